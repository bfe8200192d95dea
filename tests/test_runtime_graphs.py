"""CUDA-graph replay of optimistic preview passes (runtime/graphs.py), its plumbing tested on the CPU.

A CPU has no CUDA graphs, so `PassGraph` is replaced by a stand-in with a graph's contract (`graph_standin.py`):
it keeps the static input buffer and the function it was captured with, a replay runs THAT function again on the
buffer (capture-time Python values), and fails if the replay reads any tensor from outside the pass at another
address than the capture did (what a real graph would silently read stale); its capture, like a real one,
leaves every outside tensor as it found it, and an op that syncs with the host fails it. What this checks: the
runtime hands the graph the embedded rows (not the token ids), refreshes the buffer each pass, keeps one graph
across blocks (recaptured when the attention window grows, dropped for a new cache), still books use counts and
repairs a replay that missed (a block's first pass included), and falls back to eager passes when capture fails.
Real capture is checked by `gpu_check` on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover_local.runtime import graphs, optimistic
from graph_standin import CheckingGraph as StandInGraph
from graph_standin import opaque_moe
from runtime_pack import N_EXPERTS, N_LAYERS, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)
from test_runtime_optimistic import block_passes, evict_most_used, previews

TOTAL = N_EXPERTS * N_LAYERS


@pytest.fixture
def stand_in(monkeypatch):
    StandInGraph.made = StandInGraph.replays = 0
    monkeypatch.setattr(graphs, "PassGraph", StandInGraph)
    # the CPU reference MoE loops over the slots in use (ops follow the routing); on CUDA it is one launch
    monkeypatch.setattr(optimistic, "moe_w4a16", opaque_moe(optimistic.moe_w4a16))
    monkeypatch.setattr(graphs.torch.cuda, "Stream", lambda device=None: "stream")
    return StandInGraph


def with_graphs(pack, **kw):
    loaded = runtime(pack, **kw)
    rt = loaded.model.runtime
    # on a CPU the runtime never turns them on by itself
    rt.graphs.enabled = rt.commit_graphs.enabled = rt.merged_graphs.enabled = True
    return loaded


def commits(loaded) -> list:
    return [r for r in loaded.model.runtime.records if r.kind == "commit"]


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("slots", [TOTAL, TOTAL - 1])
def test_graph_replays_decode_the_same_tokens(pack, ref, stand_in, slots, merge):
    """A few blocks of decoding. All resident, every preview and commit is a replay; one slot short, some
    replays miss and are repaired (or rerun through the syncing path). Tokens equal the eager runtime's
    either way. With commits merged into the next block's first preview (`merge`), those passes are replays of
    one graph of their own, from the second on (the first is an eager attempt: it compiles the 64-row kernels)."""
    ids = prompt(ref, 13, seed=2)
    got = with_graphs(pack, slots=slots)
    assert decode(got, ids, merge=merge) == decode(runtime(pack, slots=slots), ids, merge=False)
    stats = got.model.runtime_stats()
    s, c = stats["graphs"], stats["merged_graphs" if merge else "commit_graphs"]
    recs = previews(got)
    graphed = [r for r in recs if r.graphed]
    # a replay that missed is repaired: the expert loaded, the graph replayed again
    assert s["error"] is None and s["replays"] == sum(1 + r.repairs for r in graphed) > 0
    done = [r for r in got.model.runtime.records if r.kind == ("merged" if merge else "commit")]
    assert len(done) == 3 and not [r for r in got.model.runtime.records if r.kind == ("commit" if merge else "merged")]
    committed = [r for r in done if r.graphed]
    assert c["error"] is None and c["replays"] == sum(1 + r.repairs for r in committed) > 0
    assert stand_in.replays == s["replays"] + c["replays"]
    blocks = sum(r.pass_in_block == 0 for r in recs) + merge * len(done)
    assert 0 < s["captures"] <= blocks  # at most one per block: reused by the block's passes
    assert c["captures"] == 1 and stand_in.made == s["captures"] + 1  # one commit graph serves every block
    assert all(r.optimistic for r in graphed + committed)
    if merge:  # the first merged pass an eager attempt (all resident: it stands; one short: it may rerun syncing)
        assert done[0].optimistic and (done[0].synced == done[0].retried)
        assert not done[0].graphed and done[1].captured and not done[2].captured
    if slots == TOTAL:  # nothing can miss: every pass is optimistic, every commit after the first merged a replay
        assert all(r.optimistic and not r.retried for r in recs + done)
        assert len(graphed) == len(recs) and len(committed) == len(done) - merge > 1


def run_blocks(loaded, blocks=([5] * 8, [7, 3] * 4), previews: int = 4, before_commit=lambda i: None,
               after_commit=lambda i: None, then_preview: list[int] | None = None) -> list[torch.Tensor]:
    """Logits of a 40-token prefill, then for each block (its rows, different each time) `previews` previews
    and a commit, and with `then_preview` one more preview of those rows; the hooks run before and after the
    i-th block's commit (tests evict experts there)."""
    model = loaded.model
    cache = model.new_cache()
    with torch.inference_mode():
        out = [model(torch.tensor([prompt(loaded, 40, seed=6)]), cache)]
        for i, rows in enumerate(blocks):
            block = torch.tensor([rows])
            out += [model(block, cache, preview=True) for _ in range(previews)]
            before_commit(i)
            out.append(model(block, cache))
            after_commit(i)
        if then_preview is not None:
            out.append(model(torch.tensor([then_preview]), cache, preview=True))
    return out


