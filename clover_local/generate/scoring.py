"""Causal-pass log-probabilities of a token sequence: `score`'s figures and the server's `logprobs`.

A block-diffusion model also reads text causally (the prompt's prefill is that pass), so log p(token | the tokens
before it) is defined for any text, generated or not. Scoring goes through the prefix cache like a prefill: the
runtime's prefill span (`CloverModel.prefill_rows`) at a time, else CHUNK rows, so a 35B pack scores in the memory
it chats in. The LM head runs on HEAD_ROWS rows at a time: at Clover's 248K vocabulary, 512 rows of fp32 logits
alone would be 0.5 GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

CHUNK = 512  # rows per causal pass without the runtime: bounds activation memory on long texts
HEAD_ROWS = 64  # rows per LM-head call: bounds the logits (rows x vocab x 4 bytes)


@dataclass
class Scores:
    """logprobs[i] = log p(ids[i+1] | ids[..i]); top[i], when asked for, the `top` likeliest (token id, log p)
    at that position, likeliest first (the same fp32 values: a greedy token's logprob equals top[i][0][1])."""

    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)


class Stopped(Exception):
    """`should_stop` said so between two passes."""


def score_ids(model, ids: list[int], top: int = 0, should_stop: Callable[[], bool] | None = None) -> Scores:
    """Log-probabilities of ids[1:] given what precedes each (a fresh cache: nothing of an earlier generation is
    assumed). `should_stop` is asked before each pass; True raises Stopped."""
    cache = model.new_cache()
    device = model.embed_tokens.weight.device
    chunk_rows = model.prefill_rows or CHUNK
    out = Scores()
    with torch.inference_mode():
        for start in range(0, len(ids) - 1, chunk_rows):
            if should_stop is not None and should_stop():
                raise Stopped
            chunk = ids[start : min(start + chunk_rows, len(ids) - 1)]
            hidden = model.hidden(torch.tensor([chunk], device=device), cache)[0]
            targets = torch.tensor(ids[start + 1 : start + 1 + len(chunk)], device=device)
            for r in range(0, len(chunk), HEAD_ROWS):
                logp = torch.log_softmax(model.lm_head(hidden[r : r + HEAD_ROWS]).float(), -1)
                out.logprobs.extend(logp.gather(-1, targets[r : r + HEAD_ROWS, None]).squeeze(-1).tolist())
                if top:
                    values, indices = logp.topk(top, -1)
                    out.top.extend(list(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist()))
    return out
