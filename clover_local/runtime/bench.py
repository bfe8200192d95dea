"""`clover-local bench`: preview passes over one 32-row block after a prefix, at a device budget.

Measures: ms per pass (the block's first pass, and the steady state of the later ones), tokens/s at the
tokens per pass (assumed 3 for synthetic weights, measured by a short decode on a real pack), expert-cache hit
rate, PCIe bytes and GB/s, bytes read from device memory per pass against the roofline floor at the device's
bandwidth, and one profiled pass split into components (each with its byte floor), from which the RTX 5070 Ti
projection follows: Σ over calls of max(measured, bytes / 896 GB/s) + PCIe bytes / 50 GB/s.

`optimistic` (default on, as in the runtime) lets later passes of the block run without per-layer host syncs
(`runtime/optimistic.py`), and on CUDA as one graph replay per pass (`runtime/graphs.py`); `--no-optimistic` and
`--no-cuda-graphs` time the slower paths. The prefix's prefill is timed too (`prefill`: tokens/s, the expert copies
it waited for and those it prefetched, its components; on CUDA after a two-chunk warm-up that compiles the prefill
shapes' kernels, so `prefill_ms` is what a later prompt costs; the hooks add a little host time). The profiled pass
takes the syncing path (it reads per-layer counters, the bytes of each part); on CUDA a graph-profiled pass
(`_graph_profiled_pass`) adds each part's GPU time, since eager times at these sizes are mostly host launch cost.
`--routing uniform` gives synthetic packs a real block's expert load (`UniformRouting`); `uniform-reveal` also
gives the 3 rows revealed after each pass new experts, as a real decode does (the later passes then miss a few
experts each: `repairs_per_steady_pass`).
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from clover_local.errors import CloverError
from clover_local.generate.prompt_cache import PromptCache
from clover_local.runtime import segments
from clover_local.runtime.kernels import triton_on, kernel_forms, tuning
from clover_local.model.clover import CloverModel
from clover_local.runtime.load import RuntimeOptions, load_packed_model, reconfigure
from clover_local.runtime.offload import OffloadedExperts
from clover_local.runtime.packed_linear import PackedLinear, PackedMLP
from clover_local.runtime.placement import ASSUMED_TOKENS_PER_PASS, DEFAULT_PREFILL_CHUNK, PCIE_BPS, TARGET_BPS
from clover_local.runtime.sizes import cpu_count, pinned_allocator_bytes

# on a real pack, tokens per pass by the factor rule beside the threshold's (BENCHMARKS.md "Reveal rules": 1 is the
# tiny model's best trade)
BENCH_FACTOR = 1.0

# memory bandwidth by device name (vendor specs), for the roofline; anything else is measured with a copy
KNOWN_BANDWIDTH = {
    "H200": 4.8e12, "H100 NVL": 3.9e12, "H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100": 3.35e12,
    "A100-SXM4-80GB": 2.039e12, "A100": 1.555e12, "L40S": 0.864e12, "RTX 5090": 1.792e12, "RTX 5080": 0.96e12,
    "RTX 5070 Ti": 0.896e12, "RTX 4090": 1.008e12, "RTX 4080": 0.717e12, "RTX 3090": 0.936e12,
}


def device_bandwidth(device: torch.device) -> tuple[float, str]:
    """(bytes/s, where the figure comes from)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, bw in KNOWN_BANDWIDTH.items():
            if key in name:
                return bw, f"spec ({name})"
    n = (256 << 20) if device.type == "cuda" else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n / best, "measured copy (read + write)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Timer:
    """Start/end marks: CUDA events on a GPU, perf_counter on the CPU; durations read after a sync. `in_graph`:
    external events, which a CUDA graph capture records as event nodes, so a replay times its own kernels."""

    def __init__(self, device: torch.device, in_graph: bool = False) -> None:
        self.cuda = device.type == "cuda"
        self.in_graph = in_graph

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True, external=True) if self.in_graph else \
                torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


def _device_bytes(t: Tensor, device: torch.device) -> int:
    return t.numel() * t.element_size() if t.device.type == device.type else 0


@dataclass
class _Frame:
    category: str
    parent: int | None
    start: object
    end: object = None
    bytes: int = 0
    child_seconds: float = 0.0
    share: float | None = None  # a segment (`runtime/segments.py`): its part of the parent's bytes
    segments: list[int] = field(default_factory=list)  # a hooked call's segments, by frame index