def test_one_graph_serves_every_block_until_a_new_cache(pack, ref, stand_in):
    """The preview graph reads the cache's fixed buffers and its device length: captured once, replayed by the
    next block at another start (the stand-in checks every outside tensor is read at the capture's address)."""
    got = with_graphs(pack, slots=TOTAL)
    want = run_blocks(runtime(pack, slots=TOTAL))
    rt = got.model.runtime
    out = run_blocks(got)
    for a, b in zip(want, out):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    flags = [(r.pass_in_block, r.graphed, r.captured) for r in previews(got)]
    # all resident: every preview is optimistic; the first captures, the other seven (both blocks) replay
    assert flags == [(0, True, True)] + [(i % 4, True, False) for i in range(1, 8)]
    # the commits too: the first captures, the second replays the same graph at the next start
    assert [(r.graphed, r.captured) for r in commits(got)] == [(True, True), (True, False)]
    assert stand_in.made == 2 and stand_in.replays == 10
    assert rt.graphs.current.x.shape == (1, 8, got.config.hidden_size)  # the embedded rows, not token ids
    got.model.new_cache()
    assert rt.graphs.current is None  # a new sequence: other buffers, another graph


def test_attention_window_changes_recapture(pack, ref, stand_in, monkeypatch):
    """Past a window step of committed tokens the attention window grows: a new graph, once."""
    from clover_local.runtime import offload
    from clover_local.runtime.offload import preview_window

    step = offload.WINDOW_STEP
    assert preview_window(0, 8192) == preview_window(step - 1, 8192) == step
    assert preview_window(step, 8192) == 2 * step and preview_window(5000, 4160) == 4160
    assert preview_window(4096, 4160) == preview_window(4128, 4160)  # the bench's two blocks: one graph
    monkeypatch.setattr(offload, "WINDOW_STEP", 64)  # the tiny pack's context is small
    got = with_graphs(pack, slots=TOTAL, context=256)
    want = runtime(pack, slots=TOTAL, context=256)
    for loaded in (got, want):
        model = loaded.model
        cache = model.new_cache()
        with torch.inference_mode():
            model(torch.tensor([prompt(loaded, 60, seed=1)]), cache)
            block = torch.tensor([[9] * 8])
            loaded.seen = [model(block, cache, preview=True) for _ in range(2)]
            model(block, cache)  # 68 committed: past the first 64-row window
            loaded.seen += [model(block, cache, preview=True) for _ in range(2)]
    for a, b in zip(want.seen, got.seen):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    assert got.model.runtime.graphs.captures == 2 and stand_in.made == 3  # and one commit graph


