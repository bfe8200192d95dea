"""A grammar that holds the answer only from a trigger on: free text until the model writes `<tool_call>`, then each
call held to the tools' grammar (serve's auto tool calls; llama.cpp calls the same idea a lazy grammar).

Why: with `tool_choice: auto` the model decides whether to call, and what it writes before a call is its own; but a
call it starts should be one the server can read back. A misspelt name, a missing `</function>` or a parameter the
tool does not have leaves the call in the content as text, and the agent waits for a call that never comes.

How it meets block diffusion: a free block reveals its positions in any order, so the trigger is looked for in the
block's revealed run from its start (every position before the trigger settled: the text before the call is final),
after the thinking where the prompt opens it. Once it is found, the tokens after it that the grammar takes stay, every
later position of the block is masked again, and from there the block is revealed as a constrained one (left to
right, json_mode.py), as are the blocks after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from clover_local.generate.json_mode import ByteConstraint, PrefixState

_SPECIAL = b"\xff"  # a special token's place in the searched bytes: never in a trigger (not UTF-8)


@dataclass
class Trigger:
    """`constraint` holds the answer from the first byte of `text` on (its grammar starts with `text`); before that
    the answer is free. `armed_by`: a token (`</think>`, where the prompt opens the thinking) the trigger only counts
    after, so a tag written inside the thinking stays text."""

    constraint: ByteConstraint
    text: bytes = b"<tool_call>"
    armed_by: int | None = None

    def watch(self) -> "TriggerWatch":
        return TriggerWatch(self)


class TriggerWatch:
    """One answer's look-out for the trigger: `committed` after each block, `find` after each pass of a free one."""

    def __init__(self, trigger: Trigger) -> None:
        self.trigger = trigger
        self.armed = trigger.armed_by is None
        self.tail: list[int] = []  # the last committed tokens (since arming) a trigger could have started in

    def committed(self, tokens: list[int]) -> None:
        if not self.armed:
            if self.trigger.armed_by not in tokens:
                return
            self.armed = True
            tokens = tokens[tokens.index(self.trigger.armed_by) + 1:]
        # each token is at least one byte, so a trigger that began before these can only have been completed
        self.tail = (self.tail + tokens)[-len(self.trigger.text):]

    def find(self, run: list[int]) -> tuple[int, PrefixState] | None:
        """Where the trigger starts in `run` (the block's answer tokens from its start, up to its first masked
        position) or in the committed tokens just before it: (how many of `run`'s tokens stay — up to the one the
        trigger starts in, then those the grammar takes — and the grammar's state after them). None where there is
        no trigger yet, or where it begins in a token (or committed text) the grammar refuses: the answer stays free."""
        tokens, committed = self.tail + run, len(self.tail)
        first = 0
        if not self.armed:
            if self.trigger.armed_by not in run:
                return None
            first = run.index(self.trigger.armed_by) + 1
        constraint = self.trigger.constraint
        pieces = [constraint.vocab.token_bytes(t) or _SPECIAL for t in tokens[first:]]
        data = b"".join(pieces)
        at = data.find(self.trigger.text)
        if at < 0:
            return None
        ends = list(accumulate(len(p) for p in pieces))
        k = next(i for i, end in enumerate(ends) if end > at)  # the token the trigger starts in
        state = constraint.start()
        if not state.feed_all(data[at:ends[k]]):
            return None
        keep = first + k + 1
        for t in tokens[keep:]:
            nxt = constraint.advance(state, t)
            if nxt is None:
                if keep < committed:  # committed text the grammar refuses: no holding it to the grammar now
                    return None
                break
            state, keep = nxt, keep + 1
        return max(keep - committed, 0), state
