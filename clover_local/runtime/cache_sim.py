"""The expert cache's policy at the real model's counts, without the model: `python -m
clover_local.runtime.cache_sim`.

Why: a cache policy is judged by its copies at 40 layers × 256 experts and ≈ 8,900 slots, which no CPU test can
load; the copies depend only on the routing and on the calls the runtime makes, not on the weights. This drives
the real `ExpertCache` with slabs of a few hundred bytes and a routing trace (uniform, the bench's worst case,
or Zipf-skewed per layer), making the calls `Runtime` makes: a prefill pass is a syncing pass over up to `span`
prompt rows, each layer over all of them `chunk` rows at a time (per chunk `acquire`, `prefetch` of the next
layer's last experts, `release`, the cache told the pass is layer-major: `CloverModel._layer_by_layer`; `--span`
equal to `--chunk`: chunk after chunk through every layer, as before 2026-12-03); a block's previews and its commit are
graph replays (`missing` → `repair` → `commit_uses`, the commit with `last_of_block`), as on a GPU once the
graph exists (the very first preview is a syncing pass: no graph yet; `--no-cuda-graphs`: every first pass,
and a later one that missed is rerun syncing; `--host-reads`: a replay reads what it lacks in place and stands,
`commit_uses(host_reads=True)`, which installs it for later passes; `--resident-routing`: a block's later
previews choose each row's best experts among those resident when the pass begins, the first pass and the
commit choose freely, as `Runtime.route_limit` does; `--merge-commits`: a block's commit and the next block's
first pass are one pass over both row sets, as decoding runs them by default, the first such pass an eager
attempt, its experts unpinned after it, as `Runtime.pass_scope` does; `--read-through`: with host reads, a replay
copies the experts it reads into slots it did not use, as `OptimisticPass` does; `--drift`: the share of a
block's rows rerouted from one pass to the next, as revealed tokens are; `--jitter`: every row's scores also move
a little each pass, so choices at the margin change). It counts copies (demand and
prefetch) and host reads per phase and turns them into PCIe bytes at the real slab size and milliseconds at
50 GB/s (targets.md's measured pinned rate), and a replay-path figure per pass: REPLAY_MS per replay (a repaired pass
replays twice) plus that PCIe time, all of it waited for. Derived figures, not timings.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from clover_local.runtime.expert_cache import ExpertCache, LayerCounters, dense_rows
from clover_local.runtime.expert_store import HostExpertStore
from clover_local.runtime.slab import SlabLayout

PCIE_BPS = 50e9
REAL_LAYOUT = SlabLayout(hidden=2048, inter=512, bits=4, groups_gu=16, groups_down=4)  # 35B, group 128
REAL_SLAB = REAL_LAYOUT.nbytes
REPLAY_MS = 26.8  # a graphed 32-row preview at 16 GiB on the H200 (BENCHMARKS.md, 2026-11-30)
TINY_SLAB = SlabLayout(hidden=32, inter=16, bits=4, groups_gu=1, groups_down=1)


@dataclass
class SimConfig:
    layers: int = 40
    experts: int = 256
    top_k: int = 8
    slots: int = 8860  # the 16 GiB plan's slot count on the H200 runs (BENCHMARKS.md)
    prefix: int = 4096
    chunk: int = 512
    span: int = 4096  # prompt rows a prefill pass takes layer by layer (the runtime's prefill_span)
    block: int = 32
    blocks: int = 6
    passes: int = 11  # per block: ≈ 32 tokens at 3 per pass
    drift: float = 0.03  # share of a block's rows whose routing changes from one of its passes to the next
    jitter: float = 0.0  # every row's scores take a Gaussian step of this size a pass (choices at the margin)
    routing: str = "uniform"  # or "zipf"
    zipf: float = 1.0  # exponent of the per-layer popularity for routing "zipf"
    seed: int = 0
    warm: bool = True  # the slots start filled at load (`ExpertCache.warm`), as the runtime's do
    graphs: bool = True  # False: as `--no-cuda-graphs` runs (every block's first pass syncing, no repairs)
    host_reads: bool = False  # optimistic passes read what they lack in place (runtime/host_reads.py)
    resident_routing: bool = False  # later previews choose among resident experts (`Runtime.route_limit`)
    merge_commits: bool = False  # a commit and the next block's first pass as one pass (`commit_and_preview`)
    read_through: bool = False  # with host_reads: read-through installs into offered slots (`set_read_through`)


@dataclass
class Phase:
    passes: int = 0
    demand: int = 0  # copies a pass waited for (acquire's misses, repair's loads)
    prefetched: int = 0
    wasted: int = 0  # prefetched, evicted unused
    missed: int = 0  # passes with a demand copy (a graph replay that missed: one more replay after its repair)
    host_read: int = 0  # experts read in place from host memory (then installed: counted in prefetched)
    read_through: int = 0  # of those, copied into a slot as they were read (no copy of their own)
    background: int = 0  # of the prefetched, installs behind the next pass (resident routing): not waited for
    substituted: int = 0  # routing choices resident routing took away
    distinct: int = 0  # (layer, expert) pairs the passes used, summed: the expert bytes they read

    @property
    def copies(self) -> int:
        return self.demand + self.prefetched


@dataclass
class SimResult:
    config: SimConfig
    phases: dict[str, Phase] = field(default_factory=dict)
    first_pass_each: list[int] = field(default_factory=list)  # copies of each block's first pass

    def to_dict(self) -> dict:
        out = {"config": asdict(self.config), "slab_bytes": REAL_SLAB, "pcie_gbps_assumed": PCIE_BPS / 1e9}
        for name, ph in self.phases.items():
            n = max(ph.passes, 1)
            per = ph.copies / n
            pcie = (ph.copies * REAL_SLAB + ph.host_read * REAL_LAYOUT.weight_bytes) / n
            out[name] = dict(asdict(ph), copies=ph.copies, copies_per_pass=round(per, 1),
                             host_reads_per_pass=round(ph.host_read / n, 1), pcie_bytes_per_pass=int(pcie),
                             distinct_per_pass=round(ph.distinct / n, 1),
                             pcie_ms_per_pass=round(1e3 * pcie / PCIE_BPS, 2))
            if name == "block_later_passes":  # replays, one more per repaired pass, and PCIe time waited for
                waited = pcie - ph.background * REAL_SLAB / n
                out[name]["replay_path_ms_per_pass"] = round(REPLAY_MS * (n + ph.missed) / n
                                                             + 1e3 * waited / PCIE_BPS, 2)
        out["first_pass_each"] = self.first_pass_each
        return out


class _Router:
    """Top-k routing of a pass's rows per layer: distinct experts per row, drawn by per-layer popularity."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        if cfg.routing == "uniform":
            self.p = None
        elif cfg.routing == "zipf":
            ranks = np.arange(1, cfg.experts + 1, dtype=np.float64) ** -cfg.zipf
            self.p = np.stack([self.rng.permutation(ranks / ranks.sum()) for _ in range(cfg.layers)])
        else:
            raise ValueError(f"routing must be uniform or zipf, got {cfg.routing!r}")

    def scores(self, n: int) -> np.ndarray:
        """[layers, n, experts] each row's preference: Gumbel-perturbed log popularity, whose top-k are k distinct
        experts drawn by popularity (vectorised over rows and layers)."""
        c = self.cfg
        logp = np.zeros((c.layers, 1, c.experts)) if self.p is None else np.log(self.p)[:, None, :]
        return logp - np.log(-np.log(self.rng.random((c.layers, n, c.experts))))

    def top(self, g: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """[layers, n, top_k] the experts rows with scores g choose; `allowed` [layers, experts] bool: only
        among those (a layer with fewer than top_k allowed chooses freely, as `restrict_logits`)."""
        k = self.cfg.top_k
        if allowed is not None:
            allowed = allowed | (allowed.sum(1, keepdims=True) < k)
            g = np.where(allowed[:, None, :], g, -np.inf)
        return np.argpartition(-g, k - 1, axis=2)[:, :, :k]

    def rows(self, n: int) -> np.ndarray:
        """[layers, n, top_k] expert ids."""
        return self.top(self.scores(n))

    def counts(self, routes: np.ndarray) -> np.ndarray:
        """[layers, experts] routed rows per expert."""
        c = self.cfg
        flat = routes.reshape(c.layers, -1) + np.arange(c.layers)[:, None] * c.experts
        return np.bincount(flat.reshape(-1), minlength=c.layers * c.experts).reshape(c.layers, c.experts)


def _cache(cfg: SimConfig) -> ExpertCache:
    layers = list(range(cfg.layers))
    host = HostExpertStore(TINY_SLAB, layers, cfg.experts, pin=False)
    return ExpertCache(TINY_SLAB, cfg.slots, layers, cfg.experts, torch.device("cpu"), host)


def _book(phase: Phase, before: LayerCounters, after: LayerCounters) -> int:
    copied, prefetched = after.copied - before.copied, after.prefetched - before.prefetched
    phase.passes += 1
    phase.demand += copied
    phase.prefetched += prefetched
    phase.wasted += after.prefetch_wasted - before.prefetch_wasted
    phase.missed += int(copied > 0)
    phase.host_read += after.host_reads - before.host_reads
    phase.read_through += after.read_through - before.read_through
    return copied + prefetched


def _syncing_pass(ec: ExpertCache, counts: np.ndarray | list[np.ndarray], history: dict[int, np.ndarray]) -> None:
    """Runtime._run_group per layer: acquire, prefetch the next layer's last experts, release. A list of counts:
    a prefill pass's chunks, each layer over all of them before the next (the caller's `begin_pass` says
    layer-major)."""
    chunks = counts if isinstance(counts, list) else [counts]
    n_layers = chunks[0].shape[0]
    for layer in range(n_layers):
        for c in chunks:
            experts = np.flatnonzero(c[layer])
            if experts.size > ec.n_slots:
                raise ValueError("one layer call needs more experts than there are slots")
            ec.acquire(layer, experts, c[layer, experts])
            if layer + 1 < n_layers:
                ec.prefetch(layer + 1, history.get(layer + 1, np.zeros(0, dtype=np.int64)))
            ec.release()
            history[layer] = experts[np.argsort(-c[layer, experts], kind="stable")]


def _optimistic_pass(ec: ExpertCache, counts: np.ndarray, commit: bool, repair: bool, host_reads: bool) -> None:
    """A pass on resident slots (a graph replay when `repair`): what it lacked is read in place (`host_reads`),
    or loaded by `repair`, else (or when that does not fit) it reruns as a syncing pass; then booked by
    `commit_uses`."""
    if host_reads:
        installed = None
        if ec.read_through_on:  # as `OptimisticPass.begin` and the kernels' assignment during the pass
            ec.offer_slots()
            installed = ec.read_through_targets(counts)
        ec.commit_uses(counts, host_reads=True, installed=installed)
        return
    if ec.missing(counts):
        if not repair or ec.repair(counts, last_of_block=commit) is None:
            _syncing_pass(ec, counts, {})
            return
    ec.commit_uses(counts)


def simulate(cfg: SimConfig) -> SimResult:
    """The prompt's prefill passes, then `blocks` blocks of `passes` previews and a commit each, through one
    expert cache as the runtime drives it; each phase's copies, prefetches and misses booked apart."""
    if cfg.slots < cfg.experts or cfg.slots > cfg.layers * cfg.experts:
        raise ValueError(f"slots must be between {cfg.experts} and {cfg.layers * cfg.experts}")
    ec, router, res = _cache(cfg), _Router(cfg), SimResult(cfg)
    if cfg.warm:
        ec.warm()  # as `runtime.load` does
    if cfg.host_reads:
        ec.set_read_through(cfg.read_through)
    history: dict[int, np.ndarray] = {}
    for name in ("prefill_first_pass", "prefill_later_passes", "block_first_pass", "block_later_passes",
                 "commit", "merged"):
        res.phases[name] = Phase()
    _prefill(cfg, ec, router, res, history)
    next_scores = None  # the next block's rows, routed by the merged pass that committed the last block
    compiled = False  # a merged pass ran (the runtime's first is an eager attempt: it compiles, no graph)
    for b in range(cfg.blocks):
        scores = router.scores(cfg.block) if next_scores is None else next_scores
        opened = next_scores is not None  # this block's first pass already ran, merged with the last commit
        next_scores = None
        for p in range(int(opened), cfg.passes + 1):  # the block's previews, then its commit
            if p:  # a few rows route differently from one pass to the next (revealed tokens)
                change = router.rng.random(cfg.block) < cfg.drift
                scores[:, change] = router.scores(int(change.sum()))
                if cfg.jitter:  # and every row's scores move a little (the context changed)
                    scores = scores + cfg.jitter * router.rng.standard_normal(scores.shape)
            commit = p == cfg.passes
            merged = commit and cfg.merge_commits and b + 1 < cfg.blocks
            allowed = None
            if cfg.resident_routing and p and not commit:  # as `Runtime._restrict_routing`
                allowed = ec.restricted_choice(cfg.top_k)[0]
            else:
                ec.take_landing()
            routes = router.top(scores, allowed)
            if merged:  # the commit's rows, then the next block's first pass
                ec.end_block()  # as `Runtime.pass_scope`: the block's experts unpinned before it
                next_scores = router.scores(cfg.block)
                routes = np.concatenate([routes, router.top(next_scores)], axis=1)
            counts = router.counts(routes)
            before = ec.totals()
            ec.begin_pass(False)
            _block_pass(cfg, ec, counts, history, first=p == 0, first_block=b == 0, commit=commit, merged=merged,
                        compiled=compiled)
            compiled |= merged
            ec.end_pass()
            if merged:
                ec.end_block()  # its experts unpinned after it: the next block's passes pin their own
            phase = res.phases["merged" if merged else "commit" if commit else "block_first_pass" if p == 0
                               else "block_later_passes"]
            phase.distinct += int((counts > 0).sum())
            if allowed is not None:
                _substituted(cfg, ec, router, phase, scores, allowed)
            n = _book(phase, before, ec.totals())
            if p == 0 or merged:
                res.first_pass_each.append(n)
        if next_scores is None:  # (a merged commit ended the block already)
            ec.end_block()
    return res


def _prefill(cfg: SimConfig, ec, router, res: SimResult, history: dict[int, np.ndarray]) -> None:
    """The prompt in passes of `span` rows, each layer over a pass's rows `chunk` at a time (syncing)."""
    span = max(cfg.span, cfg.chunk)
    for start in range(0, cfg.prefix, span):
        rows = min(span, cfg.prefix - start)
        chunks = [router.counts(router.rows(min(cfg.chunk, rows - s))) for s in range(0, rows, cfg.chunk)]
        before = ec.totals()
        ec.end_block()
        ec.begin_pass(dense_rows(rows, cfg.top_k, cfg.experts), layer_major=len(chunks) > 1)
        _syncing_pass(ec, chunks, history)
        ec.end_pass()
        ec.end_block()
        phase = res.phases["prefill_first_pass" if start == 0 else "prefill_later_passes"]
        phase.distinct += int((sum(chunks) > 0).sum())
        _book(phase, before, ec.totals())


def _block_pass(cfg: SimConfig, ec, counts: np.ndarray, history: dict[int, np.ndarray], *, first: bool,
                first_block: bool, commit: bool, merged: bool, compiled: bool) -> None:
    """One pass of a block, by the path the runtime takes for it (`Runtime._may_run_optimistically`): a block's
    first pass syncs with no graph to replay (the very first, or every one when eager, unless host reads make an
    eager attempt stand); an eager commit syncs; a merged pass is an eager attempt first (compiles; a miss reruns
    syncing), then replays (a miss is repaired), syncing without graphs or host reads."""
    if merged:
        if not (cfg.graphs or cfg.host_reads):
            _syncing_pass(ec, counts, history)
        else:
            _optimistic_pass(ec, counts, False, repair=cfg.graphs and compiled, host_reads=cfg.host_reads)
    elif first and ((first_block and cfg.graphs) or not (cfg.graphs or cfg.host_reads)):
        _syncing_pass(ec, counts, history)
    elif commit and not cfg.graphs:
        _syncing_pass(ec, counts, {})
    else:
        _optimistic_pass(ec, counts, commit, repair=cfg.graphs, host_reads=cfg.host_reads)


def _substituted(cfg: SimConfig, ec, router, phase: Phase, scores: np.ndarray, allowed: np.ndarray) -> None:
    """Resident routing's cost (as `Runtime._install_wanted`): the rows' own choices it took away, and those of
    them not on the device copied in behind the pass."""
    kept = allowed | (allowed.sum(1, keepdims=True) < cfg.top_k)
    lost = router.counts(router.top(scores)) * ~kept
    phase.substituted += int(lost.sum())
    rows, experts = np.nonzero((lost > 0) & (ec.slot_of[ec.layer_ids] < 0))
    phase.background += ec.install_missed(rows, experts, background=True)


def main(argv: list[str] | None = None) -> int:
    d = SimConfig()
    ap = argparse.ArgumentParser(prog="python -m clover_local.runtime.cache_sim", description=__doc__.split("\n\n")[0])
    for f in ("slots", "prefix", "chunk", "span", "block", "blocks", "passes", "layers", "experts", "top_k", "seed"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(d, f))
    ap.add_argument("--drift", type=float, default=d.drift)
    ap.add_argument("--jitter", type=float, default=d.jitter,
                    help="every row's routing scores take a Gaussian step of this size each pass (Gumbel scores: "
                         "scale ≈ 1.3), so its choices at the margin change")
    ap.add_argument("--routing", choices=("uniform", "zipf"), default=d.routing)
    ap.add_argument("--zipf", type=float, default=d.zipf)
    ap.add_argument("--cold", dest="warm", action="store_false", help="start with empty slots (no warm fill)")
    ap.add_argument("--no-cuda-graphs", dest="graphs", action="store_false",
                    help="as an eager runtime: every block's first pass syncing, a pass that missed rerun")
    ap.add_argument("--host-reads", action="store_true",
                    help="optimistic passes read missing experts in place from host memory (no repairs)")
    ap.add_argument("--resident-routing", action="store_true",
                    help="a block's later previews choose among resident experts only (an approximation)")
    ap.add_argument("--merge-commits", action="store_true",
                    help="a block's commit and the next block's first pass as one pass (decoding's default)")
    ap.add_argument("--read-through", action="store_true",
                    help="with --host-reads: a replay copies what it reads into a slot the layer before it did not "
                         "use (a read-through install: one PCIe transfer, not two)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    cfg = SimConfig(**{k: getattr(a, k) for k in asdict(d)})
    try:
        out = simulate(cfg).to_dict()
    except ValueError as e:
        print(f"cache_sim: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{cfg.layers} layers × {cfg.experts} experts, top-{cfg.top_k}, {cfg.slots} slots, {cfg.routing} routing; "
          f"copies at {REAL_SLAB / 2**20:.2f} MiB per slab, PCIe at {PCIE_BPS / 1e9:.0f} GB/s (derived)")
    for name, ph in out.items():
        if isinstance(ph, dict) and "copies" in ph:
            print(f"  {name:22s} {ph['passes']:4d} passes  {ph['copies_per_pass']:8.1f} copies/pass "
                  f"({ph['demand']} demand in {ph['missed']} passes, {ph['prefetched']} prefetched, "
                  f"{ph['wasted']} wasted, {ph['host_read']} read in place ({ph['read_through']} through), "
                  f"{ph['distinct_per_pass']:.0f} "
                  f"experts used)  "
                  f"{ph['pcie_ms_per_pass']:7.2f} ms/pass" + (f", replay path {ph['replay_path_ms_per_pass']:.1f} ms"
                                                             if "replay_path_ms_per_pass" in ph else ""))
    print(f"  first pass of each block: {out['first_pass_each']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
