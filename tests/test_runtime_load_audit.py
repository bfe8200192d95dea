"""Audit tests for the runtime's load (`runtime/load.py`), its CPU experts (`runtime/cpu_experts.py`) and its
optimistic passes (`runtime/optimistic.py`): the edges the other tests leave open (found by mutation testing) —
the int4 kernel's shape rule, the converted experts' byte count and a budget of exactly one expert, a syncing
layer's routing set before the pass's counts were read, the PyTorch read-through twin at slot 0 and with a full
carry, and the load options' refusals and switches."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from clover_local.runtime.cpu_experts import CpuExperts, int4_kernel_fits
from clover_local.runtime.slab import SlabLayout
import runtime_pack
from runtime_pack import N_EXPERTS, N_LAYERS, runtime
from test_cpu_experts import EXPERTS, H, INTER, random_store
from test_runtime_optimistic import block_passes

pack = runtime_pack.pack  # the shared tiny pack's fixture, by name


# ------------------------------------------------------------------------------------------ CPU experts


def _stack(bits: int = 4, group_size: int = 128, in_features: int = 256, out_features: int = 32):
    return SimpleNamespace(bits=bits, group_size=group_size, in_features=in_features, out_features=out_features)


def test_the_int4_kernel_takes_only_the_shapes_torch_does():
    assert int4_kernel_fits(_stack())
    assert int4_kernel_fits(_stack(group_size=32, in_features=96, out_features=16))
    assert not int4_kernel_fits(_stack(out_features=24))  # a multiple of 8, not of 16
    assert not int4_kernel_fits(_stack(in_features=192))  # 1.5 groups of 128
    assert not int4_kernel_fits(_stack(bits=3))
    assert not int4_kernel_fits(_stack(group_size=16, in_features=256))


def _one_expert_bytes() -> int:
    """A converted expert of the H=256, INTER=64 layout: gate_up codes [128, 128] uint8 and scales with zero terms
    [2, 128, 2] bf16 (group 128); down codes [256, 32] and [2, 256, 2] bf16 (group 32)."""
    return 128 * 128 + 2 * 128 * 2 * 2 + 256 * 32 + 2 * 256 * 2 * 2


def test_a_converted_expert_counts_its_bytes_and_the_summary_says_so():
    store = random_store(SlabLayout(H, INTER, 4, H // 128, INTER // 32), [0], seed=2)
    cpu = CpuExperts(store, budget=1 << 20)
    cpu.run(0, torch.randn(1, H), torch.tensor([[3]]), torch.ones(1, 1))
    size = _one_expert_bytes()
    assert size == 27648
    assert cpu.nbytes == size
    s = cpu.summary()
    assert s["kept"] == 1 and s["kept_bytes"] == size and s["budget"] == 1 << 20 and s["kernel"] is True
    assert s["runs"] == 1 and s["rows"] == 1 and s["conversions"] == 1 and s["converted_hits"] == 0


def test_a_budget_of_exactly_one_expert_keeps_one():
    store = random_store(SlabLayout(H, INTER, 4, H // 128, INTER // 32), [0], seed=2)
    size = _one_expert_bytes()
    cpu = CpuExperts(store, budget=size)
    x, one = torch.randn(1, H), torch.ones(1, 1)
    cpu.run(0, x, torch.tensor([[1]]), one)
    assert list(cpu.kept) == [(0, 1)] and cpu.nbytes == size
    cpu.run(0, x, torch.tensor([[1]]), one)
    assert cpu.stats.converted_hits == 1 and cpu.stats.conversions == 1
    cpu.run(0, x, torch.tensor([[4]]), one)  # one more byte than the budget: the first goes
    assert list(cpu.kept) == [(0, 4)] and cpu.nbytes == size and cpu.stats.evictions == 1
    short = CpuExperts(store, budget=size - 1)  # a byte short: nothing kept
    short.run(0, x, torch.tensor([[1]]), one)
    assert not short.kept and short.nbytes == 0 and short.stats.conversions == 1


def test_the_reference_path_counts_its_time_too():
    store = random_store(SlabLayout(H, 8 * 3, 4, H // 128, 1), [0], seed=3)  # group 24: the reference runs
    cpu = CpuExperts(store, budget=1 << 30)
    assert not cpu.kernel
    x = torch.randn(4, H)
    cpu.run(0, x, torch.tensor([[0], [1], [0], [EXPERTS - 1]]), torch.ones(4, 1))
    assert cpu.stats.seconds > 0 and cpu.stats.runs == 3 and cpu.stats.rows == 4
    assert cpu.summary()["seconds"] == round(cpu.stats.seconds, 6)


# ------------------------------------------------------------------------------------------ optimistic passes


def test_a_layer_set_before_its_recorded_counts_were_read_keeps_what_was_set():
    """A syncing layer call's own order (`h[layer] = ...`) replaces what an earlier optimistic pass left for
    that layer, even while those counts have not been sorted yet."""
    from clover_local.runtime.optimistic import RoutingHistory

    h = RoutingHistory()
    h.record(np.array([[0, 3, 1, 0], [2, 0, 0, 1]], dtype=np.int32), {3: 0, 7: 1})
    h[3] = np.array([2, 0])  # layer 3's counts were never read
    assert h[3].tolist() == [2, 0] and h.get(3).tolist() == [2, 0]
    assert h[7].tolist() == [0, 3]
    fallback = np.array([5])
    assert h.get(9, fallback) is fallback and h.get(7, fallback).tolist() == [0, 3]


def _two_layer_cache(used_by_layer0):
    """Two layers of 4 experts, 8 slots: layer 0's experts in slots 0–3 (not pinned), layer 1 none, slots 4–7 free;
    read-through offers built for a pass whose layer 0 used `used_by_layer0` and layer 1 used every expert."""
    from clover_local.runtime.expert_cache import ExpertCache

    e = 4
    cache = ExpertCache(SlabLayout(64, 32, 4, 1, 1), 8, [0, 1], e, torch.device("cpu"), None)
    cache.slot_of.reshape(-1)[:e] = np.arange(e)
    cache.owner[:e] = np.arange(e)
    cache._table_stale = True
    cache.set_read_through(True)
    offers = cache.offer_slots()
    counts = np.zeros((2, e), dtype=np.int32)
    counts[0, list(used_by_layer0)] = 1
    counts[1] = 2
    return cache, offers, counts


@pytest.mark.parametrize("used,want", [
    ((1, 2, 3), [1, 5, 6, 7]),  # layer 0 left expert 0's slot 0 unused: taken first, then the carried free slots
    ((0, 1, 2, 3), [5, 6, 7, 8]),  # layer 0 used every expert: its 4 free slots (a full carry) go to layer 1
])
def test_the_pytorch_read_through_twin_takes_slot_0_and_a_full_carry(used, want):
    from clover_local.runtime.optimistic import OptimisticPass

    cache, offers, counts = _two_layer_cache(used)
    assert cache.offers.tolist() == [[4, 5, 6, 7], [0, 1, 2, 3]]
    opt = OptimisticPass(cache)
    opt.counts.copy_(torch.from_numpy(counts.reshape(-1)))
    opt.table = cache.device_slot_table()
    for row in range(2):
        opt._assign_offers(row * 4, offers, opt.install[row * 4: (row + 1) * 4])
    got = opt.install.view(2, 4).numpy()
    assert got.tolist() == [[0, 0, 0, 0], want]  # 1 + slot; layer 0 missed nothing
    assert np.array_equal(got, cache.read_through_targets(counts))  # the spec agrees


# ------------------------------------------------------------------------------------------ load options


def test_load_options_refuse_what_cannot_run_and_take_the_least_that_can():
    from clover_local.errors import CloverError
    from clover_local.runtime.load import RuntimeOptions

    RuntimeOptions(cpu_cache=0, context=1, prefill_chunk=1, prefill_span=1, slots=1).validate()  # the least
    for bad, words in [({"cpu_cache": -1}, "at least 0 bytes"), ({"context": 0}, "--context must be at least 1"),
                       ({"prefill_chunk": 0}, "prefill_chunk must be at least 1"),
                       ({"prefill_span": 0}, "CLOVER_PREFILL_SPAN) must be at least 1"),
                       ({"slots": 0}, "slots must be at least 1"), ({"cpu_experts": "often"}, "--cpu-experts")]:
        with pytest.raises(CloverError, match=words.replace("(", r"\(").replace(")", r"\)")):
            RuntimeOptions(**bad).validate()


def test_the_prefill_span_comes_from_the_environment(monkeypatch):
    from clover_local.errors import CloverError
    from clover_local.runtime.load import RuntimeOptions, env_prefill_span

    monkeypatch.delenv("CLOVER_PREFILL_SPAN", raising=False)
    assert env_prefill_span() == 4096 and RuntimeOptions().prefill_span == 4096
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", "   ")  # blank: the default
    assert env_prefill_span() == 4096
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", " 24 ")
    assert env_prefill_span() == 24 and RuntimeOptions().prefill_span == 24
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", "2k")
    with pytest.raises(CloverError, match="CLOVER_PREFILL_SPAN must be a whole number of rows, got '2k'"):
        env_prefill_span()


def test_the_plan_counts_the_cpu_cache_only_with_cpu_experts_and_pins_nothing_without_cuda(pack):
    from clover_local.runtime.load import RuntimeOptions, plan_for
    from clover_local.runtime.pack_index import read_pack_index

    index = read_pack_index(pack)

    def plan(**kw):
        return plan_for(index, torch.device("cpu"), torch.float32,
                        RuntimeOptions(vram_budget=1 << 30, ram=1 << 36, context=128, slots=14, **kw))

    off, on = plan(cpu_cache=1000), plan(cpu_cache=1000, cpu_experts="misses")
    assert on.host_bytes - off.host_bytes == 1000
    assert [x.bytes for x in on.lines if x.what == "CPU-run experts"] == [1000]
    assert not [x for x in off.lines if x.what == "CPU-run experts"]
    # no CUDA here: the host slabs stay pageable, one slab per expert, as `HostExpertStore` leaves them
    assert off.host_expert_bytes == N_LAYERS * N_EXPERTS * off.slab_bytes


def test_an_explicit_choice_wins_over_the_environments_off(pack, monkeypatch):
    monkeypatch.setenv("CLOVER_HOST_READS", "0")
    monkeypatch.setenv("CLOVER_READ_THROUGH", "0")
    rt = runtime(pack, slots=14, host_reads=True, read_through=True).model.runtime
    assert rt.host_reads and rt.host_reads_error is None
    assert rt.read_through and rt.read_through_error is None
    assert not runtime(pack, slots=14, host_reads=True).model.runtime.read_through  # the environment's default


def test_host_reads_need_optimistic_passes(pack):
    rt = runtime(pack, slots=14, host_reads=True, optimistic=False).model.runtime
    assert not rt.host_reads and rt.host_reads_error == "off (no optimistic passes)"
    assert not rt.read_through and rt.read_through_error == "no host reads"


def test_reconfigure_sets_every_switch_and_starts_the_cache_and_counters_afresh(pack):
    from clover_local.errors import CloverError
    from clover_local.runtime.load import RuntimeOptions, reconfigure

    fresh = runtime(pack, slots=14).model.runtime.cache
    loaded = runtime(pack, slots=14, host_reads=True)
    rt, cache = loaded.model.runtime, loaded.model.runtime.cache
    block_passes(loaded, previews=2)
    assert rt.stats()["expert_uses"] > 0 and not np.array_equal(cache.slot_of, fresh.slot_of)
    reconfigure(loaded.model, RuntimeOptions(slots=14, context=128, prefetch=False, optimistic=False,
                                             cpu_experts="misses", cpu_max_rows=3, resident_routing=True))
    assert (rt.prefetch, rt.optimistic) == (False, False)
    assert (cache.cpu_experts, cache.cpu_max_rows) == ("misses", 3)
    assert rt.resident_routing and rt.stats()["resident_routing"]
    assert not rt.host_reads and rt.host_reads_error == "off (no optimistic passes)"
    s = rt.stats()
    assert s["expert_uses"] == s["hits"] == s["misses"] == s["copied"] == s["bytes_h2d"] == 0
    assert np.array_equal(cache.slot_of, fresh.slot_of) and np.array_equal(cache.owner, fresh.owner)
    reconfigure(loaded.model, RuntimeOptions(slots=14, context=128, host_reads=True))
    assert rt.prefetch and rt.optimistic and not rt.resident_routing and rt.host_reads
    assert cache.cpu_experts == "off"
    with pytest.raises(CloverError, match="cpu_experts must be one of"):
        reconfigure(loaded.model, RuntimeOptions(cpu_experts="often"))


def _index_edited(monkeypatch, edit):
    """Loads read the pack's index as `edit` leaves it."""
    from clover_local.runtime import load

    real = load.read_pack_index

    def edited(folder):
        index = real(folder)
        edit(index)
        return index

    monkeypatch.setattr(load, "read_pack_index", edited)


