"""Optimistic (resident-only) passes of the offloading runtime on the tiny pack: same tokens as the syncing path,
later passes of a block run without per-layer host syncs, a miss costs exactly one rerun, the counters add up,
and the optimistic layer call never touches the host. CPU only: nothing here has run on a GPU."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from clover_local.runtime import optimistic
from clover_local.runtime.kernels import dequantize_w
from clover_local.runtime.offload import OffloadedExperts
from runtime_pack import N_EXPERTS, N_LAYERS, cold, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)

TOTAL = N_EXPERTS * N_LAYERS


def block_passes(loaded, previews: int = 4, after_preview=lambda i: None) -> list[torch.Tensor]:
    """Logits of a 40-token prefill, `previews` preview passes of one block (the same rows each time, so the
    routing repeats) and its commit; `after_preview(i)` runs between passes (a test evicts an expert there)."""
    model = loaded.model
    cache = model.new_cache()
    ids, block = torch.tensor([prompt(loaded, 40, seed=6)]), torch.tensor([[5] * 8])
    with torch.inference_mode():
        out = [model(ids, cache)]
        for i in range(previews):
            out.append(model(block, cache, preview=True))
            after_preview(i)
        out.append(model(block, cache))
    return out


def previews(loaded) -> list:
    return [r for r in loaded.model.runtime.records if r.kind == "preview"]


def evict_most_used(rt, layer: int) -> int:
    """Evict the expert `layer` routed most rows to in the last pass (the block uses it again); returns it."""
    expert = int(rt.history[layer][0])
    rt.cache.evict(layer, np.array([expert]))
    return expert


def layer_calls(loaded) -> list[int]:
    """A live count of routed-expert layer calls (forward hooks on the OffloadedExperts modules)."""
    calls = [0]
    for m in loaded.model.modules():
        if isinstance(m, OffloadedExperts):
            m.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


# ------------------------------------------------------------------------------------------ same results


@pytest.mark.parametrize("slots", [TOTAL, TOTAL - 1])
def test_optimistic_and_syncing_decode_identical_tokens(pack, ref, slots):
    """Three blocks of decoding. All resident: every pass runs optimistically and none can miss. One slot short:
    the routing of this random model drifts as tokens are revealed, so some optimistic passes miss and rerun."""
    ids = prompt(ref, 13, seed=2)
    opt, sync = runtime(pack, slots=slots), runtime(pack, slots=slots, optimistic=False)
    assert decode(opt, ids) == decode(sync, ids)
    so, ss = opt.model.runtime_stats(), sync.model.runtime_stats()
    assert ss["optimistic_passes"] == ss["retried_passes"] == 0
    n_passes = sum(p["count"] for p in so["passes"].values())
    if slots == TOTAL:
        assert so["optimistic_passes"] == n_passes and so["retried_passes"] == 0 and so["misses"] == 0
    else:
        assert so["optimistic_passes"] > so["retried_passes"] > 0
    # the same passes need the same experts, whichever path served them (a discarded attempt is not counted)
    assert so["expert_uses"] == ss["expert_uses"]
    assert [r["uses"] for r in so["layers"]] == [r["uses"] for r in ss["layers"]]


def test_later_passes_of_a_block_run_optimistically(pack, ref):
    """The block's set fits (14 slots, 11 used): the first pass loads it through the syncing path, every later
    pass runs on the device alone (no acquire, no slot-table upload) and gives the syncing path's logits."""
    rt = runtime(pack, slots=14, prefetch=False)
    ec = rt.model.runtime.cache
    acquires = []
    orig = ec.acquire
    ec.acquire = lambda *a, **k: acquires.append(a[0]) or orig(*a, **k)
    uploads = []
    got = block_passes(rt, after_preview=lambda i: uploads.append((len(acquires), ec.table_uploads)))
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False))
    for a, b in zip(want, got):
        assert torch.equal(a, b)
    recs = previews(rt)
    assert [(r.optimistic, r.retried) for r in recs] == [(False, False)] + [(True, False)] * 3
    assert recs[0].misses > 0 and all(r.misses == 0 and r.hits == r.uses > 0 for r in recs[1:])
    # later previews: no acquire; the device table is uploaded once, before the first of them reads it
    assert [a for a, _ in uploads] == [uploads[0][0]] * 4
    assert [u for _, u in uploads] == [0, 1, 1, 1]
    assert rt.model.runtime_stats()["optimistic_passes"] == 3


