"""The offloading runtime on a tiny GPTQ pack made by the quantize pipeline: packed loading, the expert cache
(block pinning, eviction, prefetch, CPU path, more experts than slots), counters, and agreement with the
dequantizing reference path (`clover_local.loader.load(pack)`). CPU only: the "device" cache is a CPU tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from clover_local.errors import CloverError
from clover_local.loader import load
from clover_local.runtime.load import RuntimeOptions
from clover_local.runtime.pack_index import read_pack_index
from clover_local.runtime.slab import SlabLayout
from runtime_pack import N_EXPERTS, N_LAYERS, cold, decode, pack, prompt, ref, runtime  # noqa: F401 (fixtures)
from test_runtime_graphs import stand_in  # noqa: F401 (fixture: graph replays on a CPU)

TOTAL = N_EXPERTS * N_LAYERS


def passes_logits(loaded, ids: list[int], block: list[int], previews: int = 2):
    """Logits of a prefill, `previews` preview passes of one block, and its commit."""
    model = loaded.model
    cache = model.new_cache()
    t = lambda x: torch.tensor([x])  # noqa: E731
    with torch.inference_mode():
        out = [model(t(ids), cache)]
        out += [model(t(block), cache, preview=True) for _ in range(previews)]
        out.append(model(t(block), cache))
    return out, cache


# ------------------------------------------------------------------------------------------ loading


def test_slabs_hold_the_pack_experts(pack, ref):
    """gate|up concatenated along N and down, read back through the PackedStack views, equal the pack."""
    from clover_local.runtime.kernels import dequantize_w

    rt = runtime(pack, slots=TOTAL)
    cache = rt.model.runtime.cache
    info = read_pack_index(pack)
    assert cache.layout == SlabLayout(128, 128, 4, info.expert["gate_proj"].groups, info.expert["down_proj"].groups)
    assert rt.model.runtime.cache.host is None  # all resident: no host copy kept
    for layer, e in ((0, 0), (3, N_EXPERTS - 1)):
        slot = int(cache.slot_of[layer, e])
        gu = dequantize_w(*cache.gate_up.slot(slot), cache.gate_up.group_size, 4)  # [K, N]
        dn = dequantize_w(*cache.down.slot(slot), cache.down.group_size, 4)
        w = ref.model.layers[layer].mlp.experts
        torch.testing.assert_close(gu.t(), w.gate_up_proj[e].float(), rtol=0, atol=0)
        torch.testing.assert_close(dn.t(), w.down_proj[e].float(), rtol=0, atol=0)


def test_modules_are_packed_and_embeddings_on_host(pack):
    from clover_local.runtime.packed_linear import HostEmbedding, PackedLinear

    m = runtime(pack, slots=4).model
    assert isinstance(m.embed_tokens, HostEmbedding) and m.embed_tokens.weight.numel() == 0
    assert isinstance(m.lm_head, PackedLinear) and m.lm_head.bits == 8
    layer = m.layers[0]
    proj = layer.linear_attn.in_proj_qkv if not layer.is_attention else layer.self_attn.q_proj
    assert isinstance(proj, PackedLinear)
    assert isinstance(m.layers[0].mlp.shared_expert.down_proj, PackedLinear)
    assert not isinstance(m.layers[0].mlp.gate, PackedLinear)  # routers stay BF16
    assert not any(t.is_meta for t in list(m.parameters()) + list(m.buffers()))


def test_the_decoder_makes_token_ids_where_the_embedding_table_is(pack):
    """With the table on the host the decoder's ids are made there, whatever device the activations use (on a
    GPU that spares each pass a copy of its ids to the card and a synchronising copy back)."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder
    from clover_local.runtime.packed_linear import HostEmbedding

    loaded = runtime(pack, slots=4)
    m = loaded.model
    table = m.embed_tokens.table
    m.embed_tokens = HostEmbedding(table, torch.device("meta"))  # activations "elsewhere"
    assert BlockDiffusionDecoder(m, loaded.mask_token_id).device == torch.device("cpu")
    m.embed_tokens = torch.nn.Embedding(4, 2, device="meta")
    assert BlockDiffusionDecoder(m, loaded.mask_token_id).device == torch.device("meta")  # a plain table


# ------------------------------------------------------------------------------------------ correctness


