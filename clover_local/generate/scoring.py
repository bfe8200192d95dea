"""Causal-pass log-probabilities of a token sequence: `score`'s figures and the server's `logprobs`.

A block-diffusion model also reads text causally (the prompt's prefill is that pass), so log p(token | the tokens
before it) is defined for any text, generated or not. Scoring goes through the prefix cache like a prefill: the
runtime's prefill span (`CloverModel.prefill_rows`) at a time, else CHUNK rows, so a 35B pack scores in the memory
it chats in. The LM head runs on HEAD_ROWS rows at a time: at Clover's 248K vocabulary, 512 rows of fp32 logits
alone would be 0.5 GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from clover_local.generate.prompt_cache import PromptCache

CHUNK = 512  # rows per causal pass without the runtime: bounds activation memory on long texts
HEAD_ROWS = 64  # rows per LM-head call: bounds the logits (rows x vocab x 4 bytes)


@dataclass
class Scores:
    """logprobs[i] = log p(ids[i+1] | ids[..i]); top[i], when asked for, the `top` likeliest (token id, log p)
    at that position, likeliest first (the same fp32 values: a greedy token's logprob equals top[i][0][1])."""

    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)

    def add(self, logits: torch.Tensor, targets: list[int], top: int) -> None:
        """Rows of raw logits [R, V] scoring `targets` (R of them)."""
        logp = torch.log_softmax(logits.float(), -1)
        index = torch.tensor(targets, device=logp.device)[:, None]
        self.logprobs.extend(logp.gather(-1, index).squeeze(-1).tolist())
        if top:
            values, indices = logp.topk(top, -1)
            self.top.extend(list(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist()))


class Stopped(Exception):
    """`should_stop` said so between two passes."""


def _read(model, cache, inputs: list[int], targets: list[int], top: int, should_stop: Callable[[], bool] | None,
          out: Scores) -> torch.Tensor | None:
    """Causal passes of `inputs` into `cache`, row i scoring targets[i] into `out` (targets may be shorter: rows
    past them are only read); the last row's raw logits. `should_stop` is asked before each pass (True: Stopped)."""
    device = model.embed_tokens.weight.device
    step = model.prefill_rows or CHUNK
    last = None
    for start in range(0, len(inputs), step):
        if should_stop is not None and should_stop():
            raise Stopped
        chunk = inputs[start : start + step]
        hidden = model.hidden(torch.tensor([chunk], device=device), cache)[0]
        for r in range(0, len(chunk), HEAD_ROWS):
            logits = model.lm_head(hidden[r : r + HEAD_ROWS]).float()
            scored = targets[start + r : start + r + len(logits)]
            if scored:
                out.add(logits[: len(scored)], scored, top)
            last = logits[-1]
    return last


def _read_from(model, cache, last: torch.Tensor, ids: list[int], start: int, end: int, top: int,
               should_stop: Callable[[], bool] | None, out: Scores) -> torch.Tensor | None:
    """Scoring on from a snapshot after ids[:start] whose last row's logits are `last`: they score ids[start], and
    one pass over ids[start:end] scores the tokens after each row; the last row's logits (`_read`'s)."""
    out.add(last[None], [ids[start]], top)
    return _read(model, cache, ids[start:end], ids[start + 1 :], top, should_stop, out)


def score_ids(model, ids: list[int], top: int = 0, should_stop: Callable[[], bool] | None = None) -> Scores:
    """Log-probabilities of ids[1:] given what precedes each (a fresh cache: nothing of an earlier generation is
    assumed)."""
    out = Scores()
    with torch.inference_mode():
        _read(model, model.new_cache(), ids[:-1], ids[1:], top, should_stop, out)
    return out


