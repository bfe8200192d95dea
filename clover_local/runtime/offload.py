"""The offloaded MoE: `OffloadedExperts` (the model's `Experts` slot) and the `Runtime` that drives the cache.

The model runs every pass through `Runtime.run_pass` (`CloverModel.runtime` hook), whose `pass_scope` is how the
cache knows blocks: preview passes at the same (cache, start) are one block; the causal pass that follows at that
start is its commit, after which the block's experts are unpinned; any other causal pass is a prefill.

Per layer call (`run_experts`): the routing decision comes to the host (one small sync), the distinct experts
are acquired (hits touched, misses copied, or run on the CPU), the next layer's likely experts are prefetched
(what it used in the previous pass), then the fused MoE kernel runs on the slots. If one call needs more experts
than there are slots, they are served in groups of at most N (slow, but correct with any cache size).

Optimistic passes (`runtime/optimistic.py`, `RuntimeOptions.optimistic`): a later preview pass of a block runs
every layer on resident slots without a host sync, and syncs once at the end, when the block's previous pass had
no miss (its routing was stable), or was the block's first pass and its whole set stayed resident (no pinned
eviction, no CPU run: a first pass always misses, it loads the set). If it needed an expert that was not resident,
its result is discarded and `run_pass` reruns it through the syncing path (a graph replay is first repaired and
replayed again). With host reads (`runtime/host_reads.py`, on a GPU where the load-time check passes) an
optimistic pass reads what is not resident in place and always stands, so every preview and commit runs that
way once a graph exists. With resident routing (`route_limit`, an opt-in approximation) a block's later previews
choose only among resident experts, so they cannot miss either; what they wanted is copied in behind the next
pass. With every expert resident (no host slabs) nothing can miss, so every pass runs that way. Per-layer
expert times (`time_layers`) are not taken in optimistic passes. An optimistic pass that stands whatever it
used (host reads, or every expert resident) is booked after the model has queued its LM head (`finish_pass`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from clover_local.errors import CloverError, torch_out_of_memory
from clover_local.model.cache import AttentionCache, GDNCache, PrefixCache
from clover_local.runtime.cpu_experts import DEFAULT_CPU_CACHE, CpuExperts
from clover_local.runtime.expert_cache import ExpertCache, LayerCounters, dense_rows
from clover_local.runtime.kernels import moe_w4a16
from clover_local.runtime.graphs import PassGraphs
from clover_local.runtime.optimistic import OptimisticPass, RoutingHistory
from clover_local.runtime.placement import prefill_rows
from clover_local.runtime.sizes import fmt_bytes

_OOM = torch_out_of_memory()
T = TypeVar("T")


WINDOW_STEP = 1024  # attention windows grow in these steps (a CUDA graph per window size)


def preview_window(length: int, capacity: int) -> int:
    """The arena rows a preview reads for `length` committed tokens: the next multiple of WINDOW_STEP above it,
    at most the capacity. One graph serves the 32 blocks inside a step (a recapture costs about one eager pass,
    ≈ 5 ms a block spread over them); a preview reads at most WINDOW_STEP − 1 rows it does not need."""
    return min((length // WINDOW_STEP + 1) * WINDOW_STEP, capacity)


@dataclass
class ArenaAttentionCache(AttentionCache):
    """KV cache over preallocated [1, Hkv, context, D] buffers: appends never allocate. A preview reads a fixed
    window of them with a mask from `length_t` (the prefix cache's device copy of the length), not a slice of
    the committed length: the same kernels at the same addresses for every block inside one window size. A
    commit (a causal pass of at most `in_place_rows` rows) writes its rows at `length_t` the same way
    (`write_block`); its host `length` moves when the pass is settled (`ArenaPrefixCache.settle`)."""

    length_t: Tensor | None = None
    in_place_rows: int = 0

    def window(self, rows: int = 1) -> int:
        """Arena rows a pass of `rows` block rows reads now (what a captured graph's shapes depend on): a
        preview's committed keys, or a commit's and its own (the same window while committed lengths are
        multiples of the block size, as decoding keeps them)."""
        return preview_window(self.length + rows - 1, self.k.shape[2])

    def preview_keys_values(self) -> tuple[Tensor, Tensor, Tensor | None]:
        w = self.window()
        committed = torch.arange(w, device=self.k.device) < self.length_t
        return self.k[:, :, :w], self.v[:, :, :w], committed

    def writes_in_place(self, rows: int) -> bool:
        return rows <= self.in_place_rows

    def adopt(self, own: AttentionCache) -> None:
        """Nothing to take back: the chunks wrote into the arena, and `settle` moves the length (a rerun of the
        pass starts from the same one)."""

    def write_block(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Write a commit's keys/values [1,Hkv,T,D] at rows length_t … length_t+T−1 (device-side positions:
        writing them again, as a rerun of the pass does, writes the same rows) and return what the block attends
        to before itself: the window and its committed mask, as a preview reads them."""
        self._write(k, v)
        w = self.window(k.shape[2])
        return self.k[:, :, :w], self.v[:, :, :w], torch.arange(w, device=self.k.device) < self.length_t

    def write_merged(self, k: Tensor, v: Tensor) -> tuple[tuple, tuple]:
        """`write_block` for a merged pass: one window for both parts, wide enough for the next block's preview
        (the committed keys with these), masked for the commit before them and for the preview after them."""
        self._write(k, v)
        n = k.shape[2]
        w = self.window(n + 1)
        kw, vw, rows = self.k[:, :, :w], self.v[:, :, :w], torch.arange(w, device=self.k.device)
        return (kw, vw, rows < self.length_t), (kw, vw, rows < self.length_t + n)

    def _write(self, k: Tensor, v: Tensor) -> None:
        n = k.shape[2]  # room for them: checked by `Runtime.run_pass` before the pass (a replay runs no Python)
        pos = self.length_t + torch.arange(n, device=self.k.device)
        self.k.index_copy_(2, pos, k.to(self.k.dtype))
        self.v.index_copy_(2, pos, v.to(self.v.dtype))

    def check_room(self, rows: int) -> None:
        """Before a causal pass of `rows` rows (`ArenaPrefixCache.check_room`): the arena never grows."""
        if self.length + rows > self.k.shape[2]:
            raise CloverError(
                f"the sequence reached the {self.k.shape[2]}-token context the runtime was loaded for; "
                "load it again with a larger --context")


class ArenaGDNCache(GDNCache):
    """A GDN layer's ring and state in buffers allocated once (zeros = nothing committed yet, which is what the
    model assumes for a missing ring or state); updates copy into them, so their addresses never change.

    A causal pass's new ring and state go to the runtime's `pending` buffers for the layer (shared by its
    caches: one pass at a time) and are copied in when the pass is settled. Until then the pass can be thrown
    away and rerun from the same state (an optimistic commit that needed a non-resident expert), which a state
    written in place would not allow: the delta rule cannot be undone."""

    def __init__(self, ring: Tensor, state: Tensor, pending: tuple[Tensor, Tensor]) -> None:
        super().__init__(ring, state)
        self.pending = pending

    def update(self, ring: Tensor | None, state: Tensor | None) -> None:
        for buf, new in ((self.ring, ring), (self.state, state)):
            if new is None:
                buf.zero_()
            else:
                buf.copy_(new)

    def write(self, ring: Tensor, state: Tensor) -> None:
        self.pending[0].copy_(ring)
        self.pending[1].copy_(state)

    def apply_pending(self) -> None:
        self.update(*self.pending)


class ArenaPrefixCache(PrefixCache):
    """The runtime's prefix cache: `length_t` mirrors `length` on the device (a fill per causal pass, no sync),
    and previews read their start from it (`preview_start`)."""

    def __init__(self, layers: list, device: torch.device) -> None:
        object.__setattr__(self, "length_t", torch.zeros((), dtype=torch.int64, device=device))
        super().__init__(layers)
        for c in layers:
            if isinstance(c, ArenaAttentionCache):
                c.length_t = self.length_t

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name == "length":
            self.length_t.fill_(value)

    def preview_start(self) -> Tensor:
        return self.length_t

    def check_room(self, rows: int) -> None:
        for c in self.layers:
            if isinstance(c, ArenaAttentionCache):
                c.check_room(rows)
                return

    def settle(self, length: int) -> None:
        """After a causal pass (once, whether it ran eagerly or as graph replays): its GDN states applied, the
        attention layers' lengths advanced, `length_t` filled (only now: the pass read the old one)."""
        for c in self.layers:
            if isinstance(c, ArenaGDNCache):
                c.apply_pending()
            elif isinstance(c, ArenaAttentionCache):
                c.length = length
        self.length = length


class OffloadedExperts(nn.Module):
    """Drop-in for `model.moe.Experts`: forward(x [N,H], idx [N,k], weights [N,k]) → [N,H]."""

    def __init__(self, runtime: "Runtime", layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.__dict__["runtime"] = runtime  # plain reference, not a submodule

    def forward(self, x: Tensor, idx: Tensor, weights: Tensor) -> Tensor:
        return self.runtime.run_experts(self.layer, x, idx, weights)

    def extra_repr(self) -> str:
        return f"layer={self.layer}, slots={self.runtime.cache.n_slots}"


@dataclass
class PassRecord:
    kind: str  # preview | commit | merged (a commit + the next block's first preview) | prefill
    pass_in_block: int
    rows: int
    ms: float
    uses: int
    hits: int
    misses: int
    bytes: int
    optimistic: bool = False  # attempted without per-layer syncs
    retried: bool = False  # ... and rerun after a miss (ms covers every run)
    graphed: bool = False  # the optimistic attempt was a CUDA graph replay (runtime/graphs.py)
    captured: bool = False  # ... of a graph captured in this pass (ms includes the capture)
    repairs: int = 0  # replays after loading what the one before missed (`ExpertCache.repair`)
    synced: bool = False  # an optimistic attempt gave up: the pass ran through the syncing path
    host_reads: int = 0  # misses the MoE kernel read in place from host memory (`RuntimeOptions.host_reads`)
    substituted: int = 0  # routing choices resident routing took away (`Runtime.route_limit`)
    read_through: int = 0  # of host_reads, those copied into a slot as they were read (`set_read_through`)


# Replays of a missing graphed preview, each after loading what the last one lacked, before the syncing path.
MAX_REPAIRS = 3


@dataclass
class PassState:
    """What `pass_scope` decided about the pass it brackets."""

    kind: str
    optimistic: bool = False
    retried: bool = False
    graphed: bool = False
    captured: bool = False
    repairs: int = 0
    synced: bool = False
    counts: np.ndarray | None = None  # the last optimistic attempt's use counts
    deferred: bool = False  # it stands whatever it used: booked later (`Runtime.finish_pass`)


class Runtime:
    # a pass that stands whatever it used is booked after the model queues its LM head (`finish_pass`); False
    # books every pass at once (tests compare the two)
    defer_booking = True

    def __init__(self, config, cache: ExpertCache, plan, device: torch.device, dtype: torch.dtype, *,
                 context: int, prefetch: bool = True, prefill_chunk: int = 512, prefill_span: int = 512,
                 time_layers: bool = True,
                 optimistic: bool = True, cuda_graphs: bool = True, resident_routing: bool = False,
                 cpu_cache: int = DEFAULT_CPU_CACHE) -> None:
        self.config, self.cache, self.plan = config, cache, plan
        # missed experts the cache leaves to the CPU (`--cpu-experts`) run there, converted once and kept
        self.cpu = CpuExperts(cache.host, cpu_cache) if cache.host is not None else None
        self.device, self.dtype = device, dtype
        self.context = context
        self.prefetch = prefetch
        self.prefill_chunk = prefill_chunk
        # rows of a prefill pass, each layer chunk by chunk (as the plan sized it)
        self.prefill_span = prefill_rows(prefill_chunk, prefill_span, context)
        self.time_layers = time_layers
        self.optimistic = optimistic
        self.block_size = config.diffusion.block_size
        self.cuda = device.type == "cuda"
        self.layers = sorted(cache.counters)
        self.history = RoutingHistory()
        self.block_key: tuple | None = None
        self.pass_in_block = 0
        self._records: deque[PassRecord] = deque(maxlen=4096)
        self._deferred: Callable[[], None] | None = None  # the last pass's booking, when it was put off
        self._deferred_thread = 0  # ... by this thread
        self._layer_events: list = []
        self._opt = OptimisticPass(cache)
        self.host_reads_error: str | None = None  # why optimistic passes do not read from the host (set_host_reads)
        self.read_through_error: str | None = None  # ... nor read through into slots (set_read_through)
        self.graphs = PassGraphs(device, enabled=cuda_graphs)  # optimistic preview passes as graph replays
        self.commit_graphs = PassGraphs(device, enabled=cuda_graphs)  # ... and commits (one failing spares the other)
        self.merged_graphs = PassGraphs(device, enabled=cuda_graphs)  # ... and merged commit + first preview passes
        # a merged pass ran (the first is an eager attempt: its 64-row kernels compiled, later ones are graphed)
        self._merged_compiled = False
        self._optimistic_now = False  # layer calls take the resident-only path
        self._block_clean = False  # the block's previous pass makes an optimistic one worth trying
        self.optimistic_passes = 0
        self.retried_passes = 0
        self.repair_replays = 0
        self.kv: dict[int, tuple[Tensor, Tensor]] = {}
        for i, kind in enumerate(config.layer_types):
            if kind == "full_attention":
                shape = (1, config.num_key_value_heads, context, config.head_dim)
                self.kv[i] = (torch.zeros(shape, dtype=dtype, device=device),
                              torch.zeros(shape, dtype=dtype, device=device))
        # per GDN layer, where a causal pass's new ring and state wait until it is settled (ArenaGDNCache);
        # shared by the runtime's caches (one pass at a time)
        self.gdn_pending = {i: self._gdn_buffers() for i, kind in enumerate(config.layer_types)
                            if kind != "full_attention"}
        self._arena_user: weakref.ref | None = None  # the cache whose keys/values the arena holds
        # resident routing: what each layer's router may choose in this pass (`route_limit`: 0 = may, -1 = not;
        # for a block's later previews the experts resident when it began, else all) and the choices that took
        # away (`wanted`, counted on the device, copied in after the pass); buffers graphs read, filled per pass
        self.resident_routing = False
        self._route_table: Tensor | None = None
        self._wanted: Tensor | None = None
        self._wanted_host: Tensor | None = None  # ... read behind a pass whose booking is put off
        self.set_resident_routing(resident_routing)
        self._restricted = False  # the pass in progress routes among resident experts
        self.restricted_passes = 0  # passes resident routing restricted
        self.substituted = 0  # choices it took away, over all passes
        self.background_installs = 0  # ... and the wanted experts copied in after them

    def _gdn_buffers(self) -> tuple[Tensor, Tensor]:
        cfg = self.config
        return (torch.zeros(1, cfg.linear_conv_kernel_dim - 1, cfg.gdn_conv_dim, dtype=self.dtype, device=self.device),
                torch.zeros(1, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                            dtype=torch.float32, device=self.device))

    # ------------------------------------------------------------------ model hooks
    def new_cache(self) -> PrefixCache:
        """A prefix cache over the preallocated KV arena (one live sequence at a time: batch 1)."""
        self.finish_pass()
        cfg = self.config
        layers: list = []
        for i, kind in enumerate(cfg.layer_types):
            if kind == "full_attention":
                k, v = self.kv[i]
                layers.append(ArenaAttentionCache(k=k, v=v, length=0, in_place_rows=self.block_size))
            else:
                layers.append(ArenaGDNCache(*self._gdn_buffers(), pending=self.gdn_pending[i]))
        cache = ArenaPrefixCache(layers, self.device)
        self._end_block()  # a new sequence: nothing of the last block carries over
        self._drop_graphs()  # ... nor a graph reading another cache's buffers
        self._arena_user = weakref.ref(cache)  # weak: a finished generation's GDN states are not kept alive
        return cache

    def reclaim(self, cache: PrefixCache) -> bool:
        """Ready an earlier cache of ours for more passes (a reused prompt prefix). False when a newer cache has
        been handed the arena since, overwriting its keys/values. Ends the runtime's notion of the current block,
        so the first pass on the reclaimed cache is not taken for a continuation of its last (uncommitted) one."""
        self.finish_pass()
        if self._arena_user is None or self._arena_user() is not cache:
            return False
        self._end_block()
        return True

    def restart(self, cuda_graphs: bool) -> None:
        """Forget every pass so far — the block, the routing history, the graphs and their counters, whether a
        merged pass ran — as a fresh load has none (`runtime.load.reconfigure`, which then empties and warms the
        expert cache); `cuda_graphs` as the load option."""
        self.finish_pass()
        self._end_block()
        for graphs in (self.graphs, self.commit_graphs, self.merged_graphs):
            graphs.reset(cuda_graphs)
        self.history = RoutingHistory()
        self._block_clean = self._merged_compiled = False

    def _end_block(self, key: tuple | None = None) -> None:
        """The current block is over: unpin its experts; `key` starts the next one. The preview graph stays: it
        reads the cache's fixed buffers and its device length, so it serves the next block too."""
        self.cache.end_block()
        self.block_key, self.pass_in_block = key, 0

    def _drop_graphs(self) -> None:
        self.graphs.drop()
        self.commit_graphs.drop()
        self.merged_graphs.drop()

    def _graph_key(self, cache, x: Tensor, kind: str) -> tuple:
        """What a captured preview, commit or merged pass depends on: the cache object (its buffers), the rows,
        the attention window it reads (a commit's covers its own rows too; a merged pass's, the preview after
        them: `ArenaAttentionCache.write_merged`)."""
        att = next((c for c in cache.layers if isinstance(c, ArenaAttentionCache)), None)
        rows = {"commit": x.shape[1], "merged": x.shape[1] - self.block_size + 1}.get(kind, 1)
        window = 0 if att is None else att.window(rows)
        return id(cache), tuple(x.shape), x.dtype, window

    def run_pass(self, preview: bool, start: int, x: Tensor, cache, fn: Callable[[Tensor], T],
                 commit_rows: int = 0) -> T:
        """Run one pass `fn(x)` (the model's layers over embedded rows x [B,T,H], `CloverModel.hidden`) inside
        `pass_scope`. An optimistic preview or commit runs as a CUDA graph replay where it can
        (`runtime/graphs.py`). An optimistic attempt that needed a non-resident expert is thrown away (a preview
        writes nothing to the prefix cache; a commit writes its keys/values at fixed rows, which a rerun writes
        again, and holds its GDN states aside until the model settles the cache); a replay is repaired — what it
        lacked is loaded and it replays again, up to MAX_REPAIRS times — and anything else, or a repair that
        does not fit, reruns through the syncing path. `commit_rows`: a merged pass (`CloverModel.
        commit_and_preview`), which is a commit of the block at `start` and the next block's first pass."""
        if not preview and isinstance(cache, ArenaPrefixCache):
            # the one check, before the pass: a graph replay runs no Python
            cache.check_room(commit_rows or x.shape[1])
        with self.pass_scope(preview, start, x.shape[1], cache, allow_optimistic=True,
                             next_block=start + commit_rows if commit_rows else None) as state:
            while state.optimistic:
                graphs = {"preview": self.graphs, "commit": self.commit_graphs,
                          "merged": self.merged_graphs if self._merged_compiled else None}.get(state.kind)
                if graphs is not None:
                    out, graphed, captured = graphs.run(self._graph_key(cache, x, state.kind), x, fn)
                    state.graphed, state.captured = state.graphed or graphed, state.captured or captured
                else:
                    out = fn(x)
                if self.defer_booking and self._stands_whatever_it_used():  # booked later (`finish_pass`)
                    self._optimistic_now = False
                    if self._restricted:  # lands with the counts (`finish_async` records the event after both)
                        self._wanted_host.copy_(self._wanted, non_blocking=True)
                    self._opt.finish_async()
                    state.deferred = True
                    return out
                if self._settle_optimistic(state):
                    return out
                del out
                if self._restricted:  # the attempt thrown away counted choices too: the next run counts afresh
                    self._wanted.zero_()
                if not (state.graphed and self._repair(state)):
                    break
            state.synced = state.optimistic
            return fn(x)

    def run_steps(self, start: int, x: Tensor, cache, steps: Callable[[Tensor], Generator[int, None, T]]
                  ) -> Generator[int, None, T]:
        """A prompt's pass that goes layer by layer (`CloverModel.prompt_pass`) as a generator of the model's
        steps, inside `pass_scope`: a front end shows them, and a consumer that stops between two abandons the
        pass (`_failures`: GeneratorExit is raised there). Always the syncing path, never a graph: it runs once
        a prompt span, seconds at 35B, where its per-layer routing syncs cost milliseconds."""
        if isinstance(cache, ArenaPrefixCache):
            cache.check_room(x.shape[1])
        with self.pass_scope(False, start, x.shape[1], cache, layer_major=True):
            return (yield from steps(x))

    @property
    def host_reads(self) -> bool:
        """Whether optimistic passes read non-resident experts in place (`OptimisticPass.host_reads`)."""
        return self._opt.host_reads

    def set_host_reads(self, on: bool, error: str | None = None) -> None:
        """Switch host reads (`OptimisticPass.host_reads`) on or off, e.g. after the load-time check
        (`runtime/host_reads.py`); `error` says why they are off. Drops the captured graphs: their MoE launches
        were captured with or without the host stacks."""
        self.finish_pass()
        self._opt.host_reads = on and self.cache.host is not None
        self.host_reads_error = error
        self._drop_graphs()

    @property
    def read_through(self) -> bool:
        """Whether passes that read from the host copy what they read into slots as they go (`set_read_through`)."""
        return self.cache.read_through_on and self._opt.host_reads

    def set_read_through(self, on: bool, error: str | None = None) -> None:
        """Switch read-through installs on or off (they act with host reads only): a pass that reads a missing
        expert from host memory copies it into a slot its layer's predecessor did not use, instead of the copy
        after the pass that moved it over PCIe a second time (`ExpertCache.offer_slots`, `kernels.moe_w4a16`
        install); `error` says why it is off. Drops the captured graphs: their MoE launches were captured with or
        without it."""
        self.finish_pass()
        self.read_through_error = None if on else error
        self.cache.set_read_through(on)
        self._drop_graphs()

    def set_resident_routing(self, on: bool) -> None:
        """Switch resident routing (`route_limit`) on or off; moot with every expert resident. Drops the captured
        graphs: their routers were captured with or without the restriction."""
        self.finish_pass()
        self.resident_routing = on and self.cache.host is not None
        if self.resident_routing and self._route_table is None:
            n = len(self._opt.row_of) * self.cache.n_experts
            self._route_table = torch.zeros(n, dtype=torch.int32, device=self.device)
            self._wanted = torch.zeros(n, dtype=torch.int32, device=self.device)
            self._wanted_host = torch.zeros(n, dtype=torch.int32, pin_memory=self.cuda)
        self._drop_graphs()

    def route_limit(self, layer: int) -> tuple[Tensor, Tensor] | None:
        """The `SparseMoe.route_limit` hook: (allowed, wanted) [E] int32 views of layer's row, or None without
        resident routing. With it, a block's later previews choose only among the experts resident when the
        pass began (the block's first pass loaded its own), so they never wait for a copy; the experts a row
        wanted and could not have are copied in behind the next pass (`_install_wanted`) and may be chosen
        from the pass after it. The first pass, commits and prefills choose freely. An approximation (for a
        pass or two a choice the router ranks lower stands in for one not resident), measured in BENCHMARKS.md."""
        if not self.resident_routing:
            return None
        n = self.cache.n_experts
        row = slice(self._opt.row_of[layer] * n, (self._opt.row_of[layer] + 1) * n)
        return self._route_table[row], self._wanted[row]

    def _restrict_routing(self, kind: str) -> np.ndarray | None:
        """Fill the route table for the pass about to run; returns the slots whose copies it need not wait for
        (the last pass's background installs, which it may not choose), or None (wait for every copy)."""
        if not self.resident_routing:
            self._restricted = False
            return None
        self._restricted = kind == "preview" and self.pass_in_block > 0
        if not self._restricted:
            self.cache.take_landing()  # an exact pass waits for every copy
            self._route_table.zero_()
            return None
        allowed, landing = self.cache.restricted_choice(self.config.num_experts_per_tok)
        self._route_table.copy_(torch.from_numpy(np.where(allowed, 0, -1).astype(np.int32).reshape(-1)))
        self._wanted.zero_()
        return landing if landing.size else None

    def _install_wanted(self, landed: bool) -> int:
        """After a restricted pass: count what it took away and start copying the experts rows wanted into free
        or unpinned slots (`ExpertCache.install_missed(background=True)`); returns the choices taken away.
        `landed`: the choices were read behind the pass (its booking put off), else they are read now."""
        self._restricted = False
        self.restricted_passes += 1
        cache = self.cache
        wanted = (self._wanted_host if landed else self._wanted.cpu()).view(cache.layer_ids.size, cache.n_experts)
        wanted = wanted.numpy()
        lost = int(wanted.sum())
        self.substituted += lost
        rows, experts = np.nonzero((wanted > 0) & (cache.slot_of[cache.layer_ids] < 0))
        if rows.size:
            self.background_installs += cache.install_missed(rows, experts, background=True)
        return lost

    def _may_run_optimistically(self, kind: str) -> bool:
        if not self.optimistic:
            return False
        if kind == "merged":
            # a commit (the block's pinned experts) and a block's first pass (experts unknown, most of them
            # resident, as for a first preview): a replay where a graph is or can be captured, except the first
            # merged pass, an eager attempt (it compiles the 64-row optimistic kernels before any capture; one
            # that missed reruns syncing, once); without graphs, where an attempt stands (every expert resident,
            # or host reads)
            return self.merged_graphs.enabled or self.cache.host is None or self.host_reads
        if self.cache.host is None:  # every expert is resident: nothing can miss
            return True
        if kind == "commit":
            # the block's experts are pinned by its previews, and its final tokens route mostly like the last
            # one; a replay that misses is read from the host or repaired, so worth it wherever a graph is (or
            # can be) captured and, without host reads, the block's set stayed resident (else the commit's will
            # not fit either: a wasted replay)
            return self.commit_graphs.enabled and (self._block_clean or self.host_reads)
        if kind != "preview":
            return False
        if self.pass_in_block == 0:
            # a block's first pass: its experts are unknown, but most are the last block's, still resident, and
            # a replay that misses reads them from the host or is repaired, for less than the syncing pass (27 vs
            # ~250 ms at 35B). Eager, an attempt costs as much as the syncing pass, so only with a graph to replay
            # (captured by a later pass, once the first has compiled the preview kernels), or with host reads and
            # no graphs (it cannot be thrown away then).
            return self.graphs.current is not None or (self.host_reads and not self.graphs.enabled)
        # host reads: an attempt always stands; resident routing: it chooses nothing that is not resident
        return self._block_clean or self.host_reads or self.resident_routing

    def _stands_whatever_it_used(self) -> bool:
        """An optimistic attempt stands before its counts are read: what was not resident was read from the host,
        or nothing is off the device."""
        return self._opt.host_reads or self.cache.host is None

    def _settle_optimistic(self, state: PassState) -> bool:
        """The optimistic pass's one host sync: book it (True), or flag it for a rerun (False)."""
        self._optimistic_now = False
        return self._book(state, self._opt.finish())

    def _book(self, state: PassState, counts: np.ndarray) -> bool:
        if not state.retried:
            self.optimistic_passes += 1
        if not self._stands_whatever_it_used() and self.cache.missing(counts):
            if state.kind == "prefill":  # a prefill is optimistic only with every expert resident
                raise RuntimeError("an optimistic prefill pass used a non-resident expert")
            if not state.retried:
                self.retried_passes += 1
            state.retried = True
            state.counts = counts
            return False
        self.cache.commit_uses(counts, host_reads=self._opt.host_reads, installed=self._opt.installed)
        self.history.record(counts, self._opt.row_of)
        return True

    def _repair(self, state: PassState) -> bool:
        """Load what the last attempt lacked and start another optimistic attempt (True), or give up (False)."""
        if state.repairs >= MAX_REPAIRS or self.cache.repair(state.counts, state.kind == "commit") is None:
            return False
        state.repairs += 1
        self.repair_replays += 1
        self._opt.begin()  # the new slot table, the copies awaited on the device, counts from zero
        self._optimistic_now = True
        return True

    @contextmanager
    def pass_scope(self, preview: bool, start: int, rows: int, cache=None, allow_optimistic: bool = False,
                   next_block: int | None = None, layer_major: bool = False):
        """Bracket one pass: block bookkeeping, timing, the pass record. `allow_optimistic`: the caller can rerun
        the body (`run_pass`), so the pass may start optimistically (`PassState.optimistic`). `next_block`: a
        merged pass, committing the current block and the first pass of the one starting there (the current
        block's experts are unpinned before it, what it uses is pinned to the next). `layer_major`: a prompt's
        pass that goes layer by layer (`run_steps`; the cache ranks the layer in progress as needed next). A
        pass that stands whatever it used (`PassState.deferred`) is booked later, by `finish_pass`."""
        self.finish_pass()
        key = (id(cache), start) if cache is not None else None
        kind = ("merged" if next_block is not None else "preview" if preview
                else "commit" if key is not None and key == self.block_key else "prefill")
        # everything from here to the booking under `_failures`: a stop that lands anywhere in the bookkeeping
        # (Ctrl-C raises wherever the decoder is) leaves the runtime and its cache sound (`_abandon`)
        with self._failures(f"during a {rows}-row {kind} pass"):
            if kind == "merged":
                self._end_block((id(cache), next_block))
            elif kind == "preview" and (key is None or key != self.block_key):
                self._end_block(key)
            elif kind == "prefill":
                self._end_block()
            before = self.cache.totals()
            self._layer_events = []
            dense = kind == "prefill" and dense_rows(rows, self.config.num_experts_per_tok, self.config.num_experts)
            self.cache.begin_pass(dense, layer_major)
            landing = self._restrict_routing(kind)
            state = PassState(kind, optimistic=allow_optimistic and self._may_run_optimistically(kind))
            t0 = time.perf_counter()
            if state.optimistic:
                self._opt.begin(keep=landing)
                self._optimistic_now = True
            yield state
            if state.deferred:
                self._deferred = lambda: self._close_pass(state, rows, preview, before, t0)
                self._deferred_thread = threading.get_ident()
            else:
                self._close_pass(state, rows, preview, before, t0)

    def finish_pass(self) -> None:
        """Book the last pass if its booking was put off (`PassState.deferred`): wait for its use counts (not for
        what was queued after it) and do the host's bookkeeping — counters, LRU ticks, pins, installs of what it
        read from the host, its record. The model calls this once its LM head is queued behind the pass
        (`CloverModel._finish_pass`), so the ≈ 0.25 ms of booking at 35B (`docs/host_overhead.py`) runs while
        the device computes the LM head (≈ 0.36 ms at 32 rows on an H200), not between the pass and the LM head
        with the device idle. Every other way into the runtime calls it first, so nothing sees a pass half booked
        (but `stats` from another thread, which sees the counters as of the pass before)."""
        close, self._deferred = self._deferred, None
        if close is not None:
            with self._failures("after a pass"):  # e.g. the installs of what it read from the host
                close()

    @contextmanager
    def _failures(self, when: str):
        """A failed pass: the runtime forgets its pass state (`_abandon`); out of device memory → one line."""
        try:
            yield
        except _OOM:
            self._abandon()
            if self.cuda:
                torch.cuda.empty_cache()
            raise CloverError(
                f"the GPU ran out of memory {when} (budget "
                f"{fmt_bytes(self.plan.vram_budget)}): other programs may be using the card; lower --vram-budget "
                "or --context and retry") from None
        except BaseException:
            self._abandon()
            raise

    def _close_pass(self, state: PassState, rows: int, preview: bool, before: LayerCounters, t0: float) -> None:
        """The pass is over: its record, and what the next pass of the block may assume."""
        kind = state.kind
        if state.deferred:
            counts = self._opt.collect()  # the pass is over on the device: its time ends here
        elif self.cuda:
            torch.cuda.synchronize(self.device)
        ms = 1e3 * (time.perf_counter() - t0)
        if state.deferred:
            self._book(state, counts)  # it stands: booked as hits and host reads
        self.cache.end_pass()
        self._resolve_layer_events()
        substituted = self._install_wanted(state.deferred) if self._restricted else 0
        after = self.cache.totals()
        self._records.append(PassRecord(kind, self.pass_in_block, rows, ms, after.uses - before.uses,
                                        after.hits - before.hits, after.misses - before.misses,
                                        after.bytes - before.bytes, state.optimistic, state.retried,
                                        state.graphed, state.captured, state.repairs, state.synced,
                                        after.host_reads - before.host_reads, substituted,
                                        after.read_through - before.read_through))
        if kind == "merged":
            # its commit rows' experts were pinned with the preview rows' (one set of use counts): unpinned now,
            # the block's next pass pins its own set, so the last block's experts do not crowd this one's
            self.cache.end_block()
            self._merged_compiled = True
        if preview or kind == "merged":
            # what this pass used was pinned as it went: unless a pinned expert was evicted (the block's set does
            # not fit) or one ran on the CPU, all of it is resident now. A later pass must also have missed
            # nothing (a sign of stable routing; after a syncing rerun that means one syncing pass before trying
            # again) or have been repaired (its replays end on a graph that missed nothing).
            kept = after.pinned_evictions == before.pinned_evictions and after.cpu_runs == before.cpu_runs
            stable = after.misses == before.misses or (state.repairs > 0 and not state.synced)
            self._block_clean = kept and (self.pass_in_block == 0 or stable)
            self.pass_in_block += 1
        else:
            self._end_block()

    def _abandon(self) -> None:
        self._restricted = False
        self.cache.recover()
        if self.cache.offers.size:  # slots a failed pass read experts through into, unregistered
            self.cache.drop_offers(self._opt.taken_slots())
        self._drop_graphs()
        self.block_key, self.pass_in_block = None, 0
        self._layer_events = []
        self._optimistic_now = False

    # ------------------------------------------------------------------ the MoE
    def run_experts(self, layer: int, x: Tensor, idx: Tensor, weights: Tensor) -> Tensor:
        if self._optimistic_now:
            return self._opt.run(layer, x, idx, weights)
        t0 = time.perf_counter()
        start_ev = None
        if self.cuda and self.time_layers:
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        idx_host = idx.detach().to("cpu").numpy().astype(np.int64, copy=False)
        if not bool(torch.isfinite(weights).all()):  # (this path syncs anyway: one reduction more a layer)
            raise CloverError(
                f"layer {layer}'s router got non-finite logits: the hidden states reaching it are not finite (NaN "
                "or inf); `python -m clover_local.runtime.gpu_check --stages finite` names the first module that "
                "made them")
        counts = np.bincount(idx_host.reshape(-1), minlength=self.cache.n_experts)
        experts = np.flatnonzero(counts)
        counts = counts[experts]
        n = self.cache.n_slots
        if experts.size <= n:
            out = self._run_group(layer, x, idx_host, weights, experts, counts, whole=True)
        else:  # one call needs more experts than there are slots: serve them in groups
            out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            order = np.argsort(self.cache.slot_of[layer, experts] < 0, kind="stable")  # resident ones first
            for g in range(0, experts.size, n):
                sel = np.sort(order[g : g + n])
                out += self._run_group(layer, x, idx_host, weights, experts[sel], counts[sel], whole=False)
        out = out.to(x.dtype)
        self.history[layer] = experts[np.argsort(-counts, kind="stable")]
        c = self.cache.counters[layer]
        if start_ev is not None:
            end_ev = torch.cuda.Event(enable_timing=True)
            end_ev.record()
            self._layer_events.append((c, start_ev, end_ev))
        else:
            c.seconds += time.perf_counter() - t0
        return out

    def _run_group(self, layer: int, x: Tensor, idx_host: np.ndarray, weights: Tensor, experts: np.ndarray,
                   counts: np.ndarray, whole: bool) -> Tensor:
        cache = self.cache
        acq = cache.acquire(layer, experts, counts)
        try:
            if whole and self.prefetch:
                self._prefetch_after(layer)
            cache.wait(acq)
            table = np.full(cache.n_experts, -1, dtype=np.int64)
            table[experts] = acq.slots
            pair_slots = table[idx_host]
            on_device = pair_slots >= 0
            if whole and on_device.all():
                slot_ids = torch.from_numpy(pair_slots).to(x.device)
                return moe_w4a16(x, slot_ids, weights, cache.gate_up, cache.down)
            in_group = np.isin(idx_host, experts)
            out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            cpu_job = None
            r, j = np.nonzero(~on_device & in_group)
            if r.size:  # the CPU path's inputs come over first, so the device kernel below overlaps its compute
                rows, cols = torch.from_numpy(r).to(x.device), torch.from_numpy(j).to(x.device)
                cpu_job = (rows, x[rows].to("cpu"), torch.from_numpy(idx_host[r, j][:, None]),
                           weights[rows, cols][:, None].to("cpu", torch.float32))
            r, j = np.nonzero(on_device & in_group)
            if r.size:
                rows, cols = torch.from_numpy(r).to(x.device), torch.from_numpy(j).to(x.device)
                slot_ids = torch.from_numpy(pair_slots[r, j][:, None]).to(x.device)
                y = moe_w4a16(x[rows], slot_ids, weights[rows, cols][:, None], cache.gate_up, cache.down)
                out.index_add_(0, rows, y.float())
            if cpu_job is not None:  # torch's int4 CPU kernel on converted host experts, indexed by expert id
                rows, xc, ec, wc = cpu_job
                out.index_add_(0, rows, self.cpu.run(layer, xc, ec, wc).to(x.device))
            return out
        finally:
            cache.release()

    def _prefetch_after(self, layer: int) -> None:
        pos = self.layers.index(layer)
        if pos + 1 < len(self.layers):
            nxt = self.layers[pos + 1]
            self.cache.prefetch(nxt, self.history.get(nxt, np.zeros(0, dtype=np.int64)))

    def _resolve_layer_events(self) -> None:
        for counters, a, b in self._layer_events:
            counters.seconds += a.elapsed_time(b) / 1e3
        self._layer_events = []

    # ------------------------------------------------------------------ numbers
    @property
    def records(self) -> deque[PassRecord]:
        """The last 4,096 passes, each booked (`finish_pass`)."""
        self.finish_pass()
        return self._records

    def reset_stats(self) -> None:
        self.finish_pass()
        for i in self.cache.counters:
            self.cache.counters[i] = LayerCounters()
        self._records.clear()
        self.optimistic_passes = self.retried_passes = self.repair_replays = 0
        self.restricted_passes = self.substituted = self.background_installs = 0
        if self.cpu is not None:
            self.cpu.reset_stats()

    def placed_bytes(self, model: nn.Module, cache: PrefixCache | None = None, prompt_cache=None) -> dict[str, int]:
        """Bytes this runtime holds on the compute device, by what they are (the plan's prediction's twin);
        `prompt_cache` (a generate.prompt_cache.PromptCache) adds its snapshot."""
        weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())
                      if t.device.type == self.device.type)
        kv = sum(t.numel() * t.element_size() for pair in self.kv.values() for t in pair)
        gdn = sum(t.numel() * t.element_size() for pair in self.gdn_pending.values() for t in pair)
        if cache is not None:
            for c in cache.layers:
                if isinstance(c, GDNCache):
                    gdn += sum(t.numel() * t.element_size() for t in (c.ring, c.state) if t is not None)
        snapshot = prompt_cache.nbytes if prompt_cache is not None else 0
        return {"weights": weights, "kv_cache": kv, "gdn_states": gdn, "prompt_snapshot": snapshot,
                "expert_slots": self.cache.nbytes, "total": weights + kv + gdn + snapshot + self.cache.nbytes}

    def stats(self) -> dict:
        """Counters for front ends and `bench`: hit rate, misses, PCIe bytes, pass times, per layer. From another
        thread than the one decoding (chat's status line) they may be a pass behind: only the decoding thread
        books a pass (`finish_pass`)."""
        if self._deferred is not None and self._deferred_thread == threading.get_ident():
            self.finish_pass()
        tot = self.cache.totals()
        recs = list(self._records)

        def rate(h: int, u: int) -> float | None:
            return round(h / u, 4) if u else None

        later = [r for r in recs if r.kind == "preview" and r.pass_in_block > 0]
        first = [r for r in recs if r.kind == "merged" or (r.kind == "preview" and r.pass_in_block == 0)]
        by_kind = {}
        for kind in ("preview", "commit", "merged", "prefill"):
            rs = [r for r in recs if r.kind == kind]
            if rs:
                by_kind[kind] = {"count": len(rs), "mean_ms": round(sum(r.ms for r in rs) / len(rs), 3)}
        return {
            "device": str(self.device),
            "slots": self.cache.n_slots,
            "resident": self.cache.resident(),
            "experts_total": self.plan.experts_total,
            "slab_bytes": self.cache.layout.nbytes,
            "expert_uses": tot.uses,
            "hits": tot.hits,
            "misses": tot.misses,
            "copied": tot.copied,
            "repair_unused": tot.repair_unused,  # ... of those, repair copies its rerun did not use (not misses)
            "cpu_runs": tot.cpu_runs,
            "cpu_experts": self.cpu.summary() if self.cpu is not None else None,
            "host_reads": tot.host_reads,  # misses read in place from host memory (optimistic passes)
            "host_reads_on": self.host_reads,
            "host_reads_error": self.host_reads_error,
            "read_through": tot.read_through,  # ... of those, copied into a slot as they were read (one transfer)
            "read_through_on": self.read_through,
            "read_through_error": self.read_through_error,
            "resident_routing": self.resident_routing,  # later previews choose among resident experts only
            "restricted_passes": self.restricted_passes,
            "substituted": self.substituted,  # ... the choices that took away
            "background_installs": self.background_installs,  # ... and the wanted experts copied in behind
            "prefetched": tot.prefetched,
            "prefetch_used": tot.prefetch_used,
            "prefetch_wasted": tot.prefetch_wasted,
            "pinned_evictions": tot.pinned_evictions,
            "bytes_h2d": tot.bytes,
            "hit_rate": rate(tot.hits, tot.uses),
            "first_pass_hit_rate": rate(sum(r.hits for r in first), sum(r.uses for r in first)),
            "later_pass_hit_rate": rate(sum(r.hits for r in later), sum(r.uses for r in later)),
            "optimistic_passes": self.optimistic_passes,  # attempted without per-layer syncs, retried ones included
            "retried_passes": self.retried_passes,  # of those, rerun after a miss (repaired, or syncing)
            "repair_replays": self.repair_replays,  # graph replays after loading what the replay before lacked
            "graphs": self.graphs.stats(),  # optimistic previews captured / replayed as CUDA graphs
            "commit_graphs": self.commit_graphs.stats(),  # ... and commits
            "merged_graphs": self.merged_graphs.stats(),  # ... and merged passes (a commit + the next first preview)
            "passes": by_kind,
            "last_pass": asdict(recs[-1]) if recs else None,
            "layers": [self._layer_dict(i) for i in self.layers],
        }

    def _layer_dict(self, i: int) -> dict:
        d = asdict(self.cache.counters[i])
        d["ms"] = round(d.pop("seconds") * 1e3, 3)
        return {"layer": i, **d}