def test_logits_match_dequantizing_reference(pack, ref):
    ids, block = prompt(ref, 21), prompt(ref, 8, seed=1)
    want, _ = passes_logits(ref, ids, block)
    for kw in ({"slots": 5, "prefill_chunk": 8}, {"slots": TOTAL}):
        got, _ = passes_logits(runtime(pack, **kw), ids, block)
        for a, b in zip(want, got):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_a_chunked_prefill_keeps_only_the_rows_asked_for(pack):
    """A prompt longer than `prefill_chunk` runs in passes of that many rows; what comes back is the rows asked
    for (as a slice, an index tensor in any order, a bool mask), as from all rows, and nothing else is held (the
    decoder asks for one row)."""
    rt = runtime(pack, slots=TOTAL, prefill_chunk=8, prefill_span=8)
    ids = torch.tensor([prompt(rt, 21, seed=7)])
    mask = torch.zeros(21, dtype=torch.bool)
    mask[[2, 9, 20]] = True
    with torch.inference_mode():
        every = rt.model(ids, rt.model.new_cache())
        assert every.shape[1] == 21
        for rows in (slice(-1, None), slice(3, 12), torch.tensor([17, 3, 3, -1]), mask):
            cache = rt.model.new_cache()
            got = rt.model(ids, cache, rows=rows)
            want = every[:, rows]
            assert got.shape == want.shape and cache.length == 21
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # (the LM head's sums vary with its rows)
        cache = rt.model.new_cache()
        assert rt.model(ids, cache, rows=slice(0, 0)).shape[1] == 0 and cache.length == 21