def score_prefix(model, ids: list[int], upto: int, top: int, reuse: PromptCache,
                 should_stop: Callable[[], bool] | None = None, known: Scored | None = None) -> tuple[Scores, int]:
    """(scores of ids[1:upto], how many prompt tokens were resumed rather than read), leaving the cache after
    ids[:upto] (a whole number of blocks) saved in `reuse` with its last row's logits: where a decoder given `reuse`
    resumes. A request that wants an answer and the logprobs of its prompt reads the prompt once for both, not once
    to decode and again to score.

    `known`: the scores of the prompt a scoring request saved last (`Scored`). When `reuse` still holds a snapshot
    inside it that this prompt starts with, the prompt resumes there and only the rows after it are read: a
    harness's multiple-choice questions send one context with each answer, and all but the first read the
    context's whole blocks no more. The snapshot is taken only when those scores cover it (a snapshot of another
    prompt since, or too few alternatives listed: read afresh, and no reuse reported)."""
    out = Scores()
    n = reuse.saved_tokens
    head = known.head(ids, n, top) if known is not None and 0 < n <= upto else None
    resume = reuse.take(model, ids[:upto]) if head is not None else None
    with torch.inference_mode():
        if resume is None or resume.length != n or resume.last_logits is None:
            cache, start = model.new_cache(), 0
            last = _read(model, cache, ids[:upto], ids[1:upto], top, should_stop, out)
        else:
            cache, out, start, last = resume.cache, head, n, resume.last_logits
            if n < upto:
                last = _read_from(model, cache, last, ids[:upto], n, upto, top, should_stop, out)
        reuse.save(model, cache, ids[:upto], last)
    return out, start


@dataclass
class Scored:
    """A scored prompt prefix: its token ids and `Scores` of ids[1:]."""

    ids: list[int]
    scores: Scores

    def head(self, ids: list[int], n: int, top: int) -> Scores | None:
        """Scores of ids[1:n] when ids[:n] is within this prefix and it listed at least `top` alternatives (a copy,
        cut to `top`), else None."""
        if n > len(self.ids) or ids[:n] != self.ids[:n] or (top and len(self.scores.top) < n - 1):
            return None
        if top and n > 1 and len(self.scores.top[0]) < top:
            return None
        return Scores(self.scores.logprobs[: n - 1], [t[:top] for t in self.scores.top[: n - 1]] if top else [])


def score_rest(model, ids: list[int], upto: int, top: int, reuse: PromptCache, head: Scores,
               should_stop: Callable[[], bool] | None = None) -> Scores:
    """`head` (score_prefix's scores of ids[1:upto]) completed, in place, to all of ids[1:] from the snapshot at
    `upto` that `reuse` holds (score_prefix's, saved again by the decoder): its logits score ids[upto], one pass
    over ids[upto:-1] the rest. Nothing past `upto` (a whole-block prompt, an empty answer): `head` as it is.
    Without that snapshot (a failed or other generation since), all of ids afresh."""
    if len(ids) <= upto:
        return head
    resume = reuse.take(model, ids[:upto])
    if resume is None or resume.length != upto or resume.last_logits is None:
        return score_ids(model, ids, top, should_stop)
    reuse.save(model, resume.cache, ids[:upto], resume.last_logits)  # for the next request (score_prefix's `known`)
    with torch.inference_mode():
        _read_from(model, resume.cache, resume.last_logits, ids, upto, len(ids) - 1, top, should_stop, head)
    return head


def score_from_snapshot(model, ids: list[int], first: int, top: int, reuse: PromptCache,
                        should_stop: Callable[[], bool] | None = None) -> Scores:
    """Scores of ids[first:] alone (logprobs[i] is ids[first + i]'s), for a chat answer's tokens after its prompt
    ids[:first]. Resumes from the snapshot `reuse` holds when it is of a prefix of the prompt (the decoder's, where
    the conversation's next request resumes), so only the rows after it are read: the prompt's history is not
    read again. That snapshot is saved back before reading on, so the next request still finds it. Without one
    (a prompt under a block, another generation since), all of ids afresh."""
    if len(ids) <= first:
        return Scores()
    resume = reuse.take(model, ids[:first])
    if resume is not None:
        reuse.save(model, resume.cache, ids[: resume.length], resume.last_logits)  # the next request's, still
    if resume is None or resume.last_logits is None:
        out, start = score_ids(model, ids, top, should_stop), 1
    else:
        start = resume.length
        out = Scores()
        with torch.inference_mode():
            _read_from(model, resume.cache, resume.last_logits, ids, start, len(ids) - 1, top, should_stop, out)
    skip = first - start
    return Scores(out.logprobs[skip:], out.top[skip:])