def test_preview_params_count_only_when_every_gdn_layer_has_them(pack, monkeypatch):
    assert runtime(pack, slots=14).model.has_preview_params  # the tiny pack: layers 0-2 are GDN, all have them
    _index_edited(monkeypatch, lambda index: index.tensors.pop("model.layers.1.linear_attn.conv_right_weight"))
    assert not runtime(pack, slots=14).model.has_preview_params


def test_a_parameter_no_shape_list_names_is_refused_by_name(pack, monkeypatch):
    from clover_local.errors import CloverError
    from clover_local.runtime import load

    real = load.global_shapes
    monkeypatch.setattr(load, "global_shapes", lambda cfg: {k: v for k, v in real(cfg).items() if k != "norm.weight"})
    with pytest.raises(CloverError, match="pack has no tensor for norm.weight"):
        runtime(pack, slots=14)


def test_tied_embeddings_stay_on_the_device_as_the_lm_heads_table(pack, monkeypatch):
    from clover_local.runtime.packed_linear import HostEmbedding

    def tie(index):
        index.config.tie_word_embeddings = True

    _index_edited(monkeypatch, tie)
    model = runtime(pack, slots=14).model
    assert not isinstance(model.embed_tokens, HostEmbedding)
    assert model.lm_head.weight is model.embed_tokens.weight
    assert tuple(model.lm_head.weight.shape) == (model.config.vocab_size, model.config.hidden_size)


