"""A conversation longer than the context: its oldest exchanges are left out (chat's turns, serve's /api/chat as
Ollama does it), the system message and the latest question kept.

The cut is worked out afresh for every answer (serve gets the whole conversation with each request) — and it must
come out the same from one turn to the next while the conversation grows, or every turn would read the whole prompt
again (the prompt cache resumes only an unchanged start). So the tokens to leave out are counted in whole steps of
a quarter of the room (`leave_out`), and the cut is the first exchange boundary past them by each message's own
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


def fit(messages: list[dict[str, Any]], render: Callable[[list[dict[str, Any]]], tuple[str, list[int]]],
        count: Callable[[str], int], context: int, room: int) -> tuple[int, str, list[int]]:
    """The conversation cut to leave its answer `room` of `context` tokens: where the kept messages start after the
    leading system messages (0: all kept), and `render`'s prompt and token ids of what is kept. Past `leave_out`'s
    estimate, an exchange more at a time until it fits or only the last question is left (the caller refuses
    that)."""
    prompt, ids = render(messages)
    cut = leave_out(messages, count, len(ids) + room - context, max(1, (context - room) // 4))
    if not cut:
        return 0, prompt, ids
    head = messages[: system_head(messages)]
    for start in [i for i in exchange_starts(messages) if i >= cut]:
        prompt, ids = render(head + messages[start:])
        if len(ids) + room <= context:
            break
    return start, prompt, ids
