"""Host reads (`runtime/host_reads.py`): optimistic passes read non-resident experts in place from the host slabs
instead of being thrown away and rerun. On the tiny pack (CPU: the "host" and the "device" are both RAM, so what
is checked is the bookkeeping and the math, not PCIe): the same tokens as the syncing path, no pass rerun, a
forced miss read once and installed for the next pass, counters that add up, no host sync in the layer call,
and the load-time check that switches the path off when the kernel's host reads are wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from clover_local.runtime import host_reads
from clover_local.runtime.kernels import PackedStack
from runtime_pack import N_EXPERTS, N_LAYERS, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)
from test_runtime_optimistic import (block_passes, evict_most_used, gather_moe, guard_optimistic_calls, layer_calls,
                                     previews)

TOTAL = N_EXPERTS * N_LAYERS


def _close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    # the reference MoE sums a token's choices in slot order, and a host expert's number (S + e) sorts after
    # the slots: the same math in another fp32 order
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_the_load_time_check_switches_host_reads_on(pack):
    rt = runtime(pack, slots=14, host_reads=True).model.runtime
    assert rt.host_reads and rt.host_reads_error is None
    s = rt.stats()
    assert s["host_reads_on"] is True and s["host_reads_error"] is None
    off = runtime(pack, slots=14, host_reads=False).model.runtime
    assert not off.host_reads and off.host_reads_error == "off (--no-host-reads)"
    auto = runtime(pack, slots=14).model.runtime  # default: on a GPU only
    assert not auto.host_reads and "CPU device" in auto.host_reads_error
    every = runtime(pack, host_reads=True).model.runtime  # all resident: nothing to read from the host
    assert not every.host_reads and every.host_reads_error == "every expert is resident"


def test_the_environment_switches_the_default_off(pack, monkeypatch):
    from clover_local.runtime import load

    monkeypatch.setenv("CLOVER_HOST_READS", "0")
    monkeypatch.setattr(load, "_host_reads_default", lambda device: True)  # as on a GPU
    rt = runtime(pack, slots=14).model.runtime
    assert not rt.host_reads and rt.host_reads_error == "off (CLOVER_HOST_READS=0)"
    monkeypatch.delenv("CLOVER_HOST_READS")
    assert runtime(pack, slots=14).model.runtime.host_reads  # the GPU default, checked and on
    assert runtime(pack, slots=14, host_reads=True).model.runtime.host_reads  # an explicit choice wins


def test_the_check_refuses_a_kernel_whose_host_reads_are_wrong(pack, monkeypatch):
    rt = runtime(pack, slots=14, host_reads=False).model.runtime
    cache = rt.cache
    assert host_reads.check(cache, torch.float32, 8, 2) is None
    real = host_reads.moe_w4a16

    def ignores_host(x, slots, w, gu, dn, host=None):  # reads slot S + e as device slot e: wrong expert
        if host is not None:
            slots = slots - cache.n_slots
        return real(x, slots, w, gu, dn)

    monkeypatch.setattr(host_reads, "moe_w4a16", ignores_host)
    assert host_reads.check(cache, torch.float32, 8, 2) == "the MoE kernel's host reads differ from its slot reads"

    def raises(*a, **k):
        raise RuntimeError("Pointer argument (at 8) cannot be accessed from Triton (cpu tensor?)\nmore")

    monkeypatch.setattr(host_reads, "moe_w4a16", raises)
    assert host_reads.check(cache, torch.float32, 8, 2) == (
        "RuntimeError: Pointer argument (at 8) cannot be accessed from Triton (cpu tensor?)")


def test_the_read_through_check_at_load(pack, monkeypatch):
    """Read-through installs are on where host reads are, once the load-time check has read a host expert into
    another's slot and found the output and the slab right (and put the slot's own expert back); a kernel that
    does not copy, or copies wrong, switches them off with the reason; the option and the environment too."""
    rt = runtime(pack, slots=14, host_reads=True).model.runtime
    assert rt.read_through and rt.read_through_error is None and rt.stats()["read_through_on"]
    assert_slots_hold_their_experts(rt.cache)  # the check's target slot holds its own expert again
    cache = rt.cache
    assert host_reads.check_read_through(cache, torch.float32, 8, 2) is None
    real = host_reads.moe_w4a16
    monkeypatch.setattr(host_reads, "moe_w4a16", lambda *a: real(*a[:6]))  # reads in place, copies nothing
    assert host_reads.check_read_through(cache, torch.float32, 8, 2) == (
        "the MoE kernel's read-through left the slot's slab incomplete")
    monkeypatch.setattr(host_reads, "moe_w4a16", lambda *a: real(*a) * (2 if len(a) > 6 else 1))
    assert host_reads.check_read_through(cache, torch.float32, 8, 2) == (
        "the MoE kernel's read-through output differs from its slot reads")
    monkeypatch.undo()
    assert_slots_hold_their_experts(cache)
    off = runtime(pack, slots=14, host_reads=True, read_through=False).model.runtime
    assert not off.read_through and off.read_through_error == "off (--no-read-through)"
    monkeypatch.setenv("CLOVER_READ_THROUGH", "0")
    env = runtime(pack, slots=14, host_reads=True).model.runtime
    assert not env.read_through and env.read_through_error == "off (CLOVER_READ_THROUGH=0)"
    none = runtime(pack, slots=14, host_reads=False).model.runtime
    assert not none.read_through and none.read_through_error == "no host reads"


@pytest.mark.parametrize("slots", [TOTAL - 1, 14, 9])
def test_host_reads_decode_the_syncing_paths_tokens_without_reruns(pack, ref, slots):
    """Three blocks of decoding with too few slots: the routing drifts as tokens are revealed, so passes miss
    (the repair path reruns some, `test_runtime_optimistic`); read from the host, none is rerun and every preview
    and commit runs optimistically (CPU: no graphs, so a block's first pass too)."""
    ids = prompt(ref, 13, seed=2)
    hr, sync = runtime(pack, slots=slots, host_reads=True), runtime(pack, slots=slots, optimistic=False)
    assert decode(hr, ids) == decode(sync, ids)
    s = hr.model.runtime_stats()
    assert s["retried_passes"] == 0 and s["repair_replays"] == 0 and s["host_reads"] > 0
    recs = list(hr.model.runtime.records)
    assert all(r.optimistic and not r.retried for r in recs if r.kind == "preview")
    assert sum(r.host_reads for r in recs) == s["host_reads"]
    assert s["expert_uses"] == sync.model.runtime_stats()["expert_uses"]  # the same passes need the same experts


@pytest.mark.parametrize("read_through", [False, True])
def test_a_forced_miss_is_read_from_the_host_once_and_installed(pack, ref, read_through):
    """Evict an expert the block uses after its first pass: the next pass reads it from the host (no rerun: one
    sweep of layer calls), it is copied back into a slot after that pass — or, reading through, into a slot of
    the layer before that the pass did not use or a free one, as it reads it (one transfer of its bytes, not
    two) — and the pass after hits everything."""
    rt = runtime(pack, slots=14, prefetch=False, host_reads=True, read_through=read_through)
    r = rt.model.runtime
    calls = layer_calls(rt)
    per_pass, victim = [], {}

    def after(i: int) -> None:
        per_pass.append(calls[0])
        if i == 0:
            layer = r.layers[1]
            victim["layer"], victim["expert"] = layer, evict_most_used(r, layer)
            victim["offered"] = set(r.cache.slot_of[r.layers[0]][r.cache.slot_of[r.layers[0]] >= 0].tolist())
            victim["free"] = set(np.flatnonzero(r.cache.owner < 0).tolist())
        if i == 1:  # read from the host, then installed for the next pass: resident, pinned (a copy: prefetched)
            slot = r.cache.slot_of[victim["layer"], victim["expert"]]
            assert slot >= 0 and r.cache.pin_gen[slot] == r.cache.gen
            assert r.cache.prefetched[slot] != read_through
            if read_through:  # a slot the layer before held (an expert of its that the pass did not use), or a free
                # one the first layer left over (`read_through_targets`: free slots carry from layer to layer)
                assert slot in victim["offered"] | victim["free"]

    got = block_passes(rt, previews=4, after_preview=after)
    _close(got, block_passes(runtime(pack, slots=14, prefetch=False, optimistic=False), previews=4))
    recs = previews(rt)
    assert [(x.optimistic, x.retried, x.host_reads) for x in recs] == [
        (True, False, recs[0].host_reads), (True, False, 1), (True, False, 0), (True, False, 0)]
    assert recs[1].misses == 1 and recs[2].misses == recs[3].misses == 0 and recs[2].hits == recs[2].uses
    assert np.diff(per_pass).tolist() == [N_LAYERS] * 3  # no pass swept the layers twice
    layout = r.cache.layout  # PCIe: the read, and the copy after it unless it read through
    assert recs[1].bytes == layout.weight_bytes + (0 if read_through else layout.nbytes)
    assert recs[1].read_through == int(read_through)
    layer = next(x for x in r.stats()["layers"] if x["layer"] == victim["layer"])
    assert layer["prefetch_used"] >= (0 if read_through else 1)  # the install was used by pass 2


@pytest.mark.parametrize("slots", [14, 9])
def test_reading_through_decodes_the_same_tokens_with_one_transfer_per_miss(pack, ref, slots):
    """Three blocks of decoding with host reads, reading through and not: the same tokens; reading through,
    a miss read into a slot as it is read asks for no copy after the pass (every other miss asks for one: how
    many get one depends on the room unpinned slots leave), the counters add up, and every resident slot holds
    its expert's bytes exactly (the kernel's copies are whole). (Whole-decode PCIe totals are not compared: the
    two modes leave different experts resident, so later misses differ; on the tiny pack either may move more.)"""
    ids = prompt(ref, 13, seed=2)
    on = runtime(pack, slots=slots, host_reads=True)
    off = runtime(pack, slots=slots, host_reads=True, read_through=False)
    asked = {}
    for name, loaded in (("on", on), ("off", off)):  # the copies each mode asks for after its passes
        cache, asked[name] = loaded.model.runtime.cache, []
        real = cache.install_missed
        cache.install_missed = lambda rows, experts, background=False, real=real, log=asked[name]: (
            log.append(0 if background else rows.size) or real(rows, experts, background))
    assert decode(on, ids) == decode(off, ids)
    s_on, s_off = on.model.runtime_stats(), off.model.runtime_stats()
    assert s_on["read_through_on"] and not s_off["read_through_on"] and s_off["read_through"] == 0
    assert 0 < s_on["read_through"] <= s_on["host_reads"]
    assert sum(asked["on"]) == s_on["host_reads"] - s_on["read_through"]
    assert sum(asked["off"]) == s_off["host_reads"]
    cache = on.model.runtime.cache
    assert s_on["bytes_h2d"] == ((s_on["copied"] + s_on["prefetched"]) * cache.layout.nbytes
                                 + s_on["host_reads"] * cache.layout.weight_bytes)
    assert sum(r.read_through for r in on.model.runtime.records) == s_on["read_through"]
    assert_slots_hold_their_experts(cache)


def assert_slots_hold_their_experts(cache) -> None:
    """Every resident slot holds its registered expert's bytes (each part of the slab)."""
    dev = cache.layout.views(cache.buf)
    for slot in np.flatnonzero(cache.owner >= 0).tolist():
        layer, expert = divmod(int(cache.owner[slot]), cache.n_experts)
        assert cache.slot_of[layer, expert] == slot
        host = cache.layout.views(cache.host.buffers[layer])
        for part in dev:
            assert torch.equal(dev[part][slot], host[part][expert]), (slot, layer, expert, part)


def test_counters_add_up_with_host_reads(pack, ref):
    rt = runtime(pack, slots=TOTAL - 3, host_reads=True)
    decode(rt, prompt(ref, 11, seed=5), n=24)
    s = rt.model.runtime_stats()
    cache = rt.model.runtime.cache
    assert s["host_reads"] > 0 and s["hits"] + s["misses"] == s["expert_uses"] > 0
    assert s["misses"] == s["copied"] - s["repair_unused"] + s["cpu_runs"] + s["host_reads"]
    assert s["bytes_h2d"] == ((s["copied"] + s["prefetched"]) * cache.layout.nbytes
                              + s["host_reads"] * cache.layout.weight_bytes)
    assert s["prefetch_used"] + s["prefetch_wasted"] <= s["prefetched"]
    for row in s["layers"]:
        assert row["hits"] + row["misses"] == row["uses"]
    assert not cache.locked.any()


def gather_moe_host(x, slot_ids, weights, gate_up, down, host=None, install=None):
    """`gather_moe` over the device stacks followed by the host ones (slot S + e = host expert e), no sync; with
    `install`, host experts copied into their slots first (every one it names, used or not: the runtime names
    only used ones), through a scatter with a sink row instead of a boolean index."""
    if host is not None and install is not None:
        for d, h in zip((gate_up, down), host):
            for part in ("qweight", "scales", "qzeros"):
                dev, src = getattr(d, part), getattr(h, part)
                to = torch.where(install > 0, install.long() - 1, dev.shape[0])
                room = torch.cat([dev, dev[:1]]).index_copy_(0, to, src)
                dev.copy_(room[:-1])
    if host is not None:
        gate_up, down = (PackedStack(torch.cat([d.qweight, h.qweight]), torch.cat([d.scales, h.scales]),
                                     torch.cat([d.qzeros, h.qzeros]), d.group_size, d.bits)
                         for d, h in zip((gate_up, down), host))
    return gather_moe(x, slot_ids, weights, gate_up, down)


def test_a_host_reading_layer_call_never_syncs(pack, ref, monkeypatch):
    rt = runtime(pack, slots=12, prefetch=False, host_reads=True)
    guarded = guard_optimistic_calls(monkeypatch, gather_moe_host)
    got = block_passes(rt)
    _close(got, block_passes(runtime(pack, slots=12, prefetch=False, optimistic=False)))
    assert guarded == rt.model.runtime.layers * 4  # four previews (a commit syncs where there are no graphs)
    assert sum(x.host_reads for x in previews(rt)) > 0


# ------------------------------------------------------------------ booking a pass after the LM head is queued
# A pass that stands whatever it used (host reads on, or every expert resident) is booked by
# `Runtime.finish_pass`, which the model calls once its LM head is queued: on a GPU the host's bookkeeping then
# overlaps the LM head instead of leaving the device idle between the pass and it.


def _fields(recs) -> list[tuple]:
    return [tuple(v for k, v in vars(r).items() if k != "ms") for r in recs]


@pytest.mark.parametrize("slots,resident", [(TOTAL, False), (12, False), (26, True)])
def test_a_booking_put_off_changes_nothing_it_books(pack, ref, slots, resident, monkeypatch):
    """The same decode booked at once (`Runtime.defer_booking` off) and put off: the same tokens, pass
    records (all but the times), counters and cache state; with resident routing, the same choices taken away and
    installed behind the passes (read with the counts when put off)."""
    from clover_local.runtime.offload import Runtime

    ids = prompt(ref, 13, seed=3)
    opts = dict(slots=slots, host_reads=slots < TOTAL, resident_routing=resident)
    late = runtime(pack, **opts)
    seen = []
    real_finish = Runtime.finish_pass
    monkeypatch.setattr(Runtime, "finish_pass",
                        lambda self: (seen.append(self._deferred is not None), real_finish(self))[1])
    tokens_late = decode(late, ids)
    monkeypatch.undo()
    assert sum(seen) > 10  # the decode's previews and merged passes were put off and booked
    monkeypatch.setattr(Runtime, "defer_booking", False)
    now = runtime(pack, **opts)
    assert decode(now, ids) == tokens_late
    a, b = late.model.runtime, now.model.runtime
    assert _fields(a.records) == _fields(b.records)
    sa, sb = a.stats(), b.stats()
    for s in (sa, sb):
        s.pop("last_pass"), s.pop("passes")
        for row in s["layers"]:
            row.pop("ms")
    assert sa == sb
    for name in ("slot_of", "last_use", "pin_gen", "prefetched"):
        assert np.array_equal(getattr(a.cache, name), getattr(b.cache, name)), name
    if resident:
        assert sa["restricted_passes"] > 0 and sa["substituted"] > 0 and sa["background_installs"] > 0


def test_a_pass_put_off_is_booked_before_anything_reads_the_runtime(pack, ref):
    """`hidden` alone (no LM head after it) leaves the pass unbooked: counters unchanged; the next way into the
    runtime (records, stats on the decoding thread, the next pass) books it; stats from another thread (chat's
    status line) do not, and see the counters as of the last booked pass."""
    import threading

    loaded = runtime(pack, host_reads=False)  # every expert resident: every optimistic pass stands unseen
    rt, model = loaded.model.runtime, loaded.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(loaded, 40, seed=6)]), cache)
        uses, n = rt.cache.totals().uses, len(rt.records)
        model.hidden(torch.tensor([[5] * 8]), cache, preview=True)
        assert rt._deferred is not None and rt.cache.totals().uses == uses
        other: list = []
        t = threading.Thread(target=lambda: other.append(rt.stats()["expert_uses"]))
        t.start()
        t.join()
        assert other == [uses] and rt._deferred is not None  # another thread: a pass behind, nothing booked
        assert rt.stats()["expert_uses"] > uses and rt._deferred is None  # this thread: booked
        assert len(rt.records) == n + 1 and rt.records[-1].kind == "preview" and rt.records[-1].optimistic
        model.hidden(torch.tensor([[5] * 8]), cache, preview=True)
        assert rt._deferred is not None
        model.hidden(torch.tensor([[6] * 8]), cache, preview=True)  # the next pass books the one before first
        assert [r.pass_in_block for r in list(rt._records)[-2:]] == [0, 1] and rt._deferred is not None


