"""Choosing a token and its confidence for each masked position."""

from __future__ import annotations

import torch


def choose(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N,V] fp32 → (token ids [N], confidence [N]).

    Greedy (temperature 0): the argmax and its softmax probability. Sampled: draw from the temperature-scaled,
    top-p-truncated distribution; the confidence is the drawn token's probability in it (as LLaDA-style
    low-confidence remasking does), so a flat distribution reveals slowly.
    """
    if temperature <= 0:
        probs = torch.softmax(logits, -1)
        conf, ids = probs.max(-1)
        return ids, conf
    probs = torch.softmax(logits / temperature, -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        keep[..., 0] = True  # always keep the top token (top_p = 0 would otherwise keep nothing: 0/0 = NaN)
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    ids = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(probs.device)
    return ids, probs.gather(-1, ids[:, None]).squeeze(-1)


def pick_reveals(confidence: torch.Tensor, threshold: float) -> list[int]:
    """Indices (into `confidence`) to reveal this pass: every one at or above the threshold, and at least the
    single most confident. A threshold of 1.0 or more means exactly one per pass."""
    best = int(confidence.argmax())
    if threshold >= 1.0:
        return [best]
    chosen = (confidence >= threshold).nonzero().flatten().tolist()
    return chosen if chosen else [best]