class ComponentProfiler:
    """Forward hooks that time the pass's parts (self time: a module's time minus its hooked children).

    In an eager pass the host launches kernels one by one, slower than the GPU runs them, so these times are
    mostly launch cost. With `in_graph` the hooks run while a preview pass is captured as a CUDA graph: their
    events become nodes of the graph and time the replay, i.e. the GPU's own time for each part.

    Inside a hooked call, kernel launchers name their launches (`segments.segment`: the routed experts' align,
    gate/up pass, down pass and sum; a dense call's split-K sum): each becomes a child row "<category>: <name>"
    with its share of the call's bytes, and the call's own row keeps the rest (slot mapping, host work)."""

    def __init__(self, model: nn.Module, runtime, device: torch.device, kv_tokens: int, in_graph: bool = False) -> None:
        self.timer = _Timer(device, in_graph)
        self.frames: list[_Frame] = []
        self.stack: list[int] = []
        self.handles = []
        cfg = model.config
        a = torch.empty((), dtype=runtime.dtype).element_size()
        kv_bytes = 2 * cfg.num_key_value_heads * cfg.head_dim * kv_tokens * a
        gdn_bytes = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
        expert_bytes = runtime.cache.layout.weight_bytes
        for name, mod in model.named_modules():
            if isinstance(mod, PackedLinear):
                if name == "lm_head":
                    cat = "lm_head"
                elif ".self_attn." in name:
                    cat = "attention projections"
                elif ".linear_attn." in name:
                    cat = "GDN projections"
                else:
                    cat = "shared expert"
                self._hook(mod, cat, lambda m=mod: m.nbytes)
            elif isinstance(mod, OffloadedExperts):
                counters = runtime.cache.counters[mod.layer]
                self._hook(mod, "routed experts", None, counters=counters, per_expert=expert_bytes)
            elif type(mod).__name__ == "Attention":
                self._hook(mod, "attention core", lambda: kv_bytes)
            elif type(mod).__name__ == "GatedDeltaNet":
                self._hook(mod, "GDN core", lambda: gdn_bytes)
            elif isinstance(mod, PackedMLP) or type(mod).__name__ == "MLP":  # own time: silu · up between the two
                self._hook(mod, "shared expert", lambda: 0)
            elif type(mod).__name__ == "SparseMoe":  # its own time: the router's linear and top-k, the combine
                own = sum(_device_bytes(m.weight, device) for m in (mod.gate, mod.shared_expert_gate))
                self._hook(mod, "router and combine", lambda b=own: b)
            elif type(mod).__name__ == "DecoderLayer":  # per layer, not the model: a captured pass is the layers
                own = sum(_device_bytes(p, device) for n, p in mod.named_parameters() if not n.startswith("mlp."))
                self._hook(mod, "rest (norms, residuals)", lambda b=own: b)
        segments.listen(self._segment)

    def _end_segment(self) -> None:
        if self.stack and self.frames[self.stack[-1]].share is not None:
            self.frames[self.stack.pop()].end = self.timer.mark()

    def _segment(self, name: str, share: float) -> None:
        """A launcher's mark inside the hooked call on top of the stack (outside any: ignored)."""
        self._end_segment()
        if not self.stack:
            return
        top = self.stack[-1]
        self.frames[top].segments.append(len(self.frames))
        self.frames.append(_Frame(f"{self.frames[top].category}: {name}", top, self.timer.mark(), share=share))
        self.stack.append(len(self.frames) - 1)

    def _hook(self, mod, category, nbytes, counters=None, per_expert=0):
        def pre(_m, _args):
            if counters is not None:
                self._uses0 = counters.uses
            self.frames.append(_Frame(category, self.stack[-1] if self.stack else None, self.timer.mark()))
            self.stack.append(len(self.frames) - 1)

        def post(_m, _args, _out):
            self._end_segment()
            f = self.frames[self.stack.pop()]
            f.end = self.timer.mark()
            f.bytes = (counters.uses - self._uses0) * per_expert if counters is not None else nbytes()
            whole = f.bytes
            for i in f.segments:  # the segments' parts of the call's bytes; the call keeps what is left
                seg = self.frames[i]
                seg.bytes = round(seg.share * whole)
                f.bytes -= seg.bytes

        self.handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]

    def close(self) -> None:
        segments.stop(self._segment)
        for h in self.handles:
            h.remove()

    def own_seconds(self) -> list[tuple[str, float]]:
        """(category, self time) of every hooked call, in call order."""
        durs = [self.timer.seconds(f.start, f.end) for f in self.frames]
        child = [0.0] * len(self.frames)
        for i, f in enumerate(self.frames):
            if f.parent is not None:
                child[f.parent] += durs[i]
        return [(f.category, max(0.0, durs[i] - child[i])) for i, f in enumerate(self.frames)]

    def components(self, device_bw: float, graph: list[tuple[str, float]] | None = None) -> tuple[list[dict], float,
                                                                                                   float | None]:
        """Per-category rows, the projected ms on the target card (without PCIe) from this pass's times, and, given
        `graph` (the same calls' `own_seconds` from a graph replay), the projection from the replay's times."""
        own = self.own_seconds()
        if graph is not None and [c for c, _ in graph] != [c for c, _ in own]:
            graph = None  # not the same calls (cannot happen for the same block; never pair wrong rows)
        rows: dict[str, dict] = {}
        projected, projected_graph = 0.0, 0.0
        for i, (f, (cat, t)) in enumerate(zip(self.frames, own)):
            r = rows.setdefault(cat, {"component": cat, "calls": 0, "ms": 0.0, "bytes": 0, "floor_ms": 0.0,
                                      "floor_ms_5070ti": 0.0, "projected_ms_5070ti": 0.0})
            r["calls"] += 1
            r["ms"] += 1e3 * t
            r["bytes"] += f.bytes
            r["floor_ms"] += 1e3 * f.bytes / device_bw
            r["floor_ms_5070ti"] += 1e3 * f.bytes / TARGET_BPS
            p = 1e3 * max(t, f.bytes / TARGET_BPS)
            r["projected_ms_5070ti"] += p
            projected += p
            if graph is not None:
                g = 1e3 * max(graph[i][1], f.bytes / TARGET_BPS)
                r["graph_ms"] = r.get("graph_ms", 0.0) + 1e3 * graph[i][1]
                r["projected_ms_5070ti_graph"] = r.get("projected_ms_5070ti_graph", 0.0) + g
                projected_graph += g
        out = sorted(rows.values(), key=lambda r: -r.get("graph_ms", r["ms"]))
        for r in out:
            for k in ("ms", "floor_ms", "floor_ms_5070ti", "projected_ms_5070ti", "graph_ms",
                      "projected_ms_5070ti_graph"):
                if k in r:
                    r[k] = round(r[k], 4)
        return out, projected, projected_graph if graph is not None else None