def test_a_booked_pass_leaves_no_slot_in_doubt(pack, ref):
    """Once a read-through pass is booked its offers are settled: a later failure (here an abandoned prefill,
    as a Ctrl-C leaves it) evicts nothing on their account — the slots they named hold registered experts."""
    loaded = runtime(pack, slots=12, prefetch=False, host_reads=True)
    rt, model = loaded.model.runtime, loaded.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(loaded, 40, seed=6)]), cache)
        model(torch.tensor([[5] * 8]), cache, preview=True)
        model(torch.tensor([[5] * 8]), cache, preview=True)
    assert rt.records[-1].read_through > 0 or rt.records[-2].read_through > 0  # it did read some through
    assert rt.cache.offers.size == 0  # booked
    held = rt.cache.owner.copy()
    rt._abandon()
    assert np.array_equal(rt.cache.owner, held)
    assert_slots_hold_their_experts(rt.cache)


@pytest.mark.parametrize("readable", [True, False], ids=["targets-read", "device-error"])
def test_a_booking_that_fails_is_one_line_and_the_runtime_goes_on(pack, ref, monkeypatch, readable):
    """Out of device memory while booking a pass (its installs): one clear line, the runtime's pass state
    forgotten as for a failed pass, and the next pass runs. The pass had read experts through into slots that
    held others: those slots are dropped, so no slot is left holding what the host does not know of — only those
    (its targets read back), or every slot it was offered where they cannot be read (a device error)."""
    from clover_local.errors import CloverError
    from clover_local.runtime.expert_cache import ExpertCache
    from clover_local.runtime.optimistic import OptimisticPass

    if not readable:
        monkeypatch.setattr(OptimisticPass, "taken_slots", lambda self: None)

    loaded = runtime(pack, slots=12, prefetch=False, host_reads=True)
    rt, model = loaded.model.runtime, loaded.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([prompt(loaded, 40, seed=6)]), cache)
        model.hidden(torch.tensor([[5] * 8]), cache, preview=True)
    real = ExpertCache.commit_uses

    def oom(self, counts, host_reads=False, installed=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")

    monkeypatch.setattr(ExpertCache, "commit_uses", oom)
    offered = np.unique(rt.cache._offered())
    owner = rt.cache.owner.copy()
    with pytest.raises(CloverError, match=r"^the GPU ran out of memory after a pass \(budget .*lower --vram-budget"):
        rt.finish_pass()
    assert rt._deferred is None and rt.block_key is None and not rt.cache.locked.any()
    taken = rt._opt.installed[rt._opt.installed > 0] - 1
    assert taken.size  # it had read some through: unregistered, then dropped — those slots only
    dropped = np.flatnonzero((owner >= 0) & (rt.cache.owner < 0))
    suspect = taken if readable else offered
    assert np.array_equal(dropped, np.unique(suspect[owner[suspect] >= 0]))
    assert dropped.size < offered[owner[offered] >= 0].size if readable else dropped.size > taken.size
    assert_slots_hold_their_experts(rt.cache)
    monkeypatch.setattr(ExpertCache, "commit_uses", real)
    with torch.inference_mode():
        logits = model(torch.tensor([[5] * 8]), cache, preview=True)
    assert torch.isfinite(logits).all() and rt.records[-1].kind == "preview"