def test_without_host_reads_a_missing_experts_choice_weighs_nothing(pack):
    """An optimistic layer call without host reads sends a non-resident choice to slot 0 with weight 0: its output
    is the resident choices' alone (the pass is then thrown away, but what it computed is defined)."""
    rt = runtime(pack, slots=14).model.runtime
    cache, opt = rt.cache, rt._opt
    resident = [e for e in range(N_EXPERTS) if cache.slot_of[1, e] >= 0]
    missing = [e for e in range(N_EXPERTS) if cache.slot_of[1, e] < 0]
    assert resident and missing and cache.slot_of[1, missing[0]] < 0
    opt.begin()
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(1))
    idx = torch.tensor([[resident[0], missing[0]], [missing[-1], resident[-1]]])
    with torch.inference_mode():
        got = opt.run(1, x, idx, torch.tensor([[0.6, 0.4], [0.3, 0.7]]))
        want = opt.run(1, x, idx, torch.tensor([[0.6, 0.0], [0.0, 0.7]]))
    torch.testing.assert_close(got, want)
    assert got.abs().sum() > 0


def test_a_failed_load_time_check_switches_the_path_off_with_its_reason(pack, monkeypatch):
    from clover_local.runtime import host_reads

    monkeypatch.setattr(host_reads, "check_read_through", lambda *a: "read-through check failed")
    rt = runtime(pack, slots=14, host_reads=True).model.runtime
    assert rt.host_reads and not rt.read_through and rt.read_through_error == "read-through check failed"
    monkeypatch.setattr(host_reads, "check", lambda *a: "host-read check failed")
    rt = runtime(pack, slots=14, host_reads=True).model.runtime
    assert not rt.host_reads and rt.host_reads_error == "host-read check failed"
    assert not rt.read_through and rt.read_through_error == "no host reads"