def test_forced_miss_reruns_the_pass_once(pack, ref):
    """Evict an expert the block uses after its first pass: the next (optimistic) pass misses, is rerun once
    through the syncing path (which copies the expert back), and the logits are the syncing path's."""
    rt = runtime(pack, slots=14, prefetch=False)
    r = rt.model.runtime
    calls = layer_calls(rt)
    per_pass = []
    victim = {}

    def after(i: int) -> None:
        per_pass.append(calls[0])
        if i == 0:
            layer = r.layers[1]
            victim["layer"], victim["expert"] = layer, evict_most_used(r, layer)
            assert r.cache.slot_of[layer, victim["expert"]] < 0
        if i == 1:  # the rerun copied it back
            assert r.cache.slot_of[victim["layer"], victim["expert"]] >= 0

    got = block_passes(rt, previews=4, after_preview=after)
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False), previews=4)
    for a, b in zip(want, got):
        assert torch.equal(a, b)
    recs = previews(rt)
    # pass 1 misses and reruns; its rerun copied the expert back (a miss), so pass 2 syncs; pass 3 tries again
    assert [(x.optimistic, x.retried) for x in recs] == [(False, False), (True, True), (False, False), (True, False)]
    assert recs[1].misses == 1 and recs[1].uses == recs[0].uses
    assert np.diff(per_pass).tolist() == [2 * N_LAYERS, N_LAYERS, N_LAYERS]  # the rerun: one more sweep, no more
    s = rt.model.runtime_stats()
    assert (s["optimistic_passes"], s["retried_passes"]) == (2, 1)


# ------------------------------------------------------------------------------------------ bookkeeping


def test_counters_add_up(pack, ref):
    for prefetch in (False, True):
        rt = runtime(pack, slots=TOTAL - 2, prefetch=prefetch)
        decode(rt, prompt(ref, 11, seed=5), n=24)
        s = rt.model.runtime_stats()
        slab = rt.model.runtime.cache.layout.nbytes
        assert s["optimistic_passes"] > s["retried_passes"] > 0
        assert s["hits"] + s["misses"] == s["expert_uses"] > 0
        assert s["misses"] == s["copied"] + s["cpu_runs"]
        assert s["bytes_h2d"] == (s["copied"] + s["prefetched"]) * slab
        assert s["prefetch_used"] + s["prefetch_wasted"] <= s["prefetched"]
        for row in s["layers"]:
            assert row["hits"] + row["misses"] == row["uses"]
        recs = list(rt.model.runtime.records)
        assert sum(x.optimistic for x in recs) == s["optimistic_passes"]
        assert sum(x.retried for x in recs) == s["retried_passes"]
        assert all(x.misses == 0 and x.hits == x.uses > 0 for x in recs if x.optimistic and not x.retried)
        assert all(x.kind == "preview" and x.pass_in_block > 0 for x in recs if x.optimistic)
        assert not rt.model.runtime.cache.locked.any()


def test_device_slot_table_follows_the_host_table(pack):
    rt = runtime(pack, slots=4, prefetch=False)
    ec = cold(rt)

    def synced() -> bool:
        return torch.equal(ec.device_slot_table(), torch.from_numpy(ec.slot_of[ec.layer_ids].reshape(-1)).int())

    e = lambda *x: np.array(x, dtype=np.int64)  # noqa: E731
    assert synced()
    n = ec.table_uploads
    assert synced() and ec.table_uploads == n  # unchanged: no upload
    ec.acquire(0, e(0, 1, 2), np.ones(3, dtype=np.int64))  # three loads: one upload when next read
    ec.release()
    assert synced() and ec.table_uploads == n + 1
    ec.acquire(2, e(3, 4), np.ones(2, dtype=np.int64))  # evicts layer 0's experts
    ec.release()
    ec.evict(0, e(0, 1, 2))
    assert synced() and ec.table_uploads == n + 2
    ec.prefetch(1, e(5, 6))
    assert synced()


# ------------------------------------------------------------------------------------------ no host sync

_SYNCS = ("item", "tolist", "cpu", "numpy", "__array__", "__bool__", "__int__", "__float__", "__index__")


