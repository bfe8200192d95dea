"""Runtime figures front ends show next to decoding speed: device memory and whatever the runtime reports.

The hook: a model object may define `runtime_stats() -> Mapping[str, object] | None` (CloverModel does: the
offloading runtime's counters when it is attached, else None). Chat's status line and `/stats`, and serve's
`/health`, show what it returns. Known keys:

- `hit_rate` (the runtime's name) or `expert_cache_hit_rate`: float in [0, 1], share of routed-expert uses
  served from the device cache; shown as "—" when absent or None (no runtime, nothing run yet)
- other scalar entries (slots, hits, misses, bytes_h2d, …) are listed as is by `/stats all` and `/health`;
  nested ones (per-layer tables) are left to `bench`. Plain `/stats` shows the few a user acts on
  (`key_stats`): the hit rate, experts resident, what went over PCIe, host reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clover_local.runtime.sizes import fmt_bytes

HIT_RATE_KEYS = ("expert_cache_hit_rate", "hit_rate")


def runtime_stats(model: Any) -> dict[str, Any]:
    """What `model.runtime_stats()` returns (empty when the model has no such hook or it fails)."""
    fn = getattr(model, "runtime_stats", None)
    if not callable(fn):
        return {}
    try:
        stats = fn()
    except Exception:  # a stats hook must never break a chat or a request
        return {}
    return dict(stats) if isinstance(stats, Mapping) else {}


def model_device(model: Any):
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return None


def gpu_memory(model: Any) -> tuple[int, int] | None:
    """(bytes allocated by torch, total bytes) of the model's CUDA device; None when not on CUDA."""
    dev = model_device(model)
    if dev is None or dev.type != "cuda":
        return None
    import torch

    try:
        return torch.cuda.memory_allocated(dev), torch.cuda.get_device_properties(dev).total_memory
    except Exception:
        return None


def hit_rate(stats: Mapping[str, Any]) -> float | None:
    for key in HIT_RATE_KEYS:
        rate = stats.get(key)
        if isinstance(rate, (int, float)) and not isinstance(rate, bool):
            return float(rate)
    return None


def format_hit_rate(stats: Mapping[str, Any]) -> str:
    rate = hit_rate(stats)
    return "—" if rate is None else f"{100 * rate:.0f}%"


def scalar_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The flat part of runtime stats (numbers, strings, booleans), without the hit rate itself."""
    return {k: v for k, v in stats.items()
            if k not in HIT_RATE_KEYS and (v is None or isinstance(v, (int, float, str, bool)))}


def format_gib(n: int) -> str:
    return f"{n / 2**30:.1f}"


def _int(stats: Mapping[str, Any], key: str) -> int | None:
    v = stats.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def key_stats(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows for plain `/stats`: what a user can act on (a low hit rate, many copies over PCIe:
    a larger --vram-budget), not the ~30 counters the runtime keeps for `bench` (those: `/stats all`). The hit
    rate always (`—` without a runtime); other rows only when the runtime reports their counters."""
    rows: list[tuple[str, str]] = []
    uses, misses = _int(stats, "expert_uses"), _int(stats, "misses")
    rows.append(("expert cache hit rate", format_hit_rate(stats)))
    if uses and misses is not None:
        rows.append(("expert cache misses", f"{misses:,} of {uses:,} expert uses"))
    resident, total, slots = _int(stats, "resident"), _int(stats, "experts_total"), _int(stats, "slots")
    if resident is not None and total:
        rows.append(("experts resident", f"{resident:,} of {total:,}" + (f" ({slots:,} slots)" if slots else "")))
    copied, moved = _int(stats, "copied"), _int(stats, "bytes_h2d")
    if copied is not None or moved is not None:
        over = f"{fmt_bytes(moved)} over PCIe" if moved is not None else ""
        rows.append(("expert copies", f"{copied:,} ({over})" if copied is not None and over
                     else f"{copied:,}" if copied is not None else over))
    if stats.get("host_reads_on") is True:
        rows.append(("host reads", f"{_int(stats, 'host_reads') or 0:,} experts read in place from host memory"))
    return rows
