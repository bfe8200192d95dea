"""The one mapping table between checkpoint tensor names and the model's parameter names.

Checkpoints name text tensors `model.layers.N.…` or `model.language_model.layers.N.…`, and store routed
experts either fused (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]) or per expert
(`mlp.experts.E.{gate,up,down}_proj.weight`). Our parameter names drop the prefix and always use the fused form.
`expected_shapes` is the other half of the table: what every parameter must look like for a given config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clover_local.config import CloverConfig

SKIP = re.compile(r"^(mtp\.|model\.visual\.|visual\.|model\.mtp\.)")
_PREFIX = r"^(?:model\.language_model\.|language_model\.model\.|model\.)"


@dataclass(frozen=True)
class Target:
    """Where a checkpoint tensor goes: a parameter, or one expert's slice of a fused expert parameter."""

    name: str
    expert: int | None = None
    part: str | None = None  # "gate", "up" or "down" for per-expert tensors


_RULES: list[tuple[re.Pattern[str], object]] = [
    (re.compile(r"^(?:language_model\.)?lm_head\.weight$"), lambda m: Target("lm_head.weight")),
    (re.compile(_PREFIX + r"(embed_tokens\.weight|norm\.weight)$"), lambda m: Target(m.group(1))),
    (
        re.compile(_PREFIX + r"layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$"),
        lambda m: Target(
            f"layers.{m.group(1)}.mlp.experts.{'down_proj' if m.group(3) == 'down' else 'gate_up_proj'}",
            expert=int(m.group(2)),
            part=m.group(3),
        ),
    ),
    (re.compile(_PREFIX + r"layers\.(\d+)\.(.+)$"), lambda m: Target(f"layers.{m.group(1)}.{m.group(2)}")),
]


def map_name(ckpt_name: str) -> Target | None:
    """The parameter a checkpoint tensor feeds, or None for tensors we skip (MTP head, vision tower, unknown)."""
    if SKIP.match(ckpt_name):
        return None
    for pattern, make in _RULES:
        m = pattern.match(ckpt_name)
        if m:
            return make(m)  # type: ignore[operator]
    return None


PREVIEW_EXTRAS = ("conv_right_weight", "bd_softmax_logit_scale", "bd_softmax_history_bias", "bd_softmax_history_c")


def layer_shapes(cfg: CloverConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Expected shape of every parameter of decoder layer i (names relative to `layers.i.`)."""
    h, e, im = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate.weight": (e, h),
        "mlp.experts.gate_up_proj": (e, 2 * im, h),
        "mlp.experts.down_proj": (e, h, im),
        "mlp.shared_expert.gate_proj.weight": (cfg.shared_expert_intermediate_size, h),
        "mlp.shared_expert.up_proj.weight": (cfg.shared_expert_intermediate_size, h),
        "mlp.shared_expert.down_proj.weight": (h, cfg.shared_expert_intermediate_size),
        "mlp.shared_expert_gate.weight": (1, h),
    }
    if cfg.is_attention(i):
        nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        shapes.update({
            "self_attn.q_proj.weight": (nh * hd * 2, h),
            "self_attn.k_proj.weight": (nkv * hd, h),
            "self_attn.v_proj.weight": (nkv * hd, h),
            "self_attn.o_proj.weight": (h, nh * hd),
            "self_attn.q_norm.weight": (hd,),
            "self_attn.k_norm.weight": (hd,),
        })
    else:
        conv, hv = cfg.gdn_conv_dim, cfg.linear_num_value_heads
        k = cfg.linear_conv_kernel_dim
        shapes.update({
            "linear_attn.in_proj_qkv.weight": (conv, h),
            "linear_attn.in_proj_z.weight": (cfg.gdn_value_dim, h),
            "linear_attn.in_proj_b.weight": (hv, h),
            "linear_attn.in_proj_a.weight": (hv, h),
            "linear_attn.conv1d.weight": (conv, 1, k),
            "linear_attn.dt_bias": (hv,),
            "linear_attn.A_log": (hv,),
            "linear_attn.norm.weight": (cfg.linear_value_head_dim,),
            "linear_attn.out_proj.weight": (h, cfg.gdn_value_dim),
            "linear_attn.conv_right_weight": (conv, k - 1),
            "linear_attn.bd_softmax_logit_scale": (hv,),
            "linear_attn.bd_softmax_history_bias": (hv,),
            "linear_attn.bd_softmax_history_c": (hv,),
        })
    return shapes


def global_shapes(cfg: CloverConfig) -> dict[str, tuple[int, ...]]:
    shapes = {"embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size), "norm.weight": (cfg.hidden_size,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, cfg.hidden_size)
    return shapes


def optional(name: str) -> bool:
    """Tensors a plain Qwen3.5 backbone lacks: the block-diffusion extras."""
    return name.rsplit(".", 1)[-1] in PREVIEW_EXTRAS
