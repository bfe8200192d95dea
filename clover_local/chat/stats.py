"""Runtime figures front ends show next to decoding speed: device memory and whatever the runtime reports.

The hook: a model object may define `runtime_stats() -> Mapping[str, object] | None` (CloverModel does: the
offloading runtime's counters when it is attached, else None). Chat's status line and `/stats`, and serve's
`/health`, show what it returns. Known keys:

- `hit_rate` (the runtime's name) or `expert_cache_hit_rate`: float in [0, 1], share of routed-expert uses
  served from the device cache; shown as "—" when absent or None (no runtime, nothing run yet)
- other scalar entries (slots, hits, misses, bytes_h2d, …) are listed as is by `/stats` and `/health`;
  nested ones (per-layer tables) are left to `bench`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
