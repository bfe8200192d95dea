"""CUDA-graph replay of optimistic preview passes (runtime/graphs.py), its plumbing tested on the CPU.

A CPU has no CUDA graphs, so `PassGraph` is replaced by a stand-in with a graph's contract (`graph_standin.py`):
it keeps the static input buffer and the function it was captured with, a replay runs THAT function again on the
buffer (capture-time Python values), and fails if the replay reads any tensor from outside the pass at another
address than the capture did (what a real graph would silently read stale). What this checks: the
runtime hands the graph the embedded rows (not the token ids), refreshes the buffer each pass, keys the graph by
block, drops it when the block ends, still books use counts and reruns a pass that missed, and falls back to
eager passes when capture fails. Real capture is checked by `gpu_check` on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover_local.runtime import graphs, optimistic
from graph_standin import CheckingGraph as StandInGraph
from graph_standin import opaque_moe
from runtime_pack import N_EXPERTS, N_LAYERS, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)
from test_runtime_optimistic import block_passes, previews

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
    loaded.model.runtime.graphs.enabled = True  # on a CPU the runtime never turns them on by itself
    return loaded


@pytest.mark.parametrize("slots", [TOTAL, TOTAL - 1])
def test_graph_replays_decode_the_same_tokens(pack, ref, stand_in, slots):
    """A few blocks of decoding. All resident, every preview after a block's first is a replay; one slot short,
    some replays miss and are rerun through the syncing path. Tokens equal the eager runtime's either way."""
    ids = prompt(ref, 13, seed=2)
    got = with_graphs(pack, slots=slots)
    assert decode(got, ids) == decode(runtime(pack, slots=slots), ids)
    s = got.model.runtime_stats()["graphs"]
    recs = previews(got)
    graphed = [r for r in recs if r.graphed]
    assert s["error"] is None and s["replays"] == len(graphed) == stand_in.replays > 0
    blocks = sum(r.pass_in_block == 0 for r in recs)
    assert 0 < s["captures"] == stand_in.made <= blocks  # at most one per block: reused by the block's passes
    assert all(r.optimistic for r in graphed)
    if slots == TOTAL:  # nothing can miss: every preview is optimistic, and all but the first of each capture
        assert all(r.optimistic and not r.retried for r in recs)
        assert len(graphed) == len(recs)


def test_graph_is_keyed_by_block_and_dropped_at_its_end(pack, ref, stand_in):
    got = with_graphs(pack, slots=14, prefetch=False)
    want = block_passes(runtime(pack, slots=14, prefetch=False), previews=4)
    rt = got.model.runtime
    seen = []
    out = block_passes(got, previews=4, after_preview=lambda i: seen.append(rt.graphs.current))
    for a, b in zip(want, out):
        assert torch.equal(a, b)
    # pass 0 loads the set (syncing), pass 1 captures, passes 1-3 replay one graph
    assert [(r.optimistic, r.graphed, r.captured) for r in previews(got)] == [
        (False, False, False), (True, True, True), (True, True, False), (True, True, False)]
    assert seen[0] is None and seen[1] is not None and seen[1] is seen[2] is seen[3]
    assert seen[1].x.shape == (1, 8, got.config.hidden_size)  # the embedded rows, not token ids
    assert rt.graphs.current is None  # the commit ended the block
    assert stand_in.made == 1 and stand_in.replays == 3
    rt.graphs.current = seen[1]
    got.model.new_cache()
    assert rt.graphs.current is None  # a new sequence drops it too


def test_replay_that_missed_is_rerun(pack, ref, stand_in):
    got = with_graphs(pack, slots=14, prefetch=False)
    rt = got.model.runtime

    def after(i: int) -> None:
        if i == 1:  # evict an expert the block uses, after the graph exists
            layer = rt.layers[1]
            rt.cache.evict(layer, np.array([int(rt.history[layer][0])]))

    out = block_passes(got, previews=5, after_preview=after)
    want = block_passes(runtime(pack, slots=14, prefetch=False), previews=5)
    for a, b in zip(want, out):
        assert torch.equal(a, b)
    flags = [(r.optimistic, r.graphed, r.retried) for r in previews(got)]
    # pass 2 replays, misses, reruns (syncing); pass 3 syncs; pass 4 replays the same graph again
    assert flags == [(False, False, False), (True, True, False), (True, True, True), (False, False, False),
                     (True, True, False)]
    assert stand_in.made == 1


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