class UniformRouting:
    """Preview rows routed to experts drawn uniformly at random (top-k distinct per row, fixed for the block). For
    synthetic packs: the rows of a random model converge, so its router sends a 32-row block to ~15 experts per
    layer (measured on the full pack, 2026-11-30), where uniform routing touches 256·(1 − (248/256)^32) ≈ 163 —
    the byte load a real model's block is planned for. Only calls with the block's row count are rerouted (a
    prefill chunk keeps the model's routing).

    Done on the router's logits, not its decision, so the pass routes through its own path (on CUDA the fused
    top-k kernel, which a patched `route` would bypass; any restriction the runtime applies to the choice): each
    row ranks the experts at random and a forward hook on the router replaces its logits by those ranks times
    RANK_STEP (the router's matmul still runs and is timed; one add more), so the row's top-k are its k
    highest-ranked experts among those it may choose, with smooth weights (a step small enough that softmax
    never rounds a chosen expert's probability to zero, which would make top-k pick by index)."""

    RANK_STEP = 0.25

    def __init__(self, model: nn.Module, rows: int, seed: int = 0) -> None:
        from clover_local.model.moe import SparseMoe

        self.handles = []
        self.ranks: list[Tensor] = []  # per MoE layer [rows, E]: each row's random ranking, times RANK_STEP
        self.merged: list[Tensor] = []  # ... [2·rows, E] for a merged pass (a commit, then the next block's rows)
        self.top_k: list[int] = []
        device = model.norm.weight.device
        for moe in (m for m in model.modules() if isinstance(m, SparseMoe)):
            ranks = torch.zeros(rows, moe.gate.out_features, dtype=torch.float32, device=device)
            merged = torch.zeros(2 * rows, moe.gate.out_features, dtype=torch.float32, device=device)
            self.handles.append(moe.gate.register_forward_hook(self._hook(ranks, merged)))
            self.ranks.append(ranks)
            self.merged.append(merged)
            self.top_k.append(moe.top_k)
        self.redraw(seed)

    @property
    def idx(self) -> list[Tensor]:
        """Per MoE layer, each row's k highest-ranked experts [rows, k] (what it routes to, unrestricted)."""
        return [r.topk(m, -1).indices for r, m in zip(self.ranks, self.top_k)]

    @staticmethod
    def _hook(ranks: Tensor, merged: Tensor):
        def add_ranks(_module, _inputs, logits: Tensor):
            for table in (ranks, merged):
                if logits.shape[0] == table.shape[0]:
                    return torch.add(table, logits, alpha=0)  # fp32, the ranks alone
            return None

        return add_ranks

    def _draw(self, n: int, e: int, g: torch.Generator) -> Tensor:
        return torch.rand(n, e, generator=g).argsort(-1).to(torch.float32) * self.RANK_STEP

    def redraw_rows(self, rows: slice, seed: int) -> None:
        """New experts for some rows only (tokens just revealed: their routing changes, the rest stays)."""
        g = torch.Generator().manual_seed(seed)
        for ranks in self.ranks:
            n = len(range(*rows.indices(ranks.shape[0])))
            ranks[rows] = self._draw(n, ranks.shape[1], g).to(ranks.device)

    def redraw(self, seed: int) -> None:
        """New experts for a new block, written into the same tensors: a CUDA graph of the preview reads them."""
        g = torch.Generator().manual_seed(seed)
        for ranks in self.ranks:
            ranks.copy_(self._draw(*ranks.shape, g))

    def redraw_merged(self, seed: int) -> None:
        """Before a merged pass: its commit rows keep the block's experts, its preview rows (the next block) get
        new ones, which the next block's later passes keep (`ranks`, not read by the merged pass)."""
        g = torch.Generator().manual_seed(seed)
        for ranks, merged in zip(self.ranks, self.merged):
            n = ranks.shape[0]
            merged[:n].copy_(ranks)
            ranks.copy_(self._draw(n, ranks.shape[1], g))
            merged[n:].copy_(ranks)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


# uniform-reveal: uniform, and the rows revealed after each pass get new experts, as in a real decode
ROUTINGS = ("model", "uniform", "uniform-reveal")


MERGED_PASSES = 3  # the first runs eagerly (compiles the 64-row kernels), the second captures, the third replays


def bench_context(prefix: int, block: int, measure_tokens: bool = False) -> int:
    """The context bench loads the runtime with: the prefix, the blocks it commits (two, then the merged
    passes'), and a 64-token decode's room when it measures tokens per pass on a real pack."""
    return prefix + (2 + MERGED_PASSES) * block + (256 if measure_tokens else 0)


