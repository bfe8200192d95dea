"""Placement plan arithmetic pinned to hand-derived numbers (mutation audit of runtime/placement.py, sizes.py and
pack_index.py).

Every number below is worked out from the rules the modules document, on `synthetic_index("small")` (no weights
written: 4 layers, 1 attention + 3 GDN, 16 experts top 4, hidden 256, moe inter 128, vocab 1024, block 32):

- a 4-bit expert: gate/up [256 → 128, 2 groups] and down [128 → 256, 1 group] are 17,024 bytes each packed
  (qweight 16,384 + fp16 scales 512 + qzeros 128), 51,072 for the three; its slab (parts aligned to 256 bytes)
  is 51,200; a 3-bit one is 38,912;
- KV at 4096 tokens, bf16: 1 layer × (K, V) × 2 heads × 64 × 4096 × 2 = 2,097,152;
- one GDN layer's state: 4 heads × 64 × 64 × 4 (fp32) + (4 − 1) conv taps × 512 conv channels × 2 = 68,608;
  three layers 205,824, twice on the device (the pending copy) 411,648; the prompt snapshot adds one fp32 logits
  row: 205,824 + 1024 × 4 = 209,920;
- the device's non-expert weights: 1,817,848 (the embedding table, 1024 × 256 × 2 = 524,288, on the host);
- workspace: 35,008 activation bytes a row (bf16), a 512-row chunk plus one LM-head row
  (512 × 35,008 + 1024 × 6 = 17,930,240), a 4096-row span's hidden states three times (3 × 4096 × 256 × 2 =
  6,291,456), and a tenth of weights + activations as slack (2,603,954): 26,825,650.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from clover_local.errors import CloverError
from clover_local.runtime import sizes
from clover_local.runtime.pack_index import (PackIndex, QuantModule, TensorInfo, check_header, classify_tensor,
                                             header_from_prefix, header_length, kind_of, read_pack_index)
from clover_local.runtime.placement import HOST_RUNTIME_BYTES, expected_distinct, make_plan, workspace_bytes
from clover_local.runtime.sizes import GIB, MIB, chunk_layers, fmt_bytes, parse_size, pinned_size

SLAB, SLAB3, EXPERT = 51_200, 38_912, 51_072
WEIGHTS, KV, GDN, SNAPSHOT = 1_817_848, 2_097_152, 205_824, 209_920
FIXED = WEIGHTS + KV + 2 * GDN + SNAPSHOT  # 4,536,568
WORKSPACE = 26_825_650
EMBED = 1024 * 256 * 2
ROWS_ACT = 35_008  # activation bytes a row, bf16


@pytest.fixture(scope="module")
def small():
    from clover_local.runtime.synthetic_pack import synthetic_index

    return synthetic_index("small")


def with_config(info: PackIndex, **changes) -> PackIndex:
    return dataclasses.replace(info, config=dataclasses.replace(info.config, **changes))


def line(plan, what: str):
    found = [x for x in plan.lines if x.what == what]
    return found[0] if found else None


# ----------------------------------------------------------------------------------------------------- sizes.py


def test_sizes_are_binary_and_zero_is_refused_unless_allowed():
    assert parse_size("1KB") == parse_size("1k") == 1024 and parse_size("3KiB") == 3072
    assert parse_size("2MB") == 2 * MIB and parse_size("1T") == 1 << 40
    with pytest.raises(CloverError, match="--vram must be positive"):
        parse_size("0", "--vram")
    with pytest.raises(CloverError, match="--ram must be positive"):
        parse_size("0GB", "--ram")


def test_fmt_bytes_units_and_rounding_up():
    assert fmt_bytes(1024) == "1 KiB" and fmt_bytes(1023) == "1023 B" and fmt_bytes(GIB) == "1 GiB"
    assert fmt_bytes(1.004 * GIB) == "1 GiB"
    assert fmt_bytes(1.004 * GIB, up=True) == "1.01 GiB"  # 3 digits, rounded up: never asks for too little
    assert fmt_bytes(17.94 * GIB, up=True) == "18 GiB" and fmt_bytes(2 * GIB, up=True) == "2 GiB"
    assert fmt_bytes(123.2 * GIB, up=True) == "124 GiB"
    assert fmt_bytes(1.1 * GIB, up=True) == "1.1 GiB"  # 1.1 × 100 is 110.00000000000001 in floats: still 1.1


def test_default_budget_keeps_a_margin_or_half_the_ram(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(sizes, "device_free_bytes", lambda d: 8 * GIB if d.type == "cuda" else None)
    assert sizes.default_budget(cuda) == 8 * GIB - 512 * MIB  # the 512 MiB margin: more than free / 32
    monkeypatch.setattr(sizes, "device_free_bytes", lambda d: 32 * GIB if d.type == "cuda" else None)
    assert sizes.default_budget(cuda) == 31 * GIB  # free / 32 (1 GiB): more than the margin
    monkeypatch.setattr(sizes, "device_free_bytes", lambda d: 100 * MIB if d.type == "cuda" else None)
    assert sizes.default_budget(cuda) == 0
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 8 * GIB)
    assert sizes.default_budget(cpu) == 4 * GIB


def test_host_memory_is_read_in_kib_from_meminfo():
    with open("/proc/meminfo", encoding="ascii") as f:
        total = next(int(x.split()[1]) for x in f if x.startswith("MemTotal:"))
    assert sizes.host_total_bytes() == total * 1024


def test_pinned_chunks_waste_the_least_and_stay_under_the_cap():
    assert pinned_size(1 << 20) == 1 << 20 and pinned_size((1 << 20) + 1) == 2 << 20 and pinned_size(1) == 1
    # 1.25 GiB layers × 3: one chunk of 3.75 GiB pins 4 GiB (the cap itself: allowed), where 3 chunks pin 6 GiB
    assert chunk_layers(5 << 28, 3) == (3, 4 * GIB)
    assert chunk_layers(5 << 28, 3, max_chunk=2 * GIB) == (1, 6 * GIB)
    # the small pack's layers (16 slabs, 800 KiB): 1 MiB each either way; ties keep the smaller chunk
    assert chunk_layers(16 * SLAB, 4) == (1, 4 * MIB)


# ------------------------------------------------------------------------------------------------ pack_index.py


def test_packed_bytes_and_tensor_bytes():
    assert QuantModule("m", 4, 256, 128, 2).packed_bytes == 16_384 + 512 + 128
    assert QuantModule("m", 8, 256, 128, 2).packed_bytes == 32_768 + 512 + 256
    assert QuantModule("m", 3, 256, 128, 2).packed_bytes == 12_288 + 512 + 96
    assert QuantModule("m", 4, 256, 128, 2).group_size == 128
    assert TensorInfo("t", "s", "BF16", (3, 4)).nbytes == 24 and TensorInfo("t", "s", "I8", (5,)).nbytes == 5
    assert TensorInfo("t", "s", "F8_E8M0", (3,)).nbytes == 12  # an unknown dtype is counted at 4 bytes


def test_kind_of_every_row():
    assert kind_of("model.embed_tokens.weight") == "embeddings"
    assert kind_of("lm_head") == "lm_head"
    assert kind_of("model.layers.0.mlp.shared_expert_gate.weight") == "shared experts"
    assert kind_of("model.layers.0.mlp.shared_expert.up_proj") == "shared experts"
    assert kind_of("model.layers.0.linear_attn.in_proj_qkv") == "GDN"
    assert kind_of("model.layers.3.self_attn.q_proj") == "attention"
    assert kind_of("model.layers.0.mlp.gate.weight") == "routers"
    assert kind_of("model.layers.0.input_layernorm.weight") == "norms"


def _header(data_end: int) -> bytes:
    return json.dumps({"__metadata__": {}, "t": {"dtype": "I32", "shape": [4], "data_offsets": [0, data_end]}}
                      ).encode()


def test_headers_are_checked_against_the_file_size():
    raw = _header(16)
    n = len(raw)
    assert check_header(raw, n, 8 + n + 16, "s")["t"]["shape"] == [4]  # exactly as long as described: fine
    with pytest.raises(CloverError, match="corrupt or truncated"):
        check_header(raw, n, 8 + n + 15, "s")
    with pytest.raises(CloverError, match="corrupt or truncated"):
        check_header(raw, n, n + 16, "s")  # the 8 length bytes count too
    with pytest.raises(CloverError, match="shorter than its header length"):
        header_length(b"\x01\x00\x00", "s")
    # a header longer than the first ask is read again, whole
    blob = n.to_bytes(8, "little") + raw + bytes(16)
    asks = []

    def first(k):
        asks.append(k)
        return blob[:k]

    header, start = header_from_prefix(first, len(blob), "s", probe=16)
    assert header["t"]["data_offsets"] == [0, 16] and start == 8 + n and asks == [16, 8 + n]


def _parts(k: int, n: int, bits: int, groups: int, sc_dtype: str = "F16", qz_cols: int | None = None,
           gidx: int | None = None) -> dict[str, TensorInfo]:
    qz_cols = n * bits // 32 if qz_cols is None else qz_cols
    return {"qweight": TensorInfo("w", "s", "I32", (k * bits // 32, n)),
            "qzeros": TensorInfo("z", "s", "I32", (groups, qz_cols)),
            "scales": TensorInfo("c", "s", sc_dtype, (groups, n)),
            "g_idx": TensorInfo("g", "s", "I32", (k if gidx is None else gidx,))}


def test_gptq_shapes_are_checked():
    from clover_local.runtime.pack_index import _quant_module

    assert _quant_module("m", _parts(256, 128, 4, 2)) == QuantModule("m", 4, 256, 128, 2)
    with pytest.raises(CloverError, match="does not match g_idx"):
        _quant_module("m", _parts(256, 128, 4, 2, gidx=100))  # 32 × 32 words over 100 rows: no whole bit width
    with pytest.raises(CloverError, match="inconsistent GPTQ shapes"):
        _quant_module("m", _parts(256, 128, 4, 2, qz_cols=8))
    with pytest.raises(CloverError, match="inconsistent GPTQ shapes"):
        _quant_module("m", _parts(256, 128, 4, 3))  # 3 groups do not divide 256 rows
    with pytest.raises(CloverError, match="not in the GPTQ layout"):
        _quant_module("m", _parts(256, 128, 4, 2, sc_dtype="I32"))
    with pytest.raises(CloverError, match="2-bit"):
        _quant_module("m", _parts(256, 128, 2, 2))


def _classify(info: PackIndex, tensors: dict[str, TensorInfo]) -> PackIndex:
    pack = PackIndex(info.folder, info.config, info.quant, tensors)
    classify_tensor(pack)
    return pack


def _requant(tensors: dict, module: str, bits: int, k: int, n: int, groups: int) -> None:
    for part, info in _parts(k, n, bits, groups).items():
        tensors[f"{module}.{part}"] = TensorInfo(f"{module}.{part}", "s", info.dtype, info.shape)


def test_classify_refuses_what_the_runtime_cannot_run(small):
    base = dict(small.tensors)
    assert _classify(small, base).n_experts_total == 64
    t = dict(base)
    _requant(t, "model.layers.3.self_attn.k_proj", 3, 256, 128, 2)
    with pytest.raises(CloverError, match="k_proj is 3-bit"):
        _classify(small, t)
    t = {k: v for k, v in base.items() if not k.startswith("model.layers.2.mlp.experts.")}
    with pytest.raises(CloverError, match=r"missing model\.layers\.2\.mlp\.experts\.0"):
        _classify(small, t)
    t = dict(base)
    _requant(t, "model.layers.1.mlp.experts.7.gate_proj", 8, 256, 128, 2)
    with pytest.raises(CloverError, match="uniform experts"):
        _classify(small, t)
    for proj, k, n, groups in (("up_proj", 256, 128, 2), ("down_proj", 128, 256, 1)):
        t = dict(base)
        for layer in range(4):
            for e in range(16):
                _requant(t, f"model.layers.{layer}.mlp.experts.{e}.{proj}", 8, k, n, groups)
        with pytest.raises(CloverError, match="do not match config.json"):
            _classify(small, t)


def _folder_pack(tmp_path, small, quant_changes=None, map_changes=None):
    """The small pack's config and index in a folder, its shards' headers given by a callable (nothing else
    written): what `read_pack_index` reads."""
    from clover_local.runtime.synthetic_pack import synthetic_config

    raw = synthetic_config("small")
    raw["quantization_config"].update(quant_changes or {})
    (tmp_path / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    weight_map = {name: info.shard for name, info in small.tensors.items()}
    headers: dict[str, dict] = {}
    for name, info in small.tensors.items():
        headers.setdefault(info.shard, {})[name] = {"dtype": info.dtype, "shape": list(info.shape),
                                                    "data_offsets": [0, 0]}
    weight_map.update(map_changes or {})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    return lambda: read_pack_index(tmp_path, headers=lambda shard: headers[shard])


def test_read_pack_index_checks_the_quantization_and_the_index(small, tmp_path):
    (tmp_path / "ok").mkdir()
    assert _folder_pack(tmp_path / "ok", small)().n_experts_total == 64
    for sub, changes, message in (("act", {"desc_act": True}, "desc_act"),
                                  ("fmt", {"checkpoint_format": "gptq_v2"}, "checkpoint_format"),
                                  ("upper", {"quant_method": "GPTQ"}, None)):
        (tmp_path / sub).mkdir()
        read = _folder_pack(tmp_path / sub, small, quant_changes=changes)
        if message is None:
            assert read().expert_bits == 4  # the method's case does not matter
        else:
            with pytest.raises(CloverError, match=message):
                read()
    name = "model.layers.0.input_layernorm.weight"
    other = next(s for s in {i.shard for i in small.tensors.values()} if s != small.tensors[name].shard)
    (tmp_path / "moved").mkdir()
    with pytest.raises(CloverError, match=f"{name} is listed in .* but not in its shard {other}"):
        _folder_pack(tmp_path / "moved", small, map_changes={name: other})()


# ------------------------------------------------------------------------------------------------- placement.py


def test_the_small_pack_all_resident_to_the_byte(small):
    p = make_plan(small, GIB, None, 4096)
    assert (line(p, "KV cache").bytes, line(p, "GDN states").bytes, line(p, "prompt snapshot").bytes) == (
        KV, 2 * GDN, SNAPSHOT)
    assert sum(x.bytes for x in p.lines[:6]) == WEIGHTS and p.lines[5].what == "lm_head"
    assert p.device_fixed == FIXED == 4_536_568
    assert workspace_bytes(small.config, 1, 0, torch.bfloat16) == ROWS_ACT
    assert p.workspace == WORKSPACE
    assert (p.slab_bytes, p.expert_weight_bytes, p.min_slots, p.slots, p.slots_3bit) == (SLAB, EXPERT, 16, 64, None)
    assert p.device_predicted == FIXED + 64 * SLAB and p.device_peak == FIXED + 64 * SLAB + WORKSPACE
    assert p.host_expert_bytes == 0 and p.host_bytes == EMBED + HOST_RUNTIME_BYTES
    block = 4 * expected_distinct(16, 4, 32)
    assert p.block_set == pytest.approx(block)
    assert p.device_read_per_pass == int(WEIGHTS + GDN + KV + block * EXPERT) == 7_389_103
    assert p.pcie_first_pass == p.pcie_later_pass == 0.0 and p.fits and p.warnings == []
    # extra CPU-run expert memory is never more than the experts on the host: none here
    cpu = make_plan(small, GIB, None, 4096, cpu_cache=GIB)
    assert cpu.host_bytes == p.host_bytes and line(cpu, "CPU-run experts") is None


def test_workspace_without_a_span_and_at_fp32(small):
    # a span of one chunk: no extra hidden-state copies; slack a tenth of weights + activations
    one = make_plan(small, GIB, None, 4096, prefill_span=512)
    act = 512 * ROWS_ACT + 1024 * 6
    assert one.workspace == act + (WEIGHTS + act) // 10 == 19_905_048
    # a short context: the chunk is the context, and the 32-row preview (with a logits row each) is the larger
    short = make_plan(small, GIB, None, 16)
    preview = 32 * ROWS_ACT + 32 * 1024 * 6
    assert short.workspace == preview + (WEIGHTS + preview) // 10
    # fp32: the plain tensors (norms, routers) and the embedding table double; the packed modules do not
    p16, p32 = make_plan(small, GIB, None, 4096), make_plan(small, GIB, None, 4096, torch.float32)
    assert line(p32, "routers").bytes == 2 * line(p16, "routers").bytes == 16 * 256 * 4 * 4
    assert line(p32, "norms").bytes == 2 * line(p16, "norms").bytes
    assert line(p32, "lm_head").bytes == line(p16, "lm_head").bytes  # packed, 8-bit
    assert line(p32, "embeddings").bytes == 1024 * 256 * 4 and line(p32, "KV cache").bytes == 2 * KV


def test_partly_resident_to_the_byte(small):
    # room for 41 slabs less one byte: 40 slots (counted in slabs, not in unpadded expert bytes)
    left = 41 * SLAB - 1
    p = make_plan(small, FIXED + WORKSPACE + left, 8 * GIB, 4096)
    assert p.fits and p.slots == 40 and p.resident_fraction == 0.625
    assert p.slots_3bit == left // SLAB3 == 53
    assert p.host_expert_bytes == 4 * MIB  # 4 layers of 800 KiB, each pinned in a 1 MiB block
    assert p.host_bytes == 4 * MIB + EMBED + HOST_RUNTIME_BYTES
    assert line(p, "routed experts").bytes == 4 * MIB and line(p, "embeddings").bytes == EMBED
    block = 4 * expected_distinct(16, 4, 32)
    assert p.pcie_first_pass == pytest.approx(block * 0.375 * SLAB)
    assert p.pcie_later_pass == pytest.approx((block - 40 + 3 * 4 * 4 * 0.375) * SLAB)
    assert (p.prefill_chunk, p.prefill_span) == (512, 4096)
    assert p.pcie_prefill_chunk == pytest.approx((64 - 40) * SLAB)
    short = (block - 40) * SLAB
    assert p.warnings == [f"the 40 slots cannot hold a block's ≈64 experts: every pass will reload ≈24 of them; "
                          f"give --vram {fmt_bytes(short, up=True)} more or lower --context"]
    # pageable (no CUDA): the slabs as they are
    pageable = make_plan(small, FIXED + WORKSPACE + left, 8 * GIB, 4096, pinned=False)
    assert pageable.host_expert_bytes == 4 * 16 * SLAB
    # CPU-run experts and parked prompts add to the host's sum
    more = make_plan(small, FIXED + WORKSPACE + left, 8 * GIB, 4096, cpu_cache=MIB, parked=3 * MIB)
    assert more.host_bytes == p.host_bytes + MIB + 3 * MIB
    capped = make_plan(small, FIXED + WORKSPACE + left, 8 * GIB, 4096, cpu_cache=GIB)
    assert line(capped, "CPU-run experts").bytes == 4 * MIB and capped.host_bytes == p.host_bytes + 4 * MIB
    # a 3-bit budget with room for every expert says so, never more than there are
    room = make_plan(small, FIXED + WORKSPACE + 63 * SLAB, None, 4096)
    assert room.slots == 63 and room.slots_3bit == 64
    assert room.warnings  # 63 slots < ≈63.99 experts a block


def test_a_prefill_pass_copies_what_its_span_needs(small):
    # 8-row chunks over a 16-row span: the span's expected set, not the chunk's
    p = make_plan(small, GIB, None, 4096, slots=20, prefill_chunk=8, prefill_span=16)
    assert (p.prefill_chunk, p.prefill_span) == (8, 16)
    assert p.pcie_prefill_chunk == pytest.approx((4 * expected_distinct(16, 4, 16) - 20) * SLAB)
    # a context shorter than the chunk: the chunk is the context
    q = make_plan(small, GIB, None, 256, slots=20)
    assert (q.prefill_chunk, q.prefill_span) == (256, 256)
    # every expert on the device: nothing copied, the prefill's rows as the runtime takes them (`plan --json` said
    # 0 and 0 where the workspace line beside them said "a 512-row prefill chunk (layer by layer over 4096 rows)")
    resident = make_plan(small, GIB, None, 4096)
    assert resident.slots >= resident.experts_total and resident.pcie_prefill_chunk == 0
    assert (resident.prefill_chunk, resident.prefill_span) == (512, 4096)
    assert resident.to_dict()["prefill_chunk"] == 512


def test_later_passes_copy_nothing_for_the_block_once_it_fits(small):
    # top 1: ≈13.97 experts a layer, a block of ≈55.9 in 60 slots; only the revealed rows cross
    top1 = with_config(small, num_experts_per_tok=1)
    p = make_plan(top1, GIB, None, 4096, slots=60)
    assert p.block_set == pytest.approx(4 * 16 * (1 - (15 / 16) ** 32)) and p.slots > p.block_set
    assert p.pcie_later_pass == pytest.approx(3 * 1 * 4 * (4 / 64) * SLAB)
    assert p.warnings == []


def test_tied_embeddings_stay_on_the_device_and_passes_do_not_read_the_table(small):
    tied = make_plan(with_config(small, tie_word_embeddings=True), GIB, None, 4096)
    assert line(tied, "embeddings").where == "device" and tied.device_fixed == FIXED + EMBED
    assert tied.host_bytes == HOST_RUNTIME_BYTES
    kept = make_plan(small, GIB, None, 4096, embed_on_host=False)
    assert kept.device_fixed == FIXED + EMBED
    assert kept.device_read_per_pass == make_plan(small, GIB, None, 4096).device_read_per_pass


def test_three_bit_experts_get_no_three_bit_hint(small):
    from clover_local.runtime.synthetic_pack import synthetic_index

    three = synthetic_index("small3")
    p = make_plan(three, FIXED + WORKSPACE + 40 * SLAB3, None, 4096)
    assert p.slab_bytes == SLAB3 and p.slots == 40 and p.slots_3bit is None


def test_refusals_at_their_boundaries(small):
    # forced slots: exactly the budget fits, a byte less is refused; no slots at all fit in the fixed part alone
    assert make_plan(small, FIXED + WORKSPACE, None, 4096, slots=0).fits
    assert make_plan(small, FIXED + WORKSPACE + 10 * SLAB, None, 4096, slots=10).fits
    over = make_plan(small, FIXED + WORKSPACE + 10 * SLAB - 1, None, 4096, slots=10)
    assert not over.fits and over.refusal.startswith("10 expert slots need")
    # too small for the fixed part: the least --vram named is the fixed part and one layer's experts
    tiny = make_plan(small, FIXED + WORKSPACE - 1, None, 4096)
    least = fmt_bytes(FIXED + WORKSPACE + 16 * SLAB, up=True)
    assert tiny.refusal.endswith(f"raise --vram to at least {least} or lower --context") and least == "30.7 MiB"
    # "or lower --context" only where a shorter KV cache can make up the shortfall: all of it at most
    edge = make_plan(small, FIXED + WORKSPACE + 16 * SLAB - KV, None, 4096)
    assert edge.refusal.endswith(" or lower --context")
    beyond = make_plan(small, FIXED + WORKSPACE + 16 * SLAB - KV - 1, None, 4096)
    assert beyond.refusal.endswith(f"raise --vram to at least {least}")
    # host RAM: exactly enough fits, a byte less is refused; with every expert on the device a larger --vram
    # cannot help, and a pageable run names no pinning
    need = make_plan(small, GIB, None, 4096).host_bytes
    assert make_plan(small, GIB, need, 4096).fits
    short = make_plan(small, GIB, need - 1, 4096)
    assert "not enough host RAM" in short.refusal and "a larger --vram helps" not in short.refusal
    assert short.refusal.startswith("not enough host RAM: 512 KiB of embeddings and ")  # (it said "need 0 B")
    partly = make_plan(small, FIXED + WORKSPACE + 40 * SLAB, GIB, 4096, pinned=False)
    assert "4 MiB pinned" not in partly.refusal and "3.12 MiB, plus" in partly.refusal
    assert "a larger --vram helps only once every expert fits" in partly.refusal
    pinned = make_plan(small, FIXED + WORKSPACE + 40 * SLAB, GIB, 4096)
    assert "need 4 MiB pinned, plus 512 KiB of embeddings" in pinned.refusal and pinned.warnings == []