def test_a_long_prefill_goes_layer_by_layer_and_copies_each_expert_once(pack, ref):
    """A prefill pass longer than a chunk runs each layer over all its rows, chunk after chunk, before the next
    layer (`prefill_span`): the same logits, cache and decode as chunk after chunk through every layer, and an
    offloaded cache copies a layer's experts once for the span instead of once a chunk."""
    ids = prompt(ref, 40, seed=8)  # 5 chunks of 8 rows
    runs = {}
    for span in (8, 64):  # chunk by chunk through all layers; all 40 rows layer by layer
        rt = runtime(pack, slots=12, prefill_chunk=8, prefill_span=span, prefetch=False)
        before = rt.model.runtime_stats()["copied"]
        ec, modes = rt.model.runtime.cache, []
        real_begin = ec.begin_pass
        ec.begin_pass = lambda dense, layer_major=False: modes.append(layer_major) or real_begin(dense, layer_major)
        logits, cache = passes_logits(rt, ids, prompt(ref, 8, seed=9), previews=1)
        runs[span] = (logits, cache, rt.model.runtime_stats()["copied"] - before,
                      [r.kind for r in rt.model.runtime.records], modes)
    (by_chunk, c_chunk, copied_chunk, kinds_chunk, modes_chunk) = runs[8]
    (by_layer, c_layer, copied_layer, kinds_layer, modes_layer) = runs[64]
    assert kinds_chunk.count("prefill") == 5 and kinds_layer.count("prefill") == 1
    # the cache is told which pass goes layer by layer (its eviction order keeps the layer in progress)
    assert not any(modes_chunk) and modes_layer[0] and not any(modes_layer[1:])
    for a, b in zip(by_chunk, by_layer):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert c_chunk.length == c_layer.length == 40 + 8
    for a, b in zip(c_chunk.tensors(), c_layer.tensors()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert copied_layer < copied_chunk / 2, (copied_layer, copied_chunk)
    want, _ = passes_logits(ref, ids, prompt(ref, 8, seed=9), previews=1)
    for a, b in zip(want, by_layer):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert decode(runtime(pack, slots=12, prefill_chunk=8, prefill_span=64), ids) == decode(ref, ids)


@pytest.mark.parametrize("copies", ["at once", "deferred"])
def test_a_stop_anywhere_in_the_expert_cache_leaves_it_sound(pack, ref, copies, monkeypatch):
    """Chat's Ctrl-C raises KeyboardInterrupt in the decoder wherever it is (`DecodeThread.interrupt`), the
    expert cache's bookkeeping included: between two of its statements an expert may map to a slot that no
    longer holds it, and later loads give that slot to another expert — wrong weights, silently. Raised at each
    line the cache runs during a decode (at its second run, where there is one): afterwards each resident
    expert's slot is its own and the next decode gives the reference tokens (`ExpertCache.recover`).
    "deferred": copies land as late as a CUDA copy stream allows (CLOVER_DEFER_COPIES): a stop between a copy and
    the booking of its event left a copy nobody waited for, read as the slot's old expert (recover now waits for
    the whole copy stream)."""
    import sys

    import clover_local.runtime.expert_cache as expert_cache

    if copies == "deferred":
        monkeypatch.setenv("CLOVER_DEFER_COPIES", "1")
    ids = prompt(ref, 13, seed=2)
    want = decode(ref, ids, n=16)
    rt = runtime(pack, slots=10)  # fewer slots than a layer's experts: loads and evictions every pass
    ec = rt.model.runtime.cache

    def traced(on_line) -> bool:
        """A decode with on_line(lineno) called at each line the cache runs; True if it was interrupted."""
        def local(frame, event, arg):
            if event == "line":
                on_line(frame.f_lineno)
            return local

        sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename == expert_cache.__file__ else None)
        try:
            decode(rt, ids, n=16)
            return False
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)

    lines: list[int] = []
    assert not traced(lines.append) and decode(rt, ids, n=16) == want
    seen: dict[int, list[int]] = {}
    for i, lineno in enumerate(lines):
        seen.setdefault(lineno, []).append(i)
    stops = sorted(at[1] if len(at) > 1 else at[0] for at in seen.values())
    assert len(stops) > 100

    for stop in stops:
        count = [0]

        def line(_lineno: int) -> None:
            count[0] += 1
            if count[0] == stop + 1:  # once, as `DecodeThread.interrupt`
                raise KeyboardInterrupt

        assert traced(line), stop
        live = np.flatnonzero(ec.owner >= 0)
        owners = ec.owner[live]
        layers, experts = np.nonzero(ec.slot_of >= 0)
        assert (ec.slot_of[owners // ec.n_experts, owners % ec.n_experts] == live).all(), stop
        assert (ec.owner[ec.slot_of[layers, experts]] == layers * ec.n_experts + experts).all(), stop
        assert decode(rt, ids, n=16) == want, stop


@pytest.mark.parametrize("copies", ["at once", "deferred"])
def test_offloaded_and_resident_decode_identical_tokens(pack, ref, copies, monkeypatch):
    """"deferred": each copy into a slot lands only when the compute side waits for it (or for a later one), the
    latest a CUDA copy stream may: a pass reading a slot it did not wait for reads the old expert there."""
    if copies == "deferred":
        monkeypatch.setenv("CLOVER_DEFER_COPIES", "1")
    ids = prompt(ref, 13, seed=2)
    want = decode(ref, ids)
    resident = runtime(pack, slots=TOTAL)
    offloaded = runtime(pack, slots=10)  # fewer slots than experts: evictions every pass
    assert (offloaded.model.runtime.cache.copier.deferred is not None) == (copies == "deferred")
    assert decode(resident, ids) == want
    assert decode(offloaded, ids) == want
    s = offloaded.model.runtime_stats()
    assert s["misses"] > 0 and s["resident"] == 10
    assert resident.model.runtime_stats()["misses"] == 0


def test_cpu_path_and_oversubscribed_layer_match(pack, ref):
    """Missed experts run on the CPU from their host slabs (torch's int4 kernel on converted experts: bf16
    activations, so within bf16 tolerance; the dequantizing reference where the kernel cannot take the shapes:
    exact); a layer needing more experts than slots is served in groups. All give the reference logits."""
    ids, block = prompt(ref, 12, seed=3), prompt(ref, 8, seed=4)
    want, _ = passes_logits(ref, ids, block, previews=1)
    cpu = runtime(pack, slots=6, cpu_experts="misses")
    assert cpu.model.runtime.cpu.kernel  # the tiny pack's shapes suit torch's kernel
    got, _ = passes_logits(cpu, ids, block, previews=1)
    for a, b in zip(want, got):
        # (bf16 activations: torch 2.14.1's kernel lands 5 of 3,840 logits at 3.9e-2 of the largest, 2.13.0's under 3e-2)
        torch.testing.assert_close(b, a, rtol=0, atol=5e-2 * a.abs().max().item())
        # the same choice wherever the reference's winner leads by more than twice the row's error: a near-tie (a
        # random model has them: 3e-4 apart at a 4e-3 error with 2026-12-06's packages) may go either way
        top2 = a.topk(2, dim=-1).values
        decided = top2[..., 0] - top2[..., 1] > 2 * (b - a).abs().max(-1).values
        assert decided.any() and (b.argmax(-1) == a.argmax(-1))[decided].all()
    s = cpu.model.runtime_stats()
    assert s["cpu_runs"] > 0 and s["copied"] == 0
    c = s["cpu_experts"]
    assert c["kernel"] and c["runs"] == s["cpu_runs"]
    # each expert converted once, later passes reuse it: conversions + reuses = runs
    assert 0 < c["conversions"] == c["kept"] < c["runs"] and c["conversions"] + c["converted_hits"] == c["runs"]
    reference = runtime(pack, slots=6, cpu_experts="misses")
    reference.model.runtime.cpu.kernel = False  # as for shapes the kernel cannot take
    got, _ = passes_logits(reference, ids, block, previews=1)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert reference.model.runtime_stats()["cpu_experts"]["conversions"] == 0
    tight = runtime(pack, slots=2, prefetch=False)  # a layer call needs up to 8
    got, _ = passes_logits(tight, ids, block, previews=1)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------ cache policy


def test_counters_add_up(pack, ref):
    for prefetch in (False, True):
        rt = runtime(pack, slots=9, prefetch=prefetch)
        decode(rt, prompt(ref, 11, seed=5), n=16)
        s = rt.model.runtime_stats()
        slab = rt.model.runtime.cache.layout.nbytes
        assert s["hits"] + s["misses"] == s["expert_uses"] > 0
        assert s["misses"] == s["copied"] - s["repair_unused"] + s["cpu_runs"]
        assert s["bytes_h2d"] == (s["copied"] + s["prefetched"]) * slab
        if not prefetch:
            assert s["prefetched"] == 0 and s["bytes_h2d"] == s["misses"] * slab
        else:
            assert s["prefetched"] > 0 and s["prefetch_used"] + s["prefetch_wasted"] <= s["prefetched"]
        for row in s["layers"]:
            assert row["hits"] + row["misses"] == row["uses"]
            assert row["bytes"] == (row["copied"] + row["prefetched"]) * slab
        assert sum(r["uses"] for r in s["layers"]) == s["expert_uses"]
        assert set(s["passes"]) == {"prefill", "preview", "merged"}


def test_block_set_is_loaded_once(pack, ref):
    """With room for a block's experts, the second and later passes of a block have no misses (the block's
    experts are pinned), even after a prefill filled the cache with others; commit unpins them."""
    rt = runtime(pack, slots=14, prefetch=False)  # of 32; this block's passes use 11
    ids, block = prompt(ref, 40, seed=6), [5] * 8
    _, cache = passes_logits(rt, ids, block, previews=4)
    recs = [r for r in rt.model.runtime.records if r.kind == "preview"]
    assert [r.pass_in_block for r in recs] == [0, 1, 2, 3]
    assert recs[0].uses <= 14
    assert all(r.misses == 0 and r.hits == r.uses > 0 for r in recs[1:])
    ec = rt.model.runtime.cache
    assert not (ec.pin_gen == ec.gen).any()  # the commit ended the block
    assert not ec.locked.any()


def test_eviction_prefers_unpinned_and_never_locked(pack):
    rt = runtime(pack, slots=4, prefetch=False)
    ec = cold(rt)
    e = lambda *x: np.array(x, dtype=np.int64)  # noqa: E731
    ones = lambda n: np.ones(n, dtype=np.int64)  # noqa: E731
    ec.acquire(0, e(0, 1), ones(2))
    ec.release()
    ec.end_block()  # experts 0, 1 of layer 0: unpinned now
    ec.acquire(1, e(0, 1), ones(2))  # pinned to the current block
    ec.release()
    ec.acquire(2, e(5), ones(1))  # evicts one of layer 0's unpinned experts, not a pinned one
    assert (ec.slot_of[0, [0, 1]] < 0).sum() == 1
    assert (ec.slot_of[1, [0, 1]] >= 0).all()
    ec.release()
    acq = ec.acquire(3, e(2, 3, 4), ones(3))  # only 4 slots: must evict pinned ones, never its own
    assert (acq.slots >= 0).all() and len(set(acq.slots.tolist())) == 3
    assert ec.counters[3].pinned_evictions >= 1
    ec.release()


def test_repair_loads_what_a_pass_lacked_without_evicting_the_block(pack):
    """`repair` (after an optimistic replay missed): pins what the pass had, loads what it lacked into free or
    unpinned slots (misses when the rerun uses them), and refuses (loading nothing) when that would evict the block's pinned experts."""
    rt = runtime(pack, slots=4, prefetch=False)
    ec = cold(rt)
    e = lambda *x: np.array(x, dtype=np.int64)  # noqa: E731
    ec.acquire(0, e(0, 1), np.ones(2, dtype=np.int64))
    ec.release()
    ec.end_block()  # layer 0's experts 0, 1: resident, unpinned
    counts = np.zeros((ec.layer_ids.size, ec.n_experts), dtype=np.int64)
    r0, r1 = (int(np.flatnonzero(ec.layer_ids == i)[0]) for i in (0, 1))
    counts[r0, 0] = 3  # had (resident)
    counts[r1, [2, 5]] = 1  # lacked
    before = ec.counters[1].bytes
    assert ec.missing(counts) == 2 and ec.repair(counts) == 2
    assert ec.missing(counts) == 0 and (ec.slot_of[0, [0, 1]] >= 0).all()  # the two free slots took them
    assert (ec.counters[1].misses, ec.counters[1].copied) == (0, 2)  # copies now, misses when used
    assert ec.counters[1].bytes - before == 2 * ec.layout.nbytes
    assert (ec.pin_gen[ec.slot_of[[0, 1, 1], [0, 2, 5]]] == ec.gen).all()
    ec.commit_uses(counts)  # the replay that stood: 3 uses, the 2 loaded ones are misses, not hits
    assert (ec.counters[0].uses, ec.counters[0].hits) == (3, 1)  # layer 0: the acquire's 2 misses, then a hit
    assert (ec.counters[1].uses, ec.counters[1].hits, ec.counters[1].misses) == (2, 0, 2)
    counts[:] = 0
    counts[r0, 0] = counts[r1, [2, 5]] = 1
    counts[int(np.flatnonzero(ec.layer_ids == 2)[0]), [3, 4]] = 1  # two more: only one unpinned slot is left
    assert ec.repair(counts) is None
    assert (ec.slot_of[2, [3, 4]] < 0).all() and (ec.slot_of[1, [2, 5]] >= 0).all()


def test_plan_predicts_placed_bytes(pack, ref):
    from clover_local.runtime.load import plan_for

    for kw in ({"slots": 7}, {"vram_budget": 40 << 20}, {"slots": TOTAL}):
        rt = runtime(pack, context=96, **kw)
        _, cache = passes_logits(rt, prompt(ref, 30), prompt(ref, 8, seed=1), previews=1)
        placed = rt.model.runtime.placed_bytes(rt.model, cache)
        plan = rt.model.runtime.plan
        snapshot = next(x.bytes for x in plan.lines if x.what == "prompt snapshot")  # no PromptCache here
        assert abs((placed["total"] + snapshot) / plan.device_predicted - 1) < 0.05, (placed, plan.device_predicted)
        assert placed["expert_slots"] == plan.slots * plan.slab_bytes
        host = rt.model.runtime.cache.host  # no CUDA here: the chunks are pageable, unrounded, as the plan says
        held = sum(c.numel() for c in host.chunks) if host is not None else 0
        assert plan.host_expert_bytes == held and (held > 0) == (plan.slots < TOTAL)
    again = plan_for(read_pack_index(pack), torch.device("cpu"), torch.float32,
                     RuntimeOptions(vram_budget=40 << 20, context=96))
    assert again.slots == runtime(pack, vram_budget=40 << 20, context=96).model.runtime.cache.n_slots


def test_plan_counts_the_prompt_snapshot_chat_keeps(pack):
    """chat and serve keep a PromptCache between turns: its snapshot is the plan's "prompt snapshot" line to the
    byte, and the total with it stays within 5% of the plan."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.prompt_cache import PromptCache

    rt = runtime(pack, slots=9, context=96)
    reuse = PromptCache()
    dec = BlockDiffusionDecoder(rt.model, rt.mask_token_id)
    events = list(dec.generate(prompt(rt, 40), DecodeSettings(max_new_tokens=8, stop_token_ids=[]), reuse=reuse))
    assert reuse.saved_tokens > 0 and reuse.nbytes > 0
    plan = rt.model.runtime.plan
    line = next(x for x in plan.lines if x.what == "prompt snapshot")
    assert line.where == "device" and line.bytes == reuse.nbytes
    placed = rt.model.runtime.placed_bytes(rt.model, reuse._saved.cache, reuse)
    assert placed["prompt_snapshot"] == line.bytes and events
    assert abs(placed["total"] / plan.device_predicted - 1) < 0.05, (placed, plan.device_predicted)


# ------------------------------------------------------------------------------------------ limits and bad input


def test_context_limit_is_a_clear_error(pack, ref):
    rt = runtime(pack, slots=8, context=16)
    with pytest.raises(CloverError, match="context of 16 tokens"):  # the decoder checks up front
        decode(rt, prompt(ref, 12), n=16)
    with pytest.raises(CloverError, match="larger --context"):  # the preallocated KV cache never grows
        rt.model(torch.tensor([prompt(ref, 20)]), rt.model.new_cache())
    # the runtime survives the failed request
    assert decode(rt, prompt(ref, 3), n=8) == decode(ref, prompt(ref, 3), n=8)
    assert not rt.model.runtime.cache.locked.any()


def test_budget_and_ram_refusals(pack):
    with pytest.raises(CloverError, match=r"--vram-budget .* too small") as exc:
        runtime(pack, vram_budget=64 << 10)
    assert "\n" not in str(exc.value)
    with pytest.raises(CloverError, match="not enough host RAM"):
        runtime(pack, vram_budget=40 << 20, slots=4, ram=256 << 20)


def test_act_order_and_missing_expert_refused(pack, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(pack, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    name = "model.layers.1.mlp.experts.3.up_proj.g_idx"
    shard = bad / index["weight_map"][name]
    tensors = load_file(str(shard))
    tensors[name] = torch.arange(tensors[name].numel(), dtype=torch.int32) % 2  # interleaved: not sequential
    save_file(tensors, str(shard), metadata={"format": "pt"})
    with pytest.raises(CloverError, match="act-order"):
        runtime(bad, slots=4)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"]["desc_act"] = True
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CloverError, match="desc_act"):
        runtime(bad, slots=4)
    cfg["quantization_config"]["desc_act"] = False
    (bad / "config.json").write_text(json.dumps(cfg))
    gone = "model.layers.1.mlp.experts.3.up_proj.qweight"
    del tensors[gone]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    del index["weight_map"][gone]
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CloverError, match=r"missing model\.layers\.1\.mlp\.experts\.3\.up_proj\.qweight"):
        runtime(bad, slots=4)


def test_runtime_needs_a_pack(make_checkpoint):
    with pytest.raises(CloverError, match="not a quantized pack"):
        load(str(make_checkpoint()), "cpu", "float32", runtime=RuntimeOptions())


_INTERPRETED = """
import sys, torch
torch.set_num_threads(1)
from clover_local.loader import load
from clover_local.runtime.kernels import triton_available
from clover_local.runtime.load import RuntimeOptions
assert triton_available()
pack = sys.argv[1]
ref = load(pack, "cpu", "float32")
rt = load(pack, "cpu", "float32", runtime=RuntimeOptions(slots=28, context=64))  # of 32: offloaded
gdns = [l.linear_attn for l in rt.model.layers if hasattr(l, "linear_attn")]
# the fused GDN preview and causal pass are in the comparison (a 40-row prefill: the chunked kernels)
assert gdns and all(m.preview_kernel is not None and m.causal_kernel is not None for m in gdns)
g = torch.Generator().manual_seed(0)
ids, blk = torch.randint(0, 300, (1, 40), generator=g), torch.randint(0, 300, (1, 8), generator=g)
c1, c2 = ref.model.new_cache(), rt.model.new_cache()
with torch.inference_mode():
    for args in ((ids,), (blk,), (blk,)):  # prefill, a block's first preview, a later one (optimistic)
        a, b = ref.model(*args, c1, preview=args[0] is blk), rt.model(*args, c2, preview=args[0] is blk)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
stats = rt.model.runtime_stats()
assert stats["misses"] > 0 and stats["optimistic_passes"] >= 1, stats
assert rt.model.runtime._opt._ops is not None and rt.model.layers[0].mlp.route_kernel is not None
assert all(l.self_attn.preview_kernel is not None for l in rt.model.layers if hasattr(l, "self_attn"))
from clover_local.runtime.packed_linear import PackedLinear
tiles = [m.k_tile for m in rt.model.modules() if isinstance(m, PackedLinear)]
assert tiles and all(tiles), tiles  # every dense packed linear read with its rows field-major (dense_k_tile)
print("ok")
"""


def test_triton_kernels_on_cache_slot_views(pack):
    """The fast path: the Triton kernels (under TRITON_INTERPRET, in a fresh process so the kernels are defined
    interpreted) read experts through the strided slab views of an offloading cache, run the GDN prefill (chunked)
    and previews, preview attention, norms, router and optimistic slot mapping fused, read every dense packed linear with its rows
    repacked field-major at load, and match the reference."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CLOVER_FORCE_TRITON": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", _INTERPRETED, str(pack)], env=env, capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[1])
    if "assert triton_available()" in res.stderr:
        pytest.skip("triton is installed but its kernels do not import here")
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


def test_deferred_copies_land_in_stream_order(monkeypatch):
    """The CPU emulation of the copy stream (CLOVER_DEFER_COPIES=1): a batch lands when its event, or a later
    one, is waited for — never before — and `wait_all` lands every batch, those whose event nobody kept too."""
    from clover_local.runtime.expert_cache import SlotCopier

    monkeypatch.setenv("CLOVER_DEFER_COPIES", "1")
    copier = SlotCopier(torch.device("cpu"))
    dst = torch.zeros(3, 4)
    src = torch.arange(12.0).view(3, 4) + 1
    events = [copier.copy([(dst[i], src[i])]) for i in range(3)]
    assert not dst.any()
    copier.wait([events[1]])  # the first two land (the stream completes in order), the third not yet
    assert torch.equal(dst[:2], src[:2]) and not dst[2].any()
    copier.wait([None, events[0]])  # already landed: nothing more
    assert not dst[2].any()
    copier.wait_all()
    assert torch.equal(dst, src) and copier.deferred == []
    monkeypatch.delenv("CLOVER_DEFER_COPIES")
    assert SlotCopier(torch.device("cpu")).copy([(dst[0], src[0] * 0)]) is None and not dst[0].any()  # at once


@pytest.mark.parametrize("slots", [9, 16])
def test_prefetch_fetches_the_next_layers_experts_and_saves_demand_copies(pack, ref, slots):
    """The syncing path prefetches, after each layer's call, the next layer's likely experts (its routing in the
    last pass, most used first): most of what it copies is then used, and the same decode makes fewer demand
    copies than without prefetch. Every layer but the first is prefetched (with room: 16 slots); nothing comes
    before the first, so it never is."""
    runs = {}
    for prefetch in (False, True):
        rt = runtime(pack, slots=slots, prefetch=prefetch, optimistic=False)
        tokens = decode(rt, prompt(ref, 11, seed=5), n=16)
        runs[prefetch] = (tokens, rt.model.runtime_stats(), rt.model.runtime.cache)
    (plain_tokens, plain, _), (tokens, s, ec) = runs[False], runs[True]
    assert tokens == plain_tokens
    assert s["prefetched"] > 0 and s["prefetch_used"] > s["prefetched"] // 2
    assert s["copied"] < plain["copied"]
    layers = ec.layer_ids.tolist()
    assert ec.counters[layers[0]].prefetched == 0
    if slots == 16:
        assert all(ec.counters[layer].prefetch_used > 0 for layer in layers[1:])

@pytest.mark.parametrize("slots", [TOTAL - 2, 20])
def test_a_pass_repaired_twice_is_one_retried_pass(pack, ref, stand_in, slots):
    """Every expert evicted between two blocks: the next block's first replay misses in every layer. With room
    (30 of 32 slots) each repair fixes at least the first missing layer, so a pass takes more than one repair;
    in a tight cache (20) a repair does not fit and the pass reruns through the syncing path (`synced`). The
    counters count passes, not attempts: `retried_passes` is the passes rerun after a miss, however many
    replays each took, `repair_replays` the replays; the logits are the syncing path's either way."""
    got = _graphed_blocks_after_evicting_everything(pack, slots)
    rt = got.model.runtime
    recs = list(rt.records)
    if slots == TOTAL - 2:
        assert max(r.repairs for r in recs) >= 2 and not any(r.synced for r in recs)
    else:
        assert any(r.synced for r in recs)
    for r in recs:
        assert r.retried == (r.repairs > 0 or r.synced)  # a retried pass was repaired or rerun syncing
        assert not r.synced or r.optimistic
    s = got.model.runtime_stats()
    assert s["retried_passes"] == sum(r.retried for r in recs) > 0
    assert s["repair_replays"] == sum(r.repairs for r in recs)
    assert s["optimistic_passes"] == sum(r.optimistic for r in recs)


def _graphed_blocks_after_evicting_everything(pack, slots: int):
    """Graphed blocks with every expert evicted after the first commit (the next block's first replay misses in
    every layer), checked to give the syncing path's logits; the loaded model, for its records and counters."""
    from test_runtime_graphs import run_blocks, with_graphs

    got = with_graphs(pack, slots=slots, prefetch=False)
    rt = got.model.runtime

    def evict_all(i: int) -> None:
        if i == 0:
            for layer in rt.layers:
                rt.cache.evict(layer, np.arange(N_EXPERTS))

    out = run_blocks(got, previews=3, after_commit=evict_all)
    want = run_blocks(runtime(pack, slots=slots, prefetch=False, optimistic=False), previews=3)
    assert all(torch.equal(a, b) for a, b in zip(want, out))
    return got


def test_repairs_stop_at_max_repairs_and_the_pass_reruns_syncing(pack, ref, stand_in, monkeypatch):
    """The bound on repairs holds: a pass that would take more repairs than MAX_REPAIRS (here 1; the scenario
    above takes ≥ 2 with room) reruns through the syncing path after that many, with the same logits."""
    from clover_local.runtime import offload

    monkeypatch.setattr(offload, "MAX_REPAIRS", 1)
    recs = list(_graphed_blocks_after_evicting_everything(pack, TOTAL - 2).model.runtime.records)
    assert max(r.repairs for r in recs) == 1
    assert any(r.synced and r.repairs == 1 for r in recs)


@pytest.mark.parametrize("slots", [6, 12])
def test_a_block_that_ran_experts_on_the_cpu_tries_no_resident_only_pass(pack, ref, slots):
    """With `--cpu-experts misses`, what a pass ran on the CPU was never copied in: the block's next pass would
    miss it, so it is not attempted optimistically (an attempt thrown away and rerun costs a pass); every pass
    goes the syncing path and none is retried."""
    rt = runtime(pack, slots=slots, cpu_experts="misses")
    decode(rt, prompt(ref, 11, seed=5), n=24)
    s = rt.model.runtime_stats()
    assert s["cpu_runs"] > 0
    assert s["retried_passes"] == 0 and s["optimistic_passes"] == 0
    assert not any(r.retried for r in rt.model.runtime.records)


def test_a_commit_replay_that_missed_is_repaired_into_the_blocks_unused_slots(pack, ref, stand_in):
    """26 slots of 32: a commit's replay misses experts its final tokens route to, and the free and unpinned
    slots cannot take them all. The commit ends its block, so the block's pinned experts it did not use may
    make room (`repair(last_of_block=True)`): it is repaired and replayed, never rerun through the syncing
    path, and its logits are the syncing path's."""
    from test_runtime_graphs import commits, run_blocks, with_graphs

    got = with_graphs(pack, slots=26, prefetch=False)
    out = run_blocks(got, previews=3)
    want = run_blocks(runtime(pack, slots=26, prefetch=False, optimistic=False), previews=3)
    assert all(torch.equal(a, b) for a, b in zip(want, out))
    recs = commits(got)
    assert len(recs) == 2 and all(r.graphed and r.retried and r.repairs >= 1 and not r.synced for r in recs)


def test_a_layer_call_over_more_experts_than_slots_serves_the_resident_ones_first(pack):
    """A call that needs all 8 experts of a layer with 4 slots runs in groups: the 4 experts already resident
    form the first group (hits), and only the other 4 are copied — not the other way round, which would evict
    the resident ones first and copy them back for the second group. The output is the all-resident one."""
    ids = np.arange(8)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 128, generator=g)
    idx = torch.from_numpy(np.stack([ids, (ids + 3) % 8], 1))
    weights = torch.softmax(torch.randn(8, 2, generator=g), -1)
    full = runtime(pack, slots=TOTAL).model.runtime
    want = full.run_experts(1, x, idx, weights)
    tight = runtime(pack, slots=4, prefetch=False).model.runtime
    ec = tight.cache
    for layer in ec.layer_ids.tolist():
        ec.evict(layer, np.arange(ec.n_experts))
    ec.acquire(1, np.array([1, 4, 6, 7]), np.ones(4, dtype=np.int64))
    ec.release()
    before = (ec.counters[1].hits, ec.counters[1].misses, ec.counters[1].copied)
    got = tight.run_experts(1, x, idx, weights)
    c = ec.counters[1]
    assert (c.hits - before[0], c.misses - before[1], c.copied - before[2]) == (4, 4, 4)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_pinned_expert_layers_share_power_of_two_chunks():
    """torch's pinned allocator rounds each allocation up to a power of two: one buffer per 399 MiB layer (35B)
    would pin 512 MiB each. The layers go in chunks whose rounded sizes waste the least — 5 layers in 2 GiB at 35B,
    17.18 GB pinned for 16.74 GB of experts instead of 21.47 GB — and each layer's buffer is its own view."""
    from clover_local.runtime.expert_store import HostExpertStore
    from clover_local.runtime.sizes import chunk_layers, pinned_size
    from clover_local.runtime.slab import SlabLayout

    layer_35b = 256 * 1_634_304  # experts x slab bytes (`plan synthetic:full --json`)
    assert chunk_layers(layer_35b, 40) == (5, 8 * 2**31)
    assert 40 * pinned_size(layer_35b) == 40 * 2**29  # one buffer a layer: 21.47 GB
    assert [pinned_size(n) for n in (1, 2, 3, 4096, 4097)] == [1, 2, 4, 4096, 8192]
    # the best k for each layer count: never more pinned than one buffer a layer, never a chunk over the cap
    for n_layers in range(1, 12):
        k, total = chunk_layers(100, n_layers, max_chunk=1024)
        assert total <= n_layers * pinned_size(100) and pinned_size(k * 100) <= 1024
        assert total == min((n_layers // j) * pinned_size(j * 100) + pinned_size(n_layers % j * 100) *
                            (n_layers % j > 0) for j in range(1, n_layers + 1) if pinned_size(j * 100) <= 1024)

    layout = SlabLayout(64, 32, 4, 1, 1)
    layers = [0, 1, 3, 4, 5, 7, 8]
    store = HostExpertStore(layout, layers, n_experts=3, pin=False)
    k, _ = chunk_layers(3 * layout.nbytes, len(layers))
    assert len(store.chunks) == -(-len(layers) // k) and store.pinned_bytes == 0  # (pinned only with CUDA)
    assert store.nbytes == len(layers) * 3 * layout.nbytes
    bases = [c.data_ptr() for c in store.chunks]
    for n, i in enumerate(layers):
        store.buffers[i].fill_(n)
        offset = store.buffers[i].data_ptr() - max(b for b in bases if b <= store.buffers[i].data_ptr())
        assert store.buffers[i].shape == (3, layout.nbytes) and offset % 256 == 0  # slab-aligned in its chunk
    assert all(bool((store.slab(i, e) == n).all()) for n, i in enumerate(layers) for e in range(3))


def test_experts_stay_in_pageable_memory_where_pinning_fails(monkeypatch, capsys):
    """Windows caps page-locked memory (so may a container): where the pinned chunks cannot be had, the store warns
    in one line and keeps the experts in pageable memory (slower copies, no reads in place) instead of failing the
    load. (On this CPU build a pinned allocation fails as it would there: torch raises.)"""
    from clover_local.runtime.expert_store import HostExpertStore
    from clover_local.runtime.slab import SlabLayout

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    layout = SlabLayout(64, 32, 4, 1, 1)
    store = HostExpertStore(layout, [0, 1, 2], n_experts=3, pin=True)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("warning: could not pin") and "pageable" in err
    assert not store.pinned and store.pinned_bytes == 0 and not any(c.is_pinned() for c in store.chunks)
    store.buffers[2].fill_(7)
    assert bool((store.slab(2, 1) == 7).all()) and store.nbytes == 3 * 3 * layout.nbytes