@contextmanager
def no_host_sync():
    """Make every way a tensor's value reaches Python raise: `.item()`, `.tolist()`, `.cpu()`, `.numpy()`,
    numpy conversion, `bool/int/float(t)` (so `if t:` too), `.to("cpu")`. On a CPU tensor none of these would
    stall anything, but on CUDA each is a device→host sync."""
    saved = {n: torch.Tensor.__dict__.get(n) for n in (*_SYNCS, "to")}
    to = torch.Tensor.to

    def raiser(name: str):
        def f(self, *a, **k):
            raise AssertionError(f"host sync in an optimistic layer call: Tensor.{name}")
        return f

    def guarded_to(self, *a, **k):
        dev = k.get("device", a[0] if a and isinstance(a[0], (str, torch.device)) else None)
        if dev is not None and torch.device(dev).type == "cpu":
            raise AssertionError("host sync in an optimistic layer call: Tensor.to('cpu')")
        return to(self, *a, **k)

    try:
        for n in _SYNCS:
            setattr(torch.Tensor, n, raiser(n))
        torch.Tensor.to = guarded_to
        yield
    finally:
        for n, f in saved.items():
            if f is None:
                delattr(torch.Tensor, n)
            else:
                setattr(torch.Tensor, n, f)


def gather_moe(x, slot_ids, weights, gate_up, down):
    """The reference MoE math without its loop over the slots it is given (`torch.unique(...).tolist()`), the
    one sync of the CPU path that the Triton kernel does not have: every (row, choice) gathers its slot."""
    m, k = slot_ids.shape
    s = slot_ids.reshape(-1).long()
    inter = gate_up.out_features // 2
    gu = dequantize_w(gate_up.qweight[s], gate_up.scales[s], gate_up.qzeros[s], gate_up.group_size, gate_up.bits)
    h = torch.bmm(x.float().repeat_interleave(k, 0).unsqueeze(1), gu).squeeze(1)
    act = (F.silu(h[:, :inter]) * h[:, inter:]).to(x.dtype).float()
    dn = dequantize_w(down.qweight[s], down.scales[s], down.qzeros[s], down.group_size, down.bits)
    y = torch.bmm(act.unsqueeze(1), dn).squeeze(1) * weights.reshape(-1, 1).float()
    return y.view(m, k, -1).sum(1).to(x.dtype)


def guard_optimistic_calls(monkeypatch, moe) -> list:
    """Run every optimistic layer call under `no_host_sync`, with `moe` as its MoE (sync-free on the CPU);
    returns the live list of the layers so called."""
    monkeypatch.setattr(optimistic, "moe_w4a16", moe)
    guarded = []
    run = optimistic.OptimisticPass.run

    def run_guarded(self, *a):
        with no_host_sync():
            out = run(self, *a)
        guarded.append(a[0])
        return out

    monkeypatch.setattr(optimistic.OptimisticPass, "run", run_guarded)
    return guarded


def test_optimistic_layer_call_never_syncs(pack, ref, monkeypatch):
    rt = runtime(pack, slots=14, prefetch=False)
    r = rt.model.runtime
    # the guard is real: the syncing layer call trips it at once
    x, idx = torch.randn(3, 128), torch.tensor([[0, 1], [2, 3], [1, 4]])
    with pytest.raises(AssertionError, match="host sync"), no_host_sync():
        r.run_experts(r.layers[0], x, idx, torch.full((3, 2), 0.5))
    r.cache.release()

    guarded = guard_optimistic_calls(monkeypatch, gather_moe)
    got = block_passes(rt)
    want = block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False))
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert guarded == r.layers * 3  # three optimistic passes, every layer guarded
    assert [x.optimistic for x in previews(rt)] == [False, True, True, True]


def test_routing_history_sorts_a_layer_when_asked():
    """`RoutingHistory`: an optimistic pass's counts become each layer's experts, most rows first, ties by lower
    id, unused ones left out — sorted on first access; a syncing layer call's own order replaces its layer's, and
    the next pass's counts replace both."""
    from clover_local.runtime.optimistic import RoutingHistory

    h = RoutingHistory()
    assert 3 not in h and h.get(3) is None
    counts = np.array([[0, 2, 5, 2, 0, 1], [1, 0, 0, 0, 0, 0]], dtype=np.int32)
    h.record(counts, {3: 0, 7: 1})
    assert 3 in h and 7 in h and 5 not in h
    assert h[3].tolist() == [2, 1, 3, 5] and h.get(7).tolist() == [0]
    h[7] = np.array([4, 2])
    assert h[7].tolist() == [4, 2] and h[3].tolist() == [2, 1, 3, 5]
    h.record(counts[::-1].copy(), {3: 0, 7: 1})
    assert h[3].tolist() == [0] and h[7].tolist() == [2, 1, 3, 5]
