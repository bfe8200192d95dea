"""Ollama's answer to a conversation longer than the context: the oldest messages are left out, not a 400.

Each request sends the whole conversation, so the cut is worked out afresh every time — and it must come out the
same from one request to the next while the conversation grows, or every turn would read the whole prompt again
(the prompt cache resumes only an unchanged start). So the tokens to leave out are counted in whole steps of a
quarter of the room (`leave_out`), and the cut is the first exchange boundary past them by each message's own
length (an estimate that depends on those messages alone): a conversation that grows by a turn keeps its cut until
it has grown by a step."""

from __future__ import annotations

import json
from typing import Any, Callable


FRAME_TOKENS = 5  # what a chat template adds around a message's text (ChatML: `<|im_start|>role\n` … `<|im_end|>\n`)


def system_head(messages: list[dict[str, Any]]) -> int:
    """How many system messages lead the conversation (they are always kept)."""
    return next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))


def exchange_starts(messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the user messages after the leading system messages: where an exchange may start."""
    return [i for i in range(system_head(messages), len(messages)) if messages[i].get("role") == "user"]


def leave_out(messages: list[dict[str, Any]], count: Callable[[str], int], excess: int, step: int) -> int:
    """Where the kept messages start (after the leading system messages, which stay): the first exchange boundary
    whose messages before it come to at least `excess` tokens rounded up to whole `step`s, by `count` of each
    message's text and FRAME_TOKENS; never past the last user message. 0 where nothing need go."""
    if excess <= 0:
        return 0
    starts = exchange_starts(messages)
    if len(starts) < 2:
        return 0
    want = -(-excess // step) * step
    dropped = 0
    for i in range(system_head(messages), starts[-1]):
        m = messages[i]
        dropped += FRAME_TOKENS + count(m.get("content") or "") + (
            count(json.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
        if i + 1 in starts and dropped >= want:
            return i + 1
    return starts[-1]
