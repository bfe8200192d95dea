"""A thinking budget: the most tokens an answer may spend between `<think>` and `</think>` before it must answer.

Qwen3.5-family models (Clover's backbone) can think for thousands of tokens, and a client that sets `max_tokens`
gets a cut-off thought and no answer when the thinking eats it (agents then fail on an empty reply). With a budget
the decoder writes the closing text itself — `EARLY_EXIT`, ending with `</think>` — where the budget runs out, so
the answer still comes: the thinking, closing text included, takes at most `tokens`.

Block diffusion writes a block's positions in any order, so the closing text is placed into the block where the
budget runs out as already-revealed tokens (the block's other positions are previewed around it), and `</think>` is
refused at the positions before it, so the thinking cannot close twice. The count starts at the answer's start when
the prompt opened the thinking (the Qwen3.5 templates do), else after the `<think>` the model writes — seen when its
block commits, so such a budget is counted from the next block on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clover_local.errors import CloverError

# What the decoder writes when the budget runs out: a sentence that tells the model its thinking ended on purpose
# (an answer after a bare `</think>` tends to go on thinking), then the tag.
EARLY_EXIT = "\n\nI am out of thinking time, so I will answer now with what I have.\n</think>\n\n"


# serve's default cap: where nothing else bounds the thinking, it leaves the answer a quarter of its tokens (at most
# ANSWER_ROOM), so an agent's max_tokens cannot end inside the thought with no answer; below ROOM_FROM answer tokens
# a client asked for a short reply and the cap would leave the thinking too little
ANSWER_ROOM, ROOM_FROM = 1024, 256


def answer_room_budget(max_new_tokens: int) -> int | None:
    """The thinking's most tokens that leave the answer its room (`ANSWER_ROOM`); None for a short answer."""
    if max_new_tokens < ROOM_FROM:
        return None
    return max_new_tokens - min(ANSWER_ROOM, max_new_tokens // 4)


@dataclass
class ThinkBudget:
    """The budget and the token ids it needs (`for_tokenizer`)."""

    tokens: int  # the most tokens the thinking may take, the closing text included
    close_ids: list[int]  # EARLY_EXIT's tokens, `</think>` among them
    start_id: int  # `<think>`
    end_id: int  # `</think>`
    opened: bool = False  # the prompt opened the thinking: the answer starts inside it

    @classmethod
    def for_tokenizer(cls, tokenizer, tokens: int, opened: bool) -> "ThinkBudget":
        """CloverError when the tokenizer has no single `<think>` / `</think>` token (the budget counts by them)."""
        start, end = tokenizer.think_start_id, tokenizer.think_end_id
        if start is None or end is None:
            raise CloverError("this model's tokenizer has no <think> and </think> tokens, so a thinking budget "
                              "cannot be kept: leave the budget out")
        if tokens < 1:
            raise CloverError(f"a thinking budget must be at least 1 token, got {tokens}")
        return cls(tokens, tokenizer.encode(EARLY_EXIT), start, end, opened)


@dataclass
class BudgetTracker:
    """One answer's thinking against its budget, block by block (the decoder's side of it)."""

    budget: ThinkBudget
    since: int | None = None  # the answer's token index where the thinking started (None: not yet)
    ended: bool = False
    closing: bool = False  # the closing text has been placed (some may still be `pending`)
    pending: list[int] = field(default_factory=list)  # closing text that did not fit its block

    def __post_init__(self) -> None:
        self.since = 0 if self.budget.opened else None

    @property
    def end_id(self) -> int:
        return self.budget.end_id

    def place(self, written: int, first: int, end: int) -> tuple[list[tuple[int, int]], int]:
        """For a block whose answer positions are [first, end), `written` answer tokens before it: the (position,
        token id) pairs of closing text it holds, and the position before which `</think>` is refused (`first`
        when none is)."""
        if self.pending:
            n = min(len(self.pending), end - first)
            placed, self.pending = list(enumerate(self.pending[:n], first)), self.pending[n:]
            return placed, first
        if self.since is None or self.ended or self.closing:
            return [], first
        close = self.budget.close_ids
        at = first + max(self.budget.tokens - len(close) - (written - self.since), 0)
        if at >= end:
            return [], first
        self.closing = True
        n = min(len(close), end - at)
        self.pending = close[n:]
        return list(enumerate(close[:n], at)), at

    def committed(self, written: int, new: list[int]) -> None:
        """A block's answer tokens `new`, the answer having had `written` tokens before them."""
        for i, t in enumerate(new):
            if self.since is None and t == self.budget.start_id:
                self.since = written + i + 1
            elif self.since is not None and t == self.budget.end_id:
                self.ended = True  # (closing text of ours after it, if any, is still placed)
                return
