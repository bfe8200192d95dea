"""The model configuration: backbone fields plus the block-diffusion fields, read from a checkpoint folder.

Clover's `config.json` may be flat or nest the backbone under `text_config`; layer kinds come from
`layer_types` or `full_attention_interval`. The diffusion fields were never seen in a real file, so each has
a documented fallback (see shared/docs/clover-model.md) and a missing mask token fails with a message that
names the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clover_local.errors import CloverError

KNOWN_MODEL_TYPES = {"clover_moe", "clover_moe_text", "qwen3_5_moe", "qwen3_5_moe_text"}
MAX_CONTEXT = 131_072


def check_min_context(context: int, flag: str = "--context") -> None:
    """The least context that can hold an answer (before any config is read: a flag's check)."""
    if context < 2:
        raise CloverError(f"{flag} must be at least 2 (a prompt token and an answer token), got {context}")


@dataclass
class DiffusionConfig:
    """How a block is denoised. `logits_shifted`: Dream style (row i-1 predicts token i) vs LLaDA (row i)."""

    block_size: int = 32
    threshold: float = 0.95
    mask_token_id: int | None = None
    logits_shifted: bool = False


@dataclass
class CloverConfig:
    hidden_size: int
    num_hidden_layers: int
    layer_types: list[str]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    vocab_size: int
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    eos_token_ids: list[int] = field(default_factory=list)
    max_position_embeddings: int = MAX_CONTEXT
    model_type: str = "clover_moe"
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gdn_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def gdn_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def gdn_conv_dim(self) -> int:
        return 2 * self.gdn_key_dim + self.gdn_value_dim

    @property
    def max_context(self) -> int:
        return min(MAX_CONTEXT, self.max_position_embeddings)

    def check_context(self, context: int | None, flag: str = "--context") -> None:
        """A context the model can hold: at least a prompt token and an answer token, at most its own limit
        (a larger one used to be planned for, or silently cut to the limit when loading)."""
        if context is None:
            return
        check_min_context(context, flag)
        if context > self.max_context:
            raise CloverError(f"{flag} {context:,} is above this model's context of {self.max_context:,} tokens: "
                              "give at most that")

    def is_attention(self, layer: int) -> bool:
        return self.layer_types[layer] == "full_attention"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_BACKBONE_INTS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "vocab_size",
)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise CloverError(f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CloverError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CloverError(f"{path} does not hold a JSON object")
    return data


def _layer_types(text: dict[str, Any], n_layers: int) -> list[str]:
    if "layer_types" in text and text["layer_types"] is not None:
        types = list(text["layer_types"])
        if len(types) != n_layers:
            raise CloverError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
        bad = sorted({t for t in types if t not in ("full_attention", "linear_attention")})
        if bad:
            raise CloverError(f"config.json: unknown layer type {bad[0]!r} in layer_types")
        return types
    interval = int(text.get("full_attention_interval", 4))
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]


def _eos_ids(*sources: Any) -> list[int]:
    ids: list[int] = []
    for src in sources:
        if src is None:
            continue
        for v in src if isinstance(src, list) else [src]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    return ids


def parse_config(raw: dict[str, Any], generation: dict[str, Any] | None = None) -> CloverConfig:
    """Build a CloverConfig from config.json contents (and generation_config.json when present)."""
    generation = generation or {}
    model_type = raw.get("model_type")
    if model_type not in KNOWN_MODEL_TYPES:
        raise CloverError(
            f"config.json: model_type {model_type!r} is not a Clover model "
            f"(expected one of {', '.join(sorted(KNOWN_MODEL_TYPES))})"
        )
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    missing = [k for k in _BACKBONE_INTS if k not in text]
    if missing:
        raise CloverError(f"config.json: missing field {missing[0]!r}")
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    n_layers = int(text["num_hidden_layers"])
    head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])

    def pick(key: str, default: Any) -> Any:
        for src in (generation, raw, text):
            if src.get(key) is not None:
                return src[key]
        return default

    shifted = pick("logits_shifted", None)
    if shifted is None:
        shifted = pick("shift_logits", False)
    diffusion = DiffusionConfig(
        block_size=int(pick("block_size", 32)),
        threshold=float(pick("threshold", 0.95)),
        mask_token_id=pick("mask_token_id", None),
        logits_shifted=bool(shifted),
    )
    if diffusion.block_size < 1:
        raise CloverError(f"config: block_size must be positive, got {diffusion.block_size}")
    return CloverConfig(
        **{k: int(text[k]) for k in _BACKBONE_INTS},
        layer_types=_layer_types(text, n_layers),
        head_dim=head_dim,
        shared_expert_intermediate_size=int(
            text.get("shared_expert_intermediate_size") or text["moe_intermediate_size"]
        ),
        rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10_000_000.0))),
        partial_rotary_factor=float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        eos_token_ids=_eos_ids(generation.get("eos_token_id"), text.get("eos_token_id"), raw.get("eos_token_id")),
        max_position_embeddings=int(text.get("max_position_embeddings", MAX_CONTEXT)),
        model_type=str(model_type),
        diffusion=diffusion,
    )


def load_config(folder: str | Path) -> CloverConfig:
    """Read config.json (+ generation_config.json) from a checkpoint or pack folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CloverError(f"{folder} is not a folder")
    raw = _read_json(folder / "config.json")
    gen_path = folder / "generation_config.json"
    generation = _read_json(gen_path) if gen_path.exists() else {}
    return parse_config(raw, generation)
