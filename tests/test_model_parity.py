"""The causal pass matches transformers' Qwen3_5MoeForCausalLM on the same files (fp32, |Δlogit| ≤ 1e-4)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from clover_local.checkpoint.synthetic import TinySpec
from clover_local.model.clover import load_model
from tests.conftest import run_cli, tokenizer_spec

transformers = pytest.importorskip("transformers")


def hf_model_from_files(folder: Path):
    """Load the checkpoint into transformers independently of our reader: its own config class, names
    normalised here with a few regexes, per-expert tensors stacked into its fused parameters."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    raw = json.loads((folder / "config.json").read_text())
    text = raw.get("text_config", raw)
    fields = {k: v for k, v in text.items() if k not in ("model_type", "architectures")}
    fields.pop("block_size", None)
    fields.pop("mask_token_id", None)
    model = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**fields)).eval()
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    state, experts = {}, {}
    for name, t in tensors.items():
        name = re.sub(r"^model\.language_model\.", "model.", name)
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
        if m:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
            continue
        state[name] = t
    for base, parts in experts.items():
        n = 1 + max(e for e, _ in parts)
        state[f"{base}.gate_up_proj"] = torch.stack([torch.cat([parts[(e, "gate")], parts[(e, "up")]]) for e in range(n)])
        state[f"{base}.down_proj"] = torch.stack([parts[(e, "down")] for e in range(n)])
    missing, _ = model.load_state_dict(state, strict=False)
    assert not missing, missing
    return model


SHAPES = {
    "default": {},
    "wide-gva1": dict(hidden_size=48, linear_num_key_heads=3, linear_num_value_heads=3, linear_key_head_dim=8,
                      linear_value_head_dim=12, num_attention_heads=6, num_key_value_heads=3, head_dim=8,
                      num_experts=6, num_experts_per_tok=3, num_hidden_layers=3, full_attention_interval=3,
                      partial_rotary_factor=0.5),
    "deep": dict(num_hidden_layers=8, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=24,
                 shared_expert_intermediate_size=40),
}
LAYOUTS = [
    ("model.", True, False, 1),
    ("model.language_model.", False, True, 3),
    ("model.", False, False, 2),
    ("model.language_model.", True, True, 1),
]


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("prefix,fused,nested,shards", LAYOUTS)
def test_causal_logits_match_transformers(make_checkpoint, tokenizer_dir, shape, prefix, fused, nested, shards):
    spec = tokenizer_spec(tokenizer_dir, **SHAPES[shape])
    folder = make_checkpoint(spec=spec, prefix=prefix, fused=fused, nested=nested, shards=shards, seed=7)
    ours = load_model(folder, dtype=torch.float32)
    ref = hf_model_from_files(folder)
    ids = torch.randint(0, spec.vocab_size, (1, 37), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = ours(ids)
        b = ref(ids).logits.float()
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= 1e-4
    assert a.abs().max().item() > 1e-3  # the comparison is not between two near-zero tensors


def test_prefill_then_single_rows_equals_full_pass(make_checkpoint):
    folder = make_checkpoint(seed=3)
    model = load_model(folder, dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size - 8, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        parts = [model(ids[:, :19], cache)]
        for t in range(19, 30):
            parts.append(model(ids[:, t : t + 1], cache))
    stepped = torch.cat(parts, 1)
    assert cache.length == 30
    assert (full - stepped).abs().max().item() <= 1e-4


def test_score_matches_transformers(make_checkpoint, capsys):
    from clover_local.tokenizer import ChatTokenizer

    folder = make_checkpoint(seed=5)
    text = "Hello world, the quick brown fox. 你好"
    assert run_cli(["score", folder, "--text", text, "--dtype", "float32", "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ids = ChatTokenizer.from_folder(folder).encode(text)
    assert out["token_ids"] == ids
    ref = hf_model_from_files(folder)
    with torch.no_grad():
        logp = torch.log_softmax(ref(torch.tensor([ids])).logits[0].float(), -1)
    expected = logp[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    assert len(out["logprobs"]) == len(ids) - 1
    assert torch.allclose(torch.tensor(out["logprobs"]), expected, atol=1e-4)
    assert out["ppl"] == pytest.approx(torch.exp(-expected.mean()).item(), rel=1e-4)


def test_causal_mask_is_torchs_lower_right_causal_bias():
    """`attention.causal_mask`: a causal pass's t rows after a cached prefix each see the keys up to their own;
    on CPU a bool mask, on CUDA torch's lower-right causal bias (no [t, s] mask: flash attention): the same."""
    from torch.nn.attention.bias import causal_lower_right

    from clover_local.model.attention import causal_mask

    for t, s in ((5, 12), (7, 7), (2, 3)):
        want = causal_lower_right(t, s)._materialize(torch.device("cpu"))
        assert torch.equal(causal_mask(t, s, torch.device("cpu")), want)