def test_replay_that_missed_is_repaired(pack, ref, stand_in):
    """A replay that needed an evicted expert is thrown away, the expert is loaded, and the graph replays again
    (no syncing pass); the block stays on replays after it, and the logits are the syncing path's."""
    got = with_graphs(pack, slots=14, prefetch=False)
    rt = got.model.runtime

    def after(i: int) -> None:
        if i == 1:  # evict an expert the block uses, after the graph exists
            evict_most_used(rt, rt.layers[1])

    out = block_passes(got, previews=5, after_preview=after)
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False), previews=5)
    for a, b in zip(want, out):
        assert torch.equal(a, b)
    flags = [(r.optimistic, r.graphed, r.retried, r.repairs, r.synced) for r in previews(got)]
    # pass 0 syncs (no graph yet); pass 1 captures; pass 2 misses, loads the expert, replays; 3 and 4 replay
    assert flags == [(False, False, False, 0, False), (True, True, False, 0, False), (True, True, True, 1, False),
                     (True, True, False, 0, False), (True, True, False, 0, False)]
    repaired = previews(got)[2]
    assert repaired.misses == 1 and repaired.hits == repaired.uses - 1  # the loaded expert is a miss, not a hit
    s = got.model.runtime_stats()
    assert s["repair_replays"] == 1 and s["hits"] + s["misses"] == s["expert_uses"]
    assert s["graphs"]["captures"] == s["commit_graphs"]["captures"] == 1


def test_first_pass_of_a_block_replays_and_repairs(pack, ref, stand_in):
    """Once a graph exists, a block's first preview is a replay too: what it lacks (here: every expert of one
    layer, evicted between the blocks) is loaded and the graph replays again, instead of the syncing pass."""
    got = with_graphs(pack, slots=TOTAL - 2, prefetch=False)
    rt = got.model.runtime

    out = run_blocks(got, previews=3,
                     after_commit=lambda i: i == 0 and rt.cache.evict(rt.layers[2], np.arange(N_EXPERTS)))
    want = run_blocks(runtime(pack, slots=TOTAL - 2, prefetch=False, optimistic=False), previews=3)
    for a, b in zip(want, out):
        assert torch.equal(a, b)
    recs = previews(got)
    first = recs[3]
    assert first.pass_in_block == 0 and first.optimistic and first.graphed and not first.captured
    assert first.repairs >= 1 and not first.synced and first.misses > 0
    assert rt.cache.slot_of[rt.layers[2]].max() >= 0  # the repair loaded that layer's experts back
    assert not recs[0].optimistic  # the very first block: no graph yet, the syncing path
    assert rt.graphs.captures == rt.commit_graphs.captures == 1 and stand_in.made == 2
    assert got.model.runtime_stats()["expert_uses"] == sum(r.uses for r in rt.records)


def test_capture_failure_falls_back_to_eager(pack, ref, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "PassGraph", broken)
    monkeypatch.setattr(graphs.torch.cuda, "Stream", lambda device=None: "stream")
    monkeypatch.setattr(graphs.torch.cuda, "synchronize", lambda device=None: None)
    got = with_graphs(pack, slots=TOTAL)
    ids = prompt(ref, 13, seed=2)
    assert decode(got, ids) == decode(runtime(pack, slots=TOTAL), ids)
    s = got.model.runtime_stats()["graphs"]
    assert s["enabled"] is False and "stream is capturing" in s["error"]
    assert s["captures"] == s["replays"] == 0
    assert not any(r.graphed for r in previews(got))