def run_bench(folder: Path, *, label: str, synthetic: bool, vram_budget: int | None, prefix: int, passes: int,
              device: torch.device, dtype: torch.dtype, cpu_experts: str = "off", prefetch: bool = True,
              measure_tokens: bool = True, optimistic: bool = True, cuda_graphs: bool = True,
              routing: str = "model", host_reads: bool | None = None, resident_routing: bool = False,
              read_through: bool | None = None, prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
              on_step=lambda msg: None, model: CloverModel | None = None) -> dict:
    """`bench`'s measurements (its docstring). `model`: the pack at `folder` loaded before at the same budget and
    a context of at least `bench_context` (`run_variants`), set to these options (`runtime.load.reconfigure`)
    instead of loaded again; `load_s` is then that reconfiguration's time.

    The run, in order: the prefix's prefill; block 1's passes (its first loads the block's experts, the later
    ones are the steady state) and its commit; block 2's passes (what every later block of a decode costs), a
    graph-profiled and a profiled pass, its commit; the merged passes. Then the figures derived from them."""
    _check_bench_args(routing, passes, prefix)
    t0 = time.perf_counter()
    on_step("loading")
    from clover_local.config import load_config

    bs = load_config(folder).diffusion.block_size
    context = bench_context(prefix, bs, measure_tokens and not synthetic)
    options = RuntimeOptions(vram_budget=vram_budget, context=context, cpu_experts=cpu_experts, prefetch=prefetch,
                             optimistic=optimistic, cuda_graphs=cuda_graphs, host_reads=host_reads,
                             resident_routing=resident_routing, read_through=read_through,
                             prefill_chunk=prefill_chunk)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = _loaded(folder, device, dtype, options, model)
    load_s = time.perf_counter() - t0
    run = _BenchRun(model, device, passes, routing, on_step)
    rt = model.runtime
    held = PromptCache()
    bw, bw_source = device_bandwidth(device)
    with torch.inference_mode():
        cache, prefill_ms, prefill = run.prefill(prefix, held, bw)
        run.rerouted = UniformRouting(model, bs) if routing.startswith("uniform") else None
        try:
            rt.reset_stats()
            block = run.masked_block()
            recs = run.denoise(block, cache, "block 1")
            steady_call_ms = sum(run.call_ms[1:]) / len(run.call_ms[1:])
            stats = rt.stats()
            on_step("commit pass")
            model(block, cache)
            commit_rec = rt.records[-1]
            # the next block at the next start: what every later block of a decode costs (its first pass loads
            # the block's experts; no graph capture when the first block's graph still fits)
            if run.rerouted is not None:
                run.rerouted.redraw(seed=1)
            block = run.masked_block()
            recs2 = run.denoise(block, cache, "block 2")
            graph_own, graph_note = _graph_profiled_pass(model, rt, block, cache, device, prefix + bs, on_step)
            profiled, (components, projected_compute, projected_graph_compute) = run.profiled_pass(
                block, cache, prefix + bs, bw, graph_own)
            model(block, cache)
            commit2_rec = rt.records[-1]
            merged_recs = run.merged_passes(cache)
            placed = rt.placed_bytes(model, cache, held)
        finally:
            if run.rerouted is not None:
                run.rerouted.close()
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None

    first, steady = recs[0], recs[1:]
    steady_ms = sum(r.ms for r in steady) / len(steady)
    distinct = sum(r.uses for r in steady) / len(steady)
    device_bytes = _device_read_per_pass(model, device, dtype, prefix, distinct)
    roofline_ms = 1e3 * device_bytes / bw
    steady_pcie = sum(r.bytes for r in steady) / len(steady)
    graphed = [r for r in steady if r.graphed and not r.captured and not r.retried]  # replays that stood
    graphed_ms = sum(r.ms for r in graphed) / len(graphed) if graphed else None
    tpp, tpp_source, tpp_factor = _tokens_per_pass(folder, model, synthetic, measure_tokens)
    pcie_ms = 1e3 * steady_pcie / PCIE_BPS
    pass_bytes, pass_seconds = sum(r.bytes for r in recs), sum(r.ms for r in recs) / 1e3
    return {
        **_about(label, synthetic, device, dtype, rt.plan, prefix, bs, passes),
        "load_s": round(load_s, 3),
        "prefill_ms": round(prefill_ms, 3),
        "prefill": prefill,
        "ms_per_pass": round(steady_ms, 3),
        "ms_per_pass_first": round(first.ms, 3),
        "ms_per_pass_each": [round(r.ms, 3) for r in recs],
        # a steady preview as the decoder waits for it: the pass, its LM head over the 32 rows and the host's
        # booking of the pass (which overlaps the LM head: `Runtime.finish_pass`), up to a device sync
        "ms_per_call": round(steady_call_ms, 3),
        "commit_ms": round(commit_rec.ms, 3),
        "routing": routing,
        "tokens_per_pass": tpp,
        "tokens_per_pass_source": tpp_source,
        # the same decode by the factor rule (`--reveal-factor 1`), measured beside the model's threshold
        "tokens_per_pass_factor_rule": tpp_factor,
        "tokens_per_s": round(tpp * 1e3 / steady_ms, 3),
        **_block_counters(rt, first, steady, distinct),
        "pcie_bytes": pass_bytes,
        "pcie_gbps": round(pass_bytes / pass_seconds / 1e9, 3) if pass_seconds else 0.0,
        "device_bytes_per_pass": device_bytes,
        "device_bandwidth_gbps": round(bw / 1e9, 1),
        "bandwidth_source": bw_source,
        "roofline_ms": round(roofline_ms, 4),
        "roofline_ratio": round(steady_ms / roofline_ms, 2),
        "profiled_pass_ms": round(profiled.ms, 3),
        "components": components,
        **_projections(tpp, device, projected_compute + pcie_ms,
                       # inside a graph no per-kernel time is visible: the whole pass takes the larger of its time
                       # here and its bytes at the target's bandwidth
                       None if graphed_ms is None else max(graphed_ms, 1e3 * device_bytes / TARGET_BPS) + pcie_ms,
                       None if projected_graph_compute is None else projected_graph_compute + pcie_ms),
        "graph_profile": graph_note,
        "memory": _memory(rt, placed, peak),
        **_counters(stats, optimistic),
        "next_block": _next_block(recs2, commit2_rec.ms, bs, tpp),
        "merged": _merged_summary(merged_recs, recs2, commit2_rec, rt.stats()["merged_graphs"], bs, tpp),
        "commits": {  # a block's causal pass; the first one captures the commit graph, the second replays it
            "each": [{"ms": round(r.ms, 3), "graphed": r.graphed, "captured": r.captured, "repairs": r.repairs,
                      "synced": r.synced, "misses": r.misses} for r in (commit_rec, commit2_rec)],
            "graphs": rt.stats()["commit_graphs"],  # apart, as in "merged": "enabled" is the graphs', not the pass's
        },
        "graphs": {**stats["graphs"], "steady_passes_graphed": len(graphed),
                   "ms_per_pass_graphed": None if graphed_ms is None else round(graphed_ms, 3),
                   "capture_pass_ms": [round(r.ms, 3) for r in recs if r.captured]},
    }


