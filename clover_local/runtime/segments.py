"""Named segments of one profiled call: where a kernel launcher tells the bench's profiler which launch comes next.

Why: `bench`'s component profile (`bench.ComponentProfiler`) times whole modules by forward hooks, so the routed
experts of a layer were one row — on the H200 ≈ 13.8 of a 26.8 ms pass (BENCHMARKS.md, 2026-11-30) — with its
slot mapping, align, gate/up pass, down pass and weighted sum inside. The MoE at ≈ 0.9 TB/s against 4.8 is the
largest lever left, and which of those launches holds the time decides what to change; a graph-profiled pass
records these marks as events in the graph, so one bench run splits the row at no extra GPU time.

`segment(name)` is a no-op unless a profiler is listening (`listen`); then it ends the previous segment of the
call being timed and starts `name`. `share` is the part of the call's bytes the segment reads (the gate/up and down
passes split the experts' bytes), so the projection rule (each kernel: the larger of its time and its bytes at the
target's bandwidth) applies per launch. Host-side only: nothing is read from the device.
"""

from __future__ import annotations

from collections.abc import Callable

_sink: Callable[[str, float], None] | None = None


def segment(name: str, share: float = 0.0) -> None:
    """The launches after this call, up to the next segment or the end of the profiled call, are `name`."""
    if _sink is not None:
        _sink(name, share)


def listening() -> bool:
    """Whether a profiler listens: for a launcher whose segment share costs host work to compute."""
    return _sink is not None


def listen(sink: Callable[[str, float], None]) -> None:
    """`sink(name, share)` receives every `segment` call until `stop`. One listener at a time: a new one replaces
    any earlier (a profiler an exception left unclosed then hears nothing, and cannot break the next one)."""
    global _sink
    _sink = sink


def stop(sink: Callable[[str, float], None]) -> None:
    """The listener `sink` stops (idempotent: a profiler closed twice, or one that never listened)."""
    global _sink
    if _sink == sink:  # (a bound method is a new object at each access: equal, not identical)
        _sink = None
