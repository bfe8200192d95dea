"""Optimistic (resident-only) passes: the routed experts of every layer run without a device→host sync.

The syncing path (`Runtime.run_experts`) brings each layer's routing to the host to find misses: ~40 stalls per
pass at 35B, and a pass that cannot be captured as a CUDA graph. After the first pass of a block, though, the
block's experts are pinned and later passes almost never miss. So such a pass runs optimistically:

- routing idx [N,k] → slots through the cache's device slot table (a gather on the device);
- a choice routed to a non-resident expert goes to the host: with `host_reads` the MoE kernel reads that
  expert's slab in place from pinned host memory (slot S + expert; the output is right, the pass stands, and the
  expert is copied into a slot after it for the block's later passes); without, it gets slot 0 and weight 0
  (the kernel never reads out of bounds; the output is wrong, possibly NaN if slot 0 holds no expert, and the
  pass is thrown away);
- per (layer, expert) row counts accumulate on the device (`counts`, int32 [layers × E]).

At the end of the pass ONE host read of `counts` says what the pass used; the host table (unchanged during the
pass: nothing is copied or evicted in it) says whether any of that was missing. Nothing missed: the counts are
booked as hits (LRU, pins, counters) and the result stands. Something missed: with host reads the result
stands too (`ExpertCache.commit_uses(host_reads=True)` books the misses and installs them); without, the caller
reruns the pass (a preview pass writes nothing, so a rerun is safe): a graph replay after loading what the counts
say it lacked (`ExpertCache.repair`), or the syncing path. Why host reads: with routing that drifts as tokens
are revealed, most later passes of a block miss a few experts (cache_sim `--drift`: 57 of 60), and each miss
then cost a repair and a second replay (decode near 2× a steady pass); read in place, a miss costs its bytes
over PCIe inside the one replay.

On an H200 (2026-11-30, `gpu_check --stages model`) optimistic passes give the syncing path's logits exactly and
raise nothing under `torch.cuda.set_sync_debug_mode("error")`. Eager, they save little (steady 141–211 ms vs
139–182 ms syncing across three runs: the host's launches dominate either way); what they buy is a pass with no
host round trip, which `runtime/graphs.py` captures as a CUDA graph (26.8 ms per replay at 16 GiB).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from clover_local.runtime.expert_cache import ExpertCache
from clover_local.runtime.kernels import fused_layer_ops, moe_w4a16


class OptimisticPass:
    """The device state of optimistic passes over one cache: use counts and the slot table in force."""

    def __init__(self, cache: ExpertCache) -> None:
        self.cache = cache
        self.host_reads = False  # non-resident experts read from host memory (`Runtime.set_host_reads`)
        self.n_experts = cache.n_experts
        self.row_of = {int(layer): r for r, layer in enumerate(cache.layer_ids.tolist())}
        n = len(self.row_of) * cache.n_experts
        # one buffer, zeroed at once: use counts, read-through targets (1 + slot, or 0), the offered slots a
        # layer left over for the next (count, then up to E slots)
        e = cache.n_experts
        self._state = torch.zeros(2 * n + 1 + e, dtype=torch.int32, device=cache.device)
        self.counts, self.install, self.carry = self._state[:n], self._state[n : 2 * n], self._state[2 * n :]
        self._scratch = torch.empty(2 * e, dtype=torch.int32, device=cache.device)  # the candidates, compacted
        self.installed: np.ndarray | None = None  # the last collected pass's targets (`collect`), if it read through
        self._through = False  # the pass whose counts were queued read through (`finish_async`)
        self.table: Tensor | None = None
        self.offers: Tensor | None = None
        self._host: Tensor | None = None  # where the counts are read to (`finish_async`)
        self._done = None  # ... and the CUDA event after that read
        self._ops = fused_layer_ops(cache.device)  # the mapping below in one launch (CUDA; tests: interpreted)

    def begin(self, keep=None) -> None:
        """Before the pass: the table reflects every install/evict so far, pending copies have landed (GPU-side
        wait) but those into the slots `keep` names (a restricted pass never reads them: `Runtime.route_limit`),
        counts start at zero. Host work only, no sync."""
        self.cache.settle_copies(keep)
        # after the settle: an offered slot may be one whose copy was still landing (the pass waits for it anyway)
        self.offers = self.cache.offer_slots() if self._reads_through() else None
        self.table = self.cache.device_slot_table()
        self._state.zero_()

    def _reads_through(self) -> bool:
        """Host reads that copy what they read into offered slots (`ExpertCache.set_read_through`)."""
        return self.host_reads and self.cache.read_through_on

    def run(self, layer: int, x: Tensor, idx: Tensor, weights: Tensor) -> Tensor:
        """One layer's routed experts on resident slots: x [N,H], idx/weights [N,k] → [N,H]. No `.item()`,
        `.tolist()`, `.cpu()` or branch on a tensor value here (a test enforces it); the kernel on CUDA (Triton)
        is sync-free too, the CPU reference kernel is not (it loops over the slots it is given)."""
        cache = self.cache
        host = cache.host.stacks(layer) if self.host_reads else None
        base = self.row_of[layer] * self.n_experts
        offers = self.offers if host is not None else None
        install = self.install[base : base + self.n_experts] if offers is not None else None
        if self._ops is not None:
            slots, w = self._ops.optimistic_slots(idx, weights, self.table, self.counts, base,
                                                  cache.n_slots if host is not None else -1,
                                                  self._ops.ReadThrough(self.install, offers, self._scratch,
                                                                        self.carry, self.n_experts)
                                                  if offers is not None else None)
            return moe_w4a16(x, slots, w, cache.gate_up, cache.down, host, install)
        flat = idx.reshape(-1).to(torch.int64) + base
        self.counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
        slots = self.table.index_select(0, flat).view(idx.shape)
        resident = slots >= 0
        if host is not None:
            if offers is not None:
                self._assign_offers(base, offers, install)
            return moe_w4a16(x, torch.where(resident, slots, cache.n_slots + idx), weights, cache.gate_up,
                             cache.down, host, install)
        return moe_w4a16(x, slots.clamp(min=0), weights.masked_fill(~resident, 0), cache.gate_up, cache.down)

    def _assign_offers(self, base: int, offers: Tensor, install: Tensor) -> None:
        """The layer's missing experts (by id) take its usable offered slots — unpinned, then those earlier layers
        left over (`carry`), then pinned — and leave the rest (up to E) to the next layer
        (`ExpertCache.read_through_targets`): the PyTorch twin of `layer_ops.optimistic_slots`'s assignment, on
        device tensors, no host read (compactions by scatter, not boolean indexing)."""
        e = self.n_experts
        r = base // e
        cv = offers[r].to(torch.int64)
        unused = self.counts[base - e : base] == 0 if r > 0 else torch.ones_like(cv, dtype=torch.bool)
        first, second = (cv >= 0) & unused, (cv <= -2) & unused
        n_first, n_carry = first.sum(), self.carry[0].to(torch.int64)
        at = torch.arange(e, device=cv.device)
        dump = 3 * e  # where the scatters send what they do not place
        cands = torch.full((3 * e + 1,), -1, dtype=torch.int64, device=cv.device)
        cands.scatter_(0, torch.where(first, torch.cumsum(first, 0) - 1, dump), cv)
        cands.scatter_(0, torch.where(at < n_carry, n_first + at, dump), self.carry[1:].to(torch.int64))
        cands.scatter_(0, torch.where(second, n_first + n_carry + torch.cumsum(second, 0) - 1, dump), -2 - cv)
        total = n_first + n_carry + second.sum()
        missing = (self.counts[base : base + e] > 0) & (self.table[base : base + e] < 0)
        rank = torch.cumsum(missing, 0) - 1
        take = missing & (rank < total)
        slot = cands.index_select(0, rank.clamp(0, dump))
        install.copy_(torch.where(take, slot + 1, torch.zeros_like(slot)))
        taken = torch.minimum(missing.sum(), total)
        self.carry[1:].copy_(cands.index_select(0, (taken + at).clamp(max=dump)))
        self.carry[0].copy_(torch.clamp(total - taken, max=e))

    def taken_slots(self) -> np.ndarray | None:
        """After a pass that failed: the slots its layers were told to read experts through into (what the MoE
        kernel may have written), once the device has finished what was queued; None where they cannot be read
        (a device error: then every offered slot is suspect, `ExpertCache.drop_offers`)."""
        try:
            install = self.install.cpu().numpy()
        except Exception:  # a CUDA error poisons every later device call
            return None
        return install[install > 0] - 1

    def finish(self) -> np.ndarray:
        """The pass's one device→host read: counts [layers, E] (routed rows per expert)."""
        self.finish_async()
        return self.collect()

    def finish_async(self) -> None:
        """Queue the read of the counts behind the pass (into pinned host memory, with an event on CUDA) without
        waiting for it: what comes after the pass on the stream (the LM head, the decoder's draw) can be queued
        before the host waits (`collect`). Queued before the next pass's `begin` zeroes them, so it reads these."""
        if self._host is None:
            cuda = self.counts.device.type == "cuda"
            self._host = torch.empty(self._state.shape, dtype=self._state.dtype, pin_memory=cuda)
            self._done = torch.cuda.Event() if cuda else None
        self._through = self.offers is not None  # (offered only with host reads: `begin`)
        n = self.counts.numel() * (2 if self._through else 1)  # and the targets where it read through
        self._host[:n].copy_(self._state[:n], non_blocking=True)
        if self._done is not None:
            self._done.record()

    def collect(self) -> np.ndarray:
        """The counts `finish_async` queued, once they have landed (waits for the pass, not for what followed);
        `installed` then holds the pass's read-through targets (None if it read none through)."""
        if self._done is not None:
            self._done.synchronize()
        n, shape = self.counts.numel(), (len(self.row_of), self.n_experts)
        host = self._host.numpy()
        self.installed = host[n : 2 * n].reshape(shape).copy() if self._through else None
        # a copy: the routing history keeps it, and the next pass's read lands in the same buffer
        return host[:n].reshape(shape).copy()