def test_graphs_stay_off_on_cpu(pack):
    rt = runtime(pack).model.runtime
    assert rt.graphs.enabled is False


def test_checking_stand_in_catches_a_rebuilt_outside_tensor():
    """The stand-in is only worth its passes if it fails where a real graph would read stale memory."""
    holder = {"w": torch.ones(4)}
    g = StandInGraph("k", torch.zeros(4), lambda x: x * holder["w"] + 1, None)
    assert torch.equal(g.replay(torch.full((4,), 2.0)), torch.full((4,), 3.0))  # same tensor: fine
    old = holder["w"]
    holder["w"] = torch.full((4,), 5.0)  # rebuilt between passes (a graph would still read `old`)
    with pytest.raises(AssertionError, match="reads outside tensors"):
        g.replay(torch.full((4,), 2.0))
    del old


def test_gpu_check_comparison_runs_on_the_stand_in(pack, ref, stand_in, monkeypatch):
    """`gpu_check.optimistic_vs_syncing` (run on a GPU session's few minutes) through the CPU stand-in: its four
    modes agree, and its "repaired" mode really makes a block's first pass a replay that misses and is repaired."""
    from clover_local.runtime import gpu_check

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    got = with_graphs(pack, slots=20, prefetch=False)  # 20: a layer keeps top-k after the resident mode's eviction
    model = got.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(got, 40, seed=6)]), cache)
    res = gpu_check.optimistic_vs_syncing(model, cache, torch.tensor([[5] * 8]), passes=4)
    first = res["repaired"]["first"]
    assert first["graphed"] and first["repairs"] >= 1 and not first["synced"] and first["misses"] > 0
    assert res["repaired_logits_equal"] and res["graphed_logits_equal"] and res["optimistic_logits_equal"]
    z = res["resident"]  # replayed, restricted after an eviction, exact again by the last pass
    assert z["evicted"] and z["graphed"] >= 3 and z["misses_after_first"] == 0
    assert z["substituted"][1] > 0 and z["substituted"][-1] == 0
    assert res["ok"], res
    assert not model.runtime.resident_routing  # switched off again after the check


def test_gpu_check_commit_comparison_runs_on_the_stand_in(pack, ref, stand_in, monkeypatch):
    """`gpu_check.commit_graph_vs_eager` through the stand-in: syncing, captured, replayed and repaired commits
    give the same logits and leave the same cache behind (the next preview agrees)."""
    from clover_local.runtime import gpu_check

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    got = with_graphs(pack, slots=TOTAL - 2, prefetch=False)  # a commit's set fits (with 14 slots it does not)
    model = got.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(got, 40, seed=6)]), cache)
    res = gpu_check.commit_graph_vs_eager(model, cache, torch.tensor([[5] * 8]))
    assert not res["syncing"]["graphed"] and res["graphed"]["graphed"] and not res["graphed_again"]["captured"]
    assert res["repaired"]["repairs"] >= 1 and res["repaired"]["misses"] > 0 and not res["repaired"]["synced"]
    assert res["repaired_next_preview_rel_err"] == res["graphed_commit_rel_err"] == 0.0
    assert res["ok"], res


def test_gpu_check_merged_comparison_runs_on_the_stand_in(pack, ref, stand_in, monkeypatch):
    """`gpu_check.merged_vs_separate` through the stand-in: a merged pass (eager, captured, replayed) gives the
    commit's and the next block's first preview's logits of the two passes, and leaves the same cache behind."""
    from clover_local.runtime import gpu_check

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    got = with_graphs(pack, slots=TOTAL - 2, prefetch=False)
    model = got.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(got, 40, seed=6)]), cache)
    res = gpu_check.merged_vs_separate(model, cache, torch.tensor([[5, 9, 2, 7, 1, 3, 8, 4]]))
    assert res["separate"]["kinds"] == ["commit", "preview"] and res["merged_eager"]["kinds"] == ["merged"]
    assert not res["merged_eager"]["graphed"] and res["merged_graphed"]["captured"]
    assert res["merged_again"]["graphed"] and not res["merged_again"]["captured"]
    assert res["merged_again_next_preview_vs_eager_rel_err"] == 0.0
    assert max(v for k, v in res.items() if k.endswith("_rel_err")) < 1e-4
    assert res["ok"], res


