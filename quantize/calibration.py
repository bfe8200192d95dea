"""Calibration data: the project's set (calib_data/clover_calib.jsonl), a user's JSONL or text, or a set a
checkpoint ships (`calibration.jsonl` next to its weights, as the tiny model does).

Samples are rendered through the model's chat template, tokenised, joined and cut into `samples` sequences
of `seq_len` tokens (a multiple of the block size). Diffusion-aware calibration also builds a noisy copy of
each sequence with every block masked at its own random ratio: the preview pass sees that at generation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from clover_local.errors import CloverError
from clover_local.model.noising import mask_blocks
from clover_local.text_files import parse_json, unreadable

HOLDOUT_EVERY = 10  # sample i with i % 10 == 9 is held out for evaluation, never calibrated on


def default_calib_path() -> Path:
    return Path(str(resources.files("calib_data").joinpath("clover_calib.jsonl")))


def check_calib_file(calib: str) -> Path:
    """--calib as a path to a readable file, refused in words that match what is there (a folder is not
    "missing"), so the flags can be checked before any layer is read."""
    path = Path(calib).expanduser()
    if path.is_dir():
        raise CloverError(f"calibration file {calib} is a directory; give a .jsonl (messages or text) or .txt file")
    if not path.exists():
        raise CloverError(f"calibration file {calib} does not exist")
    if not path.is_file():
        raise CloverError(f"calibration file {calib} is not a regular file")
    return path


def resolve_calib_path(calib: str | None, source: Path) -> Path:
    if calib:
        return check_calib_file(calib)
    shipped = source / "calibration.jsonl"
    return shipped if shipped.is_file() else default_calib_path()


def read_samples(path: Path, tokenizer, refused: list[str] | None = None) -> list[str]:
    """Texts of a JSONL (`messages` rendered by the chat template, or `text`) or a .txt split on blank lines.

    A conversation the model's chat template cannot render (the shipped set has tool turns; a template without a
    tool role refuses them) is left out, and its reason appended to `refused`: the rest still calibrates. Only
    when the template renders none of them is that an error (with the template's reason)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CloverError(f"cannot read calibration file {path}: {unreadable(exc)}") from None
    texts: list[str] = []
    reasons: list[str] = []
    if path.suffix in (".jsonl", ".json"):
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = parse_json(line)
            except json.JSONDecodeError:
                raise CloverError(f"{path} line {n} is not valid JSON") from None
            if isinstance(item, dict) and isinstance(item.get("messages"), list):
                odd = next((i for i, m in enumerate(item["messages"])
                            if not isinstance(m, dict) or not isinstance(m.get("role"), str)), None)
                if odd is not None:  # (what the template reads of every message, whatever else it holds)
                    raise CloverError(f"{path} line {n}: message {odd} is not an object with a 'role'")
                try:
                    texts.append(tokenizer.apply_chat_template(item["messages"], add_generation_prompt=False))
                except CloverError as exc:
                    reasons.append(str(exc))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                texts.append(item["text"])
            else:
                raise CloverError(f"{path} line {n} has neither 'messages' (a list of chat messages) nor 'text' (a "
                                  "string)")
    else:
        texts = [t.strip() for t in raw.split("\n\n") if t.strip()]
    if not texts and reasons:
        raise CloverError(f"the model's chat template renders none of the {len(reasons)} conversations in {path} "
                          f"({reasons[0].rstrip('.')}); give --calib a file it can render, or plain text")
    if not texts:
        raise CloverError(f"calibration file {path} holds no samples")
    if refused is not None:
        refused.extend(reasons)
    return texts


@dataclass
class CalibrationSet:
    clean: torch.Tensor  # [S, L] token ids
    noisy: torch.Tensor  # [S, L] with masked positions
    path: str
    n_texts: int
    tokens: int
    refused: int = 0  # conversations the chat template could not render, left out


def build_calibration(
    path: Path, tokenizer, samples: int, seq_len: int, block_size: int, mask_id: int, seed: int,
    holdout: bool = False,
) -> CalibrationSet:
    """Token sequences for calibration (or, with `holdout`, for evaluation) from one calibration file."""
    if seq_len < block_size or seq_len % block_size:
        raise CloverError(f"--seq-len must be a positive multiple of the block size ({block_size}), got {seq_len}")
    if samples < 1:
        raise CloverError("--samples must be at least 1")
    refused: list[str] = []
    texts = read_samples(path, tokenizer, refused)
    if len(texts) >= HOLDOUT_EVERY:
        texts = [t for i, t in enumerate(texts) if (i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1) == holdout]
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(texts), generator=gen).tolist()
    stream: list[int] = []
    for i in order:
        stream.extend(tokenizer.encode(texts[i]))
        if len(stream) >= samples * seq_len:
            break
    n = min(samples, len(stream) // seq_len)
    if n == 0:
        # short data: one sequence, padded by repetition (still real text in every row)
        reps = -(-seq_len // max(len(stream), 1))
        stream = (stream * reps)[:seq_len]
        n = 1
    clean = torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)
    noisy, _ = mask_blocks(clean, block_size, mask_id, gen)
    return CalibrationSet(clean, noisy, str(path), len(texts), n * seq_len, len(refused))