class RoutingHistory:
    """Per layer, the experts its last pass used, most rows first (ties: lower id): what a syncing pass
    prefetches for the next layer. A syncing layer call sets its own (`h[layer] = ...`); an optimistic pass
    leaves its use counts (`record`) and a layer's order is sorted when something asks for it. Why lazy: a
    decode's passes are graph replays, which read no history, and sorting 40 layers' counts after each one cost
    ≈ 0.3 ms of host time between two replays at 35B (`docs/host_overhead.py`)."""

    def __init__(self) -> None:
        self._order: dict[int, np.ndarray] = {}
        self._counts: np.ndarray | None = None
        self._pending: dict[int, int] = {}  # layer → its row of _counts, not sorted yet

    def record(self, counts: np.ndarray, row_of: dict[int, int]) -> None:
        """An optimistic pass's counts [layers, E] (rows: `row_of`): every layer's history is now this pass's."""
        self._counts = counts
        self._pending = dict(row_of)

    def __setitem__(self, layer: int, experts: np.ndarray) -> None:
        self._pending.pop(layer, None)
        self._order[layer] = experts

    def __contains__(self, layer: int) -> bool:
        return layer in self._pending or layer in self._order

    def __getitem__(self, layer: int) -> np.ndarray:
        r = self._pending.pop(layer, None)
        if r is not None:
            row = self._counts[r]
            self._order[layer] = np.argsort(-row, kind="stable")[: int(np.count_nonzero(row))]
        return self._order[layer]

    def get(self, layer: int, default: np.ndarray | None = None) -> np.ndarray | None:
        return self[layer] if layer in self else default
