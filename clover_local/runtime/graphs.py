"""CUDA graphs of optimistic preview passes: preview passes replayed as one graph.

Measured on an H200 (BENCHMARKS.md, 2026-11-30): an eager preview pass at 35B shapes takes 130–210 ms while its
bytes need < 3 ms; the time is the host launching ~4,000 small kernels one by one. An optimistic pass
(`optimistic.py`) has no host sync and fixed shapes, so it is captured once and replayed (26.8 ms per pass there,
with the graph captured per block; this version keeps one graph across blocks and is not measured on a GPU yet):

- what the graph reads is persistent or read from the device at replay: model weights, the expert slots and the
  device slot table, the runtime's prefix cache (runtime/offload.py) — a fixed KV window of the arena with a mask
  from the cache's device length, GDN rings and states in buffers that commits copy into, the block's start
  (positions, the GDN history term) from that device length; the embedded rows are the one input, copied into a
  static buffer before each replay (the embedding table lives on the host, so the lookup stays outside);
- so one graph serves every block of a sequence: it is recaptured only when the attention window grows (every
  1,024 committed tokens), and dropped for a new cache (other buffers) or an abandoned pass;
- capture happens on the first optimistic preview (the kernels are compiled by then: the prefill or the block's
  first pass ran them eagerly). If capture fails, the reason is kept (`error`), graphs are switched off for the
  runtime's life, and passes run eagerly as before. `tests/graph_standin.py` checks on the CPU that a replay
  reads every tensor from outside the pass at the address the capture saw, that nothing relies on the capture
  having run (it executes nothing), and that no op in the pass syncs with the host.

The optimistic use counts are accumulated inside the graph, so the pass's single host read still says whether
an expert was missing. With host reads (`host_reads.py`) the replay read it in place from pinned host memory and
stands; without, a replay that used one is thrown away, what it lacked is loaded (`ExpertCache.repair`) and the
graph replays again (up to `offload.MAX_REPAIRS` times, then the syncing path). That makes replays worth
trying for a block's first pass too, whose experts are mostly the last block's: it is a replay (~27 ms at 35B)
plus the copies of what is new, where the syncing pass took ~250 ms (not yet measured on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch
from torch import Tensor


class PassGraph:
    """One captured pass: static input, the graph, its output buffer (owned by the graph's memory pool)."""

    def __init__(self, key: Hashable, x: Tensor, fn: Callable[[Tensor], Tensor], stream) -> None:
        self.key = key
        self.x = x.clone()
        self.graph = torch.cuda.CUDAGraph()
        stream.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(stream):
            # thread_local: the expert cache's copy thread may touch CUDA meanwhile; that is not this capture's.
            # Each graph gets its own memory pool, freed with it: reusing one pool handle after every graph of it
            # was deleted trips an allocator assert (H200, torch 2.11, 2026-11-30: "use_count > 0").
            self.graph.capture_begin(capture_error_mode="thread_local")
            try:
                self.out = fn(self.x)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream(x.device).wait_stream(stream)

    def replay(self, x: Tensor) -> Tensor:
        self.x.copy_(x)
        self.graph.replay()
        return self.out.clone()  # the buffer is overwritten by the next replay


class PassGraphs:
    """The runtime's current preview graph (one per cache, rows and attention window), with counters; `run` falls
    back to eager on any capture error."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device = device
        self._stream = None
        self.reset(enabled)

    def reset(self, enabled: bool) -> None:
        """As constructed: no graph, no counts, no capture error."""
        self.enabled = enabled and self.device.type == "cuda"
        self.current: PassGraph | None = None
        self.captures = 0
        self.replays = 0
        self.error: str | None = None

    def drop(self) -> None:
        self.current = None

    def run(self, key: Hashable, x: Tensor, fn: Callable[[Tensor], Tensor]) -> tuple[Tensor, bool, bool]:
        """(fn(x), whether it ran as a graph replay, whether the graph was captured for it). `key` names the
        block and shape: a new key recaptures (capture costs about one eager pass of host time)."""
        if not self.enabled:
            return fn(x), False, False
        captured = False
        if self.current is None or self.current.key != key:
            self.current = None  # the old graph and its pool go before the new capture allocates
            if not self._capture(key, x, fn):
                return fn(x), False, False
            captured = True
        self.replays += 1
        return self.current.replay(x), True, captured

    def _capture(self, key: Hashable, x: Tensor, fn: Callable[[Tensor], Tensor]) -> bool:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        try:
            self.current = PassGraph(key, x, fn, self._stream)
        except Exception as err:  # e.g. an op that syncs: keep the reason, run eagerly from now on
            self.error = f"{type(err).__name__}: {err}"[:500]
            self.enabled = False
            self.current = None
            torch.cuda.synchronize(self.device)
            return False
        self.captures += 1
        return True

    def stats(self) -> dict:
        return {"enabled": self.enabled, "captures": self.captures, "replays": self.replays, "error": self.error}