def test_reconfigure_leaves_an_all_resident_cache_whole(pack):
    from clover_local.runtime.load import RuntimeOptions, reconfigure

    loaded = runtime(pack)
    cache = loaded.model.runtime.cache
    assert cache.host is None and cache.resident() == N_LAYERS * N_EXPERTS
    before = cache.slot_of.copy()
    reconfigure(loaded.model, RuntimeOptions(context=128, prefetch=False))
    assert cache.resident() == N_LAYERS * N_EXPERTS and np.array_equal(cache.slot_of, before)
    assert not loaded.model.runtime.prefetch
    block_passes(loaded, previews=1)  # runs: nothing to copy, nowhere to copy it from
    assert loaded.model.runtime.stats()["copied"] == 0


def test_a_pass_waits_for_every_landing_copy_but_those_it_was_told_to_leave(pack):
    """`OptimisticPass.begin(keep)`: copies into the slots `keep` names stay pending (a restricted pass does not
    read them: they overlap it); every other pending copy is waited for."""
    rt = runtime(pack, slots=14).model.runtime
    cache, opt = rt.cache, rt._opt
    cache.ready = {3: None, 5: None}
    cache.pending[[3, 5]] = True
    opt.begin(keep=np.array([5]))
    assert list(cache.ready) == [5] and cache.pending.nonzero()[0].tolist() == [5]
    opt.begin()
    assert not cache.ready and not cache.pending.any()


@pytest.mark.parametrize("where", ["layer", "global"])
def test_a_tensor_of_the_wrong_shape_is_refused_by_name(pack, monkeypatch, where):
    from clover_local.errors import CloverError
    from clover_local.runtime import load

    if where == "layer":
        real = load.layer_shapes
        monkeypatch.setattr(load, "layer_shapes", lambda cfg, i: {
            **real(cfg, i), **({"input_layernorm.weight": (129,)} if i == 2 else {})})
        words = r"pack tensor model.layers.2.input_layernorm.weight has shape \[128\], expected \[129\]"
    else:
        real = load.global_shapes
        monkeypatch.setattr(load, "global_shapes", lambda cfg: {**real(cfg), "norm.weight": (129,)})
        words = r"pack tensor model.norm.weight has shape \[128\], expected \[129\]"
    with pytest.raises(CloverError, match=words):
        runtime(pack, slots=14)
