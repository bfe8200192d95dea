"""The model configuration: backbone fields plus the block-diffusion fields, read from a checkpoint folder.

Clover's `config.json` may be flat or nest the backbone under `text_config`; layer kinds come from
`layer_types` or `full_attention_interval`. The diffusion fields were never seen in a real file, so each has
a documented fallback (see shared/docs/clover-model.md) and a missing mask token fails with a message that
names the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clover_local.errors import CloverError
from clover_local.text_files import parse_json

KNOWN_MODEL_TYPES = {"clover_moe", "clover_moe_text", "qwen3_5_moe", "qwen3_5_moe_text"}
MAX_CONTEXT = 131_072
PAST_ANY_MODEL = {"num_hidden_layers": 1_000, "num_experts": 4_096}  # (the 35B: 40 layers of 256 experts)


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
        data = parse_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CloverError(f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CloverError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CloverError(f"{path} does not hold a JSON object")
    return data


def _layer_types(text: dict[str, Any], n_layers: int) -> list[str]:
    if "layer_types" in text and text["layer_types"] is not None:
        if not isinstance(text["layer_types"], list):
            raise CloverError(f"config.json: layer_types must be a list, got {text['layer_types']!r}")
        types = list(text["layer_types"])
        if len(types) != n_layers:
            raise CloverError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
        bad = sorted({t for t in types if t not in ("full_attention", "linear_attention")})
        if bad:
            raise CloverError(f"config.json: unknown layer type {bad[0]!r} in layer_types")
        return types
    interval = _whole(text, "full_attention_interval", 4)
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
    if not isinstance(model_type, str) or model_type not in KNOWN_MODEL_TYPES:
        raise CloverError(
            f"config.json: model_type {model_type!r} is not a Clover model "
            f"(expected one of {', '.join(sorted(KNOWN_MODEL_TYPES))})"
        )
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    missing = [k for k in _BACKBONE_INTS if k not in text]
    if missing:
        raise CloverError(f"config.json: missing field {missing[0]!r}")
    ints = {k: _whole(text, k) for k in _BACKBONE_INTS}
    for part, whole in (("num_key_value_heads", "num_attention_heads"),
                        ("linear_num_key_heads", "linear_num_value_heads")):
        if ints[whole] % ints[part]:
            raise CloverError(f"config.json: {whole} ({ints[whole]}) must be a multiple of {part} ({ints[part]})")
    if ints["num_experts_per_tok"] > ints["num_experts"]:
        raise CloverError(f"config.json: num_experts_per_tok ({ints['num_experts_per_tok']}) is more than "
                          f"num_experts ({ints['num_experts']})")
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise CloverError(f"config.json: rope_parameters must be an object, got {rope!r}")
    # tables of layers and of experts are built before any weight is read: a typo must not fill the RAM
    for key, most in PAST_ANY_MODEL.items():
        if ints[key] > most:
            raise CloverError(f"config.json: {key} {ints[key]:,} is past any model's (at most {most:,} here)")
    n_layers = ints["num_hidden_layers"]
    head_dim = _whole(text, "head_dim", ints["hidden_size"] // ints["num_attention_heads"])

    def holder(key: str) -> tuple[dict[str, Any], str]:
        """The first of generation_config.json, config.json and its text_config that sets `key`, and its name."""
        for src, name in ((generation, "generation_config.json"), (raw, "config.json"), (text, "config.json")):
            if src.get(key) is not None:
                return src, name
        return {}, "config.json"

    shifted = holder("logits_shifted")[0].get("logits_shifted")
    if shifted is None:
        shifted = holder("shift_logits")[0].get("shift_logits", False)
    block_src, block_where = holder("block_size")
    threshold_src, threshold_where = holder("threshold")
    mask_src, mask_where = holder("mask_token_id")
    diffusion = DiffusionConfig(
        block_size=_whole(block_src, "block_size", 32, where=block_where),
        threshold=_real(threshold_src, "threshold", 0.95, high=1.0, where=threshold_where),
        mask_token_id=_whole(mask_src, "mask_token_id", least=0, where=mask_where) if mask_src else None,
        logits_shifted=bool(shifted),
    )
    return CloverConfig(
        **ints,
        layer_types=_layer_types(text, n_layers),
        head_dim=head_dim,
        shared_expert_intermediate_size=_whole(text, "shared_expert_intermediate_size", ints["moe_intermediate_size"]),
        rope_theta=_real(rope, "rope_theta", _real(text, "rope_theta", 10_000_000.0)),
        partial_rotary_factor=_real(rope, "partial_rotary_factor", _real(text, "partial_rotary_factor", 0.25),
                                    high=1.0),
        rms_norm_eps=_real(text, "rms_norm_eps", 1e-6),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        eos_token_ids=_eos_ids(generation.get("eos_token_id"), text.get("eos_token_id"), raw.get("eos_token_id")),
        max_position_embeddings=_whole(text, "max_position_embeddings", MAX_CONTEXT, least=2),
        model_type=str(model_type),
        diffusion=diffusion,
    )


def _whole(src: dict[str, Any], key: str, default: int | None = None, least: int = 1, where: str = "config.json"
           ) -> int:
    """A field that counts something, as a whole number ≥ `least` (null or absent: `default`); anything else is
    a broken config.json, named in one line rather than met as a traceback deep in the model's construction."""
    value = src.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise CloverError(f"{where}: {key} must be a whole number of at least {least}, got {value!r}")
    return value


def _real(src: dict[str, Any], key: str, default: float, low: float = 0.0, high: float = math.inf,
          where: str = "config.json") -> float:
    """A field that is a finite number in (low, high] (absent or null: `default`)."""
    value = src.get(key)
    if value is None:
        return default
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (finite and low < value <= high):
        bound = f"in ({low:g}, {high:g}]" if high < math.inf else f"a finite number above {low:g}"
        raise CloverError(f"{where}: {key} must be {bound}, got {value!r}")
    return float(value)


def load_config(folder: str | Path) -> CloverConfig:
    """Read config.json (+ generation_config.json) from a checkpoint or pack folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CloverError(f"{folder} is not a folder")
    raw = _read_json(folder / "config.json")
    gen_path = folder / "generation_config.json"
    generation = _read_json(gen_path) if gen_path.exists() else {}
    return parse_config(raw, generation)