def test_commit_replay_that_missed_is_repaired(pack, ref, stand_in):
    """A commit is a graph replay too (captured at the first block's commit, replayed at every later start). One
    that needed an evicted expert (here: every expert of a layer, evicted after the block's last preview) is
    thrown away, the experts are loaded and it replays again: its keys/values are written again at the same
    rows and its GDN states, held aside until the pass is settled, start again from the committed ones, so the
    commit's logits and the next block's preview are the syncing path's."""
    got = with_graphs(pack, slots=TOTAL - 2, prefetch=False)
    rt = got.model.runtime

    three = ([5] * 8, [7, 3] * 4, [2] * 8)
    out = run_blocks(got, three, previews=2, then_preview=[4] * 8,
                     before_commit=lambda i: i == 1 and rt.cache.evict(rt.layers[1], np.arange(N_EXPERTS)))
    want = run_blocks(runtime(pack, slots=TOTAL - 2, prefetch=False, optimistic=False), three, previews=2,
                      then_preview=[4] * 8)
    for a, b in zip(want, out):
        assert torch.equal(a, b)
    recs = commits(got)
    assert [(r.graphed, r.captured) for r in recs] == [(True, True), (True, False), (True, False)]
    repaired = recs[1]
    assert repaired.repairs >= 1 and not repaired.synced and repaired.misses > 0
    assert rt.commit_graphs.captures == 1 and rt.commit_graphs.error is None


def test_replay_that_missed_reads_from_the_host(pack, ref, stand_in):
    """With host reads, a replay that needs an evicted expert reads it in place and stands (no repair, no second
    replay); the expert is installed after it, so the next replay hits. The logits are the syncing path's."""
    got = with_graphs(pack, slots=14, prefetch=False, host_reads=True)
    rt = got.model.runtime

    def after(i: int) -> None:
        if i == 1:
            evict_most_used(rt, rt.layers[1])

    out = block_passes(got, previews=5, after_preview=after)
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False), previews=5)
    for a, b in zip(want, out):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # host experts sum in another order (CPU ref)
    flags = [(r.optimistic, r.graphed, r.retried, r.repairs, r.host_reads) for r in previews(got)]
    # pass 0 syncs (no graph yet), 1 captures, 2 reads the evicted expert from the host, 3 and 4 hit
    assert flags == [(False, False, False, 0, 0), (True, True, False, 0, 0), (True, True, False, 0, 1),
                     (True, True, False, 0, 0), (True, True, False, 0, 0)]
    s = got.model.runtime_stats()
    assert s["repair_replays"] == s["retried_passes"] == 0
    # the commit too: at 14 slots the block's final set does not fit, and what it lacks is read in place
    (commit,) = commits(got)
    assert commit.graphed and commit.host_reads > 0 and commit.repairs == 0 and not commit.synced
    assert s["host_reads"] == 1 + commit.host_reads
    assert s["graphs"]["replays"] == 4  # one replay per optimistic preview


