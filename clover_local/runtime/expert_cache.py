"""The device expert cache: N slots in one buffer [N, slab], a slot table, and a policy made for block diffusion.

Policy (targets.md, "why offloading a diffusion model is different"):
- A block's expert set is loaded once and reused by all its passes: every slot used during the current block is
  *pinned* (its `pin_gen` equals the block generation) until the block commits (`end_block`).
- Eviction takes free slots first, then unpinned ones (those of the oldest block first), and only then pinned
  ones (when one block's set does not fit). Within each of those, the expert whose layer comes up furthest ahead
  in the sweep goes first: passes sweep the layers in order, so at layer L the experts of layer L − 1 are the ones
  needed last (Belady's choice for a cyclic sweep, where least-recently-used evicts the next layer's experts
  just before they are needed). Slots the current layer call uses are *locked* and never evicted.
- A prefill chunk that routes to nearly every expert of every layer (`begin_pass(dense=True)`) ignores pins:
  every expert is needed again by the next chunk, so only the sweep order says which is needed last.
- A prompt's pass that goes layer by layer (`begin_pass(layer_major=True)`: each layer over all its rows, a
  chunk at a time) stays at a layer for several acquires: the layer in progress is needed again first, not
  last, so victims are ranked as if the sweep stood just before it, and a prefetch of the next layer never
  takes its slots. The next layer's prefetch then starts with the layer's first chunk.
- `prefetch` fetches a layer's likely experts (what it used in the previous pass; in a dense pass all of them)
  before it runs, on a copy stream (CUDA) while the layer before computes; it only takes free or unpinned slots
  (any unlocked one in a dense pass).
- At 35B with 8,860 slots (`python -m clover_local.runtime.cache_sim`): a 512-row prefill chunk copies the
  1,380 experts that do not fit, all prefetched (least-recently-used eviction: 1,736, most of them waited for).
- Optionally (`cpu_experts`) a missed expert runs on the CPU instead of being copied (torch's int4 CPU kernel on
  the expert converted once from its host slab and kept: `runtime/cpu_experts.py`): "auto" does so when it has
  few rows and a copy would have to evict a pinned expert of the current block.

Bookkeeping is vectorised numpy over slots (≈10K entries), so a steady-state layer call costs tens of µs.
A pass that stops anywhere in it (chat's Ctrl-C raises wherever the decoder is) is followed by `recover`, which
rebuilds the expert → slot map from the slots' owners.
On CPU the "device" is a CPU tensor and copies are synchronous; the code path is the same.

The host table `slot_of` has a device twin (`device_slot_table`, int32 [layers-with-experts × E], −1 = not
resident) for optimistic passes (`runtime/optimistic.py`), which map routing to slots without the host. Every
change to `slot_of` marks it stale; it is uploaded whole (40 KiB at 35B), once, before the next read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from clover_local.runtime.expert_store import HostExpertStore
from clover_local.runtime.slab import SlabLayout

CPU_POLICIES = ("off", "auto", "misses")


def dense_rows(rows: int, top_k: int, n_experts: int) -> bool:
    """Whether a pass of `rows` rows routes to nearly every expert of every layer (≥ 98 % of them expected under
    uniform routing: rows × top-k ≥ 4 × experts): the cache then evicts by sweep order alone (`begin_pass`)."""
    return rows * top_k >= 4 * n_experts


class DeferredCopy:
    """A batch of copies the CPU emulation of the copy stream holds back (`SlotCopier`, CLOVER_DEFER_COPIES=1)."""

    def __init__(self, pairs: list[tuple[Tensor, Tensor]]) -> None:
        self.pairs = pairs


class SlotCopier:
    """Host→device slab copies: synchronous on CPU; on CUDA, a side stream with one event per batch.

    CLOVER_DEFER_COPIES=1 (CPU, tests): the copies land as late as CUDA allows instead of at once — a batch is
    held until the compute side waits for its event, or for a later one (a stream completes in order). A pass that
    reads a slot without waiting for its copy then reads the slot's old bytes, as it may on a GPU, and its logits
    differ from an all-resident run's; on the CPU's synchronous copies the same bug would never show."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda" and torch.cuda.is_available()
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.deferred: list[DeferredCopy] | None = (
            [] if not self.cuda and os.environ.get("CLOVER_DEFER_COPIES") == "1" else None)

    def copy(self, pairs: list[tuple[Tensor, Tensor]]):
        """Copy each (dst, src); returns an event the compute stream must wait on (None on CPU)."""
        if not self.cuda:
            if self.deferred is not None:
                self.deferred.append(DeferredCopy(pairs))
                return self.deferred[-1]
            for dst, src in pairs:
                dst.copy_(src)
            return None
        main = torch.cuda.current_stream(self.stream.device)
        # a victim slot may still be read by a kernel queued earlier on the compute stream
        self.stream.wait_stream(main)
        with torch.cuda.stream(self.stream):
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return event

    def wait_all(self) -> None:
        """Make the compute stream wait for every copy issued so far, whether or not its event was kept (a pass
        stopped between `copy` and the bookkeeping of its event leaves one nobody holds)."""
        if self.cuda:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)
        elif self.deferred:
            self.wait(self.deferred[-1:])

    def wait(self, events) -> None:
        if not self.cuda:
            if self.deferred:  # every batch up to the last one waited for lands, in issue order
                waited = {id(e) for e in events if e is not None}
                last = max((i for i, b in enumerate(self.deferred) if id(b) in waited), default=-1)
                for batch in self.deferred[: last + 1]:
                    for dst, src in batch.pairs:
                        dst.copy_(src)
                del self.deferred[: last + 1]
            return
        main = torch.cuda.current_stream(self.stream.device)
        for ev in {id(e): e for e in events if e is not None}.values():
            main.wait_event(ev)


