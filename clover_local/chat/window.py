"""A conversation longer than the context: its oldest exchanges are left out (chat's turns, serve's /api/chat as
Ollama does it), the system message and the latest question kept.

The cut is worked out afresh for every answer (serve gets the whole conversation with each request) — and it must
come out the same from one turn to the next while the conversation grows, or every turn would read the whole prompt
again (the prompt cache resumes only an unchanged start). So the tokens to leave out are counted in whole steps of
a quarter of the room (`leave_out`), and the cut is the first exchange boundary past them by each message's own
length (its text, and the frame its template puts around it, measured on the whole render): a conversation that
grows by a turn keeps its cut until it has grown by a step."""

from __future__ import annotations

import functools
import json
from typing import Any, Callable


# what a chat template adds around a message's text (ChatML: `<|im_start|>role\n` … `<|im_end|>\n`); `fit` measures it
FRAME_TOKENS = 5


def system_head(messages: list[dict[str, Any]]) -> int:
    """How many system messages lead the conversation (they are always kept)."""
    return next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))


def exchange_starts(messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the user messages after the leading system messages: where an exchange may start."""
    return [i for i in range(system_head(messages), len(messages)) if messages[i].get("role") == "user"]


def message_tokens(message: dict[str, Any], count: Callable[[str], int]) -> int:
    """A message's text in tokens by `count`: its content and its tool calls (as JSON), without the frame."""
    calls = message.get("tool_calls")
    return count(message.get("content") or "") + (count(json.dumps(calls)) if calls else 0)


def leave_out(messages: list[dict[str, Any]], count: Callable[[str], int], excess: int, step: int,
              frame: int = FRAME_TOKENS) -> int:
    """Where the kept messages start (after the leading system messages, which stay): the first exchange boundary
    whose messages before it come to at least `excess` tokens rounded up to whole `step`s, by `message_tokens`
    and `frame` tokens a message; never past the last user message. 0 where nothing need go."""
    if excess <= 0:
        return 0
    starts = exchange_starts(messages)
    if len(starts) < 2:
        return 0
    want = -(-excess // step) * step
    dropped = 0
    for i in range(system_head(messages), starts[-1]):
        dropped += frame + message_tokens(messages[i], count)
        if i + 1 in starts and dropped >= want:
            return i + 1
    return starts[-1]


def fit(messages: list[dict[str, Any]], render: Callable[[list[dict[str, Any]]], tuple[str, list[int]]],
        count: Callable[[str], int], context: int, room: int) -> tuple[int, str, list[int]]:
    """The conversation cut to leave its answer `room` of `context` tokens: where the kept messages start after the
    leading system messages (0: all kept), and `render`'s prompt and token ids of what is kept. The tokens a
    message's frame takes are measured on the whole conversation's render (what the template added beyond the
    texts, a message's share rounded down: ChatML's 5 in a chat's prompt), so the estimate and the excess are in
    the same tokens whatever the template. Where the estimate still falls short, a step more at a time — not an
    exchange more, which would move the cut at every turn — until it fits or only the last question is left
    (the caller refuses that)."""
    prompt, ids = render(messages)
    excess, step = len(ids) + room - context, max(1, (context - room) // 4)
    if excess <= 0:
        return 0, prompt, ids
    count = functools.cache(count)  # each text tokenized once: the frame's measure and every `leave_out` read them
    frame = max(0, (len(ids) - sum(message_tokens(m, count) for m in messages)) // len(messages))
    head, last = messages[: system_head(messages)], (exchange_starts(messages) or [0])[-1]
    cut = leave_out(messages, count, excess, step, frame)
    while cut:
        prompt, ids = render(head + messages[cut:])
        if len(ids) + room <= context or cut == last:
            break
        excess += step
        cut = leave_out(messages, count, excess, step, frame)
    return cut, prompt, ids
