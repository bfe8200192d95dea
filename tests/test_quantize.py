"""`clover-local quantize` and `clover-local eval` on tiny random checkpoints.

What a pack must be (design.md, "The pack format"), checked with a reader written here from that text alone;
every profile and RTN load and run; interrupted runs (after a layer, inside a layer, a killed process, a full
disk) resume into byte-identical packs; bad input ends in one `error:` line; eval and `--json` report what they
promise. Dims are 128 wide so group size 128 divides every quantized input width.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from clover_local.checkpoint.names import PREVIEW_EXTRAS, layer_shapes
from clover_local.checkpoint.reader import CheckpointReader
from clover_local.checkpoint.synthetic import random_state
from clover_local.config import load_config
from clover_local.errors import CloverError
from clover_local.pack.manifest import MANIFEST_NAME, Manifest, verify_pack
from clover_local.pack.reader import PackReader
from quantize import pipeline
from quantize.gptq import CLIP_MIN_SHRINK
from quantize.pipeline import PROGRESS, QuantizeSettings, quantize_checkpoint, shard_name
from quantize.profiles import MIXER_LINEARS, SHARED_LINEARS, PROFILES
from tests.conftest import checkpoint_with_tokenizer, run_cli, tokenizer_spec

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
EPOCH = "1700000000"  # SOURCE_DATE_EPOCH: fixes the pack's creation time, so two runs can be byte-identical
SPEC = dict(hidden_size=128, moe_intermediate_size=128, shared_expert_intermediate_size=128, num_attention_heads=4,
            head_dim=32, linear_key_head_dim=32, linear_value_head_dim=32)
N_LAYERS = 4  # layers 0-2 GDN, layer 3 attention
N_SHARDS = N_LAYERS + 1
UNQUANTIZED_LEAVES = ("mlp.gate.weight", "mlp.shared_expert_gate.weight", "input_layernorm.weight",
                      "post_attention_layernorm.weight")
GDN_PLAIN = ("linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight", "linear_attn.conv1d.weight",
             "linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.norm.weight",
             *(f"linear_attn.{x}" for x in PREVIEW_EXTRAS))
ATTN_PLAIN = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")

_CALIB = [
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "add 123+45 gives 168; reverse abcd gives dcba; sort dbca gives abcd",
    "你好，世界。今天天气很好。",
    "count a in banana: 3. lookup b in a=3 b=7 c=1: 7",
    "Hello world, this is a tiny tokenizer for tests.",
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread_fixed_time():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)
        yield
    torch.set_num_threads(before)


def write_src(folder: Path, tokenizer_dir: Path, *, state=None, **kwargs) -> Path:
    """A tiny BF16 Clover checkpoint with the test tokenizer; kwargs override the spec (or go to write_checkpoint)."""
    ckpt_kw = {k: kwargs.pop(k) for k in ("shards", "seed") if k in kwargs}
    spec = tokenizer_spec(tokenizer_dir, **{**SPEC, **kwargs})
    return checkpoint_with_tokenizer(folder, tokenizer_dir, spec, dtype=torch.bfloat16, state=state, **ckpt_kw)


class Env:
    """Module-wide inputs: a source checkpoint, a calibration file and the balanced GPTQ pack made from them."""

    def __init__(self, root: Path, tokenizer_dir: Path) -> None:
        self.root, self.tokenizer_dir = root, tokenizer_dir
        self.src = write_src(root / "src", tokenizer_dir)
        self.calib = root / "calib.jsonl"
        with open(self.calib, "w", encoding="utf-8") as f:
            for i in range(24):
                text = f"{i}: {_CALIB[i % len(_CALIB)]} {_CALIB[(i * 3 + 1) % len(_CALIB)]}"
                if i % 3 == 0:
                    item = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text[::-1]}]}
                else:
                    item = {"text": text}
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
        self.pack = root / "pack-balanced"
        self.result = self.quantize(self.pack)
        self._packs = {("balanced", "gptq"): (self.pack, self.result)}
        self.logits: dict[Path, torch.Tensor] = {}

    def pack_for(self, profile: str, method: str):
        """(folder, QuantizeResult) of a pack made with this profile and method, made once per module."""
        if (profile, method) not in self._packs:
            out = self.root / f"pack-{profile}-{method}"
            self._packs[profile, method] = (out, self.quantize(out, profile=profile, method=method))
        return self._packs[profile, method]

    def settings(self, **kw) -> QuantizeSettings:
        return QuantizeSettings(samples=4, seq_len=64, calib=str(self.calib), **kw)

    def quantize(self, out: Path, src: Path | None = None, **kw):
        run_kw = {k: kw.pop(k) for k in ("resume", "overwrite", "on_layer", "stop_after_layer", "measure") if k in kw}
        return quantize_checkpoint(src or self.src, out, self.settings(**kw), CPU, **run_kw)

    def cli_args(self, out: Path, *extra, src: Path | None = None) -> list:
        return ["quantize", src or self.src, "--out", out, "--calib", str(self.calib), "--samples", "4",
                "--seq-len", "64", "--device", "cpu", "--no-eval", *extra]


@pytest.fixture(scope="module")
def env(tmp_path_factory, tokenizer_dir, _one_thread_fixed_time) -> Env:
    return Env(tmp_path_factory.mktemp("quant"), tokenizer_dir)


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` (hidden ones included: a leftover progress folder is a difference)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def pack_tensors(pack: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(pack.glob("model-*.safetensors")):
        out.update(load_file(str(shard)))
    return out


def state_of(out: Path) -> dict:
    return json.loads((out / PROGRESS / "state.json").read_text())


def expect_error(capsys, args, *needles: str) -> str:
    """The CLI fails with exactly one `error: …` line on stderr naming every needle, and no traceback."""
    code = run_cli(args)
    out, err = capsys.readouterr()
    assert code != 0, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------ an independent reader of the GPTQ layout


def unpack_gptq(t: dict[str, torch.Tensor], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense weight [out, in] and the step (scale) of each entry, from design.md's description only:
    qweight int32 [in/p, out] (row p·i+j in bits bits·j…), qzeros int32 [G, out/p] (column p·k+j, stored
    as zero−1), scales fp16 [G, out], g_idx int32 [in]; w = (q − zero) · scale."""
    p, mask = 32 // bits, (1 << bits) - 1
    qweight = t["qweight"].numpy().view(np.uint32)
    qzeros = t["qzeros"].numpy().view(np.uint32)
    scales = t["scales"].numpy().astype(np.float32)
    g_idx = t["g_idx"].numpy().astype(np.int64)
    n_in, n_out = qweight.shape[0] * p, qweight.shape[1]
    q = np.zeros((n_in, n_out), np.int64)
    for j in range(p):
        q[j::p] = (qweight >> np.uint32(bits * j)) & mask
    zeros = np.zeros((qzeros.shape[0], n_out), np.int64)
    for j in range(p):
        zeros[:, j::p] = ((qzeros >> np.uint32(bits * j)) & mask) + 1
    step = scales[g_idx]  # [in, out]
    w = (q - zeros[g_idx]).astype(np.float32) * step
    return w.T, step.T


def module_tensors(tensors: dict[str, torch.Tensor], module: str) -> dict[str, torch.Tensor]:
    return {k: tensors[f"{module}.{k}"] for k in ("qweight", "qzeros", "scales", "g_idx")}


def expected_modules(cfg, profile) -> dict[str, tuple[int, int, int]]:
    """Pack module name → (bits, out, in) of every module the profile quantizes."""
    h, im = cfg.hidden_size, cfg.moe_intermediate_size
    mods: dict[str, tuple[int, int, int]] = {}
    for i in range(cfg.num_hidden_layers):
        shapes = layer_shapes(cfg, i)
        names = []
        if profile.mixer:
            names += [(n, profile.mixer) for n in MIXER_LINEARS[cfg.layer_types[i]]]
        if profile.shared:
            names += [(n, profile.shared) for n in SHARED_LINEARS]
        for name, bits in names:
            mods[f"model.layers.{i}.{name}"] = (bits, *shapes[f"{name}.weight"])
        for e in range(cfg.num_experts):
            for part, (o, n_in) in (("gate_proj", (im, h)), ("up_proj", (im, h)), ("down_proj", (h, im))):
                mods[f"model.layers.{i}.mlp.experts.{e}.{part}"] = (profile.experts, o, n_in)
    if profile.lm_head:
        mods["lm_head"] = (profile.lm_head, cfg.vocab_size, h)
    return mods


def bits_by_dynamic(qc: dict, module: str) -> int | None:
    """What a GPTQ loader reading `quantization_config` makes of a module: None = not quantized."""
    bits = qc["bits"]
    for rule, override in qc.get("dynamic", {}).items():
        negative = rule.startswith("-:")
        pattern = rule[2:] if rule[:2] in ("-:", "+:") else rule
        if re.match(pattern, module):
            if negative:
                return None
            bits = override.get("bits", bits)
    return bits


# ---------------------------------------------------------------------------------------------- 1. format


