"""The safetensors index (`model.safetensors.index.json`): which shard file holds each tensor. One reader for BF16
checkpoints and packs alike, so a malformed index is the same one line wherever it is met."""

from __future__ import annotations

import json
from pathlib import Path

from clover_local.errors import CloverError
from clover_local.paths import is_plain_file_name
from clover_local.text_files import parse_json

INDEX_NAME = "model.safetensors.index.json"


def read_weight_map(index: Path, shown: str | None = None) -> dict[str, str]:
    """The index's `weight_map`: tensor name → the name of a shard file beside the index (a plain file name: a
    path elsewhere is refused, not read). FileNotFoundError passes through: each caller says what a missing index
    means. `shown`: how messages name the index (default: its path)."""
    shown = shown or str(index)
    try:
        data = parse_json(index.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CloverError(f"{shown} is not a valid safetensors index ({exc})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CloverError(f"{shown} is not a valid safetensors index (no 'weight_map' object)")
    for name, shard in weight_map.items():
        if not is_plain_file_name(shard):
            raise CloverError(f"{shown} is not a valid safetensors index ({name!r} is in {shard!r}, not a shard "
                              "file beside it)")
    return weight_map
