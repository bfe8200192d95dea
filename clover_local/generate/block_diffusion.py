"""Block-diffusion decoding (clover-model.md's loop).

Blocks are aligned to multiples of `block_size` in absolute position: the prompt's complete blocks are
prefilled causally, its tail (if any) opens the first block with the rest masked. For each block: repeat a
preview pass, reveal every masked position whose confidence reaches the threshold (at least the most
confident one; or by Fast-dLLM's factor rule, `DecodeSettings.factor`); when none is masked, commit the block
with a causal pass. Output stops at a stop token (what follows it is dropped) or at `max_new_tokens`. Cost unit:
one pass over `block_size` rows.

A commit that another block follows is merged with that block's first preview (all masks, so known in advance)
into one pass (`CloverModel.commit_and_preview`: same tokens, each weight read once for both); `merge_commits=
False` or `CLOVER_MERGE_COMMITS=0` runs them as two passes.

With a `PromptCache` (`reuse=`), the prefill resumes after the longest saved block-aligned prefix of the prompt
and the cache is saved again at a block boundary of this prompt (generate/prompt_cache.py).

Held answers: a `constraint` (JSON mode, a schema, a forced call) reveals each block left to right from the start
(`constrained_reveals`); a `trigger` (serve's auto tool calls) leaves the answer free until the trigger's text
shows in a block's settled run, then masks again what follows it beyond what the grammar takes, and holds the rest
the same way (generate/trigger.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

import torch

from clover_local.errors import CloverError
from clover_local.generate.events import BlockCommitted, DecodeStats, Event, Finished, PassDone, PrefillProgress, Reveal
from clover_local.generate.json_mode import ByteConstraint, PrefixState
from clover_local.generate.prompt_cache import PromptCache
from clover_local.generate.ranges import Penalties
from clover_local.generate.sampling import (LogitBias, TokenCounts, check_finite, choose, device_generator,
                                            pick_reveals, sure_enough)
from clover_local.generate.thinking import BudgetTracker, ThinkBudget
from clover_local.generate.trigger import Trigger
from clover_local.model.cache import PrefixCache
from clover_local.model.clover import CloverModel


@dataclass
class DecodeSettings:
    max_new_tokens: int = 512
    threshold: float = 0.95
    factor: float = 0.0  # > 0: Fast-dLLM's factor rule instead of the threshold (sampling.sure_enough)
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token (sampling.choose)
    min_p: float = 0.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    penalties: Penalties = field(default_factory=Penalties)
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit (sampling.LogitBias)
    # JSON mode: the answer is one JSON object (json_mode.py), or one value a JSON schema allows (json_schema.py)
    constraint: ByteConstraint | None = None
    think_budget: ThinkBudget | None = None  # the most tokens the thinking may take (thinking.py)
    # free text until the trigger (`<tool_call>`), then held to its grammar (trigger.py: serve's auto tool calls)
    trigger: Trigger | None = None


def _index(rows: list[int]) -> slice | list[int]:
    """Ascending row numbers as an index: a slice when they are consecutive (a view, no copy), else the list."""
    if not rows:
        return slice(0, 0)
    if rows[-1] - rows[0] == len(rows) - 1:
        return slice(rows[0], rows[-1] + 1)
    return rows


def whole_blocks(n: int, block_size: int) -> int:
    """The first `n` tokens cut down to whole blocks: the part of a prompt that is prefilled (its tail goes
    through the answer's first block with the first masks), and where a prompt cache can be saved."""
    return n // block_size * block_size


def check_context(prompt_len: int, max_new_tokens: int, limit: int) -> None:
    if prompt_len + max_new_tokens > limit:
        raise CloverError(
            f"prompt ({prompt_len} tokens) plus --max-new-tokens ({max_new_tokens}) exceeds the model's "
            f"context of {limit} tokens; shorten the prompt or lower --max-new-tokens"
        )


def constrained_reveals(settings: DecodeSettings, constraint: ByteConstraint, shape: PrefixState,
                        masked: list[int], logits: torch.Tensor, ids: list[int], conf: list[float]
                        ) -> tuple[list[Reveal], PrefixState]:
    """JSON mode's reveals this pass (json_mode.py): the leftmost masked position — the model's choice if the
    constraint allows it, else the likeliest token it allows — then, while the model's own choices (that first
    one's included) are allowed and sure enough (the reveal rule, `sampling.sure_enough`, counting the run's
    reveals), the positions right after it: they were predicted with the first one masked, so after a replaced
    or unsure token they wait for the next pass. Masked positions are always the block's last ones here."""
    check_finite(conf)
    stops = settings.stop_token_ids

    def sure(j: int) -> bool:  # the run's (j + 1)-th reveal
        return sure_enough(conf[j], j + 1, settings.threshold, settings.factor)

    token, nxt, first_conf = ids[0], constraint.advance(shape, ids[0]), conf[0]
    run = nxt is not None and sure(0)  # the next ones were predicted beside this one
    if nxt is None:
        token, nxt = constraint.likeliest_allowed(shape, logits[0])
        first_conf = float(torch.softmax(logits[0].float(), -1)[token])
    reveals = [Reveal(masked[0], token, first_conf)]
    j = 1
    while run and token not in stops and j < len(masked) and sure(j):
        after = constraint.advance(nxt, ids[j])
        if after is None:
            break
        token, nxt = ids[j], after
        reveals.append(Reveal(masked[j], token, conf[j]))
        j += 1
    return reveals, nxt


class _Picker:
    """What decides one answer's tokens pass after pass, with the state it carries between passes: the logits'
    adjustments (penalties against the answer's token counts, logit bias, the mask token and, before the thinking
    budget's closing text, `</think>` refused), the draw, the reveal rule, and what holds the answer — a
    constraint (JSON mode, a schema, a forced call) from the start, or serve's auto tool calls' grammar from
    their trigger on — with the thinking budget's closing text placed into the blocks."""

    def __init__(self, settings: DecodeSettings, prompt_ids: list[int], mask_id: int) -> None:
        self.settings, self.prompt_ids, self.mask_id = settings, prompt_ids, mask_id
        # made on the logits' device at the first pass that needs them (the runtime keeps the embeddings on the
        # host): the sampling generator, the answer's token counts for the penalties
        self.gen: torch.Generator | None = None
        self.counts: TokenCounts | None = None
        self.bias = LogitBias(settings.logit_bias) if settings.logit_bias else None
        self.constraint = settings.constraint
        self.shape = self.constraint.start() if self.constraint else None  # the answer so far, as the constraint
        self.watch = settings.trigger.watch() if settings.trigger else None  # until the trigger holds the answer
        self.thinking = BudgetTracker(settings.think_budget) if settings.think_budget else None

    def place_thinking(self, tokens: list[int | None], written: int, first: int, end: int) -> int:
        """The thinking budget's closing text placed into a new block whose answer positions are [first, end)
        (`written` answer tokens before it; not counted by the penalties: the model did not choose them); the
        position before which `</think>` is refused."""
        if self.thinking is None:
            return first
        placed, no_end_before = self.thinking.place(written, first, end)
        for p, t in placed:
            tokens[p] = t
        return no_end_before

    def reveal(self, logits: torch.Tensor, tokens: list[int | None], masked: list[int], targets: list[int],
               no_end_before: int) -> list[Reveal]:
        """One pass's reveals from the logits of the `masked` positions, written into `tokens` (where the trigger
        shows, what its grammar does not take is masked again)."""
        s = self.settings
        if s.penalties.active:
            if self.counts is None:
                self.counts = TokenCounts(logits.shape[-1], logits.device, self.prompt_ids)
            self.counts.apply(logits, s.penalties)
        if self.bias is not None:
            self.bias.apply(logits)
        logits[:, self.mask_id] = float("-inf")
        if no_end_before > masked[0]:
            logits[[j for j, p in enumerate(masked) if p < no_end_before], self.thinking.end_id] = float("-inf")
        if self.gen is None and s.temperature > 0:
            self.gen = device_generator(s.seed, logits.device)
        ids, conf = choose(logits, s.temperature, s.top_p, self.gen, s.top_k, s.min_p)
        ids_h, conf_h = ids.tolist(), conf.tolist()  # one read each off the device, not one per reveal
        if self.shape is None:
            reveals = sorted((Reveal(masked[j], ids_h[j], conf_h[j])
                              for j in pick_reveals(conf_h, s.threshold, s.factor)), key=lambda r: r.position)
        else:
            reveals, self.shape = constrained_reveals(s, self.constraint, self.shape, masked, logits, ids_h, conf_h)
        for r in reveals:
            tokens[r.position] = r.token_id
        if self.watch is not None and self.shape is None:
            hit = self.watch.find(_run(tokens, targets))
            if hit is not None:  # held from here: what the grammar did not take is masked again
                kept, self.shape = hit
                self.constraint, cut = s.trigger.constraint, targets[0] + kept
                for p in targets[kept:]:
                    tokens[p] = None
                reveals = [r for r in reveals if r.position < cut]
        if self.counts is not None:
            self.counts.add([r.token_id for r in reveals])
        return reveals

    def committed(self, written: int, new: list[int]) -> None:
        """A block's answer tokens `new`, after `written` others."""
        if self.thinking is not None:
            self.thinking.committed(written, new)
        if self.watch is not None and self.shape is None:
            self.watch.committed(new)


def _run(tokens: list[int | None], targets: list[int]) -> list[int]:
    """The block's answer tokens (`targets`: their positions) from its start up to its first masked one."""
    run: list[int] = []
    for p in targets:
        t = tokens[p]
        if t is None:
            break
        run.append(t)
    return run


class BlockDiffusionDecoder:
    """Drives a model's causal and preview passes; yields events, prints nothing."""

    def __init__(self, model: CloverModel, mask_token_id: int, merge_commits: bool | None = None) -> None:
        self.model = model
        self.mask_id = mask_token_id
        if merge_commits is None:
            merge_commits = os.environ.get("CLOVER_MERGE_COMMITS", "1") != "0"
        self.merge_commits = merge_commits
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
        """Where token ids are made: the embedding table's device. The runtime keeps that table on the host
        (`HostEmbedding.table`), so ids made there skip a copy to the GPU and a synchronising copy back."""
        emb = self.model.embed_tokens
        return getattr(emb, "table", emb.weight).device

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], settings: DecodeSettings, reuse: PromptCache | None = None,
                 snapshot_at: int | None = None) -> Iterator[Event]:
        """Decode one answer. `reuse`: resume from (and save again into) this prompt cache; `snapshot_at`: where
        the next prompt is expected to stop repeating this one (a chat: the history without the generation
        prompt), the save point being the last block boundary at or before it (default: the whole prefill).
        A generation that fails clears `reuse`; one stopped early does not, whether closed (GeneratorExit) or
        interrupted (KeyboardInterrupt: Ctrl-C, which chat raises inside the decoder's thread): what `reuse`
        holds then is either nothing (stopped before the save point) or a complete snapshot, which later passes
        cannot reach (its GDN states are copies; keys/values past it are cut off when it is resumed)."""
        if not prompt_ids:
            raise CloverError("the prompt is empty")
        if settings.max_new_tokens < 1:
            raise CloverError("--max-new-tokens must be at least 1")
        check_context(len(prompt_ids), settings.max_new_tokens, self.cfg.max_context)
        try:
            yield from self._generate(prompt_ids, settings, reuse, snapshot_at)
        except (GeneratorExit, KeyboardInterrupt):  # a stop, not a failure: the saved prefix stays
            raise
        except BaseException:
            if reuse is not None:
                reuse.clear()
            raise

    def _generate(self, prompt_ids: list[int], settings: DecodeSettings, reuse: PromptCache | None,
                  snapshot_at: int | None) -> Iterator[Event]:
        bs, stops = self.block_size, set(settings.stop_token_ids)
        picker = _Picker(settings, prompt_ids, self.mask_id)
        stats = DecodeStats(prompt_tokens=len(prompt_ids))
        t0 = time.perf_counter()

        prefill = whole_blocks(len(prompt_ids), bs)
        # last_logits: of the last committed row; predicts the next block's first token when shifted
        cache, last_logits, stats.reused_tokens = yield from self._prefill(prompt_ids[:prefill], reuse, snapshot_at)
        stats.prefill_seconds = time.perf_counter() - t0
        tail = prompt_ids[prefill:]
        out: list[int] = []
        block_no = 0
        first_preview = None  # logits of this block's first preview, from the last block's merged commit
        while len(out) < settings.max_new_tokens:
            fixed = len(tail) if block_no == 0 else 0
            targets = list(range(fixed, min(bs, fixed + settings.max_new_tokens - len(out))))
            tokens: list[int | None] = (tail if block_no == 0 else []) + [None] * (bs - fixed)
            no_end_before = picker.place_thinking(tokens, len(out), fixed, targets[-1] + 1)
            passes = 0
            while (any(tokens[p] is None for p in targets)
                   and self._settled_stop(tokens, targets, stops) is None):
                masked = [p for p in targets if tokens[p] is None]
                logits = self._masked_logits(tokens, masked, cache, last_logits, first_preview)
                first_preview = None
                reveals = picker.reveal(logits, tokens, masked, targets, no_end_before)
                stats.passes += 1
                yield PassDone(block_no, passes, reveals, list(tokens), fixed)
                passes += 1
            stop_at = self._settled_stop(tokens, targets, stops)
            finished = stop_at is not None
            if finished:
                stats.stop_reason = "stop"
            new = [int(t) for t in tokens[fixed : stop_at if finished else targets[-1] + 1]]  # type: ignore[arg-type]
            picker.committed(len(out), new)
            out.extend(new)
            stats.blocks += 1
            done = finished or len(out) >= settings.max_new_tokens
            if not done:  # commit the finished block: the next one previews against it
                last_logits, first_preview = self._commit([int(t) for t in tokens],  # type: ignore[arg-type]
                                                          cache, settings.max_new_tokens - len(out))
                stats.commits += 1
                if first_preview is not None:
                    stats.merged_commits += 1
            yield BlockCommitted(block_no, new, passes)
            if done:
                break
            block_no += 1
        stats.tokens = len(out)
        stats.seconds = time.perf_counter() - t0
        yield Finished(out, stats)

    def _masked_logits(self, tokens: list[int | None], masked: list[int], cache: PrefixCache,
                       last_logits: torch.Tensor | None, first_preview: torch.Tensor | None) -> torch.Tensor:
        """The logits [len(masked), V] predicting the block's masked positions: a preview pass's (from the last
        merged commit where it ran this block's first one), with only the rows that predict them through the LM
        head. Shifted, a position's come from the row before it, and position 0's from the last committed row:
        no pass at all where that is the only one masked."""
        src = [p - 1 for p in masked] if self.shifted else masked
        rows = _index(src[1:] if src[0] < 0 else src)
        if first_preview is not None:
            logits = first_preview[rows]
        elif rows == slice(0, 0) and last_logits is not None:
            logits = None  # only position 0 is masked: its logits do not depend on the block
        else:
            block = [self.mask_id if t is None else t for t in tokens]
            logits = self.model(self._ids(block), cache, preview=True, rows=rows)[0]
        if src[0] >= 0:
            return logits
        first = last_logits if last_logits is not None else torch.zeros_like(logits[0])
        # (a copy either way: the picker writes into the logits, and `first` may be a prompt cache's)
        return first[None].clone() if logits is None else torch.cat([first[None], logits], 0)

    def _commit(self, block: list[int], cache: PrefixCache, room: int
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A finished block into the cache: (logits of its last row, the next block's first preview — all masks —
        from the same pass, or None where it ran alone). Merged unless turned off or the next block needs no pass:
        one token left, whose shifted logits are the commit's last row's."""
        if self.merge_commits and not (self.shifted and room == 1):
            last, first = self.model.commit_and_preview(self._ids(block), self._ids([self.mask_id] * len(block)),
                                                        cache)
            return last[0], first[0]
        return self._causal(block, cache), None

    def _causal(self, tokens: list[int], cache: PrefixCache) -> torch.Tensor:
        """Append `tokens` to the cache; the logits of their last row."""
        return self.model(self._ids(tokens), cache, rows=slice(-1, None))[0, -1]

    def _prefill(self, prefix: list[int], reuse: PromptCache | None, snapshot_at: int | None
                 ) -> Generator[PrefillProgress, None, tuple[PrefixCache, torch.Tensor | None, int]]:
        """(cache holding `prefix`, logits of its last row, tokens taken from `reuse`), with progress events on
        the way. With `reuse`, the prefill runs in two parts around the save point, which is never before what
        was reused."""
        resume = reuse.take(self.model, prefix) if reuse is not None else None
        if resume is None:
            cache, last, done = self.model.new_cache(), None, 0
        else:
            cache, last, done = resume.cache, resume.last_logits, resume.length
        reused = done
        step = self.model.prefill_rows or len(prefix)
        # worth showing: more than one pass, or one that goes layer by layer (seconds at 35B)
        progress = len(prefix) - reused > step or self.model.layer_chunk(len(prefix) - reused, cache) > 0
        if progress:
            yield PrefillProgress(0, len(prefix) - reused)
        if reuse is not None:
            upto = len(prefix) if snapshot_at is None else min(max(snapshot_at, 0), len(prefix))
            save_at = max(done, whole_blocks(upto, self.block_size))
            if save_at > done:
                last = yield from self._prefill_part(prefix, done, save_at, cache, reused, progress)
                done = save_at
            if save_at:
                reuse.save(self.model, cache, prefix[:save_at], last)
        if len(prefix) > done:
            last = yield from self._prefill_part(prefix, done, len(prefix), cache, reused, progress)
        return cache, last, reused

    def _prefill_part(self, prefix: list[int], start: int, end: int, cache: PrefixCache, reused: int,
                      progress: bool) -> Generator[PrefillProgress, None, torch.Tensor]:
        """prefix[start:end] into the cache, one causal pass per `prefill_rows` rows (the LM head on the last
        pass's last row only); the logits of that row. With `progress`, an event after each pass and, in a pass
        that goes layer by layer, after each layer (its rows counted in proportion)."""
        step = self.model.prefill_rows or end - start
        total, layers = len(prefix) - reused, self.cfg.num_hidden_layers
        for s in range(start, end, step):
            e = min(s + step, end)
            steps = self.model.prompt_pass(self._ids(prefix[s:e]), cache, last_logits=e == end)
            try:
                while True:
                    try:
                        done = next(steps)
                    except StopIteration as stop:
                        last = stop.value
                        break
                    if progress and done < layers:  # (the pass's last layer: the event below)
                        yield PrefillProgress(s - reused + (e - s) * done // layers, total)
            finally:
                steps.close()  # a consumer that stopped here abandons the pass
            if progress:
                yield PrefillProgress(e - reused, total)
        return last

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
