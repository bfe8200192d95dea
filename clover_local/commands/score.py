"""`clover-local score`: causal-path log-probabilities of a text (the parity check against other engines)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import torch
import typer

from clover_local.cli import app
from clover_local.errors import CloverError

CHUNK = 512  # rows per causal pass: bounds activation memory on long texts


def score_ids(model, ids: list[int]) -> list[float]:
    """logprobs[i] = log p(ids[i+1] | ids[..i]), computed in chunks through the prefix cache."""
    cache = model.new_cache()
    device = model.embed_tokens.weight.device
    out: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(ids) - 1, CHUNK):
            chunk = ids[start : min(start + CHUNK, len(ids) - 1)]
            logits = model(torch.tensor([chunk], device=device), cache)[0]
            targets = torch.tensor(ids[start + 1 : start + 1 + len(chunk)], device=device)
            lp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
            out.extend(lp.tolist())
    return out


@app.command()
def score(
    model: str = typer.Argument(..., help="Checkpoint folder, Hub repo id, or 'tiny' (the shipped model)."),
    text: Optional[str] = typer.Option(None, "--text", help="Text to score."),
    file: Optional[Path] = typer.Option(None, "--file", help="UTF-8 file to score instead of --text."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = typer.Option("auto", "--dtype", help="float32 or bfloat16 (auto: bf16 on GPU, fp32 on CPU)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"token_ids", "logprobs", "ppl"}.'),
) -> None:
    """Score a text with the causal pass: per-token log-probabilities and perplexity.

    logprobs[i] is log p(token_ids[i+1] | token_ids[..i]).

    Example: clover-local score tiny --text "add 12+30" --json
    """
    from clover_local.loader import load

    if (text is None) == (file is None):
        raise CloverError("give exactly one of --text or --file")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CloverError(f"cannot read {file}: {exc}") from None
    loaded = load(model, device, dtype)
    ids = loaded.tokenizer.encode(text or "")
    if len(ids) < 2:
        raise CloverError("the text must have at least two tokens to score")
    if len(ids) > loaded.config.max_context:
        raise CloverError(f"the text has {len(ids)} tokens, over the context of {loaded.config.max_context}")
    logprobs = score_ids(loaded.model, ids)
    ppl = math.exp(-sum(logprobs) / len(logprobs))
    if as_json:
        print(json.dumps({"token_ids": ids, "logprobs": logprobs, "ppl": ppl}))
    else:
        print(f"{len(ids)} tokens, mean log-prob {sum(logprobs) / len(logprobs):.4f}, perplexity {ppl:.4f}")
