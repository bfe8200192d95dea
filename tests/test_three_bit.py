"""Routed experts at 3 bits (`quantize --bits 3`): GPTQ's 3-bit layout in the pack, the runtime's slabs, the
expert cache and the kernels on it, on the tiny pack quantized so. Why 3 bits: at 35B the experts shrink from
16.7 to ≈ 12.7 GB, so nearly all of them fit next to everything else on one 16 GB card (no PCIe per block)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from clover_local.runtime.pack_index import read_pack_index
from clover_local.runtime.placement import make_plan
from runtime_pack import N_EXPERTS, N_LAYERS, decode, pack, prompt, runtime, tiny_pack  # noqa: F401 (fixtures)

TOTAL = N_EXPERTS * N_LAYERS


@pytest.fixture(scope="module")
def pack3(tmp_path_factory, tokenizer_dir: Path) -> Path:
    return tiny_pack(tmp_path_factory, tokenizer_dir, bits=3)


@pytest.fixture(scope="module")
def ref3(pack3: Path):
    """The 3-bit pack dequantized into a plain fp32 model (`pack.reader`, through `quantize.gptq_format`)."""
    from clover_local.loader import load

    return load(str(pack3), "cpu", "float32")


def test_the_pack_holds_3bit_experts_and_8bit_rest(pack3):
    info = read_pack_index(pack3)
    assert info.expert_bits == 3
    gate = info.expert["gate_proj"]
    assert (gate.in_features, gate.out_features) == (128, 128)
    assert gate.packed_bytes == 4 * 12 * 128 + 2 * 1 * 128 + 4 * 1 * 12  # qweight [128·3/32, 128], qzeros [1, 12]
    quant = json.loads((pack3 / "config.json").read_text())["quantization_config"]
    assert quant["bits"] == 3
    assert {m.bits for name, m in info.modules.items() if "lm_head" not in name} == {8}


def test_offloaded_3bit_decode_matches_the_dequantized_model(pack3, ref3):
    """The runtime's slabs, cache and MoE path at 3 bits give the tokens of the pack dequantized by the format's
    own reader, offloaded (misses every pass) or all resident."""
    ids = prompt(ref3, 13, seed=2)
    want = decode(ref3, ids)
    resident = runtime(pack3, slots=TOTAL)
    offloaded = runtime(pack3, slots=10)
    assert resident.model.runtime.cache.layout.bits == 3
    assert decode(resident, ids) == want
    assert decode(offloaded, ids) == want
    s = offloaded.model.runtime_stats()
    assert s["misses"] > 0 and s["resident"] == 10
    # missed experts run on the CPU too (the dequantizing reference: torch's int4 kernel takes 4 bits only)
    cpu = runtime(pack3, slots=10, cpu_experts="misses")
    assert not cpu.model.runtime.cpu.kernel
    assert decode(cpu, ids) == want
    assert cpu.model.runtime_stats()["cpu_runs"] > 0


def test_3bit_slabs_are_smaller_and_the_plan_counts_them(pack, pack3):
    four, three = read_pack_index(pack), read_pack_index(pack3)
    p4, p3 = make_plan(four, 1 << 30, None, 128, torch.float32), make_plan(three, 1 << 30, None, 128, torch.float32)
    assert p3.slab_bytes < p4.slab_bytes
    rt = runtime(pack3, slots=TOTAL)
    assert rt.model.runtime.cache.layout.nbytes == p3.slab_bytes


def test_quantize_refuses_3bit_for_widths_that_are_not_whole_runs(tmp_path, tokenizer_dir):
    from clover_local.checkpoint.synthetic import write_checkpoint
    from clover_local.errors import CloverError
    from conftest import tokenizer_spec
    from quantize.pipeline import QuantizeSettings, quantize_checkpoint

    spec = tokenizer_spec(tokenizer_dir, hidden_size=128, moe_intermediate_size=48, num_experts=4,
                          num_experts_per_tok=2, num_hidden_layers=1)
    src = write_checkpoint(tmp_path / "src", spec, fused=False, seed=1)
    with pytest.raises(CloverError, match="multiples of 32"):
        quantize_checkpoint(src, tmp_path / "out", QuantizeSettings(bits=3, samples=1, seq_len=16),
                            torch.device("cpu"))
    assert not (tmp_path / "out").exists()  # refused before the output folder was touched


def test_real_shapes_at_3bit_fit_a_16gib_budget_whole():
    """The synthetic pack with the real shapes and 3-bit experts (what `plan synthetic:full3` reads): at 16 GiB
    every expert is resident, where 4-bit experts leave ≈ 18 % of them on the host."""
    from clover_local.runtime.synthetic_pack import synthetic_index

    GIB = 1 << 30
    four, three = synthetic_index("full"), synthetic_index("full3")
    assert three.expert_bits == 3 and four.expert_bits == 4
    p4, p3 = make_plan(four, 16 * GIB, 32 * GIB, 32768), make_plan(three, 16 * GIB, 32 * GIB, 32768)
    assert p3.fits and p3.slots == p3.experts_total == 10_240 and p3.host_expert_bytes == 0
    assert p4.slots < 0.85 * 10_240
    assert p3.slab_bytes < 0.76 * p4.slab_bytes
    assert p3.pcie_later_pass == 0 and p4.pcie_later_pass > 0
    # the 4-bit plan says what 3 bits would give at its budget; a budget that fits 4-bit whole says nothing
    assert p4.slots_3bit == 10_240 and p3.slots_3bit is None
    assert make_plan(four, 80 * GIB, None, 32768).slots_3bit is None
    tight = make_plan(four, 14 * GIB, None, 32768)
    assert tight.slots < tight.slots_3bit < 10_240


def test_quantize_cli_passes_bits_and_asym(monkeypatch, tmp_path, capsys):
    """`quantize --bits 3 --asym` reaches the pipeline as bits 3, asymmetric (the pipeline's own tests cover what
    it does with them); a bits value it cannot pack is one line and exit 2."""
    import quantize.pipeline as pipeline
    from clover_local.errors import CloverError
    from conftest import run_cli

    seen = {}

    def stop(src, out, settings, device, **kw):
        seen["settings"] = settings
        raise CloverError("stopped here by the test")

    monkeypatch.setattr(pipeline, "quantize_checkpoint", stop)
    assert run_cli(["quantize", "tiny", "--out", tmp_path / "p", "--bits", "3", "--asym", "--device", "cpu"]) == 2
    assert seen["settings"].bits == 3 and seen["settings"].sym is False
    assert run_cli(["quantize", "tiny", "--out", tmp_path / "p", "--bits", "5", "--device", "cpu"]) == 2
    assert "--bits must be 3, 4 or 8" in capsys.readouterr().err


def test_3bit_experts_load_in_the_planes_layout(pack3, monkeypatch):
    """Where the Triton kernels run (here interpreted) with 16-bit activations, the load rewrites the 3-bit slabs
    into the planes layout the MoE reads field-wise — the resident ones in the device cache, the host ones through
    it: each slab then holds its expert's GPTQ words rearranged (`gptq_slot` gives them back bit for bit), and a
    layer's MoE on them, resident or read from the host, equals the reference on the GPTQ-layout ones. With
    CLOVER_W3_PLANES=0 the layout stays GPTQ's."""
    from clover_local.loader import load
    from clover_local.runtime.kernels import moe_w4a16, w4a16  # noqa: F401 (w4a16: the kernels defined)
    from clover_local.runtime.kernels.reference import moe_w4a16_ref
    from clover_local.runtime.load import RuntimeOptions

    if not w4a16._INTERPRET and not torch.cuda.is_available():
        pytest.skip("no GPU, and TRITON_INTERPRET=1 was not in force when the kernels were defined")
    monkeypatch.setenv("CLOVER_FORCE_TRITON", "1")

    def cache(slots: int, planes: str = "1"):
        monkeypatch.setenv("CLOVER_W3_PLANES", planes)
        return load(str(pack3), "cpu", "bfloat16", runtime=RuntimeOptions(context=128, slots=slots)).model.runtime.cache

    def same_experts(a, b, slots, their_slots) -> None:
        for s, t in zip(slots, their_slots):
            got, want = a.gptq_slot(s), b.slot(t)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), s

    planar, gptq = cache(TOTAL), cache(TOTAL, planes="0")
    assert planar.layout.planes and planar.gate_up.planes and planar.down.planes
    assert not gptq.layout.planes and not gptq.gate_up.planes
    assert (planar.slot_of == gptq.slot_of).all()
    for a, b in ((planar.gate_up, gptq.gate_up), (planar.down, gptq.down)):
        same_experts(a, b, range(TOTAL), range(TOTAL))
    assert not torch.equal(planar.gate_up.qweight, gptq.gate_up.qweight)
    off = cache(10)  # offloaded: the host slabs too, and what the cache was warmed with from them
    assert off.layout.planes and off.host is not None
    layer = off.layer_ids[0].item()
    for a, b in zip(off.host.stacks(layer), (gptq.gate_up, gptq.down)):
        same_experts(a, b, range(N_EXPERTS), gptq.slot_of[layer].tolist())
    for a, b in zip((off.gate_up, off.down), (gptq.gate_up, gptq.down)):  # warmed from the host slabs
        resident = [int(s) for s in off.slot_of[layer] if s >= 0]
        same_experts(a, b, resident,
                     [int(gptq.slot_of[layer, e]) for e in range(N_EXPERTS) if off.slot_of[layer, e] >= 0])
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(12, planar.layout.hidden, generator=gen).to(torch.bfloat16)
    slots = torch.stack([torch.randperm(N_EXPERTS, generator=gen)[:2] for _ in range(12)])
    w = torch.softmax(torch.randn(12, 2, generator=gen), -1).to(torch.bfloat16)
    want = moe_w4a16_ref(x, slots, w, gptq.gate_up, gptq.down)
    for got in (moe_w4a16(x, slots, w, planar.gate_up, planar.down),
                moe_w4a16(x, slots + off.n_slots, w, off.gate_up, off.down, host=off.host.stacks(layer))):
        assert (got.float() - want.float()).norm() < 2e-2 * want.float().norm()