def test_pack_layout_matches_the_gptq_format(env):
    pack, cfg = env.pack, load_config(env.src)
    profile = PROFILES["balanced"]
    tensors = pack_tensors(pack)
    want = expected_modules(cfg, profile)
    have = {k[: -len(".qweight")] for k in tensors if k.endswith(".qweight")}
    assert have == set(want)
    for module, (bits, n_out, n_in) in want.items():
        p, g = 32 // bits, 128
        t = module_tensors(tensors, module)
        assert t["qweight"].dtype == torch.int32 and tuple(t["qweight"].shape) == (n_in // p, n_out), module
        assert t["qzeros"].dtype == torch.int32 and tuple(t["qzeros"].shape) == (n_in // g, n_out // p), module
        assert t["scales"].dtype == torch.float16 and tuple(t["scales"].shape) == (n_in // g, n_out), module
        assert t["g_idx"].dtype == torch.int32 and torch.equal(t["g_idx"], torch.arange(n_in, dtype=torch.int32) // g)
        assert f"{module}.weight" not in tensors
    # routed experts per expert, never fused; everything else present and unquantized, equal to the source
    assert not [k for k in tensors if "gate_up_proj" in k or k.endswith("experts.down_proj")]
    src = CheckpointReader(env.src)
    for i in range(N_LAYERS):
        plain = UNQUANTIZED_LEAVES + (ATTN_PLAIN if cfg.is_attention(i) else GDN_PLAIN)
        ref = src.layer_state(i)
        for rel in plain:
            t = tensors[f"model.layers.{i}.{rel}"]
            assert t.dtype == (torch.float32 if rel.endswith(("A_log", "dt_bias")) else torch.bfloat16), rel
            assert torch.equal(t.float(), ref[rel].float()), rel
    for name in ("model.embed_tokens.weight", "model.norm.weight"):
        assert tensors[name].dtype == torch.bfloat16
        assert torch.equal(tensors[name].float(), src.tensor(name[len("model."):]).float())
    n_plain = N_LAYERS * len(UNQUANTIZED_LEAVES) + 3 * len(GDN_PLAIN) + len(ATTN_PLAIN) + 2
    assert len(tensors) == 4 * len(want) + n_plain  # nothing else slipped in

    # quantization_config and its per-module exceptions agree with the profile and with the stored shapes
    qc = json.loads((pack / "config.json").read_text())["quantization_config"]
    assert {k: qc[k] for k in ("quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format")} == {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
        "checkpoint_format": "gptq"}
    for module, (bits, _, _) in want.items():
        assert bits_by_dynamic(qc, module) == bits, module
    assert bits_by_dynamic(qc, "model.layers.0.linear_attn.in_proj_qkv") == 8
    assert bits_by_dynamic(qc, "model.layers.3.self_attn.q_proj") == 8
    assert bits_by_dynamic(qc, "model.layers.0.mlp.experts.5.down_proj") == 4
    for router in ("model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate",
                   "model.layers.0.linear_attn.in_proj_a", "model.layers.0.linear_attn.in_proj_b"):
        assert bits_by_dynamic(qc, router) is None, router

    # the index lists every tensor, in the shard that holds it
    index = json.loads((pack / "model.safetensors.index.json").read_text())
    listed: dict[str, str] = {}
    for k in range(1, N_SHARDS + 1):
        with safe_open(str(pack / shard_name(k, N_SHARDS)), "pt") as f:
            listed.update({name: shard_name(k, N_SHARDS) for name in f.keys()})
    assert index["weight_map"] == listed
    assert index["metadata"]["total_size"] == sum((pack / s).stat().st_size for s in set(listed.values()))

    # the manifest is complete and checks out; it records settings, calibration and memory
    manifest = verify_pack(pack)
    assert manifest.complete and manifest.created == "2023-11-14T22:13:20Z"
    assert set(manifest.files) == {p.name for p in pack.iterdir() if p.name not in (MANIFEST_NAME, "README.md")}
    assert {"config.json", "model.safetensors.index.json", "tokenizer.json", "generation_config.json",
            shard_name(1, N_SHARDS)} <= set(manifest.files)
    assert manifest.settings["bits"] == 4 and manifest.settings["profile"] == "balanced"
    assert manifest.settings["method"] == "gptq" and manifest.settings["group_size"] == 128
    assert manifest.calibration["sequences"] == 4 and manifest.calibration["seq_len"] == 64
    assert manifest.calibration["mode"] == "diffusion" and manifest.calibration["file"] == "calib.jsonl"
    assert (pack / "README.md").is_file() and not (pack / PROGRESS).exists()

    # routed experts shrink to <= 0.3 of their BF16 bytes
    expert_bytes = sum(t.numel() * t.element_size() for k, t in tensors.items() if ".mlp.experts." in k)
    bf16_bytes = N_LAYERS * cfg.num_experts * 3 * cfg.moe_intermediate_size * cfg.hidden_size * 2
    assert expert_bytes <= 0.3 * bf16_bytes
    assert manifest.memory["expert_bytes"] == expert_bytes


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_dequantized_weights_within_one_step_of_the_source(env, method):
    """Our reader (PackReader) and the independent one above agree exactly, and recover the BF16 source to within
    the quantization step — 4-bit experts and 8-bit mixer/shared/head alike. Round-to-nearest is within half a
    step everywhere. GPTQ deliberately moves weights further (it pushes each column's rounding error onto the
    columns after it, to keep the layer's *output* close), so there the bulk is within one step, not every entry."""
    pack = env.pack_for("balanced", method)[0]
    tensors = pack_tensors(pack)
    src, reader = CheckpointReader(env.src), PackReader(pack)
    im = load_config(env.src).moe_intermediate_size
    cases = []  # (pack module, bits, source weight, PackReader weight)
    for i in (0, 3):
        ref, got = src.layer_state(i), reader.layer_state(i)
        mixer = "linear_attn.in_proj_qkv" if i == 0 else "self_attn.o_proj"
        cases.append((f"model.layers.{i}.{mixer}", 8, ref[f"{mixer}.weight"], got[f"{mixer}.weight"]))
        sd = "mlp.shared_expert.down_proj"
        cases.append((f"model.layers.{i}.{sd}", 8, ref[f"{sd}.weight"], got[f"{sd}.weight"]))
        for e in (0, 7):
            gu, gu_q = ref["mlp.experts.gate_up_proj"][e], got["mlp.experts.gate_up_proj"][e]
            pre = f"model.layers.{i}.mlp.experts.{e}"
            cases.append((f"{pre}.gate_proj", 4, gu[:im], gu_q[:im]))
            cases.append((f"{pre}.up_proj", 4, gu[im:], gu_q[im:]))
            cases.append((f"{pre}.down_proj", 4, ref["mlp.experts.down_proj"][e], got["mlp.experts.down_proj"][e]))
    cases.append(("lm_head", 8, src.tensor("lm_head.weight"), reader.global_state()["lm_head.weight"]))
    for module, bits, w, w_reader in cases:
        w_hat, step = unpack_gptq(module_tensors(tensors, module), bits)
        np.testing.assert_array_equal(w_hat, w_reader.numpy(), err_msg=module)
        ratio = np.abs(w.float().numpy() - w_hat) / step
        assert ratio.max() > 0, module  # it really was quantized
        # the step is that of a `bits`-bit symmetric grid over the weights: about max|w| / (2^(bits-1) - 1)
        assert float(np.median(step)) < float(w.float().abs().max()) / (2 ** (bits - 1) - 1) * 1.5, module
        if method == "rtn":
            # within half a step, except weights past a range the clip search narrowed (by ≤ 1 − CLIP_MIN_SHRINK;
            # 4-bit modules only: 8-bit ones keep min/max)
            maxq = 2**bits - 1
            clipped_by = maxq / (2 * CLIP_MIN_SHRINK) - (maxq - 1) / 2 if bits <= 4 else 0.5
            assert (ratio <= 0.5 + 1e-3).mean() >= 0.98, (module, float((ratio <= 0.5 + 1e-3).mean()))
            assert ratio.max() <= clipped_by + 1e-3, (module, float(ratio.max()))
        else:
            assert (ratio <= 1 + 1e-3).mean() >= 0.85, (module, float((ratio <= 1).mean()))
            assert ratio.mean() <= 0.6 and ratio.max() <= 8, (module, float(ratio.mean()), float(ratio.max()))


def test_no_clip_rounds_within_half_a_step_and_the_pack_says_which(env):
    """--no-clip is plain min/max round-to-nearest (every weight within half a step, the search's clipped edge
    gone); the manifest and the model card record which rule made the pack."""
    out = env.root / "pack-rtn-no-clip"
    env.quantize(out, method="rtn", clip=False)
    plain, searched = pack_tensors(out), pack_tensors(env.pack_for("balanced", "rtn")[0])
    src = CheckpointReader(env.src).layer_state(1)
    im = load_config(env.src).moe_intermediate_size
    differs = 0
    for e in range(4):
        module = f"model.layers.1.mlp.experts.{e}.gate_proj"
        w = src["mlp.experts.gate_up_proj"][e][:im].float().numpy()
        w_hat, step = unpack_gptq(module_tensors(plain, module), 4)
        assert (np.abs(w - w_hat) / step).max() <= 0.5 + 1e-3, module
        differs += int(not torch.equal(plain[f"{module}.scales"], searched[f"{module}.scales"]))
    assert differs > 0  # the default search chose other ranges
    assert Manifest.load(out).settings["clip"] is False
    assert Manifest.load(env.pack).settings["clip"] is True
    assert Manifest.load(env.pack).settings["act_order"] is True  # GPTQ's default
    assert Manifest.load(out).settings["act_order"] is False  # round-to-nearest has no column order
    assert "| Clip search per group | no |" in (out / "README.md").read_text()


def test_experts_quantized_in_batches_match_one_at_a_time(env):
    """GPTQ over a batch of experts (one column loop) gives the pack one at a time gives: same tensors in the same
    order, with round-to-nearest experts (too few rows) interleaved and a short last batch."""
    one = env.root / "pack-batch-1"
    three = env.root / "pack-batch-3"
    r1 = env.quantize(one, expert_batch=1, min_expert_rows=120)
    r3 = env.quantize(three, expert_batch=3, min_expert_rows=120)
    paths = [layer.expert_paths for layer in r3.layers]
    assert paths == [layer.expert_paths for layer in r1.layers]
    assert all(p.get("gptq-routed", 0) % 3 and p.get("rtn-few-rows", 0) for p in paths[:1]), paths
    a, b = pack_tensors(one), pack_tensors(three)
    assert list(a) == list(b)
    for name in a:
        if ".mlp.experts." in name and name.endswith(("qweight", "scales")):
            same = (a[name] == b[name]).float().mean()
            assert float(same) >= 0.99, (name, float(same))


def test_bits_8_makes_8_bit_experts(env):
    """--bits sets the routed experts' width, and quantization_config.bits says so."""
    out = env.root / "pack-bits8"
    env.quantize(out, bits=8)
    cfg = load_config(env.src)
    with safe_open(str(out / shard_name(1, N_SHARDS)), "pt") as f:
        qweight = f.get_tensor("model.layers.0.mlp.experts.3.down_proj.qweight")
        qzeros = f.get_tensor("model.layers.0.mlp.experts.3.down_proj.qzeros")
    assert tuple(qweight.shape) == (cfg.moe_intermediate_size // 4, cfg.hidden_size)
    assert tuple(qzeros.shape) == (1, cfg.hidden_size // 4)
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["bits"] == 8 and bits_by_dynamic(qc, "model.layers.0.mlp.experts.3.down_proj") == 8
    verify_pack(out)


# ---------------------------------------------------------------------------------------------- 2. profiles


def _logits(env: Env, folder: Path) -> torch.Tensor:
    """Causal logits of a model (pack or BF16 folder) on 64 tokens of the calibration text, cached per folder.
    (Random token ids would be a poor yardstick: GPTQ fits the inputs it was calibrated on, and a random model
    is chaotic enough that off-distribution inputs say little.)"""
    from clover_local.loader import load
    from clover_local.tokenizer import ChatTokenizer

    if folder not in env.logits:
        text = " ".join(json.loads(line).get("text", "") for line in env.calib.read_text().splitlines())
        ids = torch.tensor(ChatTokenizer.from_folder(env.src).encode(text)[:64])[None]
        with torch.no_grad():
            env.logits[folder] = load(str(folder), device="cpu", dtype="float32").model(ids)
    return env.logits[folder]


@pytest.mark.parametrize("profile,method", [("balanced", "gptq"), ("compact", "gptq"), ("experts-only", "gptq"),
                                            ("balanced", "rtn")])
def test_every_profile_and_rtn_load_and_run(env, profile, method):
    out, result = env.pack_for(profile, method)
    paths = {path for r in result.layers for path in r.expert_paths}
    if method == "rtn":
        assert paths == {"rtn"}
    else:
        assert "gptq-routed" in paths and paths <= {"gptq-routed", "rtn-few-rows"}
    assert all(sum(r.expert_paths.values()) == load_config(env.src).num_experts for r in result.layers)
    manifest = verify_pack(out)
    assert manifest.settings["profile"] == profile and manifest.settings["method"] == method
    logits, ref = _logits(env, out), _logits(env, env.src)
    assert logits.shape == ref.shape == (1, 64, load_config(env.src).vocab_size)
    assert torch.isfinite(logits).all()
    # changed by quantization, but still recognisably the same model; a 4-bit mixer (compact) costs the most
    # (on this random model the GDN output norm makes the mixer dominate the residual stream)
    rel = float((logits - ref).norm() / ref.norm())
    bound = {"balanced-gptq": 0.45, "experts-only-gptq": 0.45, "balanced-rtn": 0.65, "compact-gptq": 0.9}
    assert 0 < rel < bound[f"{profile}-{method}"], rel
    if profile == "compact":
        assert rel > float((_logits(env, env.pack) - ref).norm() / ref.norm())

    tensors = pack_tensors(out)
    prof = PROFILES[profile]
    assert {k[: -len(".qweight")] for k in tensors if k.endswith(".qweight")} == set(
        expected_modules(load_config(env.src), prof))
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    if profile == "experts-only":  # attention, GDN, shared expert and head stay BF16, bit-exact
        src = CheckpointReader(env.src)
        for name in ("model.layers.3.self_attn.q_proj.weight", "model.layers.0.linear_attn.in_proj_qkv.weight",
                     "model.layers.1.mlp.shared_expert.up_proj.weight", "lm_head.weight"):
            assert tensors[name].dtype == torch.bfloat16
            ours = name[len("model."):] if name.startswith("model.") else name
            assert torch.equal(tensors[name].float(), src.tensor(ours).float()), name
        assert bits_by_dynamic(qc, "model.layers.3.self_attn.q_proj") is None
        assert bits_by_dynamic(qc, "lm_head") is None
    if profile == "compact":
        assert tuple(tensors["model.layers.3.self_attn.q_proj.qweight"].shape)[0] == 128 // 8  # 4-bit
        assert bits_by_dynamic(qc, "model.layers.3.self_attn.q_proj") == 4
        assert bits_by_dynamic(qc, "lm_head") == 8


def test_gptq_beats_rtn(env):
    """On the text it is calibrated for, GPTQ's layers and logits stay closer to BF16 than round-to-nearest's."""
    rtn_pack, rtn = env.pack_for("balanced", "rtn")
    rtn_err = [r.rel_error for r in rtn.layers]
    gptq_err = [r.rel_error for r in env.result.layers]
    assert all(0 < e < 0.5 for e in gptq_err + rtn_err)
    assert all(g < r for g, r in zip(gptq_err, rtn_err)), (gptq_err, rtn_err)
    ref = _logits(env, env.src)
    kl = {}
    for name, folder in (("gptq", env.pack), ("rtn", rtn_pack)):
        lp, lq = ref.log_softmax(-1), _logits(env, folder).log_softmax(-1)
        kl[name] = float((lp.exp() * (lp - lq)).sum(-1).mean())
    assert 0 < kl["gptq"] < kl["rtn"], kl


# ---------------------------------------------------------------------------------------------- 3. resume


def test_resume_after_a_layer_is_byte_identical(env):
    out = env.root / "resume-after"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=1)
    state = state_of(out)
    assert state["next_layer"] == 2 and len(state["reports"]) == 2
    assert (out / shard_name(2, N_SHARDS)).is_file() and not (out / shard_name(3, N_SHARDS)).exists()
    assert not (out / MANIFEST_NAME).exists()
    with pytest.raises(CloverError, match="unfinished"):  # the same call without resume is refused
        env.quantize(out)
    result = env.quantize(out, resume=True)
    assert result.resumed_from == 2
    assert [r.index for r in result.layers] == list(range(N_LAYERS))
    assert digest(out) == digest(env.pack)


def test_resume_after_an_interrupt_inside_a_layer_is_byte_identical(env):
    out = env.root / "resume-inside"
    steps = []

    def on_layer(i, n, step):
        steps.append((i, step))
        if i == 2 and step == "experts":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, on_layer=on_layer)
    assert (2, "mixer") in steps and state_of(out)["next_layer"] == 2
    assert not (out / shard_name(3, N_SHARDS)).exists()
    env.quantize(out, resume=True)
    assert digest(out) == digest(env.pack)


def test_kill_between_saving_inputs_and_state_resumes_byte_identical(env, monkeypatch):
    """A layer's shard and the next layer's inputs are saved, but the process dies before state.json says so:
    the resume must redo that layer from *its* inputs, not from the ones already written for the next."""
    out = env.root / "resume-window"
    real = pipeline._write_json

    def dies_before_state(path, data):
        if path.name == "state.json" and data["next_layer"] == 2:
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(pipeline, "_write_json", dies_before_state)
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out)
    monkeypatch.setattr(pipeline, "_write_json", real)
    assert state_of(out)["next_layer"] == 1 and (out / shard_name(2, N_SHARDS)).is_file()
    env.quantize(out, resume=True)
    assert digest(out) == digest(env.pack)


def test_interrupted_while_finishing_resumes(env, capsys, monkeypatch):
    """Every layer is done and the pack is being finished (index, config, tokenizer, manifest, card) when the
    run stops — Ctrl-C while the manifest hashes the files, Ctrl-C after it is complete but before the card,
    a full disk while the tokenizer is copied: each time the progress is kept and --resume takes it from there,
    ending in the same pack. Once the manifest is complete, --resume only writes the card and clears the progress
    (it used to quantize the LM head again to hash the same pack: minutes at 35B)."""
    import clover_local.pack.card as card

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    def full_disk(src, dst, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    out = env.root / "finish-interrupted"
    args = env.cli_args(out)
    for obj, name, fake, needle in ((pipeline.shutil, "copyfile", full_disk, "disk is full"),
                                    (Manifest, "finalize", ctrl_c, "interrupted"),
                                    (card, "write_card", ctrl_c, "interrupted")):
        monkeypatch.setattr(obj, name, fake)
        expect_error(capsys, args, needle, "--resume")
        monkeypatch.undo()
        assert state_of(out)["next_layer"] == N_LAYERS
        args = env.cli_args(out, "--resume")
    assert not (out / "README.md").exists()
    monkeypatch.setattr(pipeline, "_write_globals", ctrl_c)  # the LM head is not quantized again
    assert run_cli(args) == 0, capsys.readouterr().err
    assert digest(out) == digest(env.pack)


def test_ctrl_c_says_what_was_kept_and_exits_130(env, capsys, monkeypatch):
    """Ctrl-C before the first layer is finished: nothing to resume, and the message says so (it used to send
    the user to --resume, which then refused); after some layers: how many, and --resume. Exit 130 both times."""
    out = env.root / "ctrl-c-early"

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "build_calibration", ctrl_c)
    assert run_cli(env.cli_args(out)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "before the first layer was finished" in err[0] and "--resume" not in err[0], err
    monkeypatch.undo()
    assert run_cli(env.cli_args(out)) == 0  # the same command, as it was, runs
    capsys.readouterr()

    later = env.root / "ctrl-c-later"
    real = pipeline._write_json

    def stops_after_layer_two(path, data):
        real(path, data)
        if path.name == "state.json" and data.get("next_layer") == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_write_json", stops_after_layer_two)
    assert run_cli(env.cli_args(later)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 finished layers saved" in err[0] and "--resume" in err[0], err


def test_out_of_memory_says_where_what_was_kept_and_what_to_change(env, capsys, monkeypatch):
    """torch out of memory in a layer (a 16 GB card at 35B, another program on it) is one line, not a traceback:
    the step, the layers kept and --resume, the calibration size that makes a layer's work smaller; --resume then
    ends in the same pack as an uninterrupted run. Before the first layer is finished, there is nothing to resume
    and the line does not offer it (host RAM refused this time)."""
    from quantize.layer_quant import LayerQuantizer

    real = LayerQuantizer._quantize_moe

    def runs_out_in_layer_one(self, layer, normed, out, prefix, *args):
        if prefix.endswith("layers.1"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, layer, normed, out, prefix, *args)

    out = env.root / "out-of-memory"
    monkeypatch.setattr(LayerQuantizer, "_quantize_moe", runs_out_in_layer_one)
    line = expect_error(capsys, env.cli_args(out), "ran out of memory (layer 1: experts", "1 finished layer kept",
                        "--resume", "fewer --samples", "now 4 × 64")
    assert "the machine" in line and "GPU" not in line, line  # --device cpu: no card to free
    monkeypatch.undo()
    assert run_cli(env.cli_args(out, "--resume")) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert digest(out) == digest(env.pack)

    def no_memory(*args, **kwargs):  # a real allocation the host refuses: torch says so in a RuntimeError
        torch.empty(1 << 62, dtype=torch.uint8)

    early = env.root / "out-of-memory-early"
    monkeypatch.setattr(pipeline, "build_calibration", no_memory)
    line = expect_error(capsys, env.cli_args(early), "ran out of memory (the calibration inputs)", "no layer was "
                        "finished yet", "run it again")
    assert "--resume" not in line and "--samples" not in line, line


def test_out_of_memory_measuring_a_resumed_run_keeps_the_finished_pack(env, capsys, monkeypatch):
    """A run started with --no-eval and resumed with the measure measures the pack after it is made; out of memory
    there, the line says the pack is finished (it is: complete, verified) and how to measure it later."""
    from quantize.quality import HeldOutStreams

    out = env.root / "out-of-memory-measuring"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=0)

    def runs_out(self, which, layer):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(HeldOutStreams, "advance", runs_out)
    assert run_cli([a for a in env.cli_args(out, "--resume") if a != "--no-eval"]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # after the quantizing bar, finished
    assert "Traceback" not in err and line.startswith("error: the machine ran out of memory (measuring KL: reference "
                                                      "layer 0)"), err
    assert line.endswith(f"the pack in {out} is finished: measure it by clover-local eval {out} --reference "
                         f"{env.src} --save"), line
    assert verify_pack(out).complete  # (it raises where a file differs from the manifest)
    assert digest(out) == digest(env.pack)


def test_out_of_memory_on_a_gpu_names_what_the_run_held_of_the_card(monkeypatch):
    """On a GPU the line says how much of the card the run itself held at its peak, so a card taken by another
    program reads as such, and sends the person to free it first."""
    from clover_local.commands import quantize as command

    class Props:
        total_memory = 16 * 2**30

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 9 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    line = command.out_of_memory_message(Path("nowhere"), torch.device("cuda"), "layer 3: experts 40/256",
                                         QuantizeSettings(samples=128, seq_len=2048))
    assert line == ("the GPU ran out of memory (layer 3: experts 40/256; 9 GiB held at the peak of the card's 16 "
                    "GiB); no layer was finished yet: close other programs using the GPU and run it again, or with "
                    "fewer --samples or a shorter --seq-len (now 128 × 2048: a layer's work grows with them)")
    head = command.out_of_memory_message(Path("nowhere"), torch.device("cuda"), "LM head",
                                         QuantizeSettings(samples=128, seq_len=2048))
    assert head.endswith("(LM head; 9 GiB held at the peak of the card's 16 GiB); no layer was finished yet: close "
                         "other programs using the GPU and run it again"), head


def test_killed_process_resumes_byte_identical(env, capsys):
    """A real `python -m clover_local quantize` SIGKILLed after its first layer, then `--resume`."""
    src = write_src(env.root / "src-6", env.tokenizer_dir, num_hidden_layers=6)
    ref = env.root / "killed-ref"
    env.quantize(ref, src=src)
    out = env.root / "killed"
    child_env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                 "PYTHONPATH": str(REPO)}
    log = open(env.root / "killed.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "clover_local", *map(str, env.cli_args(out, src=src))],
                            cwd=REPO, env=child_env, stdout=subprocess.DEVNULL, stderr=log)
    state_file = out / PROGRESS / "state.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if state_file.exists() and json.loads(state_file.read_text())["next_layer"] >= 1:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        else:
            pytest.fail(f"the run ended (rc {proc.poll()}) or stalled before it could be killed: "
                        f"{(env.root / 'killed.log').read_text(errors='replace')[-2000:]}")
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == -signal.SIGKILL
    done = state_of(out)["next_layer"]
    assert 1 <= done < 6 and not (out / MANIFEST_NAME).exists()
    # the same command without --resume is refused and says what to add
    expect_error(capsys, env.cli_args(out, src=src), "--resume")
    assert state_of(out)["next_layer"] == done
    assert run_cli(env.cli_args(out, "--resume", src=src)) == 0, capsys.readouterr().err
    assert digest(out) == digest(ref)


def test_resume_refusals(env, capsys):
    out = env.root / "resume-refusals"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=0)
    before = digest(out)
    # the refusal names the flags that differ, with the value the saved run used
    expect_error(capsys, env.cli_args(out, "--resume", "--samples", "3"), "other settings", "--samples 4 (now 3)")
    expect_error(capsys, env.cli_args(out, "--resume", "--method", "rtn"), "other settings", "--method gptq (now rtn)")
    expect_error(capsys, env.cli_args(out, "--resume", "--no-clip"), "other settings", "--clip/--no-clip true")
    expect_error(capsys, env.cli_args(out, "--resume", "--no-act-order"), "other settings", "--act-order")
    expect_error(capsys, env.cli_args(out, "--resume", "--bits", "8", "--group-size", "64"), "--bits 4 (now 8)",
                 "--group-size 128 (now 64)")
    expect_error(capsys, env.cli_args(out), "unfinished", "add --resume")
    assert digest(out) == before  # refusing touched nothing
    expect_error(capsys, env.cli_args(env.root / "never-started", "--resume"), "nothing to resume")
    assert not (env.root / "never-started").exists()
    empty = env.root / "empty-out"
    empty.mkdir()
    expect_error(capsys, env.cli_args(empty, "--resume"), "nothing to resume")
    assert list(empty.iterdir()) == []


# ---------------------------------------------------------------------------------------------- 4. bad input


def test_not_a_clover_checkpoint(env, tokenizer_dir, capsys):
    other = env.root / "llama"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 128,
                                                   "num_hidden_layers": 2}))
    save_file({"model.embed_tokens.weight": torch.zeros(8, 128)}, str(other / "model.safetensors"))
    out = env.root / "out-llama"
    expect_error(capsys, env.cli_args(out, src=other), "llama", "not a clover model")
    assert not out.exists()

    # a plain Qwen3.5 backbone: the Clover layout without the block-diffusion extras
    cfg = load_config(env.src)
    state = {k: v for k, v in random_state(cfg).items() if k.rsplit(".", 1)[-1] not in PREVIEW_EXTRAS}
    plain = write_src(env.root / "backbone", tokenizer_dir, state=state)
    out = env.root / "out-backbone"
    expect_error(capsys, env.cli_args(out, src=plain), "not a Clover checkpoint", "block-diffusion")
    assert not out.exists()