def _check_bench_args(routing: str, passes: int, prefix: int) -> None:
    if routing not in ROUTINGS:
        raise CloverError(f"--routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    if passes < 2:
        raise CloverError("--passes must be at least 2 (the first pass of a block loads its experts)")
    if prefix < 0:
        raise CloverError(f"--prefix must be 0 or more, got {prefix}")


def _loaded(folder: Path, device: torch.device, dtype: torch.dtype, options: RuntimeOptions,
            model: CloverModel | None) -> CloverModel:
    """The pack loaded with `options`, or `model` (loaded before) set to them."""
    if model is None:
        return load_packed_model(folder, device, dtype, options)
    if model.runtime.prefill_chunk != options.prefill_chunk:  # it sized the workspace: a load's setting
        raise CloverError(f"bench variants share one load: prefill chunk {options.prefill_chunk} needs a load of "
                          "its own")
    reconfigure(model, options)
    return model


@dataclass
class _BenchRun:
    """What one bench run's steps share: the model, the random ids it feeds (one generator, drawn in the
    run's order), the block's routing and each denoising pass's call time."""
    model: CloverModel
    device: torch.device
    passes: int
    routing: str
    on_step: Callable[[str], None]
    rerouted: UniformRouting | None = None
    call_ms: list[float] = field(default_factory=list)  # each preview's whole call, LM head and booking included
    gen: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))

    @property
    def block_size(self) -> int:
        return self.model.config.diffusion.block_size

    @property
    def mask(self) -> int:
        cfg = self.model.config
        return cfg.diffusion.mask_token_id if cfg.diffusion.mask_token_id is not None else cfg.vocab_size - 1

    def rand_ids(self, n: int) -> Tensor:
        ids = torch.randint(0, self.model.config.vocab_size, (1, n), generator=self.gen)
        ids[ids == self.mask] = 0
        return ids.to(self.device)

    def masked_block(self) -> Tensor:
        return torch.full((1, self.block_size), self.mask, dtype=torch.long, device=self.device)

    def prefill(self, prefix: int, held: PromptCache, bw: float) -> tuple[object, float, dict | None]:
        """A cache holding `prefix` random tokens, the prefill's ms and its figures (None without a prefix); the
        states after it saved in `held`, as chat keeps them between turns (the plan counts them)."""
        model, rt, device = self.model, self.model.runtime, self.device
        warmup_ms, warmup_tokens = None, 0
        if prefix and device.type == "cuda":
            # the prefill shapes' first launches compile their Triton kernels (seconds, once per machine: Triton
            # keeps them on disk): a warm-up of two chunks on a cache of its own keeps that out of prefill_ms
            warmup_tokens = min(prefix, 2 * rt.prefill_chunk)
            self.on_step(f"prefill warm-up ({warmup_tokens} tokens: kernel compiles)")
            _sync(device)
            t = time.perf_counter()
            model(self.rand_ids(warmup_tokens), model.new_cache(), rows=slice(-1, None))
            _sync(device)
            warmup_ms = 1e3 * (time.perf_counter() - t)
        cache = model.new_cache()
        if not prefix:
            return cache, 0.0, None
        self.on_step(f"prefill of {prefix} tokens")
        ids = self.rand_ids(prefix)
        before = rt.stats()
        prof = ComponentProfiler(model, rt, device, prefix // 2)  # the keys a chunk reads, on average
        _sync(device)
        t = time.perf_counter()
        try:
            last = model(ids, cache, rows=slice(-1, None))
            _sync(device)
        finally:
            prof.close()
        prefill_ms = 1e3 * (time.perf_counter() - t)
        after = rt.stats()
        held.save(model, cache, ids[0].tolist(), last[0, -1])
        return cache, prefill_ms, {
            "chunks": -(-prefix // rt.prefill_chunk),
            "span": rt.prefill_span,  # rows a pass takes layer by layer (CLOVER_PREFILL_SPAN)
            "passes": -(-prefix // rt.prefill_span),
            "tokens_per_s": round(prefix * 1e3 / prefill_ms, 1),
            "warmup_ms": None if warmup_ms is None else round(warmup_ms, 3),
            "warmup_tokens": warmup_tokens,
            # demand copies (waited for) and prefetches (behind the layer before)
            "cache": {k: after[k] - before[k] for k in ("misses", "copied", "prefetched", "prefetch_wasted",
                                                        "bytes_h2d")},
            "components": prof.components(bw)[0],
        }

    def denoise(self, block: Tensor, cache, label: str) -> list:
        """`passes` previews of the block, revealing ≈3 positions after each, as decoding would (the routing
        drifts a little between passes); returns their records."""
        model, rt, bs = self.model, self.model.runtime, self.block_size
        n0 = len(rt.records)
        revealed = 0
        self.call_ms.clear()
        for p in range(self.passes):
            self.on_step(f"{label}: pass {p + 1}/{self.passes}")
            t = time.perf_counter()
            model(block, cache, preview=True)
            _sync(self.device)
            self.call_ms.append(1e3 * (time.perf_counter() - t))
            if revealed < bs - 3:
                block[0, revealed : revealed + 3] = self.rand_ids(3)[0]
                if self.routing == "uniform-reveal":
                    self.rerouted.redraw_rows(slice(revealed, revealed + 3), seed=1000 + len(rt.records))
                revealed += 3
        return [r for r in list(rt.records)[n0:] if r.kind == "preview"]

    def profiled_pass(self, block: Tensor, cache, keys: int, bw: float, graph_own) -> tuple[object, tuple]:
        """One more preview with the component hooks, through the syncing path (the profiler's expert bytes come
        from per-layer counters): its record, and `ComponentProfiler.components`' figures."""
        model, rt = self.model, self.model.runtime
        self.on_step("profiled pass")
        prof = ComponentProfiler(model, rt, self.device, keys)
        optimistic, rt.optimistic = rt.optimistic, False
        try:
            model(block, cache, preview=True)
            _sync(self.device)
        finally:
            prof.close()
            rt.optimistic = optimistic
        return rt.records[-1], prof.components(bw, graph_own)

    def merged_passes(self, cache) -> list:
        """MERGED_PASSES merged passes (`CloverModel.commit_and_preview`: a finished block's commit and the next
        block's first preview in one pass, as decoding runs them), each committing random tokens; their records."""
        out = []
        masks = torch.full_like(self.rand_ids(self.block_size), self.mask)
        for i in range(MERGED_PASSES):
            self.on_step(f"merged commit + first preview {i + 1}/{MERGED_PASSES}")
            if self.rerouted is not None:
                self.rerouted.redraw_merged(seed=2000 + i)
            self.model.commit_and_preview(self.rand_ids(self.block_size), masks, cache)
            out.append(self.model.runtime.records[-1])
        return out


def _device_read_per_pass(model: CloverModel, device: torch.device, dtype: torch.dtype, prefix: int,
                          distinct: float) -> int:
    """Bytes a steady preview reads from device memory: the weights there, the `distinct` experts it uses, the
    prefix's keys and values, the GDN states."""
    cfg = model.config
    a = torch.empty((), dtype=dtype).element_size()
    kv_read = sum(2 * cfg.num_key_value_heads * cfg.head_dim * prefix * a for t in cfg.layer_types
                  if t == "full_attention")
    gdn_read = sum(cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
                   for t in cfg.layer_types if t != "full_attention")
    weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())
                  if t.device.type == device.type)
    return int(weights + distinct * model.runtime.cache.layout.weight_bytes + kv_read + gdn_read)


def _tokens_per_pass(folder: Path, model: CloverModel, synthetic: bool,
                     measure_tokens: bool) -> tuple[float, str, float | None]:
    """Tokens per pass, where the figure comes from, and the factor rule's: measured by a short decode on a real
    pack with a tokenizer, else assumed."""
    if synthetic or not measure_tokens:
        return ASSUMED_TOKENS_PER_PASS, "assumed (synthetic weights)", None
    measured = _measure_tokens_per_pass(folder, model)
    if measured is None:
        return ASSUMED_TOKENS_PER_PASS, "assumed (the pack has no tokenizer)", None
    return measured, "measured (a 64-token decode)", _measure_tokens_per_pass(folder, model, factor=BENCH_FACTOR)


def _about(label: str, synthetic: bool, device: torch.device, dtype: torch.dtype, plan, prefix: int, rows: int,
           passes: int) -> dict:
    """What ran where: the pack, the machine, its versions, the budget and the run's shape."""
    return {
        "model": label,
        "synthetic": synthetic,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device.type,
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else (platform.processor() or platform.machine())),
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu_cores": cpu_count(),
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "kernel_tuning": tuning.summary(device) if triton_on(device) else None,
        "kernel_forms": kernel_forms(device),
        "vram_budget": plan.vram_budget,
        "slots": plan.slots,
        "experts_total": plan.experts_total,
        "resident_fraction": round(plan.resident_fraction, 4),
        "prefix": prefix,
        "rows": rows,
        "passes": passes,
    }


