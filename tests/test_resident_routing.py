"""Resident routing (`RuntimeOptions.resident_routing`, `Runtime.route_limit`): a block's later previews choose
only among the experts resident when the pass began, so they never wait for a copy; what a row wanted and could
not have is counted, copied in behind the next pass, and may be chosen from the pass after it. The block's
first pass, its commit and prefills route freely. On the tiny pack (CPU): which passes are restricted, that a
restricted pass never misses, the one-pass lag of a background install, exact logits wherever the routing is
free, and the counters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover_local.runtime.offload import OffloadedExperts
from runtime_pack import N_EXPERTS, N_LAYERS, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)
from test_runtime_optimistic import block_passes, evict_most_used, previews

TOTAL = N_EXPERTS * N_LAYERS


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_off_by_default_and_moot_with_every_expert_resident(pack):
    default = runtime(pack, slots=14).model
    assert not default.runtime.resident_routing and default.runtime.route_limit(0) is None
    assert all(m.route_limit() is None for m in default.modules() if getattr(m, "route_limit", None) is not None)
    every = runtime(pack, resident_routing=True).model.runtime  # nothing is offloaded: nothing to restrict
    assert not every.resident_routing and every.route_limit(0) is None
    on = runtime(pack, slots=14, resident_routing=True).model
    allowed, wanted = on.runtime.route_limit(on.runtime.layers[1])
    assert allowed.shape == wanted.shape == (N_EXPERTS,) and allowed.dtype == wanted.dtype == torch.int32
    s = on.runtime_stats()
    assert s["resident_routing"] is True and s["substituted"] == s["background_installs"] == 0
    on.runtime.set_resident_routing(False)  # switched off (gpu_check compares both on one load)
    assert on.runtime.route_limit(on.runtime.layers[1]) is None and not on.runtime_stats()["resident_routing"]
    on.runtime.pass_in_block = 1
    assert on.runtime._restrict_routing("preview") is None and not on.runtime._restricted


def test_a_missing_expert_is_substituted_then_installed_behind_the_next_pass(pack, ref):
    """Evict an expert the block uses after its first pass (the rows repeat, so every later pass wants it): the
    next pass substitutes it and it is copied in after that pass; the pass after leaves its slot out (its copy
    may still be landing) and substitutes again; from then on it is chosen and the logits are exact again. No
    later pass misses. The first pass and the commit route freely: their logits are the exact runtime's."""
    got = runtime(pack, slots=14, prefetch=False, resident_routing=True)
    rt = got.model.runtime
    evicted, seen = {}, {layer: [] for layer in rt.layers}

    def after(i: int) -> None:
        if i == 0:  # in a layer that keeps k experts to choose from (else it would choose freely and miss)
            layer = max(rt.layers, key=lambda li: int((rt.cache.slot_of[li] >= 0).sum()))
            assert (rt.cache.slot_of[layer] >= 0).sum() > 2
            evicted["layer"], evicted["expert"] = layer, evict_most_used(rt, layer)

    def allowed_at_call(mod, args):  # what each layer's router may choose, as the pass reads it
        seen[mod.layer].append(rt.route_limit(mod.layer)[0].clone())

    for m in got.model.modules():
        if isinstance(m, OffloadedExperts):
            m.register_forward_pre_hook(allowed_at_call)
    out = block_passes(got, previews=5, after_preview=after)
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False), previews=5)

    layer = evicted["layer"]
    seen = seen[layer]
    e = evicted["expert"]
    recs = previews(got)
    assert [r.substituted > 0 for r in recs] == [False, True, True, False, False]
    assert all(r.misses == 0 for r in recs[1:])  # a restricted pass chooses nothing it lacks
    assert [int(a[e]) for a in seen[1:6]] == [0, -1, -1, 0, 0]  # the five previews (seen[0]: the prefill)
    assert int(seen[0].min()) == int(seen[1].min()) == 0  # prefill and first preview: every expert allowed
    s = got.model.runtime_stats()
    assert s["background_installs"] >= 1 and s["substituted"] == sum(r.substituted for r in recs)
    assert rt.cache.slot_of[layer, e] >= 0
    # prefill, first preview, the later previews once the expert is back, and the commit: exact
    for i in (0, 1, 4, 5, 6):
        _close(want[i], out[i])
    assert not torch.allclose(out[2], want[2], rtol=1e-5, atol=1e-5)  # a substituted pass is an approximation