def test_summary_names_what_the_quality_was_measured_on(env, capsys):
    """The summary's quality line says how many held-out tokens the KL was measured on: quantize's own check, 4
    sequences of the calibration's length (at most 512)."""
    out = env.root / "summary-with-quality"
    args = [a for a in env.cli_args(out) if a != "--no-eval"]
    assert run_cli(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "KL causal" in said and "a quick check on 4 × 64 held-out tokens" in said, said


def test_bad_mask_token_touches_nothing(env, capsys):
    """A mask token outside the vocabulary is refused before --out is created, as every check on the source is."""
    bad = env.root / "bad-mask"
    shutil.copytree(env.src, bad)
    vocab = load_config(env.src).vocab_size
    (bad / "generation_config.json").write_text(json.dumps({"mask_token_id": vocab}))
    out = env.root / "out-bad-mask"
    expect_error(capsys, env.cli_args(out, src=bad), f"mask_token_id {vocab}", "outside the vocabulary")
    assert not out.exists()


def test_corrupt_shard(env, capsys):
    bad = env.root / "truncated"
    shutil.copytree(env.src, bad)
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    out = env.root / "out-truncated"
    expect_error(capsys, env.cli_args(out, src=bad), "model.safetensors", "corrupt or truncated")
    assert not out.exists()


def test_corrupt_shard_midway_keeps_finished_layers(env, capsys):
    """A shard only needed by a later layer fails there: the layers before it stay done, and once the shard is
    fixed --resume finishes the pack."""
    src = write_src(env.root / "sharded", env.tokenizer_dir, shards=3)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    shard = index["model.layers.3.mlp.experts.down_proj"]
    assert shard != index["model.embed_tokens.weight"] and shard != index["model.layers.0.mlp.gate.weight"]
    good = (src / shard).read_bytes()
    (src / shard).write_bytes(good[: len(good) // 2])
    out = env.root / "out-sharded"
    expect_error(capsys, env.cli_args(out, src=src), shard, "corrupt or truncated")
    done = state_of(out)["next_layer"]
    assert done >= 1 and all((out / shard_name(k, N_SHARDS)).is_file() for k in range(1, done + 1))
    (src / shard).write_bytes(good)
    assert run_cli(env.cli_args(out, "--resume", src=src)) == 0, capsys.readouterr().err
    verify_pack(out)


def test_bad_calibration_files(env, capsys):
    out = env.root / "out-calib"
    cases = {
        "empty.jsonl": (b"", "holds no samples"),
        "blank.txt": (b"\n\n   \n", "holds no samples"),
        "binary.jsonl": (b"\xff\xfe\x00garbage\x81\n", "cannot read calibration file"),
        "broken.jsonl": (b'{"text": "fine"}\n{"text": oops\n', "line 2 is not valid JSON"),
        "deep.jsonl": (b'{"text": "fine"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 2 is not valid JSON"),
        "fields.jsonl": (b'{"prompt": "no text field"}\n', "neither 'messages'"),
        "number.jsonl": (b'{"text": 5}\n', "nor 'text' (a string)"),
        "not-a-message.jsonl": (b'{"text": "fine"}\n{"messages": [1]}\n', "line 2: message 0 is not an object with a"),
        "no-role.jsonl": (b'{"messages": [{"role": "user", "content": "a"}, {"role": 5, "content": "b"}]}\n',
                          "line 1: message 1 is not an object with a 'role'"),
    }
    for name, (content, needle) in cases.items():
        path = env.root / name
        path.write_bytes(content)
        args = [a if a != str(env.calib) else str(path) for a in env.cli_args(out)]
        expect_error(capsys, args, needle)
    missing = [a if a != str(env.calib) else str(env.root / "missing.jsonl") for a in env.cli_args(out)]
    expect_error(capsys, missing, "missing.jsonl", "does not exist")
    # a file we may not read (tests run as root, where chmod 000 does not stop a read: simulate the OS refusing)
    real_open, real_read_text = open, Path.read_text

    def refuse(file):
        if str(file) == str(env.calib):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))

    def no_permission_open(file, *args, **kwargs):
        refuse(file)
        return real_open(file, *args, **kwargs)

    def no_permission_read_text(self, *args, **kwargs):
        refuse(self)
        return real_read_text(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("builtins.open", no_permission_open)
        mp.setattr(Path, "read_text", no_permission_read_text)
        expect_error(capsys, env.cli_args(out), "cannot read calibration file", "Permission denied")
    # nothing half-made blocks the corrected command
    assert run_cli(env.cli_args(out)) == 0, capsys.readouterr().err
    assert digest(out) == digest(env.pack)


def test_output_folder_holding_something_else(env, capsys):
    out = env.root / "out-stray"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    expect_error(capsys, env.cli_args(out), "not empty")
    expect_error(capsys, env.cli_args(out, "--resume"), str(out))
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    a_file = env.root / "out-is-a-file"
    a_file.write_text("x")
    expect_error(capsys, env.cli_args(a_file), "is a file")
    assert a_file.read_text() == "x"


def test_existing_complete_pack_needs_overwrite(env, capsys):
    out = env.root / "out-complete"
    shutil.copytree(env.pack, out)
    before = digest(out)
    expect_error(capsys, env.cli_args(out), "finished pack", "--overwrite")
    expect_error(capsys, env.cli_args(out, "--resume"), "finished pack")
    assert digest(out) == before


def test_full_disk_keeps_finished_layers_and_resumes(env, capsys, monkeypatch):
    out = env.root / "out-full-disk"
    real = pipeline.save_file
    blocked = shard_name(3, N_SHARDS)  # layer 2's shard

    def full_disk(tensors, filename, metadata=None):
        if Path(filename).name.startswith(blocked):
            Path(filename).write_bytes(b"half a shard")  # what a full disk leaves behind
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(pipeline, "save_file", full_disk)
    expect_error(capsys, env.cli_args(out), "disk is full", "--resume (2 finished layers kept)")
    assert state_of(out)["next_layer"] == 2
    assert (out / shard_name(1, N_SHARDS)).is_file() and (out / shard_name(2, N_SHARDS)).is_file()
    assert not list(out.glob(f"{blocked}*")) and not list(out.rglob("*.tmp"))
    saved = digest(out)
    monkeypatch.setattr(pipeline, "save_file", real)
    assert run_cli(env.cli_args(out, "--resume")) == 0, capsys.readouterr().err
    assert digest(out) == digest(env.pack)
    assert saved[shard_name(1, N_SHARDS)] == digest(env.pack)[shard_name(1, N_SHARDS)]


def test_a_disk_without_room_for_the_run_is_refused_before_the_first_layer(env, capsys, monkeypatch):
    """What the run will write is known from config.json and the settings: the pack (what `plan` computes, and
    the files copied beside it) and the --resume inputs (two files at once for a moment). A disk without room for
    the rest is one line before any layer is read — a fresh run leaves no folder, a resumed one keeps what it
    finished and counts it as written."""
    from clover_local.runtime.synthetic_pack import checkpoint_index
    from quantize import footprint

    cfg = CheckpointReader(env.src).config
    pack = footprint.pack_bytes(checkpoint_index(env.src, 4, "balanced", 128, "src"), footprint.small_files(env.src))
    made = sum(f.stat().st_size for f in env.pack.iterdir() if f.name != "README.md")
    assert abs(pack - made) < 0.03 * made  # the headers' entries estimated, the manifest left out
    one = footprint.progress_bytes(cfg, 4, 64, 2, torch.float32)
    out = env.root / "out-room"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=0)
    saved = next((out / PROGRESS).glob("hidden-*.safetensors")).stat().st_size
    assert one < saved < one + 4096  # its tensors and a header
    usage = shutil.disk_usage(env.root)
    written = (out / shard_name(1, N_SHARDS)).stat().st_size
    room = {"free": 0}
    monkeypatch.setattr(footprint.shutil, "disk_usage", lambda path: usage._replace(free=room["free"]))
    fresh = env.root / "out-no-room"
    room["free"] = footprint.DISK_MARGIN + pack + 2 * one - 1
    expect_error(capsys, env.cli_args(fresh), "needs ≈", "GB free", "--samples")
    assert not fresh.exists()
    room["free"] = footprint.DISK_MARGIN + (pack - written) + (2 * one - saved) - 1  # a byte short of the rest
    before = digest(out)
    expect_error(capsys, env.cli_args(out, "--resume"), "needs ≈")
    assert digest(out) == before
    room["free"] += 1
    assert run_cli(env.cli_args(out, "--resume")) == 0, capsys.readouterr().err
    assert digest(out) == digest(env.pack)


# ---------------------------------------------------------------------------------------------- 5. eval, --json


def test_eval_json(env, capsys):
    code = run_cli(["eval", env.pack, "--reference", env.src, "--json", "--samples", "2", "--seq-len", "64",
                    "--calib", env.calib, "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    q = json.loads(lines[0])
    for key in ("kl_causal_mean", "kl_causal_p99", "kl_preview_mean", "kl_preview_p99"):
        assert math.isfinite(q[key]) and q[key] >= 0, (key, q)
    for key in ("top1_causal", "top1_preview"):
        assert 0 <= q[key] <= 1, (key, q)
    assert q["kl_causal_mean"] > 0 and q["kl_causal_p99"] >= q["kl_causal_mean"]
    assert q["kl_preview_p99"] >= q["kl_preview_mean"]
    assert q["top1_causal"] > 0.4 and q["tokens_causal"] > 0 and q["tokens_preview"] > 0
    # the same measurement ranks round-to-nearest below GPTQ
    code = run_cli(["eval", env.pack_for("balanced", "rtn")[0], "--reference", env.src, "--json", "--samples", "2",
                    "--seq-len", "64", "--calib", env.calib, "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["kl_causal_mean"] > q["kl_causal_mean"]


def test_eval_says_when_the_held_out_text_gives_fewer_sequences_than_asked(env, capsys):
    """eval measures on what the held-out split holds: --samples beyond it measured fewer sequences without a
    word (the table's token counts the only trace); the table is followed by how many it got and how to get
    more, and a run that got all it asked for says nothing of it."""
    args = ["eval", env.pack, "--reference", env.src, "--seq-len", "64", "--calib", env.calib, "--device", "cpu"]
    assert run_cli([*args, "--samples", "2"]) == 0
    assert "--samples asked" not in capsys.readouterr().err
    assert run_cli([*args, "--samples", "5000", "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens_causal"]
    assert 2 * 63 < tokens < 5000 * 63 and tokens % 63 == 0
    assert run_cli([*args, "--samples", "5000"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"(--samples asked for 5000; the text's held-out split holds {tokens // 63} sequences of 64 tokens" in err


def test_eval_out_of_memory_is_one_line_with_what_to_change(env, capsys, monkeypatch):
    """Out of memory while measuring (the reference's layer on a card another program holds): one line with the
    layers it got through and the setting that holds less at once, not a traceback."""
    from quantize.quality import HeldOutStreams

    real, seen = HeldOutStreams.advance, []

    def runs_out_in_the_pack(self, which, layer):
        seen.append(which)
        if which == "pack":
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(self, which, layer)

    monkeypatch.setattr(HeldOutStreams, "advance", runs_out_in_the_pack)
    line = expect_error(capsys, ["eval", env.pack, "--reference", env.src, "--json", "--samples", "2", "--seq-len",
                                 "64", "--calib", env.calib, "--device", "cpu"],
                        "ran out of memory (measuring KL: pack layer 0)",
                        "a shorter --seq-len (now 64")
    assert "--device cpu" not in line and "GPU" not in line, line  # it ran on the CPU
    assert seen.count("reference") == N_LAYERS


def test_eval_refuses_an_unrelated_reference(env, tokenizer_dir, capsys):
    other = write_src(env.root / "other-config", tokenizer_dir, num_experts=4)
    expect_error(capsys, ["eval", env.pack, "--reference", other, "--json", "--samples", "2", "--seq-len", "64",
                          "--calib", env.calib, "--device", "cpu"], "configs differ")
    expect_error(capsys, ["eval", env.src, "--reference", env.src, "--calib", env.calib, "--device", "cpu"],
                 "not a GPTQ pack")


def test_eval_refuses_a_reference_with_the_same_shape_but_other_weights(env, tokenizer_dir, capsys):
    """A checkpoint of the same config but other weights (here one router changed, as another fine-tune would)
    was compared without a word: its large KL read as the pack's quantization error."""
    state = random_state(load_config(env.src))
    state["layers.2.mlp.gate.weight"] = state["layers.2.mlp.gate.weight"] * 1.5
    other = write_src(env.root / "other-weights", tokenizer_dir, state=state)
    expect_error(capsys, ["eval", env.pack, "--reference", other, "--json", "--samples", "2", "--seq-len", "64",
                          "--calib", env.calib, "--device", "cpu"], "was not made from", "layer 2", "mlp.gate.weight")
    same = write_src(env.root / "same-weights", tokenizer_dir, state=random_state(load_config(env.src)))
    assert run_cli(["eval", env.pack, "--reference", same, "--json", "--samples", "2", "--seq-len", "64",
                    "--calib", env.calib, "--device", "cpu"]) == 0, capsys.readouterr().err


def test_eval_refuses_another_source_before_streaming_the_reference(env, tokenizer_dir):
    """The check ran while the pack was streamed, after the reference's whole pass (hours at 35B): it now reads the
    verbatim tensors of every layer first, so not one layer of either model is streamed (here the last layer's
    input norm differs, the one a per-layer check during the stream would meet last)."""
    from quantize.quality import QualityCheck, compare

    cfg = load_config(env.src)
    last = cfg.num_hidden_layers - 1
    state = random_state(cfg)
    state[f"layers.{last}.input_layernorm.weight"] = state[f"layers.{last}.input_layernorm.weight"] + 0.25
    other = write_src(env.root / "other-last-norm", tokenizer_dir, state=state)
    streamed: list[tuple[str, int]] = []
    with pytest.raises(CloverError, match=f"layer {last}'s input_layernorm.weight differs"):
        compare(Path(env.pack), Path(other), QualityCheck(samples=2, seq_len=64, calib=str(env.calib)),
                on_layer=lambda which, i: streamed.append((which, i)))
    assert streamed == []


@pytest.mark.parametrize("name", ["input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate.weight"])
def test_eval_checks_each_tensor_the_pack_keeps_verbatim(env, tokenizer_dir, name):
    from quantize.quality import VERBATIM, QualityCheck, compare

    assert name in VERBATIM
    state = random_state(load_config(env.src))
    state[f"layers.1.{name}"] = state[f"layers.1.{name}"] + 0.25
    other = write_src(env.root / f"other-{name}", tokenizer_dir, state=state)
    with pytest.raises(CloverError, match=f"layer 1's {re.escape(name)} differs"):
        compare(Path(env.pack), Path(other), QualityCheck(samples=2, seq_len=64, calib=str(env.calib)),
                on_layer=lambda which, i: pytest.fail("streamed before the check"))


def test_pack_reader_tensor_names_what_is_missing(env):
    reader = PackReader(env.pack)
    assert reader.tensor("model.layers.0.input_layernorm.weight").dtype == torch.bfloat16
    with pytest.raises(CloverError, match="has no tensor model.layers.0.nope.weight"):
        reader.tensor("model.layers.0.nope.weight")


@pytest.mark.parametrize("profile,group", [("compact", 128), ("experts-only", 128), ("balanced", -1)])
def test_plan_of_the_checkpoint_is_the_plan_of_the_pack_for_each_profile_and_group(env, capsys, profile, group):
    """`plan CHECKPOINT --profile P --group-size G` is the plan of the pack quantize makes with them, byte for
    byte (balanced at 128 is test_plan_bench's). experts-only planned its BF16 head as model.lm_head.weight, a
    "norms" row, where quantize writes lm_head.weight."""
    if group == 128:
        made = env.pack_for(profile, "gptq")[0]
    else:
        made = env.root / f"pack-{profile}-g{group}"
        if not made.exists():
            env.quantize(made, profile=profile, method="rtn", group_size=group)
    args = ["--vram", "1GB", "--ram", "8GB", "--context", "4096", "--json"]
    assert run_cli(["plan", str(made), *args]) == 0
    want = json.loads(capsys.readouterr().out)
    flags = (["--profile", profile] if profile != "balanced" else []) + (
        ["--group-size", str(group)] if group != 128 else [])
    assert run_cli(["plan", str(env.src), *args, *flags]) == 0
    got = json.loads(capsys.readouterr().out)
    planned = got.pop("planned_as_pack")
    assert got == {**want, "model": str(env.src)}
    assert planned["profile"] == profile and planned["group_size"] == group
    shards = list(made.glob("*.safetensors"))
    assert planned["pack_bytes"] == sum(p.stat().st_size - 8 - int.from_bytes(p.read_bytes()[:8], "little")
                                        for p in shards)  # the tensors' bytes


def test_eval_of_an_unfinished_or_foreign_folder_says_what_it_is(env, capsys):
    """An interrupted quantization was 'not a GPTQ pack (its config.json has no quantization_config)', and so was
    a folder without any config.json: say it is unfinished (and --resume), or that there is no config.json."""
    out = env.root / "eval-unfinished"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=0)
    args = ["--reference", env.src, "--calib", env.calib, "--device", "cpu"]
    expect_error(capsys, ["eval", out, *args], "unfinished quantization", "--resume")
    stray = env.root / "eval-stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    expect_error(capsys, ["eval", stray, *args], "no config.json")


def test_eval_save_on_a_read_only_pack_keeps_the_measurement(env, capsys, monkeypatch):
    """`eval --save` on a pack it cannot write to (a read-only disk; simulated, tests run as root) ended in a
    traceback before the figures were printed: minutes of measuring lost. Now the figures come first (valid
    JSON on stdout), then one `error:` line, and the pack is unchanged."""
    out = env.root / "eval-read-only"
    shutil.copytree(env.pack, out)
    before = digest(out)

    def read_only(self, folder):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr(Manifest, "write", read_only)
    code = run_cli(["eval", out, "--reference", env.src, "--json", "--save", "--samples", "2", "--seq-len", "64",
                    "--calib", env.calib, "--device", "cpu"])
    stdout, err = capsys.readouterr()
    assert code != 0 and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and err.startswith("error: ") and "Read-only" in err, err
    assert json.loads(stdout)["kl_causal_mean"] > 0
    assert digest(out) == before


@pytest.mark.parametrize("flags,path", [(["--min-expert-rows", "1000000"], "rtn-few-rows"),
                                        (["--expert-stats", "all", "--eval"], "gptq-all")])
def test_quantize_json_summary(env, capsys, flags, path):
    out = env.root / f"json-{path}"
    code = run_cli([*env.cli_args(out), "--json", *flags])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    lines = stdout.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert [layer["layer"] for layer in summary["layers"]] == list(range(N_LAYERS))
    n_experts = load_config(env.src).num_experts
    for layer in summary["layers"]:
        assert layer["experts"] == {path: n_experts}, layer
        assert 0 < layer["rel_error"] < 0.5 and layer["kind"] in ("linear_attention", "full_attention")
    assert summary["pack_bytes"] < summary["source_bytes"]
    # the run's peaks, to size the next one: this process's resident memory (torch alone is over 100 MiB), no GPU
    assert 100 * 2**20 < summary["peak_host_bytes"] < 64 * 2**30 and summary["peak_device_bytes"] is None
    assert summary["settings"] == Manifest.load(out).settings  # what the pack records
    assert summary["calibration"] == Manifest.load(out).calibration and summary["calibration"]["sequences"] >= 1
    assert {k: summary["settings"][k] for k in ("bits", "group_size", "method", "sym", "clip", "act_order")} == {
        "bits": 4, "group_size": 128, "method": "gptq", "sym": True, "clip": True, "act_order": True}
    if "--eval" in flags:  # measured quality is in the summary and the manifest, and the pack still verifies
        assert summary["quality"]["kl_causal_mean"] >= 0
        assert verify_pack(out).quality["top1_preview"] == summary["quality"]["top1_preview"]
    else:
        assert summary["quality"] is None


def test_every_file_of_a_pack_has_the_same_shareable_mode(env):
    """safetensors' writer and the manifest's temp file make 0600 files: a pack on a shared machine was a mix
    of 0600 shards and 0644 configs. Every file gets the mode a new file gets (0666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in env.pack.iterdir() if p.is_file()}
    assert any(n.endswith(".safetensors") for n in modes) and MANIFEST_NAME in modes
    assert set(modes.values()) == {0o666 & ~mask}, modes


def test_the_summary_says_what_calibration_ran_on_and_what_the_columns_mean():
    """The defaults ask for 128 × 2048 tokens; a small file gives fewer, which was visible only in the manifest."""
    from clover_local.commands.quantize import EXPERT_PATHS, _calibration_line

    line = _calibration_line({"file": "c.jsonl", "sequences": 5, "seq_len": 2048}, samples=128)
    assert "5 sequences × 2048 tokens from c.jsonl" in line and "--samples asked for 128" in line
    assert "asked for" not in _calibration_line({"file": "c.jsonl", "sequences": 8, "seq_len": 64}, samples=8)
    assert "3 conversations" in _calibration_line({"file": "c", "sequences": 1, "seq_len": 64,
                                                   "conversations_left_out": 3}, samples=1)
    assert all(p in EXPERT_PATHS for p in ("gptq-routed", "rtn-few-rows", "gptq-all"))


# ---------------------------------------------------------------------------------------------- 6. what a kill leaves


def _partial(env, name: str, after_layer: int = 1) -> Path:
    """A run stopped (as by a kill) once layers 0..after_layer are saved."""
    out = env.root / name
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=after_layer)
    return out


def test_a_kill_while_the_progress_is_removed_keeps_the_finished_pack(env, capsys, monkeypatch):
    """The last step of a run deletes `.clover-progress`; a kill inside that rmtree left the folder without its
    state.json beside a complete pack, and the next command (with or without --resume) took it for a run that
    never finished a layer and deleted every shard of the finished pack."""
    out = env.root / "kill-in-cleanup"
    shutil.copytree(env.pack, out)
    (out / PROGRESS).mkdir()
    save_file({"clean": torch.zeros(2, 2)}, str(out / PROGRESS / f"hidden-{N_LAYERS:05d}.safetensors"))
    expect_error(capsys, env.cli_args(out, "--resume"), "finished pack")
    expect_error(capsys, env.cli_args(out), "finished pack", "--overwrite")
    assert digest(out) == digest(env.pack)  # every shard kept; only the leftover progress folder went
    verify_pack(out)

    # and the run removes state.json before the rest, so such a kill never leaves a state without its inputs
    seen = []
    real = pipeline.shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path).name == PROGRESS:
            seen.append(sorted(p.name for p in Path(path).iterdir()))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline.shutil, "rmtree", rmtree)
    env.quantize(env.root / "cleanup-order")
    assert seen and all("state.json" not in names for names in seen), seen


def test_resume_refuses_damaged_progress_in_one_line_and_touches_nothing(env, capsys):
    """A finished layer's shard altered (same length: its sha256 recorded when written says so), cut short or gone,
    the saved inputs cut short or gone, state.json garbled: one
    `error:` line naming what is wrong and --overwrite (the earlier layers' inputs are not kept), never a
    traceback, and never a 'complete' pack hashed over a broken shard."""
    base = _partial(env, "damaged-base")
    hidden = base / PROGRESS / state_of(base)["hidden"]
    shard = shard_name(2, N_SHARDS)

    def cut(path: Path) -> None:
        path.write_bytes(path.read_bytes()[:1000])

    def cut_data(path: Path) -> None:  # the header intact, the tensors' bytes short
        path.write_bytes(path.read_bytes()[:-64])

    cases = [(lambda o: flip_last_byte(o / shard), (shard, "not what was written", "--overwrite")),
             (lambda o: cut(o / shard), (shard, "corrupt or truncated", "--overwrite")),
             (lambda o: cut_data(o / shard), (shard, "corrupt or truncated", "--overwrite")),
             (lambda o: (o / shard_name(1, N_SHARDS)).unlink(), (shard_name(1, N_SHARDS), "missing", "--overwrite")),
             (lambda o: cut(o / PROGRESS / hidden.name), ("damaged", hidden.name, "--overwrite")),
             (lambda o: (o / PROGRESS / hidden.name).unlink(), ("damaged", hidden.name, "--overwrite")),
             (lambda o: (o / PROGRESS / "state.json").write_text('{"fingerprint": '), ("damaged", "state.json"))]
    for k, (damage, needles) in enumerate(cases):
        out = env.root / f"damaged-{k}"
        shutil.copytree(base, out)
        damage(out)
        before = digest(out)
        expect_error(capsys, env.cli_args(out, "--resume"), *needles)
        assert digest(out) == before and not (out / MANIFEST_NAME).exists()


@pytest.mark.parametrize("field, value, says", [
    ("next_layer", 1.5, "next_layer is 1.5, not a layer of this model's"),
    ("next_layer", -1, "next_layer is -1"),  # (it was read as layer -1's tensors: 'no tensor for layers.-1')
    ("hidden", 5, "hidden is 5, not a file name"),
    ("hidden", "../../etc/passwd", "hidden is '../../etc/passwd', not a file name"),  # (it was opened)
    ("shards", [1], "shards is [1], not a JSON object"),
    ("reports", [1], "reports holds an entry that is not a JSON object"),
    ("reports", {"a": 1}, "not a JSON array"),
    ("fingerprint", None, "fingerprint is null, not a JSON object"),
    ("calibration", "x", 'calibration is "x", not a JSON object'),
    (None, None, "not a JSON object"),  # the whole file a list
])
def test_a_progress_field_of_the_wrong_kind_is_damage_not_a_traceback(env, capsys, field, value, says):
    """state.json hand-edited or written by another tool: each field `--resume` reads is checked as read (a float
    layer, a list of shards, a null fingerprint were TypeError / AttributeError tracebacks)."""
    base = env.root / "kinds-base"
    if not base.exists():
        shutil.copytree(_partial(env, "kinds-partial"), base)
    out = env.root / f"kinds-{uuid.uuid4().hex[:8]}"
    shutil.copytree(base, out)
    state = state_of(out)
    (out / PROGRESS / "state.json").write_text(json.dumps({**state, field: value} if field else [state]))
    before = digest(out)
    expect_error(capsys, env.cli_args(out, "--resume"), "damaged", says, "--overwrite")
    assert digest(out) == before and not (out / MANIFEST_NAME).exists()


def flip_last_byte(path: Path) -> None:
    """A bit flip in the tensors' bytes: the same length, the header intact."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_shard_altered_before_the_pack_is_hashed_is_refused_not_certified(env, capsys, monkeypatch):
    """Each layer's shard is read back for its sha256 when written; one altered before the finish hashes the pack
    (here while the LM head is quantized) stops the run in one line, the manifest never marked complete."""
    out = env.root / "altered-before-finish"
    real = pipeline._write_globals

    def globals_then_flip(reader, path, *args, **kwargs):
        real(reader, path, *args, **kwargs)
        flip_last_byte(path.parent / shard_name(2, N_SHARDS))

    monkeypatch.setattr(pipeline, "_write_globals", globals_then_flip)
    expect_error(capsys, env.cli_args(out), "layer 1", shard_name(2, N_SHARDS), "not what was written",
                 "--overwrite")
    assert not (out / MANIFEST_NAME).exists() or not Manifest.load(out).complete


def test_resume_clears_temp_files_a_kill_left(env):
    """A kill inside safetensors' writer leaves its hidden `.tmpXXXXXX` (a shard's or a layer's inputs' size:
    gigabytes at 35B); the resumed pack must not keep them, and ours (`X.tmp`) are written over."""
    out = _partial(env, "temp-leftovers")
    (out / f"{shard_name(3, N_SHARDS)}.tmp").write_bytes(b"half a shard")
    (out / ".tmpAb12Cd").write_bytes(b"safetensors' own temp file")
    (out / PROGRESS / ".tmpXy34Zw").write_bytes(b"half the next layer's inputs")
    env.quantize(out, resume=True)
    assert digest(out) == digest(env.pack)


def test_a_full_disk_before_the_first_layer_does_not_send_to_resume(tmp_path):
    """With no layer saved, --resume has nothing to resume (it says so): the full-disk line must not send there."""
    err = pipeline._write_error(tmp_path / pipeline.PROGRESS / "hidden.safetensors", OSError(errno.ENOSPC, "full"))
    assert "run the same command again (no layer was finished yet)" in str(err) and "--resume" not in str(err)


def test_write_errors_from_safetensors_are_one_line(env, capsys, monkeypatch):
    """safetensors raises its own SafetensorError (not OSError) for a full disk or a read-only one, with the OS
    error only in its text: that ended in a traceback where the disk-full message and --resume belonged."""
    from safetensors import SafetensorError

    real = pipeline.save_file
    for k, (text, needles) in enumerate((("No space left on device (os error 28)", ("disk is full", "--resume")),
                                         ('Read-only file system (os error 30) at path "/x/.tmpAbCdEf"',
                                          ("cannot write", "Read-only file system")))):
        out = env.root / f"st-error-{k}"

        def fails_at_layer_two(tensors, filename, metadata=None, text=text):
            if Path(filename).name.startswith(shard_name(3, N_SHARDS)):
                raise SafetensorError(f"Error while serializing: I/O error: {text}")
            return real(tensors, filename, metadata=metadata)

        monkeypatch.setattr(pipeline, "save_file", fails_at_layer_two)
        expect_error(capsys, env.cli_args(out), *needles)
        monkeypatch.undo()
        assert state_of(out)["next_layer"] == 2 and not list(out.rglob("*.tmp"))
    assert run_cli(env.cli_args(out, "--resume")) == 0, capsys.readouterr().err
    assert digest(out) == digest(env.pack)


def test_out_that_cannot_be_created_is_one_line(env, capsys, monkeypatch):
    """--out under a file, or on a read-only disk (simulated: tests run as root), was a traceback from mkdir."""
    a_file = env.root / "a-file"
    a_file.write_text("x")
    expect_error(capsys, env.cli_args(a_file / "pack"), "cannot create --out", "Not a directory")
    assert a_file.read_text() == "x"
    real = Path.mkdir

    def read_only(self, *args, **kwargs):
        if "read-only-disk" in str(self):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    expect_error(capsys, env.cli_args(env.root / "read-only-disk" / "pack"), "cannot create --out", "Read-only")


# --- mutation-testing additions: which rows calibrate each routed expert --------------------------------------


def test_expert_hessians_come_from_the_rows_routed_to_each_expert(env, monkeypatch):
    """Each routed expert's gate/up Hessian is built from exactly the rows routed to it, its down Hessian from the
    quantized gate/up's activations on those rows, and an expert with exactly --min-expert-rows rows is calibrated
    (one fewer falls back to round-to-nearest)."""
    from dataclasses import replace

    import torch.nn.functional as F

    from clover_local.model.clover import build_layer
    from quantize import layer_quant
    from quantize.layer_quant import LayerQuantizer, LayerReport, QuantOptions, _hessian
    from quantize.profiles import get_profile

    reader = CheckpointReader(env.src)
    cfg = reader.config
    layer = build_layer(cfg, 0, reader.layer_state(0), CPU, torch.float32)
    n_exp, k, rows = cfg.num_experts, cfg.num_experts_per_tok, 96
    gen = torch.Generator().manual_seed(7)
    idx = torch.stack([torch.randperm(n_exp, generator=gen)[:k] for _ in range(rows)])  # k distinct experts a row
    counts = torch.bincount(idx.reshape(-1), minlength=n_exp)
    threshold = int(counts.sort().values[n_exp // 2])  # a count some expert has exactly
    assert bool((counts == threshold).any() and (counts < threshold).any() and (counts > 0).all())
    layer.mlp.route = lambda x, limit=None: (idx, torch.full(idx.shape, 1.0 / k), None)

    calls = []
    real = layer_quant.quantize_weights

    def spy(weights, hessians, bits, opts):
        results = real(weights, hessians, bits, opts)
        calls.append((hessians.clone(), results))
        return results

    monkeypatch.setattr(layer_quant, "quantize_weights", spy)
    shared = layer.mlp.shared_expert
    shared_h = {}
    real_one = layer_quant.quantize_weight

    def spy_one(weight, hessian, bits, opts):
        for name in ("gate_proj", "up_proj", "down_proj"):
            if weight is getattr(shared, name).weight:
                shared_h[name] = hessian.clone()
        return real_one(weight, hessian, bits, opts)

    monkeypatch.setattr(layer_quant, "quantize_weight", spy_one)
    profile = replace(get_profile("balanced"), experts=4)
    opts = QuantOptions(min_expert_rows=threshold, expert_batch=1)
    moe_in = torch.randn(rows, cfg.hidden_size, generator=gen)
    normed = layer.post_attention_layernorm(moe_in)
    report = LayerReport(0, "linear_attention")
    with torch.no_grad():
        LayerQuantizer(cfg, profile, opts, CPU, torch.float32)._quantize_moe(
            layer, normed, {}, "model.layers.0", report, lambda msg: None)

    calibrated = [e for e in range(n_exp) if counts[e] >= threshold]
    assert report.expert_paths == {"gptq-routed": len(calibrated), "rtn-few-rows": n_exp - len(calibrated)}
    assert len(calls) == 2 * len(calibrated)  # gate/up then down, one expert at a time
    inter = cfg.moe_intermediate_size
    for n, e in enumerate(calibrated):
        routed = (idx == e).any(dim=-1).nonzero().squeeze(-1)
        assert routed.numel() == counts[e]
        x = normed[routed]
        (h_gu,), (gate_up,) = calls[2 * n]
        torch.testing.assert_close(h_gu, _hessian(x), rtol=1e-5, atol=1e-6)
        hgu = F.linear(x, gate_up.dequantize())
        (h_d,), _ = calls[2 * n + 1]
        torch.testing.assert_close(h_d, _hessian(F.silu(hgu[:, :inter]) * hgu[:, inter:]), rtol=1e-4, atol=1e-6)
    # the shared expert sees every row: gate/up from the normed inputs, down from the quantized gate/up's
    # activations silu(gate(x)) * up(x)
    assert set(shared_h) == {"gate_proj", "up_proj", "down_proj"}
    torch.testing.assert_close(shared_h["gate_proj"], _hessian(normed), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shared_h["up_proj"], _hessian(normed), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        act = F.silu(shared.gate_proj(normed)) * shared.up_proj(normed)  # gate/up now hold their quantized values
    torch.testing.assert_close(shared_h["down_proj"], _hessian(act), rtol=1e-4, atol=1e-6)


def test_the_moe_step_routes_and_builds_the_shared_down_hessian_a_slice_of_rows_at_a_time(env, monkeypatch):
    """The routing and the shared expert's down Hessian take CAST_ROWS rows at a time (at the default calibration
    on a GPU, the whole activations and router probabilities were GiBs of device memory): the router sees slices,
    and the pack is the one whole-row passes make — the routed experts and the shared gate/up to the bit, the
    shared down within float32 rounding of its Hessian (its codes may round the other way at a few entries)."""
    from clover_local.model.clover import build_layer
    from quantize import layer_quant
    from quantize.layer_quant import LayerQuantizer, LayerReport, QuantOptions
    from quantize.profiles import get_profile

    reader = CheckpointReader(env.src)
    cfg = reader.config
    normed = torch.randn(200, cfg.hidden_size, generator=torch.Generator().manual_seed(11))
    packs, seen = [], []
    for rows in (layer_quant.CAST_ROWS, 64):
        monkeypatch.setattr(layer_quant, "CAST_ROWS", rows)
        layer = build_layer(cfg, 0, reader.layer_state(0), CPU, torch.float32)
        real_route = layer.mlp.route
        layer.mlp.route = lambda x, limit=None, real_route=real_route: seen.append(x.shape[0]) or real_route(x)
        out, report = {}, LayerReport(0, "linear_attention")
        with torch.no_grad():
            LayerQuantizer(cfg, get_profile("balanced"), QuantOptions(min_expert_rows=2), CPU,
                           torch.float32)._quantize_moe(layer, normed, out, "model.layers.0", report, lambda m: None)
        packs.append((out, report.expert_paths))
    assert seen == [200, 64, 64, 64, 8]
    (whole, paths), (sliced, sliced_paths) = packs
    assert paths == sliced_paths and "gptq-routed" in paths and set(whole) == set(sliced)
    down = [k for k in whole if "shared_expert.down_proj" in k]
    assert down and all(torch.equal(whole[k], sliced[k]) for k in whole if k not in down)
    for k in down:  # (equal here; a float32 summation order elsewhere may move a code at a rounding boundary)
        if whole[k].is_floating_point():
            torch.testing.assert_close(whole[k], sliced[k], rtol=1e-3, atol=0)
        else:
            assert (whole[k] != sliced[k]).float().mean() < 0.02, k


def test_resume_refuses_changed_calibration_content_or_source_config(env):
    """The saved run's fingerprint covers what the flags do not show: the calibration file's bytes and the source's
    config.json. A resume after either changed would mix two calibrations (or two models) in one pack."""
    src = env.root / "src-for-fingerprint"
    shutil.copytree(env.src, src)
    calib = env.root / "calib-for-fingerprint.jsonl"
    shutil.copy(env.calib, calib)
    settings = QuantizeSettings(samples=4, seq_len=64, calib=str(calib))
    out = env.root / "resume-fingerprint"
    with pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(src, out, settings, CPU, stop_after_layer=0)
    before = digest(out)

    with open(calib, "a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "one more calibration sample, added after the run started"}) + "\n")
    with pytest.raises(CloverError, match="calibration file's content changed"):
        quantize_checkpoint(src, out, settings, CPU, resume=True)
    shutil.copy(env.calib, calib)  # the original bytes again

    config = json.loads((src / "config.json").read_text())
    config["rms_norm_eps"] = config.get("rms_norm_eps", 1e-6) * 2
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(CloverError, match="config.json changed"):
        quantize_checkpoint(src, out, settings, CPU, resume=True)
    assert digest(out) == before  # refusing touched nothing


def test_pack_reader_refuses_a_tensor_of_the_wrong_shape(env):
    pack = env.root / "pack-wrong-shape"
    shutil.copytree(env.pack, pack)
    reader = PackReader(pack)
    name = "model.layers.0.input_layernorm.weight"
    shard = pack / reader.weight_map[name]
    tensors = load_file(str(shard))
    assert tuple(reader.layer_state(0)["input_layernorm.weight"].shape) == tuple(tensors[name].shape)
    tensors[name] = tensors[name][:-8].contiguous()  # a tensor from a narrower model
    save_file(tensors, str(shard))
    with pytest.raises(CloverError, match=r"input_layernorm\.weight has shape"):
        PackReader(pack).layer_state(0)


def test_quality_measured_as_the_layers_go_is_what_eval_measures_and_survives_a_resume(env):
    """`quantize` measured KL after the pack was made, by streaming the source a second time (69 GB at 35B; over the
    network with --stream). It now runs the held-out text through each source layer before it is quantized in
    place and after: the figures equal `compare`'s on the finished pack, and a run stopped after layer 1 and
    resumed (the streams saved with the layer inputs) gives the same ones. A resumed run that was started without
    measuring has nothing to measure from: None, not a partial figure."""
    from quantize.quality import QualityCheck, compare

    check = QualityCheck(samples=2, seq_len=64, calib=str(env.calib))
    whole = env.quantize(env.root / "measured", measure=check)
    assert whole.quality == compare(env.root / "measured", env.src, check).to_dict()
    assert whole.quality["tokens_causal"] > 0 and whole.quality["kl_causal_mean"] > 0
    out = env.root / "measured-resumed"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, measure=check, stop_after_layer=1)
    assert env.quantize(out, measure=check, resume=True).quality == whole.quality
    assert digest(out) == digest(env.root / "measured")
    out = env.root / "unmeasured-resumed"
    with pytest.raises(KeyboardInterrupt):
        env.quantize(out, stop_after_layer=1)
    assert env.quantize(out, measure=check, resume=True).quality is None


def test_bf16_streams_quantize_a_bf16_layer_as_float32_streams_do(env):
    """Computing in bf16 (a GPU), every value the calibration streams take is a bf16 result, so holding them in
    bf16 (half the host memory and of the files --resume keeps) changes nothing: the same pack tensors, the same
    next-layer inputs and error as streams held in float32 — here on the CPU, computing in bf16."""
    from clover_local.model.clover import build_layer
    from quantize.layer_quant import LayerQuantizer, QuantOptions
    from quantize.profiles import get_profile

    reader = CheckpointReader(env.src)
    cfg = reader.config
    gen = torch.Generator().manual_seed(5)
    start = [torch.randn(6, 32, cfg.hidden_size, generator=gen).bfloat16() for _ in range(2)]
    runs = []
    for held in (torch.float32, torch.bfloat16):
        # (a copy: a bf16 layer on the CPU would hold the reader's own tensors, and quantize writes into them)
        state = {k: v.clone() for k, v in reader.layer_state(0).items()}
        layer = build_layer(cfg, 0, state, CPU, torch.bfloat16)
        quantizer = LayerQuantizer(cfg, get_profile("balanced"), QuantOptions(batch=4), CPU, torch.bfloat16)
        clean, noisy = (x.to(held) for x in start)
        runs.append(quantizer.quantize(layer, clean, noisy))
    (pack32, c32, n32, rep32), (pack16, c16, n16, rep16) = runs
    assert c16.dtype == torch.bfloat16 and c32.dtype == torch.float32
    assert set(pack16) == set(pack32) and all(torch.equal(pack16[k], pack32[k]) for k in pack32)
    assert torch.equal(c16.float(), c32) and torch.equal(n16.float(), n32)
    assert rep16.rel_error == rep32.rel_error > 0


def test_a_layers_streams_are_made_a_chunk_at_a_time_without_whole_copies(env):
    """The MoE's inputs are written a chunk of sequences at a time (the mixer's outputs are never held whole):
    every clean row, then every noisy one, each the post-attention norm of the mixer's output — what the whole
    batch through the mixer gives; a last chunk shorter than the others included. The next layer's inputs are
    written over this one's, equal to the whole layer on each stream; its error is measured on the sampled
    sequences, against the reference kept for those alone."""
    from clover_local.model.clover import build_layer
    from quantize.layer_quant import LayerQuantizer, QuantOptions, ref_sequences
    from quantize.profiles import get_profile

    reader = CheckpointReader(env.src)
    cfg = reader.config
    layer = build_layer(cfg, 0, reader.layer_state(0), CPU, torch.float32)
    gen = torch.Generator().manual_seed(3)
    clean, noisy = (torch.randn(5, 32, cfg.hidden_size, generator=gen) for _ in range(2))
    quantizer = LayerQuantizer(cfg, get_profile("balanced"), QuantOptions(batch=2), CPU, torch.float32)
    with torch.no_grad():
        yc, yn = quantizer._mix(layer, clean, noisy)
        want = torch.cat([layer.post_attention_layernorm(y).reshape(-1, cfg.hidden_size) for y in (yc, yn)])
        got = quantizer._moe_inputs(layer, clean, noisy)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        causal_only = quantizer._moe_inputs(layer, clean, None)
    assert not torch.equal(yc, yn)
    torch.testing.assert_close(causal_only, want[:5 * 32], rtol=1e-5, atol=1e-5)
    # the pass that makes the next layer's inputs writes them over this layer's, a chunk at a time
    with torch.no_grad():
        want_c, want_n = (y + layer.mlp(layer.post_attention_layernorm(y)) for y in (yc, yn))
        assert quantizer._propagate(layer, clean, noisy, quantizer._reference(layer, clean, noisy)) == 0.0
    torch.testing.assert_close(clean, want_c, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(noisy, want_n, rtol=1e-5, atol=1e-5)
    # with more sequences than REF_SEQUENCES (16), the reference is kept for every second one of 20 alone, and
    # a stand-in reference a known distance away on those rows gives that relative error
    many = [torch.randn(20, 32, cfg.hidden_size, generator=gen) for _ in range(2)]
    with torch.no_grad():
        reference = quantizer._reference(layer, *many)
        assert sum(r.shape[0] for r in reference) == 10 * 2  # 10 sequences, both streams
        err = quantizer._propagate(layer, *many, [r * 1.25 for r in reference])
    assert err == pytest.approx(0.2, rel=1e-6)  # ‖y − 1.25y‖ / ‖1.25y‖
    assert list(ref_sequences(5)) == [0, 1, 2, 3, 4] and list(ref_sequences(128)) == list(range(0, 128, 8))
    assert list(ref_sequences(20)) == list(range(0, 20, 2))