def _block_counters(rt, first, steady: list, distinct: float) -> dict:
    """Block 1's expert cache per pass: hits, misses, repairs, host reads, substitutions."""
    def per_steady(name: str) -> float:
        return round(sum(getattr(r, name) for r in steady) / len(steady), 3)

    uses, hits = sum(r.uses for r in steady), sum(r.hits for r in steady)
    return {
        "hit_rate": round(hits / uses, 4) if uses else None,
        "hit_rate_first_pass": round(first.hits / first.uses, 4) if first.uses else None,
        "misses_first_pass": first.misses,
        "misses_per_steady_pass": per_steady("misses"),
        "repairs_per_steady_pass": per_steady("repairs"),
        # misses read in place from host memory (runtime/host_reads.py), and whether that path is on (why not)
        "host_reads_per_steady_pass": per_steady("host_reads"),
        "host_reads": {"on": rt.host_reads, "error": rt.host_reads_error, "first_pass": first.host_reads,
                       # ... of them copied into a slot as they were read (one PCIe transfer, not two)
                       "read_through_on": rt.read_through, "read_through_error": rt.read_through_error,
                       "read_through_first_pass": first.read_through,
                       "read_through_per_steady_pass": per_steady("read_through")},
        "synced_steady_passes": sum(1 for r in steady if r.synced),
        # later passes choosing among resident experts only (`Runtime.route_limit`): on, and what it took away
        "resident_routing": rt.resident_routing,
        "substituted_per_steady_pass": per_steady("substituted"),
        "distinct_experts_per_pass": round(distinct, 2),
    }


