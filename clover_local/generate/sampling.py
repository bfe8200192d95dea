"""Choosing a token and its confidence for each masked position."""

from __future__ import annotations

import math

import torch

from clover_local.errors import CloverError
from clover_local.generate.ranges import Penalties


def choose(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None, top_k: int = 0,
    min_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N,V] fp32 → (token ids [N], confidence [N]).

    Greedy (temperature 0): the argmax and its softmax probability. Sampled: draw from the temperature-scaled
    distribution cut as transformers cuts it, in this order — `top_k` (the k likeliest, exactly k: a token tied with
    the k-th may be left out; 0 keeps all: with it, the cuts and the draw run on k columns, not the vocabulary), `top_p`
    (the likeliest up to that mass), `min_p` (those at least min_p times as likely as the likeliest; 0 keeps
    all) — each renormalised; the confidence is the drawn token's probability in it (as LLaDA-style
    low-confidence remasking does), so a flat distribution reveals slowly. (Qwen's cards recommend top_k 20 for
    the family's models.)

    The draw stays on the logits' device: each row's argmax of p / E with E ~ Exp(1) drawn per token (the
    "exponential race": row i wins with probability p_i / sum p, an exact categorical draw). Why: `multinomial`
    on the host meant copying [rows, 248,320] probabilities off the GPU every pass (32 MB at a block's first
    pass) and drawing on the CPU, ≈ 0.2 s a pass on a 2-core host — more than the pass itself. `generator`
    must be on the logits' device (`device_generator`).
    """
    if temperature <= 0:  # the argmax's softmax probability, without writing the [N, V] probabilities
        best, ids = logits.max(-1)
        return ids, torch.exp(best - torch.logsumexp(logits, -1))
    probs = torch.softmax(logits / temperature, -1)
    columns = None  # with top_k: the token id of each of probs' columns
    if 0 < top_k < probs.shape[-1]:  # the draw among the k likeliest alone: [N, k] from here on, not [N, V]
        probs, columns = probs.topk(top_k, -1)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p < 1.0:
        sorted_p, order = _most_likely(probs, top_p)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        keep[..., 0] = True  # always keep the top token (top_p = 0 would otherwise keep nothing: 0/0 = NaN)
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    if min_p > 0.0:
        probs = probs * (probs >= min_p * probs.max(-1, keepdim=True).values)
        probs = probs / probs.sum(-1, keepdim=True)
    # E = -log U, U uniform in [0, 1): never 0, so an excluded token (p = 0) never wins (torch's exponential_ is
    # the same draw, 4× slower on a CPU)
    race = torch.rand(probs.shape, generator=generator, device=probs.device).log_().neg_()
    ids = torch.div(probs, race).argmax(-1)
    conf = probs.gather(-1, ids[:, None]).squeeze(-1)
    return (ids if columns is None else columns.gather(-1, ids[:, None]).squeeze(-1)), conf


class LogitBias:
    """OpenAI's `logit_bias`: a value from -100 to 100 added to a token's logit at every masked position of every
    pass (-100 all but bans the token, 100 all but forces it; constrained answers choose among the biased logits
    too). The ids and values go to the logits' device once, at the first pass."""

    def __init__(self, bias: dict[int, float]) -> None:
        self.bias = bias
        self._on: tuple[torch.Tensor, torch.Tensor] | None = None

    def apply(self, logits: torch.Tensor) -> None:
        if self._on is None:  # (one answer's logits stay on one device)
            self._on = (torch.tensor(list(self.bias), device=logits.device),
                        torch.tensor(list(self.bias.values()), device=logits.device, dtype=logits.dtype))
        ids, values = self._on
        logits[:, ids] += values


class TokenCounts:
    """How often the answer holds each token, and which tokens the prompt or the answer holds, kept on the
    logits' device so that a penalised pass reads nothing back (one [V] vector each, updated by the revealed ids)."""

    def __init__(self, vocab: int, device: torch.device, prompt_ids: list[int]) -> None:
        self.counts = torch.zeros(vocab, device=device)
        self.seen = torch.zeros(vocab, dtype=torch.bool, device=device)
        if prompt_ids:
            self.seen[torch.tensor(prompt_ids, device=device)] = True

    def add(self, ids: list[int]) -> None:
        if ids:
            index = torch.tensor(ids, device=self.counts.device)
            self.counts.index_add_(0, index, torch.ones(len(ids), device=self.counts.device))
            self.seen[index] = True

    def apply(self, logits: torch.Tensor, p: Penalties) -> torch.Tensor:
        """`logits` [N, V] with the penalties applied (in place)."""
        if p.repetition != 1.0:
            scaled = torch.where(logits > 0, logits / p.repetition, logits * p.repetition)
            logits.copy_(torch.where(self.seen, scaled, logits))
        if p.frequency != 0.0:
            logits.sub_(p.frequency * self.counts)
        if p.presence != 0.0:
            logits.sub_(p.presence * (self.counts > 0).float())
        return logits


# top-p keeps the most likely tokens up to a mass: they are nearly always among the first TOP_P_CUT
TOP_P_CUT = 1024


def _most_likely(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's probabilities in descending order with their token ids, far enough to cover `top_p`: the first
    TOP_P_CUT when their mass reaches top_p in every row (everything past them would be cut: the same tokens
    kept as with the whole vocabulary sorted), else the whole row. Why: sorting 248,320 tokens a row each pass
    is the costliest part of a draw (1 s a pass on a 2-core CPU; a top-1024 selection 24 ms)."""
    if probs.shape[-1] > TOP_P_CUT:
        head, order = probs.topk(TOP_P_CUT, -1)
        if bool((head.sum(-1) >= top_p).all()):
            return head, order
    return probs.sort(-1, descending=True)


def device_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A seeded generator where `choose` draws (None: torch's default one there). Any integer seeds it: torch
    takes 64 bits (a negative seed as its two's complement, which `% 2**64` keeps) and raised on a wider one —
    `--seed 99999999999999999999`, a client's 20-digit seed."""
    return torch.Generator(device).manual_seed(seed % 2**64) if seed is not None else None


def check_finite(confidence: list[float]) -> None:
    """NaN confidences: the pass's logits were not finite (a pass that never synced midway, an optimistic one,
    carries NaN hidden states to here without stopping)."""
    if any(math.isnan(c) for c in confidence):
        raise CloverError("the model's logits for this pass are not finite (NaN): a kernel or weight problem; "
                          "`python -m clover_local.runtime.gpu_check --stages finite` names the first module "
                          "that made them")


def sure_enough(confidence: float, n: int, threshold: float, factor: float = 0.0) -> bool:
    """Whether a pass's n-th reveal (counted from 1, most confident first) at this confidence is revealed now. The
    threshold rule (the vendor's, SGLang's LowConfidence): at least `threshold` confident, and a threshold of 1.0
    or more means one a pass. With `factor` > 0, Fast-dLLM's factor rule (Wu et al. 2025) instead:
    (n + 1)(1 - confidence) < factor — the more revealed at once, the surer each must be. On the tiny model factor
    1 reveals 13–18 % more tokens a pass than threshold 0.9 for 0.3–1 point of accuracy, and factor 0.5 as many with
    as much (BENCHMARKS.md "Reveal rules")."""
    if factor > 0.0:
        return (n + 1) * (1.0 - confidence) < factor
    return confidence >= threshold and (threshold < 1.0 or n == 1)


def pick_reveals(confidence: torch.Tensor | list[float], threshold: float, factor: float = 0.0) -> list[int]:
    """Indices (into `confidence`, ascending) to reveal this pass: the most confident while `sure_enough` takes
    them, and at least the most confident one. Works on host floats (the decoder reads a pass's confidences off the
    device once)."""
    conf = confidence.tolist() if isinstance(confidence, torch.Tensor) else list(confidence)
    check_finite(conf)
    order = sorted(range(len(conf)), key=conf.__getitem__, reverse=True)  # (equals: the first first)
    n = 1
    while n < len(order) and sure_enough(conf[order[n]], n + 1, threshold, factor):
        n += 1
    return sorted(order[:n])