@dataclass
class LayerCounters:
    uses: int = 0  # distinct experts needed, summed over calls
    hits: int = 0
    misses: int = 0  # = copied - repair_unused + cpu_runs + host_reads
    copied: int = 0  # demand copies
    repair_unused: int = 0  # of those, loaded by `repair` for a rerun that then did not use them (not misses)
    cpu_runs: int = 0
    host_reads: int = 0  # read in place from host memory by the MoE kernel (an optimistic pass's misses)
    read_through: int = 0  # of those, copied into an offered slot by the kernel as it read them (no second copy)
    prefetched: int = 0  # prefetch copies
    prefetch_used: int = 0
    prefetch_wasted: int = 0  # evicted before any use
    pinned_evictions: int = 0
    bytes: int = 0  # host→device bytes (demand + prefetch)
    seconds: float = 0.0  # time in this layer's expert calls

    def add(self, other: "LayerCounters") -> None:
        mine, theirs = self.__dict__, other.__dict__  # plain dicts: totals() sums 40 of these every pass
        for k in _COUNTER_FIELDS:
            mine[k] += theirs[k]


_COUNTER_FIELDS = tuple(LayerCounters.__dataclass_fields__)


@dataclass
class Acquired:
    experts: np.ndarray  # sorted expert ids of this call (or group)
    slots: np.ndarray  # slot per expert, -1 = runs on the CPU
    events: list = field(default_factory=list)


