"""Block-diffusion decoding (clover-model.md's loop).

Blocks are aligned to multiples of `block_size` in absolute position: the prompt's complete blocks are
prefilled causally, its tail (if any) opens the first block with the rest masked. For each block: repeat a
preview pass, reveal every masked position whose confidence reaches the threshold (at least the most
confident one); when none is masked, commit the block with a causal pass. Output stops at a stop token (what
follows it is dropped) or at `max_new_tokens`. Cost unit: one pass over `block_size` rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from clover_local.errors import CloverError
from clover_local.generate.events import BlockCommitted, DecodeStats, Event, Finished, PassDone, Reveal
from clover_local.generate.sampling import choose, pick_reveals
from clover_local.model.clover import CloverModel


@dataclass
class DecodeSettings:
    max_new_tokens: int = 512
    threshold: float = 0.95
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)


def check_context(prompt_len: int, max_new_tokens: int, limit: int) -> None:
    if prompt_len + max_new_tokens > limit:
        raise CloverError(
            f"prompt ({prompt_len} tokens) plus --max-new-tokens ({max_new_tokens}) exceeds the model's "
            f"context of {limit} tokens; shorten the prompt or lower --max-new-tokens"
        )


class BlockDiffusionDecoder:
    """Drives a model's causal and preview passes; yields events, prints nothing."""

    def __init__(self, model: CloverModel, mask_token_id: int) -> None:
        self.model = model
        self.mask_id = mask_token_id
        self.cfg = model.config
        self.block_size = self.cfg.diffusion.block_size
        self.shifted = self.cfg.diffusion.logits_shifted
        if not model.has_preview_params:
            raise CloverError(
                "this checkpoint lacks the block-diffusion GDN parameters (conv_right_weight, bd_softmax_*): "
                "it is a plain backbone, not a Clover model"
            )

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], settings: DecodeSettings) -> Iterator[Event]:
        if not prompt_ids:
            raise CloverError("the prompt is empty")
        if settings.max_new_tokens < 1:
            raise CloverError("--max-new-tokens must be at least 1")
        check_context(len(prompt_ids), settings.max_new_tokens, self.cfg.max_context)
        bs, stops = self.block_size, set(settings.stop_token_ids)
        gen = torch.Generator().manual_seed(settings.seed) if settings.seed is not None else None
        stats = DecodeStats(prompt_tokens=len(prompt_ids))
        t0 = time.perf_counter()

        cache = self.model.new_cache()
        prefill = (len(prompt_ids) // bs) * bs
        last_logits = None  # logits of the last committed row: predicts the next block's first token when shifted
        if prefill:
            last_logits = self.model(self._ids(prompt_ids[:prefill]), cache, rows=slice(-1, None))[0, -1]
        stats.prefill_seconds = time.perf_counter() - t0
        tail = prompt_ids[prefill:]
        out: list[int] = []
        block_no = 0
        while len(out) < settings.max_new_tokens:
            fixed = len(tail) if block_no == 0 else 0
            room = settings.max_new_tokens - len(out)
            targets = list(range(fixed, min(bs, fixed + room)))
            tokens: list[int | None] = (tail if block_no == 0 else []) + [None] * (bs - fixed)
            passes = 0
            while (any(tokens[p] is None for p in targets)
                   and self._settled_stop(tokens, targets, stops) is None):
                block = [self.mask_id if t is None else t for t in tokens]
                logits = self.model(self._ids(block), cache, preview=True)[0]
                if self.shifted:
                    first = last_logits if last_logits is not None else torch.zeros_like(logits[0])
                    logits = torch.cat([first[None], logits[:-1]], 0)
                logits[:, self.mask_id] = float("-inf")
                masked = [p for p in targets if tokens[p] is None]
                ids, conf = choose(logits[masked], settings.temperature, settings.top_p, gen)
                reveals = []
                for j in pick_reveals(conf, settings.threshold):
                    tokens[masked[j]] = int(ids[j])
                    reveals.append(Reveal(masked[j], int(ids[j]), float(conf[j])))
                reveals.sort(key=lambda r: r.position)
                stats.passes += 1
                yield PassDone(block_no, passes, reveals, list(tokens), fixed)
                passes += 1
            stop_at = self._settled_stop(tokens, targets, stops)
            finished = stop_at is not None
            if finished:
                stats.stop_reason = "stop"
            new = [int(t) for t in tokens[fixed : stop_at if finished else targets[-1] + 1]]  # type: ignore[arg-type]
            out.extend(new)
            stats.blocks += 1
            done = finished or len(out) >= settings.max_new_tokens
            if not done:  # commit the finished block: the next one previews against it
                logits = self.model(self._ids([int(t) for t in tokens]), cache, rows=slice(-1, None))  # type: ignore[arg-type]
                last_logits = logits[0, -1]
                stats.commits += 1
            yield BlockCommitted(block_no, new, passes)
            if done:
                break
            block_no += 1
        stats.tokens = len(out)
        stats.seconds = time.perf_counter() - t0
        yield Finished(out, stats)

    @staticmethod
    def _settled_stop(tokens: list[int | None], targets: list[int], stops: set[int]) -> int | None:
        """Block index of the first stop token once every target position before it is revealed."""
        for p in targets:
            t = tokens[p]
            if t is None:
                return None
            if t in stops:
                return p
        return None