def _projections(tpp: float, device: torch.device, by_calls_ms: float, graphed_ms: float | None,
                 graph_parts_ms: float | None) -> dict:
    """The RTX 5070 Ti projections (the issue's rule), each with its ms per pass and tokens/s at `tpp`."""
    def projected(ms: float, rule: str) -> dict:
        return {"ms_per_pass": round(ms, 3), "tokens_per_s": round(tpp * 1e3 / ms, 2), "rule": rule}

    return {
        "projection_5070ti": {
            **projected(by_calls_ms, "sum over the profiled pass's calls of max(measured, bytes / 896 GB/s) + "
                                     "steady PCIe bytes / 50 GB/s"),
            # the rule means something from GPU times only: `bench` prints no figure when this is not "cuda"
            "timed_on": device.type,
        },
        "projection_5070ti_graphed": None if graphed_ms is None else projected(
            graphed_ms, "max(steady graphed ms here, pass bytes / 896 GB/s) + steady PCIe bytes / 50 GB/s"),
        "projection_5070ti_graph_components": None if graph_parts_ms is None else projected(
            graph_parts_ms, "sum over the pass's calls of max(GPU time in a graph replay, bytes / 896 GB/s) + "
                            "steady PCIe bytes / 50 GB/s"),
    }


def _memory(rt, placed: dict, peak: int | None) -> dict:
    """What the device holds against the plan's prediction, and the host's expert slabs."""
    plan, host = rt.plan, rt.cache.host
    return {
        "placed": placed,
        "plan_predicted": plan.device_predicted,
        "plan_error": round(placed["total"] / plan.device_predicted - 1, 4),
        "plan_peak": plan.device_peak,
        "peak_allocated": peak,
        "host_experts": host.nbytes if host is not None else 0,
        "host_pinned": bool(host is not None and host.pinned),
        # what torch's pinned allocator holds for them (chunks rounded up to powers of two: expert_store.py)
        "host_pinned_bytes": host.pinned_bytes if host is not None else 0,
        "host_pinned_measured": pinned_allocator_bytes(),  # ... and what the allocator says it holds
    }


def _counters(stats: dict, optimistic: bool) -> dict:
    """The runtime's counters after block 1: the expert cache, the CPU path, the optimistic passes."""
    return {
        "cache": {k: stats[k] for k in ("hits", "misses", "copied", "repair_unused", "cpu_runs", "host_reads",
                                        "prefetched", "prefetch_used", "prefetch_wasted", "pinned_evictions",
                                        "bytes_h2d")},
        "cpu_experts": stats["cpu_experts"],  # conversions, kept, seconds: the CPU path's cost (--cpu-experts)
        "optimistic": {"enabled": optimistic, "passes": stats["optimistic_passes"],
                       "retried": stats["retried_passes"], "repair_replays": stats["repair_replays"]},
    }


def run_variants(folder: Path, variants: dict[str, dict], *, label: str, synthetic: bool, vram_budget: int | None,
                 prefix: int, passes: int, device: torch.device, dtype: torch.dtype,
                 on_step=lambda msg: None, on_result=lambda name, result: None) -> dict[str, dict]:
    """`run_bench` once per variant (name → its keyword options: routing, host_reads, resident_routing, prefetch,
    optimistic, cuda_graphs, cpu_experts) on ONE load of the pack: each variant starts from the state a load
    leaves (`runtime.load.reconfigure`: cache emptied and warmed, counters and graphs reset, host reads checked
    again) and runs its own prefill. Why: a 35B load takes ≈ 20 s, and a GPU session has 15 minutes for every
    stage; four routing variants cost one load instead of four. Each result's `load_s` is the one load's;
    `on_result(name, result)` gets each as it is done (a stage killed at its time limit keeps those)."""
    from clover_local.config import load_config

    t0 = time.perf_counter()
    on_step("loading")
    context = bench_context(prefix, load_config(folder).diffusion.block_size, not synthetic)
    model = load_packed_model(folder, device, dtype, RuntimeOptions(vram_budget=vram_budget, context=context))
    load_s = time.perf_counter() - t0
    out = {}
    for name, kw in variants.items():
        on_step(f"variant {name}")
        r = run_bench(folder, label=label, synthetic=synthetic, vram_budget=vram_budget, prefix=prefix, passes=passes,
                      device=device, dtype=dtype, on_step=on_step, model=model, **kw)
        out[name] = {**r, "load_s": round(load_s, 3), "reconfigure_s": r["load_s"], "variant": name}
        on_result(name, out[name])
    return out