class ExpertCache:
    def __init__(self, layout: SlabLayout, n_slots: int, layers: list[int], n_experts: int, device: torch.device,
                 host: HostExpertStore | None, cpu_experts: str = "off", cpu_max_rows: int = 2) -> None:
        if cpu_experts not in CPU_POLICIES:
            raise ValueError(f"cpu_experts must be one of {CPU_POLICIES}")
        self.layout, self.n_slots, self.n_experts, self.device = layout, n_slots, n_experts, device
        self.host = host
        self.cpu_experts = cpu_experts if host is not None else "off"
        self.cpu_max_rows = cpu_max_rows
        self.buf = torch.empty(n_slots, layout.nbytes, dtype=torch.uint8, device=device)
        self.gate_up, self.down = layout.stacks(self.buf)
        n_layers = max(layers) + 1
        self.slot_of = np.full((n_layers, n_experts), -1, dtype=np.int64)
        self.owner = np.full(n_slots, -1, dtype=np.int64)  # layer * E + expert
        self.last_use = np.full(n_slots, -1, dtype=np.int64)
        self.pin_gen = np.full(n_slots, -1, dtype=np.int64)
        self.locked = np.zeros(n_slots, dtype=bool)
        self.prefetched = np.zeros(n_slots, dtype=bool)
        self.repaired = np.zeros(n_slots, dtype=bool)  # loaded by `repair` for the pass in progress (its misses)
        self.use_gen = np.full(n_slots, -1, dtype=np.int64)  # block generation of the last use (or load)
        self.dense = False  # the pass in progress needs nearly every expert (`begin_pass`)
        self.layer_major = False  # ... and goes layer by layer, a layer's chunks one after another
        self.ready: dict[int, object] = {}  # slot -> CUDA event of its pending copy
        self.pending = np.zeros(n_slots, dtype=bool)  # slots with an entry in `ready`
        self.landing = np.zeros(0, dtype=np.int64)  # slots of background installs since `take_landing`
        self.copier = SlotCopier(device)
        self.gen = 0  # block generation: slots with pin_gen == gen are pinned
        self.tick = 0
        self.counters = {i: LayerCounters() for i in layers}
        self.layer_ids = np.array(sorted(layers), dtype=np.int64)  # row r of the device table is layer_ids[r]
        self.sweep_pos = np.zeros(n_layers, dtype=np.float64)  # a layer's place in a pass's sweep
        self.sweep_pos[self.layer_ids] = np.arange(self.layer_ids.size)
        self._slot_table = torch.full((self.layer_ids.size * n_experts,), -1, dtype=torch.int32, device=device)
        self._table_stale = False
        self.table_uploads = 0
        # a pass with host reads may read experts through into slots (`set_read_through`, `offer_slots`)
        self.read_through_on = False
        self.offers = np.zeros((0, 0), dtype=np.int32)  # [rows, E]: the slots the pass in progress may fill
        self._offers_sent = self.offers  # the table last uploaded (`offer_slots` uploads only a changed one)
        self._offer_table = torch.zeros(0, dtype=torch.int32, device=device)  # its device twin

    # ------------------------------------------------------------------ state
    @property
    def nbytes(self) -> int:
        return self.buf.numel()

    def totals(self) -> LayerCounters:
        """The counters summed over layers."""
        tot = LayerCounters()
        for c in self.counters.values():
            tot.add(c)
        return tot

    def resident(self) -> int:
        return int((self.owner >= 0).sum())

    def end_block(self) -> None:
        """The current block committed (or was abandoned): its experts stop being pinned."""
        self.gen += 1

    def release(self) -> None:
        self.locked[:] = False

    def reset(self) -> None:
        """Forget pins and locks (after a failed pass); resident experts stay valid."""
        self.release()
        self.end_block()
        self.end_pass()

    def recover(self) -> None:
        """Make the tables agree again after a pass stopped at an arbitrary point (Ctrl-C raises inside the
        bookkeeping wherever it is): between two statements an expert may map to a slot that no longer holds
        it (`_load` maps it, then owns the slot; `_evict` unmaps, then disowns), and a later load would give
        that slot to another expert while the map still names it — wrong weights, silently. `owner` is the
        truth: a slot is owned only once its copy is under way (or its weights were written), and disowned
        before anything else is copied in. Copies in flight are waited for (on the device), then pins, locks and
        the pass's state are dropped (`reset`)."""
        self.settle_copies()
        live = np.flatnonzero(self.owner >= 0)
        owners, first = np.unique(self.owner[live], return_index=True)
        self.owner[np.setdiff1d(live, live[first])] = -1  # (an expert owning two slots keeps one)
        self.slot_of[:] = -1
        self.slot_of[owners // self.n_experts, owners % self.n_experts] = live[first]
        self._table_stale = True
        self.reset()

    def begin_pass(self, dense: bool, layer_major: bool = False) -> None:
        """A pass starts; `dense`: it routes to nearly every expert of every layer (a long prefill chunk);
        `layer_major`: it runs each layer over several chunks before the next (`CloverModel.prompt_pass`)."""
        self.dense, self.layer_major = dense, layer_major

    def end_pass(self) -> None:
        """The pass is over: experts `repair` loaded for it count as hits from now on (those its rerun did not use
        were copies, not misses: `repair_unused`)."""
        left = np.flatnonzero(self.repaired & (self.owner >= 0))
        for layer in (self.owner[left] // self.n_experts).tolist():
            self.counters[layer].repair_unused += 1
        self.repaired[:] = False
        self.dense = self.layer_major = False

    # ------------------------------------------------------------------ the device twin of slot_of
    def device_slot_table(self) -> Tensor:
        """int32 [len(layer_ids) * E] on the device, equal to `slot_of` (−1 = not resident). Uploaded only when
        `slot_of` changed since the last call: one small H2D per batch of changes, ordered on the current stream
        before whatever reads it. The source is pageable, so the host may change `slot_of` right after."""
        if self._table_stale:
            host = self.slot_of[self.layer_ids].reshape(-1).astype(np.int32)
            self._slot_table.copy_(torch.from_numpy(host))
            self._table_stale = False
            self.table_uploads += 1
        return self._slot_table

    # ------------------------------------------------------------------ read-through installs
    def set_read_through(self, on: bool) -> None:
        """Offer slots a pass with host reads may read experts through into (`offer_slots`): an expert it needs
        and lacks is copied into one as it is read (`kernels.moe_w4a16` install), so it crosses PCIe once
        instead of twice (read in place, then `install_missed` after the pass). No capacity is set aside."""
        self.read_through_on = bool(on)
        n, e = self.layer_ids.size, self.n_experts
        if on and self._offer_table.numel() < n * e:
            self._offer_table = torch.full((n, e), -1, dtype=torch.int32, device=self.device)
            self._offer = np.full((n, e), -1, dtype=np.int32)  # built in place each pass
            self._slot_ids = np.arange(self.n_slots, dtype=np.int32)
            self._offer_code = np.full(self.n_slots + 1, -1, dtype=np.int32)
            self._offers_sent = np.zeros((0, 0), dtype=np.int32)  # (the new device table holds none)
        self.offers = np.zeros((0, 0), dtype=np.int32)

    def offer_slots(self) -> Tensor:
        """Before an optimistic pass with host reads: per layer, the slots it may read its missing experts
        through into — the slots of the layer before it (in sweep order), and for the first layer the free slots;
        never a locked one or one with a copy still landing. Nothing is evicted here: the pass takes such a slot
        only if it did not use its expert (that layer is done by then: its count says so), so nothing it reads is
        overwritten and what it leaves stays resident. A layer takes its predecessor's: each layer's few misses a
        pass evict the experts needed furthest ahead (Belady's order for the sweep), and a block's later passes do
        not use up the early layers' slots. Two tiers: slots whose expert is not pinned to the block first; then
        (after the slots earlier layers left over) those pinned but unused by this pass — experts of rows that
        have since routed elsewhere, which a tight cache (15 GiB) otherwise keeps while the pass reads the rows'
        new experts from the host every pass (`cache_sim --slots 7805`). Returns the device table [layers, E]
        (int32), uploaded when it changed: row r ≥ 1 at column e holds row r − 1's expert e's slot s as s (not
        pinned), −2 − s (pinned) or −1 (none or unusable; its owner is implied: the kernel checks that expert's
        count); row 0 the free slots. `read_through_targets` is the rule."""
        e = self.n_experts
        busy = self.locked | self.pending
        ids = self._slot_ids
        code = self._offer_code  # each slot as offered, and a last −1 that slot_of's −1 ("none") reads
        code[:-1] = np.where(self.pin_gen == self.gen, -2 - ids, ids)
        code[:-1][busy] = -1
        offer = self._offer  # (not compacted: the kernel takes the usable ones in order)
        offer[1:] = code[self.slot_of[self.layer_ids[:-1]]]  # row r − 1's slots, offered to row r
        free = np.flatnonzero((self.owner < 0) & ~busy)[:e]
        offer[0] = -1
        offer[0, : free.size] = free
        self.offers = offer.copy()  # until the pass is booked (`commit_uses`) or dropped (`drop_offers`)
        if not np.array_equal(offer, self._offers_sent):
            self._offers_sent = self.offers
            self._offer_table.copy_(torch.from_numpy(self.offers))
        return self._offer_table

    def read_through_targets(self, counts: np.ndarray) -> np.ndarray:
        """Where a pass that used counts [len(layer_ids), E] reads its non-resident experts through to: int32
        [len(layer_ids), E], 1 + a slot, or 0 (read in place only). The rule the device applies during the pass
        (`layer_ops.optimistic_slots`, `OptimisticPass._assign_offers`), layer by layer in sweep order: a layer's
        candidates are its offered slots (`offer_slots`) that are free or hold an expert the pass did not use —
        the unpinned ones by column, then the ones earlier layers left over (at most E, carried from layer to
        layer: still unused, their layers done), then the pinned ones by column; its missing experts by id take
        them in that order, and what is left (up to E) carries to the next layer. The spec the kernels are
        tested against; `cache_sim` uses it."""
        out = np.zeros(counts.shape, dtype=np.int32)
        if self.offers.size == 0:
            return out
        offers, e = self.offers, self.n_experts
        missing = (counts > 0) & (self.slot_of[self.layer_ids] < 0)
        unused = np.ones(counts.shape, dtype=bool)
        unused[1:] = counts[:-1] == 0  # row r's offer at e holds row r − 1's expert e (row 0's are free)
        carry = np.zeros(0, dtype=np.int32)
        for r in range(counts.shape[0]):
            row, ok = offers[r], unused[r]
            cands = np.concatenate([row[ok & (row >= 0)], carry, -2 - row[ok & (row <= -2)]])
            need = np.flatnonzero(missing[r])[: cands.size]
            out[r, need] = cands[: need.size] + 1
            carry = cands[need.size :][:e]
        return out

    def _offered(self) -> np.ndarray:
        """The slots the pass in progress was offered (either tier of `offer_slots`)."""
        o = self.offers
        return np.concatenate([o[o >= 0], -2 - o[o <= -2]]).astype(np.int64)

    def drop_offers(self, taken: np.ndarray | None = None) -> int:
        """After a pass that failed (or whose booking did): the slots it was offered may hold an expert it read
        through and was never registered, where the host believes another one lives. taken: the slots its
        targets named (`OptimisticPass.taken_slots`, read back once the device finished it), evicted; None (they
        could not be read: a device error) evicts every offered slot — with the pinned tier nearly the whole
        cache, refilled on demand. Returns how many were evicted."""
        if self.offers.size == 0:
            return 0
        slots = np.unique(self._offered() if taken is None else taken.astype(np.int64))
        slots = slots[self.owner[slots] >= 0]
        for layer in np.unique(self.owner[slots] // self.n_experts).tolist():
            self._evict(slots[self.owner[slots] // self.n_experts == layer], int(layer))
        self.offers = np.zeros((0, 0), dtype=np.int32)
        return int(slots.size)

    def _adopt(self, rows: np.ndarray, experts: np.ndarray, slots: np.ndarray) -> None:
        """Experts a pass read through into offered slots (rows of the device table, expert ids, their slots):
        the slots' old experts are evicted (the pass used none of them), the new ones resident, pinned to the
        block like the rest of its set, with no copy of their own."""
        if not np.isin(slots, self._offered()).all() or np.unique(slots).size < slots.size:
            raise RuntimeError("expert cache: a read-through install into a slot that was not offered")
        layers = self.layer_ids[rows]
        for layer in np.unique(layers).tolist():
            mine = layers == layer
            self._evict(slots[mine], int(layer))
            self.counters[int(layer)].read_through += int(mine.sum())
        self.slot_of[layers, experts] = slots
        self._table_stale = True
        self.owner[slots] = layers * self.n_experts + experts
        self.last_use[slots] = self.tick
        self.use_gen[slots] = self.gen
        self.pin_gen[slots] = self.gen

    def settle_copies(self, keep: np.ndarray | None = None) -> None:
        """Make the compute stream wait for every pending slot copy (prefetches, installs), so that a pass that
        reads slots without `acquire` never reads a half-copied expert; but not for those into the slots `keep`
        names (a pass that will not read them: their copies overlap it). GPU-side waits only; a no-op on CPU."""
        names = set(keep.tolist()) if keep is not None else set()
        kept = {s: ev for s, ev in self.ready.items() if s in names}
        if not kept:  # every copy, those whose event a stopped pass never recorded too (`recover`)
            self.copier.wait_all()
        elif len(kept) < len(self.ready):
            self.copier.wait([ev for s, ev in self.ready.items() if s not in kept])
        self.ready = kept
        self.pending[:] = False
        self.pending[list(kept)] = True

    def take_landing(self) -> np.ndarray:
        """The slots background installs (`install_missed(background=True)`) filled since the last call."""
        out, self.landing = self.landing, self.landing[:0]
        return out

    def restricted_choice(self, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """For a pass that chooses among resident experts only (resident routing): (allowed [len(layer_ids), E]
        bool, the slots whose copies it need not wait for). Allowed: resident, but not the background installs
        since the last call (`take_landing`: their copies may still be landing); when that leaves a layer fewer
        than top_k, every resident expert and every copy waited for (that layer chooses freely anyway)."""
        table = self.slot_of[self.layer_ids]
        landing = self.take_landing()
        allowed = (table >= 0) & ~np.isin(table, landing)
        if (allowed.sum(1) < top_k).any():
            return table >= 0, landing[:0]
        return allowed, landing

    def missing(self, counts: np.ndarray) -> int:
        """How many (layer, expert) pairs with counts [len(layer_ids), E] > 0 are not resident."""
        return int(((counts > 0) & (self.slot_of[self.layer_ids] < 0)).sum())

    def commit_uses(self, counts: np.ndarray, host_reads: bool = False, installed: np.ndarray | None = None) -> None:
        """Book an optimistic pass that stood (counts [len(layer_ids), E] of routed rows per expert) for its hits:
        what `acquire` would have done for its hits, vectorised: counters, LRU ticks in layer order (as the
        per-layer calls would have set them), pins to the current block, prefetches marked used. Experts that
        `repair` loaded for this pass are misses, not hits.

        host_reads: the pass read its non-resident experts in place from host memory (`OptimisticPass`); they
        are booked as misses (`host_reads`, their bytes as PCIe bytes) and then copied into free or unpinned
        slots (`install_missed`), so the block's later passes find them resident; `installed` [len(layer_ids), E]
        (1 + slot, or 0): the ones the pass read through into offered slots already (`read_through_targets`), which
        are registered there instead of copied."""
        flat = np.flatnonzero(counts)  # row-major: layers in sweep order
        rows, experts = np.divmod(flat, self.n_experts)
        slots = self.slot_of[self.layer_ids[rows], experts]
        absent = slots < 0
        if absent.any() and not host_reads:
            raise RuntimeError("expert cache: commit_uses on a pass that used non-resident experts")
        missed = rows[absent], experts[absent]
        rows, experts, slots = rows[~absent], experts[~absent], slots[~absent]
        n = self.layer_ids.size
        uses = np.bincount(rows, minlength=n)
        used_prefetch = np.bincount(rows[self.prefetched[slots]], minlength=n)
        fresh = np.bincount(rows[self.repaired[slots]], minlength=n)
        self.repaired[slots] = False
        self.prefetched[slots] = False
        self.last_use[slots] = self.tick + 1 + rows
        self.use_gen[slots] = self.gen
        self.tick += n
        self.pin_gen[slots] = self.gen
        # per layer, plain ints (numpy scalars cost ~1 µs per operation: this runs after every replay)
        for layer, u, f, p in zip(self.layer_ids.tolist(), uses.tolist(), fresh.tolist(), used_prefetch.tolist()):
            c = self.counters[layer]
            c.uses += u
            c.hits += u - f
            c.misses += f
            c.prefetch_used += p
        if missed[0].size:  # after the hits are pinned: the installs must not evict what this pass used
            self._book_host_reads(*missed, installed)
        self.offers = self._offers_sent[:0]  # booked: no slot of it is in doubt any more (`drop_offers`)

    def _book_host_reads(self, rows: np.ndarray, experts: np.ndarray, installed: np.ndarray | None = None) -> None:
        """Misses a pass read from host memory (rows of the device table, expert ids), then their installs: those
        it read through into offered slots (`installed`) are registered there, the rest copied."""
        per = np.bincount(rows, minlength=self.layer_ids.size)
        for r in np.flatnonzero(per).tolist():
            c = self.counters[int(self.layer_ids[r])]
            c.uses += int(per[r])
            c.misses += int(per[r])
            c.host_reads += int(per[r])
            c.bytes += int(per[r]) * self.layout.weight_bytes  # once per BLOCK_M run: more with many rows
        if installed is not None:
            to = installed[rows, experts].astype(np.int64) - 1
            through = to >= 0
            if through.any():
                self._adopt(rows[through], experts[through], to[through])
                rows, experts = rows[~through], experts[~through]
        self.install_missed(rows, experts)

    def install_missed(self, rows: np.ndarray, experts: np.ndarray, background: bool = False) -> int:
        """Copy experts a pass used without having them (rows of the device table, expert ids; layer order) into
        free or unpinned slots, pinned to the block like the rest of its set, marked prefetched (a copy for later
        passes: used, or wasted if evicted first). As many as there is room for, earliest layers first (the next
        pass needs them first); returns how many. The copies land before the next optimistic pass reads a slot
        (`settle_copies`). `background`: experts a restricted pass wanted (resident routing); their slots are
        kept in `landing` so the next pass can leave them out and not wait for their copies."""
        if self.host is None or rows.size == 0:
            return 0
        victims = self._victims(rows.size, allow_pinned=False, at=-0.5)  # the next pass starts at the first layer
        k = victims.size
        self.tick += 1
        for layer, slots in self._load_by_layer(rows[:k], experts[:k], victims):
            self.prefetched[slots] = True
            self.counters[layer].prefetched += int(slots.size)
        if background:
            self.landing = np.concatenate([self.landing, victims[:k]])
        return int(k)

    def _load_by_layer(self, rows: np.ndarray, experts: np.ndarray, victims: np.ndarray):
        """Load experts (rows of the device table, expert ids) into `victims` one layer at a time, pinned to the
        block; yields (layer, its slots) for the caller's counters."""
        for r in np.unique(rows).tolist():
            sel = rows == r
            layer, slots = int(self.layer_ids[r]), victims[sel]
            self._load(layer, experts[sel], slots)
            self.pin_gen[slots] = self.gen
            yield layer, slots

    def repair(self, counts: np.ndarray, last_of_block: bool = False) -> int | None:
        """After an optimistic pass that missed (counts [len(layer_ids), E] of routed rows per expert): pin what
        it used and had to the block, and load what it used and lacked into free or unpinned slots (demand
        copies; each a miss when the rerun uses it: one it then does not use is a copy, not a miss). Returns
        how many were loaded, or None (nothing loaded) when they do not fit without evicting the block's pinned
        experts: the caller then takes the syncing path, which can.
        `last_of_block` (the block's commit): the block's pinned experts this pass did not use may go too.

        Why: the alternative, rerunning the pass through the syncing path, costs ~40 host round trips and an
        eager pass (250 ms at 35B on an H200) where a CUDA-graph replay costs 27 ms. The counts past the first
        missing layer come from a pass with wrong inputs, so the next replay may find a few more; each round
        fixes at least the first missing layer."""
        table = self.slot_of[self.layer_ids]
        used = counts > 0
        had = table[used & (table >= 0)]
        if last_of_block:
            self.pin_gen[self.pin_gen == self.gen] = self.gen - 1
        self.pin_gen[had] = self.gen
        rows, experts = np.nonzero(used & (table < 0))
        if rows.size == 0:
            return 0
        victims = self._victims(rows.size, allow_pinned=False, at=-0.5)  # the replay starts at the first layer
        if victims.size < rows.size:
            return None
        self.tick += 1
        for layer, slots in self._load_by_layer(rows, experts, victims[: rows.size]):
            self.repaired[slots] = True
            self.counters[layer].copied += int(slots.size)
        return int(rows.size)

    def evict(self, layer: int, experts: np.ndarray) -> None:
        """Drop resident experts of a layer (tests force a miss with it); absent ones are ignored."""
        slots = self.slot_of[layer, experts]
        slots = slots[slots >= 0]
        if slots.size:
            for s in slots[self.pending[slots]].tolist():
                self.ready.pop(s, None)
            self.pending[slots] = False
            self._evict(slots, layer)

    # ------------------------------------------------------------------ slots
    def _victims(self, m: int, allow_pinned: bool, at: float) -> np.ndarray:
        """Up to m slots to (re)fill, first to go first; never locked ones, pinned ones only if allowed (or in a
        dense pass). `at`: where the sweep is (a layer's sweep position ± 0.5: just after the layer an acquire
        serves, just before the one a prefetch is for), so a slot's layer is (its position − at) mod n_layers
        ahead. Order: free; unpinned, oldest block first; pinned; within each, the layer furthest ahead first
        (the one just swept), then the least recently used."""
        cand = ~self.locked
        if not (allow_pinned or self.dense):
            cand &= self.pin_gen != self.gen
        idx = np.flatnonzero(cand)
        if m <= 0 or idx.size == 0:
            return idx[:0]
        n = float(self.layer_ids.size)
        owner = self.owner[idx]
        live = owner >= 0
        ahead = np.mod(self.sweep_pos[np.where(live, owner, 0) // self.n_experts] - at, n)  # in (0, n)
        last = self.last_use[idx].astype(np.float64)
        key = (n - ahead) + 0.4 * (last - last.min()) / (last.max() - last.min() + 1.0)  # LRU within a layer
        if self.dense:
            tier = live.astype(np.float64)
        else:
            pinned = self.pin_gen[idx] == self.gen
            tier = np.where(live, np.where(pinned, 2.0, 1.0), 0.0)
            age = np.where(pinned, 0, np.clip(self.gen - self.use_gen[idx], 0, 10**9)).astype(np.float64)
            key -= age * (n + 1.0)
        key += tier * 1e13
        if m < idx.size:
            part = np.argpartition(key, m - 1)[:m]
        else:
            part = np.arange(idx.size)
        return idx[part[np.argsort(key[part], kind="stable")]]

    def _evict(self, slots: np.ndarray, layer: int) -> None:
        owners = self.owner[slots]
        live = owners >= 0
        if live.any():
            o = owners[live]
            self.slot_of[o // self.n_experts, o % self.n_experts] = -1
            self._table_stale = True
            c = self.counters[layer]
            c.prefetch_wasted += int(self.prefetched[slots[live]].sum())
            c.repair_unused += int(self.repaired[slots[live]].sum())
            c.pinned_evictions += int((self.pin_gen[slots[live]] == self.gen).sum())
        self.owner[slots] = -1
        self.pin_gen[slots] = -1  # a slot's next expert is not pinned by its last one's use
        self.prefetched[slots] = False
        self.repaired[slots] = False

    def _load(self, layer: int, experts: np.ndarray, slots: np.ndarray):
        """Copy experts' host slabs into slots and register them; returns the copy event."""
        self._evict(slots, layer)
        pairs = [(self.buf[int(s)], self.host.slab(layer, int(e))) for s, e in zip(slots, experts)]
        event = self.copier.copy(pairs)
        self.slot_of[layer, experts] = slots
        self._table_stale = True
        self.owner[slots] = layer * self.n_experts + experts
        self.last_use[slots] = self.tick
        self.use_gen[slots] = self.gen
        if event is not None:
            for s in slots.tolist():
                self.ready[s] = event
            self.pending[slots] = True
        self.counters[layer].bytes += len(slots) * self.layout.nbytes
        return event

    def install(self, layer: int, experts: np.ndarray, slots: np.ndarray, staging: Tensor) -> None:
        """Load-time fill (all-resident runs): staging [len(experts), slab] rows → slots; not counted as misses."""
        self._evict(slots, layer)
        s0 = int(slots[0])
        if np.array_equal(slots, np.arange(s0, s0 + slots.size)):
            self.buf[s0 : s0 + slots.size].copy_(staging)
        else:
            for row, s in enumerate(slots.tolist()):
                self.buf[s].copy_(staging[row])
        self.slot_of[layer, experts] = slots
        self._table_stale = True
        self.owner[slots] = layer * self.n_experts + experts

    def empty(self) -> None:
        """Forget every resident expert, pin, lock and pending copy: the cache as loading made it before `warm`
        (`runtime.load.reconfigure`: several bench runs on one load). Counters are left to the caller."""
        self.settle_copies()  # (a GPU-side wait) no copy still lands in a slot about to be reused
        for a, v in ((self.slot_of, -1), (self.owner, -1), (self.last_use, -1), (self.pin_gen, -1),
                     (self.use_gen, -1), (self.locked, False), (self.prefetched, False), (self.repaired, False)):
            a[:] = v
        self.landing = self.landing[:0]
        self.offers = np.zeros((0, 0), dtype=np.int32)
        self.dense = False
        self.gen = self.tick = 0
        self._table_stale = True

    def warm(self) -> int:
        """Fill an empty cache from the host slabs at load, layer by layer in sweep order until the slots run out;
        returns how many. Why: an empty cache makes the first prompt's first prefill chunk copy every expert
        (10,240 demand copies at 35B, ≈ 0.33 s at 50 GB/s); warm, that chunk copies only what does not fit, as a
        later chunk does, and a prompt shorter than a block starts its first preview warm. Not counted as misses
        or PCIe bytes of any pass (it is part of loading)."""
        if self.host is None or (self.owner >= 0).any():
            return 0
        put = 0
        for layer in self.layer_ids.tolist():
            k = min(self.n_experts, self.n_slots - put)
            if k <= 0:
                break
            self.install(layer, np.arange(k, dtype=np.int64), np.arange(put, put + k, dtype=np.int64),
                         self.host.buffers[layer][:k])
            put += k
        return put

    def acquire(self, layer: int, experts: np.ndarray, rows: np.ndarray) -> Acquired:
        """Make `experts` (sorted, unique, at most n_slots of them) usable by this layer call: hits are touched,
        misses copied (or left to the CPU, slot -1); all their slots are locked and pinned to the block."""
        self.tick += 1
        c = self.counters[layer]
        slots = self.slot_of[layer, experts].copy()
        hit = slots >= 0
        hit_slots = slots[hit]
        c.uses += int(experts.size)
        fresh = int(self.repaired[hit_slots].sum())  # loaded by `repair` for this pass: misses, not hits
        c.hits += int(hit.sum()) - fresh
        c.misses += fresh
        self.repaired[hit_slots] = False
        c.prefetch_used += int(self.prefetched[hit_slots].sum())
        self.prefetched[hit_slots] = False
        self.locked[hit_slots] = True
        self.last_use[hit_slots] = self.tick
        self.use_gen[hit_slots] = self.gen
        self.pin_gen[hit_slots] = self.gen
        waiting = hit_slots[self.pending[hit_slots]]
        events = [self.ready.pop(s) for s in waiting.tolist()]
        self.pending[waiting] = False
        miss = np.flatnonzero(~hit)
        if miss.size:
            c.misses += int(miss.size)
            order = miss[np.argsort(-rows[miss], kind="stable")]  # most rows first get device slots
            on_cpu = np.zeros(order.size, dtype=bool)
            if self.cpu_experts == "misses":
                on_cpu[:] = True
            elif self.cpu_experts == "auto":
                cheap = int(((~self.locked) & (self.pin_gen != self.gen)).sum())
                on_cpu[cheap:] = rows[order[cheap:]] <= self.cpu_max_rows
            to_copy = order[~on_cpu]
            c.cpu_runs += int(on_cpu.sum())
            if to_copy.size:
                # just after the layer (it is needed last), or in a layer-major pass just before it (its next
                # chunk needs it first)
                at = self.sweep_pos[layer] + (-0.5 if self.layer_major else 0.5)
                victims = self._victims(to_copy.size, allow_pinned=True, at=at)
                if victims.size < to_copy.size:
                    raise RuntimeError("expert cache: more experts in one call than free slots")  # callers split
                events.append(self._load(layer, experts[to_copy], victims))
                for s in victims[self.pending[victims]].tolist():
                    self.ready.pop(s, None)  # waited on through `events`
                self.pending[victims] = False
                c.copied += int(to_copy.size)
                slots[to_copy] = victims
                self.locked[victims] = True
                self.pin_gen[victims] = self.gen
        return Acquired(experts, slots, events)

    def prefetch(self, layer: int, experts: np.ndarray) -> int:
        """Start copying `experts` (most likely first) of `layer` into free or unpinned, unlocked slots. In a dense
        pass every expert of the layer is taken as likely, whatever `experts` says (there may be no history yet:
        the first prefill chunk). In a layer-major pass the layer before `layer` is the one in progress."""
        if self.dense:
            experts = np.arange(self.n_experts, dtype=np.int64)
        if self.host is None or layer not in self.counters or experts.size == 0:
            return 0
        absent = experts[self.slot_of[layer, experts] < 0]
        if absent.size == 0:
            return 0
        self.tick += 1
        at = self.sweep_pos[layer] - (1.5 if self.layer_major else 0.5)  # layer-major: the layer before is running
        victims = self._victims(absent.size, allow_pinned=False, at=at)
        owners = self.owner[victims] // self.n_experts  # (−1 for a free slot)
        keep = owners != layer  # never one of the layer's for another
        pos = int(self.sweep_pos[layer])
        if self.layer_major and pos > 0:  # nor one of the layer in progress, whose next chunks need it
            keep &= owners != self.layer_ids[pos - 1]
        victims = victims[keep]
        if victims.size == 0:
            return 0
        absent = absent[: victims.size]
        self._load(layer, absent, victims)
        self.prefetched[victims] = True
        self.counters[layer].prefetched += int(absent.size)
        return int(absent.size)

    def wait(self, acquired: Acquired) -> None:
        self.copier.wait(acquired.events)