def test_gpu_check_host_read_modes_run_on_the_stand_in(pack, ref, stand_in, monkeypatch):
    """gpu_check's comparisons with host reads on: their "repaired" modes still repair (host reads switched off
    for them) and their "host_read" modes read the evicted experts in place, agreeing with the syncing path."""
    from clover_local.runtime import gpu_check

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    for slots, check in ((14, "previews"), (TOTAL - 2, "commit")):
        got = with_graphs(pack, slots=slots, prefetch=False, host_reads=True)
        model, rt = got.model, got.model.runtime
        cache = model.new_cache()
        with torch.inference_mode():
            model(torch.tensor([prompt(got, 40, seed=6)]), cache)
        if check == "previews":
            res = gpu_check.optimistic_vs_syncing(model, cache, torch.tensor([[5] * 8]), passes=4)
            h = res["host_read"]["first"]
            assert h["graphed"] and h["host_reads"] >= 1 and h["repairs"] == 0 and not h["synced"]
            assert res["repaired"]["first"]["repairs"] >= 1
        else:
            res = gpu_check.commit_graph_vs_eager(model, cache, torch.tensor([[5] * 8]))
            h = res["host_read"]
            assert h["graphed"] and h["host_reads"] >= 1 and h["repairs"] == 0 and not h["synced"]
            assert res["repaired"]["repairs"] >= 1
        assert res["ok"], res
        assert rt.host_reads and rt.host_reads_error is None  # restored after the check


def test_stand_in_capture_executes_nothing_and_refuses_syncs():
    """As a real capture: the pass's writes to outside tensors are taken back, what it allocated and kept is
    garbage until a replay, and an op that would make the host wait for the GPU fails the capture."""
    counts, kept = torch.zeros(3, dtype=torch.int32), {}

    def bump(x):
        counts.add_(1)  # a device counter the pass accumulates
        kept["y"] = x * 2  # a tensor of the graph's pool something holds on to
        return kept["y"] + 1

    g = StandInGraph("k", torch.ones(2), bump, None)
    assert counts.tolist() == [0, 0, 0] and torch.isnan(kept["y"]).all()
    assert torch.equal(g.replay(torch.ones(2)), torch.full((2,), 3.0)) and counts.tolist() == [1, 1, 1]

    from graph_standin import SyncInGraph

    for syncing in (lambda x: x * (x.sum() > 0).item(), lambda x: x[x > 0], lambda x: x + x.nonzero().numel()):
        with pytest.raises(SyncInGraph):
            StandInGraph("k", torch.ones(2), syncing, None)
    assert counts.tolist() == [1, 1, 1]


def _counted(loaded) -> list[tuple]:
    return [(r.kind, r.pass_in_block, r.rows, r.uses, r.hits, r.misses, r.bytes, r.substituted)
            for r in loaded.model.runtime.records]


def test_graphed_passes_count_what_eager_passes_count(pack, ref, stand_in):
    """Each pass's counters (uses, hits, misses, bytes) are accumulated on the device inside the graph; the pass
    that captures must count once, as on a GPU (capture runs nothing): every record of a graphed decode equals
    the eager decode's."""
    ids = prompt(ref, 13, seed=2)
    got, want = with_graphs(pack, slots=TOTAL), runtime(pack, slots=TOTAL)
    assert decode(got, ids, merge=False) == decode(want, ids, merge=False)
    assert [r.captured for r in got.model.runtime.records].count(True) == 2  # a preview and a commit graph
    assert _counted(got) == _counted(want)


def test_graphed_restricted_passes_count_their_substitutions_once(pack, ref, stand_in):
    """Resident routing's `wanted` counts are taken inside the graph too. After a block's first pass and again
    after its second, every layer loses the expert it used most, so the capturing pass (the second) and a replay
    (the third) both choose around it: logits and records equal the eager runtime's, substitutions counted once.
    (A decode is no test here: graphed and eager passes that miss leave different experts resident — a repaired
    replay against a syncing pass with prefetch — and the restriction follows what is resident.)"""
    kw = dict(slots=TOTAL - 1, resident_routing=True)
    got, want = with_graphs(pack, **kw), runtime(pack, **kw)
    runs = []
    for loaded in (got, want):
        rt = loaded.model.runtime

        def evict(i, rt=rt):
            if i < 2:
                for layer in range(N_LAYERS):
                    evict_most_used(rt, layer)

        runs.append(block_passes(loaded, previews=4, after_preview=evict))
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    later = previews(got)[1:3]
    assert [(r.graphed, r.captured) for r in later] == [(True, True), (True, False)]
    assert all(r.substituted > 0 for r in later)
    counted, expected = _counted(got), _counted(want)
    assert counted[:-1] == expected[:-1]  # the prefill and every preview, counters included
    # The commit runs on what the fourth preview left resident, which differs by the mechanism above (with the
    # runtime pack of 2026-12-04: 23 hits / 3 misses graphed, 24 / 2 eager); what it uses and substitutes does not.
    (kind, n, rows, uses, hits, misses, _, substituted), commit = counted[-1], expected[-1]
    assert (kind, n, rows, uses, substituted) == (commit[0], commit[1], commit[2], commit[3], commit[7])
    assert kind == "commit" and hits + misses == uses


