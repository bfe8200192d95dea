"""Named quantization profiles: which linear modules get 4-bit, which 8-bit, which stay BF16.

Routers, gates (`shared_expert_gate`, GDN `in_proj_a`/`in_proj_b`), norms, conv taps, decays, the
block-diffusion extras and the embeddings always stay in BF16/FP32: they are small and steer everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from clover_local.errors import CloverError

MIXER_LINEARS = {
    "full_attention": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
    "linear_attention": ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.out_proj"),
}
SHARED_LINEARS = ("mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj")
EXPERT_PARTS = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Profile:
    name: str
    experts: int  # bits for routed experts
    mixer: int | None  # attention / GDN projections (None = keep BF16)
    shared: int | None  # shared expert
    lm_head: int | None
    about: str


PROFILES = {
    p.name: p
    for p in (
        Profile("balanced", 4, 8, 8, 8, "4-bit experts; attention, GDN, shared experts and LM head at 8-bit"),
        Profile("compact", 4, 4, 4, 8, "everything 4-bit except the LM head (8-bit)"),
        Profile("experts-only", 4, None, None, None, "4-bit experts, everything else BF16"),
    )
}
DEFAULT_PROFILE = "balanced"


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise CloverError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def dynamic_rules(profile: Profile, bits: int) -> dict[str, dict]:
    """GPTQ `quantization_config.dynamic`: per-module exceptions to the pack's default bits, as regexes
    ('+:' = quantize with these overrides, '-:' = leave unquantized), the convention GPTQ loaders read."""
    rules: dict[str, dict] = {}
    groups = {
        r"layers\.\d+\.(self_attn|linear_attn)\.(q_proj|k_proj|v_proj|o_proj|in_proj_qkv|in_proj_z|out_proj)": profile.mixer,
        r"layers\.\d+\.mlp\.shared_expert\.(gate_proj|up_proj|down_proj)": profile.shared,
        r"lm_head": profile.lm_head,
    }
    for pattern, b in groups.items():
        full = rf".*{pattern}$" if pattern != "lm_head" else r"^lm_head$"
        if b is None:
            rules[f"-:{full}"] = {}
        elif b != bits:
            rules[f"+:{full}"] = {"bits": b}
    rules[r"-:.*(mlp\.gate|shared_expert_gate|in_proj_a|in_proj_b)$"] = {}
    return rules
