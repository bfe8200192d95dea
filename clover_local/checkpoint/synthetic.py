"""Random checkpoints in the exact Clover layout, for tests, benchmarks and the README's first steps.

Any dims; either name prefix; fused or per-expert experts; one file or shards with an index. Values are
random and non-trivial everywhere (norm offsets, decays, conv taps, preview extras) so a test that swaps two
tensors or forgets a term fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from clover_local.checkpoint.names import global_shapes, layer_shapes
from clover_local.config import CloverConfig, parse_config


@dataclass
class TinySpec:
    hidden_size: int = 64
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    num_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 32
    shared_expert_intermediate_size: int = 32
    vocab_size: int = 128
    full_attention_interval: int = 4
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000.0
    block_size: int = 8
    mask_token_id: int = 127
    eos_token_id: int = 126


def tiny_config_dict(spec: TinySpec, nested: bool = False) -> dict[str, Any]:
    """A Clover-style config.json: flat, or with the backbone under `text_config`."""
    text = {
        k: getattr(spec, k)
        for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size", "vocab_size", "full_attention_interval",
        )
    }
    text.update(
        rms_norm_eps=1e-6,
        hidden_act="silu",
        attn_output_gate=True,
        num_shared_experts=1,
        max_position_embeddings=131072,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": spec.rope_theta,
            "partial_rotary_factor": spec.partial_rotary_factor,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
        eos_token_id=spec.eos_token_id,
        tie_word_embeddings=False,
    )
    top = {
        "architectures": ["CloverMoeModelLM"],
        "model_type": "clover_moe",
        "block_size": spec.block_size,
        "mask_token_id": spec.mask_token_id,
        "torch_dtype": "bfloat16",
    }
    if nested:
        top["text_config"] = text
        top["tie_word_embeddings"] = False
        return top
    return {**text, **top}


def random_state(cfg: CloverConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Parameters by our names (fused experts), fp32, with realistic scales."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(shape, std=0.02, mean=0.0):
        return torch.randn(*shape, generator=gen) * std + mean

    state: dict[str, torch.Tensor] = {}
    for name, shape in global_shapes(cfg).items():
        state[name] = rnd(shape, 0.1 if "norm" in name else 0.02)
    for i in range(cfg.num_hidden_layers):
        for rel, shape in layer_shapes(cfg, i).items():
            leaf = rel.rsplit(".", 1)[-1] if not rel.endswith(".weight") else rel.rsplit(".", 2)[-2]
            if "norm" in rel and rel != "linear_attn.norm.weight":
                t = rnd(shape, 0.1)
            elif rel == "linear_attn.norm.weight":
                t = rnd(shape, 0.1, 1.0)
            elif leaf == "A_log":
                t = torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
            elif leaf == "dt_bias":
                t = rnd(shape, 0.2, 1.0)
            elif leaf == "conv1d":
                t = rnd(shape, 0.3)
            elif leaf == "conv_right_weight":
                t = rnd(shape, 0.2)
            elif leaf == "bd_softmax_logit_scale":
                t = rnd(shape, 0.5, 4.0)
            elif leaf in ("bd_softmax_history_bias", "bd_softmax_history_c"):
                t = rnd(shape, 0.5)
            elif rel == "mlp.gate.weight":
                t = rnd(shape, 0.2)
            else:
                t = rnd(shape, 0.05)
            state[f"layers.{i}.{rel}"] = t
    return state


def checkpoint_tensors(
    cfg: CloverConfig, state: dict[str, torch.Tensor], prefix: str = "model.", fused: bool = True
) -> dict[str, torch.Tensor]:
    """Our names → checkpoint names, with the chosen prefix and expert storage."""
    out: dict[str, torch.Tensor] = {}
    im = cfg.moe_intermediate_size
    for name, t in state.items():
        if name == "lm_head.weight":
            out[name] = t
            continue
        if not fused and ".mlp.experts." in name:
            layer_prefix, param = name.split(".mlp.experts.")
            for e in range(t.shape[0]):
                base = f"{prefix}{layer_prefix}.mlp.experts.{e}."
                if param == "gate_up_proj":
                    out[base + "gate_proj.weight"] = t[e, :im]
                    out[base + "up_proj.weight"] = t[e, im:]
                else:
                    out[base + "down_proj.weight"] = t[e]
            continue
        out[prefix + name] = t
    return {k: v.contiguous() for k, v in out.items()}


def write_checkpoint(
    folder: str | Path,
    spec: TinySpec | None = None,
    *,
    prefix: str = "model.",
    fused: bool = True,
    nested: bool = False,
    shards: int = 1,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    extra_tensors: dict[str, torch.Tensor] | None = None,
    state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write config.json, generation_config.json and safetensors weights (with an index when sharded)."""
    spec = spec or TinySpec()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = tiny_config_dict(spec, nested)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    gen = {"eos_token_id": [spec.eos_token_id], "mask_token_id": spec.mask_token_id, "block_size": spec.block_size}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2))
    cfg = parse_config(raw, gen)
    tensors = checkpoint_tensors(cfg, state if state is not None else random_state(cfg, seed), prefix, fused)
    tensors = {k: v.to(dtype) for k, v in tensors.items()}
    tensors.update(extra_tensors or {})
    names = sorted(tensors)
    if shards <= 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return folder
    per = -(-len(names) // shards)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per : (s + 1) * per]}
        save_file(part, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2)
    )
    return folder


REAL_SPEC = TinySpec(
    hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
    shared_expert_intermediate_size=512, vocab_size=248320, full_attention_interval=4, partial_rotary_factor=0.25,
    rope_theta=10_000_000.0, block_size=32, mask_token_id=248319, eos_token_id=248044,
)


def write_streaming_checkpoint(
    folder: str | Path, spec: TinySpec, layer_types: list[str] | None = None, seed: int = 0
) -> Path:
    """A random BF16 checkpoint written one layer (one shard) at a time, so real-size layers never need
    more than one layer in memory. Random normal weights (std 0.02), realistic norms/decays/extras."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = tiny_config_dict(spec)
    if layer_types is not None:
        raw["layer_types"] = layer_types
        raw["num_hidden_layers"] = len(layer_types)
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    gen_cfg = {"eos_token_id": [spec.eos_token_id], "mask_token_id": spec.mask_token_id, "block_size": spec.block_size}
    (folder / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2))
    cfg = parse_config(raw, gen_cfg)
    gen = torch.Generator().manual_seed(seed)
    n = cfg.num_hidden_layers + 1
    weight_map: dict[str, str] = {}

    def make(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        leaf = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name.rsplit(".", 1)[-1]
        if leaf == "A_log":
            return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log().to(torch.bfloat16)
        if leaf in ("dt_bias", "bd_softmax_logit_scale"):
            return (torch.randn(shape, generator=gen) * 0.2 + (4.0 if "scale" in leaf else 1.0)).to(torch.bfloat16)
        std = 0.1 if ("norm" in name or leaf.startswith(("conv", "bd_"))) else 0.02
        return (torch.randn(shape, generator=gen, dtype=torch.float32) * std).to(torch.bfloat16)

    for i in range(cfg.num_hidden_layers):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {f"model.layers.{i}.{rel}": make(rel, shape) for rel, shape in layer_shapes(cfg, i).items()}
        save_file(part, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
        del part
    fname = f"model-{n:05d}-of-{n:05d}.safetensors"
    part = {("lm_head.weight" if k == "lm_head.weight" else f"model.{k}"): make(k, shape)
            for k, shape in global_shapes(cfg).items()}
    save_file(part, str(folder / fname), metadata={"format": "pt"})
    weight_map.update({k: fname for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return folder