def test_gpu_check_decode_stage_runs_on_the_stand_in(stand_in, monkeypatch, tmp_path):
    """gpu_check's decode stage (a real decode loop on chat's worker thread) on the synthetic small pack, its
    graphs stood in: greedy tokens with graphs equal the eager ones, a seeded sampled decode repeats, the loop's
    steady passes are timed beside the runtime's records."""
    from clover_local.runtime import gpu_check

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    real_init = graphs.PassGraphs.__init__

    def enabled(self, device, enabled=True):  # on a CPU the runtime never turns them on by itself
        real_init(self, device, enabled)
        self.enabled = enabled

    monkeypatch.setattr(graphs.PassGraphs, "__init__", enabled)
    r = gpu_check.stage_decode(torch.device("cpu"), kind="small", prompt_len=40, new_tokens=40)
    assert r["ok"], r
    assert r["checks"]["graphed_equals_eager"] and r["checks"]["sampled_repeats"]
    g = r["graphs"]
    assert g["graphs"]["replays"] > 0 and g["merged_graphs"]["replays"] > 0 and g["graphs"]["error"] is None
    # (counted after the two greedy decodes; the sampled ones replay too)
    assert stand_in.replays > g["graphs"]["replays"] + g["merged_graphs"]["replays"] + g["commit_graphs"]["replays"]
    for d in (r["greedy"], r["eager"], r["sampled"]):
        assert d["steady_passes"] > 0 and d["loop_ms_median"] > 0 and d["record_ms_median"] > 0


def test_bench_variants_on_one_load_capture_as_fresh_loads_do(stand_in, monkeypatch, tmp_path):
    """With graphs (stood in), each of `run_variants`' runs on one load captures, replays and runs its first
    merged pass eagerly as a fresh load's run does: graph counters and the merged passes' records alike."""
    from clover_local.runtime import bench
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    real_init = graphs.PassGraphs.reset

    def enabled(self, on):  # on a CPU the runtime never turns them on by itself
        real_init(self, on)
        self.enabled = on

    monkeypatch.setattr(graphs.PassGraphs, "reset", enabled)
    folder = ensure_synthetic("small")
    kw = dict(label="s", synthetic=True, vram_budget=None, prefix=32, passes=3, device=torch.device("cpu"),
              dtype=torch.float32)
    variants = {"uniform": dict(routing="uniform"), "model": dict(routing="model")}
    got = bench.run_variants(folder, variants, **kw)
    for name, options in variants.items():
        fresh = bench.run_bench(folder, **kw, **options)
        for key in ("graphs", "commits", "merged"):
            a, b = dict(got[name][key]), dict(fresh[key])
            for d in (a, b):  # times differ
                d.pop("ms_per_pass_graphed", None), d.pop("capture_pass_ms", None)
                for k in [k for k in d if k.endswith("_ms") or k in ("ms", "tokens_per_s")]:
                    d.pop(k)
                for e in d.get("each", []):
                    e.pop("ms", None)
            assert a == b, (name, key)
        assert got[name]["graphs"]["captures"] > 0 and got[name]["graphs"]["replays"] > 0