def _next_block(recs: list, commit_ms: float, rows: int, tpp: float) -> dict:
    """The second block's passes, and what a whole block costs at `tpp` tokens per pass: its first pass, the
    later ones at their steady time (ceil(rows / tpp) passes in all), and the commit."""
    steady, n = _later_passes(recs, rows, tpp)
    block_ms = recs[0].ms + (n - 1) * steady + commit_ms
    return {
        "ms_per_pass_each": [round(r.ms, 3) for r in recs], "first_ms": round(recs[0].ms, 3),
        "misses_first_pass": recs[0].misses, "first_pass_graphed": recs[0].graphed,
        "first_pass_repairs": recs[0].repairs, "first_pass_synced": recs[0].synced,
        "captured": sum(r.captured for r in recs),
        "graphed": sum(r.graphed for r in recs), "retried": sum(r.retried for r in recs),
        "steady_ms": round(steady, 3), "commit_ms": round(commit_ms, 3), "passes_per_block": n,
        "block_ms": round(block_ms, 3), "tokens_per_s": round(rows * 1e3 / block_ms, 2),
        "rule": "first pass + (ceil(rows / tokens per pass) − 1) × steady ms + commit",
    }


def _later_passes(block: list, rows: int, tpp: float) -> tuple[float, int]:
    """A block's steady ms (its passes after the first, averaged) and its passes at `tpp` tokens per pass."""
    later = block[1:]
    return sum(r.ms for r in later) / len(later), max(1, math.ceil(rows / tpp))


def _merged_summary(recs: list, block2: list, commit2, graphs: dict, rows: int, tpp: float) -> dict:
    """The merged passes, beside what one replaces (the second block's commit and first pass, as bench ran
    them apart), and a block's cost with it: (ceil(rows / tpp) − 1) later passes at their steady time plus the
    merged pass (a replay where one stood)."""
    stood = [r for r in recs if r.graphed and not r.captured and not r.synced]
    each = [{"ms": round(r.ms, 3), "optimistic": r.optimistic, "graphed": r.graphed, "captured": r.captured,
             "repairs": r.repairs, "synced": r.synced, "uses": r.uses, "misses": r.misses,
             "host_reads": r.host_reads, "read_through": r.read_through} for r in recs]
    ms = (stood or recs)[-1].ms
    steady, n = _later_passes(block2, rows, tpp)
    block_ms = ms + (n - 1) * steady
    return {
        "graphs": graphs,  # the merged pass's CUDA graphs ("enabled": false on a CPU; the pass still ran)
        "each": each, "ms": round(ms, 3), "replayed": bool(stood),
        "separate_ms": round(commit2.ms + block2[0].ms, 3),  # the commit and first pass it stands for
        "uses_vs_separate": [recs[-1].uses, commit2.uses + block2[0].uses],
        "block_ms": round(block_ms, 3), "tokens_per_s": round(rows * 1e3 / block_ms, 2),
        "rule": "merged pass + (ceil(rows / tokens per pass) − 1) × steady ms",
    }


def _graph_profiled_pass(model, rt, block: Tensor, cache, device: torch.device, prefix: int, on_step):
    """One more preview pass of the block, captured as a CUDA graph with the component hooks inside it, so the
    replay times each part on the GPU. Returns (per-call own seconds or None, a note saying what happened)."""
    if device.type != "cuda" or not rt.graphs.enabled:
        return None, "no CUDA graphs here"
    on_step("graph-profiled pass")
    try:
        prof = ComponentProfiler(model, rt, device, prefix, in_graph=True)
    except TypeError as err:  # torch without external events
        return None, f"not supported: {err}"
    rt.graphs.drop()  # capture afresh, with the hooks' events in the graph
    try:
        model(block, cache, preview=True)
        _sync(device)
        rec = rt.records[-1]
        if not (rec.graphed and not rec.retried):
            return None, "the pass did not stand as a graph replay (a miss or a capture error)"
        return prof.own_seconds(), "ok"
    except Exception as err:  # report, keep the rest of the bench
        return None, f"failed: {type(err).__name__}: {err}"[:300]
    finally:
        prof.close()
        rt.graphs.drop()  # the steady graph has no event nodes


def _measure_tokens_per_pass(folder: Path, model, factor: float = 0.0) -> float | None:
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished
    from clover_local.loader import resolve_mask_token
    from clover_local.tokenizer import ChatTokenizer

    try:
        tok = ChatTokenizer.from_folder(folder)
        mask = resolve_mask_token(model.config, tok)
    except CloverError:
        return None
    text = tok.apply_chat_template([{"role": "user", "content": "Explain in a few sentences why the sky is blue."}],
                                   add_generation_prompt=True, enable_thinking=False)
    decoder = BlockDiffusionDecoder(model, mask)
    stats = None
    settings = DecodeSettings(max_new_tokens=64, threshold=model.config.diffusion.threshold, factor=factor,
                              stop_token_ids=[])
    for ev in decoder.generate(tok.encode(text), settings):
        if isinstance(ev, Finished):
            stats = ev.stats
    return round(stats.tokens_per_pass, 3) if stats and stats.passes else None
