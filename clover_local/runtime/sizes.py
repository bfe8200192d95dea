"""Memory sizes: parsing `--vram 16GB`-style flags, printing bytes, and asking the machine what it has.

Sizes are binary (a 16 GB card holds 16 GiB): `16GB`, `16G` and `16GiB` all mean 16 × 2^30 bytes; `MB`/`MiB`
are 2^20, `KB`/`KiB` 2^10; a bare number is GiB.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING

from clover_local.errors import CloverError

if TYPE_CHECKING:  # (imported where a device is asked: `plan`'s and the flags' sizes go without torch)
    import torch

# the token counts the runtime's memory is sized by, by default (--context, --prefill-chunk; runtime/placement.py)
DEFAULT_CONTEXT = 32768
DEFAULT_PREFILL_CHUNK = 512
# a long prompt's causal pass runs each layer over up to this many rows (in prefill chunks) before the next
# layer (`CloverModel.hidden`): a layer's experts cross PCIe once a span, not once a chunk
DEFAULT_PREFILL_SPAN = 4096

GIB = 1 << 30
MIB = 1 << 20
_UNITS = {"": GIB, "t": 1 << 40, "g": GIB, "m": MIB, "k": 1 << 10, "b": 1}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([tgmkb]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int | float, flag: str = "size", allow_zero: bool = False) -> int:
    """`16GB` → 17179869184. Raises CloverError naming the flag on anything else (zero too, unless `allow_zero`:
    a size that may switch its feature off)."""
    if isinstance(text, (int, float)):
        return int(text)
    m = _SIZE.match(str(text))
    if not m:
        raise CloverError(f"{flag} {text!r} is not a size (examples: 16GB, 14.5GiB, 900MB)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 0 or (value == 0 and not allow_zero):
        raise CloverError(f"{flag} must be positive, got {text!r}")
    return int(value)


def fmt_bytes(n: float, up: bool = False) -> str:
    """Human size in binary units, 3 significant digits (`1.62 MiB`, `12.4 GiB`). `up`: rounded up, for a least
    amount a message asks for (`at least 18 GiB` for 17.94, where 17.9 would ask for too little)."""
    n = float(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            v = n / size
            if up:
                scale = 100 if v < 10 else 10 if v < 100 else 1
                v = math.ceil(v * scale - 1e-9) / scale  # (the tolerance: an exact 2 GiB stays 2)
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


def _meminfo(key: str, psutil_field: str) -> int | None:
    """`key` of /proc/meminfo in bytes (Linux), else psutil's `psutil_field` if installed, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:  # pragma: no cover - non-Linux
        import psutil

        return int(getattr(psutil.virtual_memory(), psutil_field))
    except Exception:  # pragma: no cover
        return None


def host_available_bytes() -> int | None:
    """Host memory available to a new process (MemAvailable), or None where it cannot be read."""
    return _meminfo("MemAvailable", "available")


def host_total_bytes() -> int | None:
    """Host memory installed (MemTotal), or None where it cannot be read."""
    return _meminfo("MemTotal", "total")


def device_free_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device (what other processes and the CUDA context leave); None on CPU."""
    import torch

    if device.type == "cuda" and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return None


def default_budget(device: torch.device, margin: int = 512 * MIB) -> int:
    """--vram-budget default: free device memory minus a safety margin (CUDA), or available RAM / 2 (CPU)."""
    free = device_free_bytes(device)
    if free is not None:
        return max(0, free - max(margin, free // 32))
    avail = host_available_bytes() or 8 * GIB
    return avail // 2


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


MAX_CHUNK = 4 << 30  # the largest pinned allocation asked for (one of 16 GB may fail where pinning is scarce)


def pinned_size(n: int) -> int:
    """What torch pins for a pinned allocation of `n` bytes: the next power of two."""
    return 1 << max(n - 1, 0).bit_length()


def chunk_layers(layer_bytes: int, n_layers: int, max_chunk: int = MAX_CHUNK) -> tuple[int, int]:
    """(layers per chunk, bytes pinned in all) with the fewest bytes pinned: chunks of k layers (the last holds the
    rest), each rounded up to a power of two, none over `max_chunk` unless one layer alone is."""
    best = (1, n_layers * pinned_size(layer_bytes))
    for k in range(2, n_layers + 1):
        if pinned_size(k * layer_bytes) > max_chunk:
            break
        full, rest = divmod(n_layers, k)
        total = full * pinned_size(k * layer_bytes) + (pinned_size(rest * layer_bytes) if rest else 0)
        if total < best[1]:
            best = (k, total)
    return best


def pinned_allocator_bytes() -> int | None:
    """Bytes torch's pinned allocator holds now (rounded blocks, cached ones included), where it reports them."""
    import torch

    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None or not torch.cuda.is_available():
        return None
    try:
        return int(stats().get("allocated_bytes.current", 0))
    except (RuntimeError, AttributeError):
        return None