@pytest.mark.parametrize("merge,slots", [(False, 22), (True, 26)])
def test_restricted_passes_never_miss_while_decoding(pack, ref, merge, slots):
    """Three blocks of a real decode with too few slots (the routing drifts as tokens are revealed): every later
    preview runs optimistically and stands, none misses; what they took away is counted and installed. (22 of
    32: a layer keeps at least k experts after a block's first pass; with fewer, as at 9, that layer chooses
    freely and may miss. A first pass merged with the last block's commit uses both blocks' experts, 31 of
    32 here: 26 slots keep k a layer.)"""
    ids = prompt(ref, 13, seed=2)
    got = runtime(pack, slots=slots, resident_routing=True)
    tokens = decode(got, ids, merge=merge)
    assert len(tokens) > 8
    later = [r for r in previews(got) if r.pass_in_block > 0]
    assert later and all(r.misses == 0 and r.optimistic and not r.retried for r in later)
    s = got.model.runtime_stats()
    assert s["substituted"] > 0 and s["background_installs"] > 0
    assert s["later_pass_hit_rate"] == 1.0
    exact = runtime(pack, slots=slots)
    decode(exact, ids, merge=merge)
    assert [r for r in previews(exact) if r.pass_in_block > 0 and r.misses]  # exact routing would have missed


def test_the_route_table_leaves_out_landing_slots_only_for_one_pass(pack):
    """`_restrict_routing` directly: resident experts allowed, the slots of the last pass's background installs
    left out (and their copies not waited for), everything allowed outside a block's later previews."""
    rt = runtime(pack, slots=TOTAL - 1, resident_routing=True).model.runtime  # warm: k or more in every layer
    cache = rt.cache
    rows, experts = np.nonzero(cache.slot_of[cache.layer_ids] < 0)
    assert cache.install_missed(rows[:1], experts[:1], background=True) == 1
    slot = cache.slot_of[cache.layer_ids[rows[0]], experts[0]]
    rt.pass_in_block = 1
    keep = rt._restrict_routing("preview")
    assert keep.tolist() == [slot]
    table = rt._route_table.view(cache.layer_ids.size, N_EXPERTS).numpy()
    resident = cache.slot_of[cache.layer_ids] >= 0
    assert table[rows[0], experts[0]] == -1
    resident[rows[0], experts[0]] = False
    assert np.array_equal(table == 0, resident)
    assert rt._restrict_routing("preview") is None  # the next pass: it is an ordinary resident expert
    assert rt._route_table.view(cache.layer_ids.size, N_EXPERTS)[rows[0], experts[0]] == 0
    for kind, at in (("preview", 0), ("commit", 3), ("prefill", 0)):
        rt.pass_in_block = at
        assert rt._restrict_routing(kind) is None and int(rt._route_table.min()) == 0


def test_a_restricted_pass_run_twice_counts_its_substitutions_once(pack, ref, monkeypatch):
    """A restricted attempt thrown away (here forced; in a decode: a layer left with fewer than k experts chose
    freely and missed) and rerun through the syncing path counts what it took away once, not once a run."""
    from clover_local.runtime.offload import Runtime

    def substituted(force: bool) -> list:
        got = runtime(pack, slots=14, prefetch=False, resident_routing=True)
        rt = got.model.runtime
        real, forced = Runtime._settle_optimistic, []

        def settle(self, state):
            if force and self._restricted and not forced:  # throw the first restricted attempt away
                forced.append(state)
                self._optimistic_now = False
                self._opt.finish()
                state.retried = True
                return False
            return real(self, state)

        monkeypatch.setattr(Runtime, "_settle_optimistic", settle)

        def after(i: int) -> None:
            if i == 0:  # as above: the most-kept layer loses an expert its rows want
                layer = max(rt.layers, key=lambda li: int((rt.cache.slot_of[li] >= 0).sum()))
                evict_most_used(rt, layer)

        block_passes(got, previews=3, after_preview=after)
        monkeypatch.undo()
        recs = previews(got)
        assert recs[1].retried == force
        return [r.substituted for r in recs]

    plain, rerun = substituted(False), substituted(True)
    assert plain[1] > 0 and rerun == plain
