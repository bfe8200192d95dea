"""One assistant turn, shared by chat, demo and serve: the decoder's events, stoppable between events, turned
into text that is split into thinking (between `<think>` and `</think>`) and the answer.

Front ends only consume the decoder's events (PrefillProgress / PassDone / BlockCommitted / Finished).
Stopping a turn is stopping the iteration: the decoder is a generator, so once the consumer stops asking for
events no further pass runs. `decode_events` does that after each event (inside a long prompt's pass, between two
of its layers: the pass is abandoned) when
`should_stop()` turns true (Ctrl-C in chat, a client that went away in serve).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

import torch

from clover_local.errors import CloverError, host_allocations_as_memory_error, out_of_memory_errors
from clover_local.generate.events import BlockCommitted, Event, Finished, PassDone, PrefillProgress
from clover_local.tokenizer import THINK_END, THINK_START

# Seconds to sleep after every preview pass. For tests and screen recordings of the live display (a tiny
# model decodes hundreds of passes a second); unset in normal use.
PASS_DELAY_ENV = "CLOVER_LOCAL_PASS_DELAY"


def pass_delay() -> float:
    try:
        return max(0.0, float(os.environ.get(PASS_DELAY_ENV, "0") or 0))
    except ValueError:
        return 0.0


def decode_events(decoder, prompt_ids: list[int], settings, should_stop: Callable[[], bool] | None = None, *,
                  reuse=None, snapshot_at: int | None = None) -> Iterator[Event]:
    """The decoder's events for one answer. When `should_stop()` is true after a pass or a commit, the decoder
    generator is closed (no further pass runs) and the iteration ends without a Finished event. `reuse` (a
    PromptCache) and `snapshot_at` go to `decoder.generate`: the prefill resumes from the last answer's."""
    delay = pass_delay()
    gen = decoder.generate(prompt_ids, settings, reuse=reuse, snapshot_at=snapshot_at)
    try:
        with host_allocations_as_memory_error():
            for event in gen:
                yield event
                if isinstance(event, Finished):
                    return
                if delay and isinstance(event, PassDone):
                    time.sleep(delay)
                if should_stop is not None and should_stop():
                    return
    finally:
        gen.close()


_DONE = object()


class DecodeThread:
    """A turn's events made on a worker thread and handed over a queue: `events(should_stop)` runs there, the
    caller iterates here. Why: the live display draws between events (≈ 2 ms a pass on a 2-core host:
    `docs/chat_overhead.py`), and on the decoding thread each of those milliseconds is one the GPU waits; on
    its own thread the drawing happens while the decoder waits for the GPU (a CUDA wait frees the GIL).

    The decoder and the model are the worker's until `close()` returns (it stops the decoder at its next event
    and joins). An exception in the worker is raised here, at the point in the stream where it happened.
    `interrupt()` (Ctrl-C) raises KeyboardInterrupt inside the decoder, wherever it is — a long prefill
    included — as the signal did when the decoder ran on the main thread. `lockstep`: the worker runs at most
    one event ahead of the consumer (the demo's paced display)."""

    def __init__(self, events: Callable[[Callable[[], bool]], Iterator[Event]], lockstep: bool = False) -> None:
        self._stop = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=1 if lockstep else 0)
        self._lock = threading.Lock()
        self._decoding = False  # inside the decoder (not handing an event over): where an interrupt may land
        self._interrupted = False
        self._thread = threading.Thread(target=self._run, args=(events,), name="clover-decode", daemon=True)
        self._thread.start()

    def _run(self, events) -> None:
        try:
            try:
                it = iter(events(self._stop.is_set))
                while True:
                    with self._lock:
                        self._decoding = True
                    try:
                        event = next(it)
                    except StopIteration:
                        break
                    finally:
                        with self._lock:
                            self._decoding = False
                    self._put(event)
            except BaseException as exc:  # noqa: BLE001 — handed to the consumer, which raises it
                self._put(exc)
            finally:
                self._put(_DONE)
        except KeyboardInterrupt:  # an interrupt that landed just after the decoder returned: nothing to stop
            pass

    def interrupt(self) -> None:
        """Stop now: KeyboardInterrupt raised in the decoder's thread (once), as Ctrl-C did in the decoder."""
        self._stop.set()
        with self._lock:
            if self._decoding and not self._interrupted:
                self._interrupted = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                           ctypes.py_object(KeyboardInterrupt))

    def _put(self, item) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                if self._stop.is_set():  # nobody will take it
                    return

    def __iter__(self) -> Iterator[Event]:
        while True:
            try:
                item = self._queue.get(timeout=0.1)  # a timeout, so Ctrl-C is seen while waiting
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):  # the decoder's failure (an event is never one)
                raise item
            yield item

    def close(self) -> None:
        """Stop the decoder after its current pass and wait for the worker to end."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()  # a lockstep worker may wait to put its last event
            except queue.Empty:
                pass
            self._thread.join(0.05)


def history_tokens(tokenizer, messages: list[dict], **template_kwargs) -> int | None:
    """Tokens of `messages` rendered without the generation prompt: the part of this prompt the next turn's
    should repeat (the prompt cache saves there; a template may render the generation prompt differently from
    the answer it becomes, e.g. an empty `<think></think>` that history drops). None if it will not render."""
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=False, **template_kwargs)
    except CloverError:
        return None
    return len(tokenizer.encode(text))


# Out of memory mid-answer: the next, shorter request may well fit, so front ends recover from it.
OUT_OF_MEMORY: tuple[type[BaseException], ...] = out_of_memory_errors()
# What a turn may raise that a front end reports and survives (anything else is a bug and propagates).
TURN_FAILURES: tuple[type[BaseException], ...] = (CloverError, *OUT_OF_MEMORY)


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, OUT_OF_MEMORY)


def release_memory() -> None:
    """Give cached device blocks back after a failed turn, so the next one starts from a clean allocator.
    Call it once the exception (and the frames holding its tensors) is gone."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def prompt_opens_thinking(prompt_text: str) -> bool:
    """True when the rendered prompt leaves a `<think>` open (templates that start the thinking themselves):
    the output then begins inside the thinking."""
    start, end = prompt_text.rfind(THINK_START), prompt_text.rfind(THINK_END)
    return start >= 0 and start > end


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (a tag still being written)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Splits an answer's text, as it grows, into reasoning and content, emitting only what is settled.

    The output is thinking when the prompt left `<think>` open or the output starts with `<think>`; the
    thinking ends at `</think>`, and what follows (leading newlines dropped) is the content. Without a
    `<think>` everything is content. While the text grows, a partly written tag and trailing whitespace of the
    reasoning are held back, so deltas never need to be taken back.
    """

    def __init__(self, starts_in_thinking: bool = False) -> None:
        self.starts_in_thinking = starts_in_thinking
        self.reasoning = ""  # emitted so far
        self.content = ""
        self.thinking = starts_in_thinking  # inside the thinking as of the last update
        self.saw_thinking = starts_in_thinking

    def _split(self, text: str, final: bool) -> tuple[str, str, bool, bool]:
        """(reasoning, content, thinking_open, has_thinking) that can be shown for `text` now."""
        body = text
        if not self.starts_in_thinking:
            head = text.lstrip()
            if head.startswith(THINK_START):
                body = head[len(THINK_START):]
            elif not final and THINK_START.startswith(head):
                return "", "", False, False  # nothing yet, or a `<think>` being written
            else:
                return "", text.lstrip("\n"), False, False
        end = body.find(THINK_END)
        if end < 0:
            reasoning = body.lstrip("\n")
            if not final:
                reasoning = reasoning[: len(reasoning) - _partial_suffix(reasoning, THINK_END)].rstrip()
            else:
                reasoning = reasoning.strip("\n")
            return reasoning, "", not final, True
        reasoning = body[:end].strip("\n")
        content = body[end + len(THINK_END):].lstrip("\n")
        return reasoning, content, False, True

    def update(self, text: str, final: bool = False) -> tuple[str, str]:
        """Feed the whole text so far; returns (new reasoning, new content) since the last update."""
        reasoning, content, self.thinking, has = self._split(text, final)
        self.saw_thinking = self.saw_thinking or has
        dr = reasoning[len(self.reasoning):] if reasoning.startswith(self.reasoning) else ""
        dc = content[len(self.content):] if content.startswith(self.content) else ""
        self.reasoning += dr
        self.content += dc
        return dr, dc


class PlainText:
    """The generated token ids of one answer as text, decoded as blocks commit, as they are (a raw completion
    has no chat template, so nothing in it is taken for reasoning)."""

    reasoning = ""
    reasoning_tokens = 0

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.text = ""  # decoded so far (PlainText's content)

    def _decoded(self, token_ids: list[int], final: bool) -> str:
        self.ids.extend(token_ids)
        text = self.tok.decode(self.ids)
        return text if final else text.rstrip("\ufffd")  # wait for the rest of a multi-byte character

    def add(self, token_ids: list[int], final: bool = False) -> tuple[str, str]:
        """(reasoning, content) added by `token_ids`: here always ("", new text)."""
        text = self._decoded(token_ids, final)
        new, self.text = text[len(self.text):], text
        return "", new

    def finish(self) -> tuple[str, str]:
        return self.add([], final=True)

    @property
    def content(self) -> str:
        return self.text

    def ids_covering(self, chars: int) -> list[int]:
        """The fewest leading ids whose text holds the first `chars` characters (an answer cut by a stop string
        keeps the tokens its text came from)."""
        total = 0
        for k, piece in enumerate(self.tok.pieces(self.ids)):
            if total >= chars:
                return self.ids[:k]
            total += len(piece)
        return list(self.ids)

    def content_ids(self, chars: int) -> tuple[int, int]:
        """ids[first:last] of the finished answer: the fewest tokens whose text holds the content's first `chars`
        characters (a chat's logprobs list those, not the thinking's). The content is the text's end, so it starts
        `len(content)` characters from the end; a token split over that start (a newline after `</think>` merged
        into a word) is in, as are all the tokens of a character split over several."""
        if chars <= 0:
            return len(self.ids), len(self.ids)
        pieces = self.tok.pieces(self.ids)
        start = len(self.tok.decode(self.ids)) - len(self.content)
        ends = list(accumulate(map(len, pieces)))
        first = next((k for k, end in enumerate(ends) if end > start), len(ends))
        while first > 0 and not pieces[first - 1]:  # the leading bytes of the content's first character
            first -= 1
        last = next((k + 1 for k, end in enumerate(ends) if end >= start + chars), len(ends))
        return first, last


class TurnText(PlainText):
    """The generated token ids of one answer as text: decoded as blocks commit, split into reasoning/content."""

    def __init__(self, tokenizer, prompt_text: str = "") -> None:
        super().__init__(tokenizer)
        self.splitter = ReasoningSplitter(prompt_opens_thinking(prompt_text))
        self._think_end_id = tokenizer.think_end_id if hasattr(tokenizer, "think_end_id") else None

    def add(self, token_ids: list[int], final: bool = False) -> tuple[str, str]:
        return self.splitter.update(self._decoded(token_ids, final), final)

    @property
    def reasoning(self) -> str:
        return self.splitter.reasoning

    @property
    def content(self) -> str:
        return self.splitter.content

    @property
    def thinking(self) -> bool:
        return self.splitter.thinking

    @property
    def reasoning_tokens(self) -> int:
        """Tokens spent thinking (up to and including `</think>`); 0 when the answer did not think."""
        if not self.splitter.saw_thinking:
            return 0
        if self._think_end_id is not None and self._think_end_id in self.ids:
            return self.ids.index(self._think_end_id) + 1
        if not self.content:
            return len(self.ids)  # still thinking (or cut off while thinking)
        return len(self.tok.encode(self.reasoning))  # `</think>` is not one token here: an estimate


@dataclass
class TurnStats:
    """What a front end measures of one answer from the events it saw (also when the answer was stopped)."""

    prompt_tokens: int = 0
    reused_tokens: int = 0  # of the prompt, resumed from the last answer's prefill (set by the front end)
    tokens: int = 0
    passes: int = 0
    blocks: int = 0
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    stop_reason: str = "running"  # stop | length | cancelled | running
    paused: float = 0.0  # time a front end slowed the display down on purpose (demo pacing), not counted
    prefilled: int = 0  # prompt tokens read with progress shown (PrefillProgress), and the time that took
    prefill_seconds: float = 0.0

    def on_event(self, event: Event) -> None:
        if isinstance(event, PrefillProgress):
            self.prefilled = event.done
            self.prefill_seconds = time.perf_counter() - self.started
        elif isinstance(event, PassDone):
            self.passes += 1
        elif isinstance(event, BlockCommitted):
            self.tokens += len(event.token_ids)
            self.blocks += 1
        elif isinstance(event, Finished):
            self.tokens = len(event.token_ids)
            self.passes = event.stats.passes
            self.stop_reason = event.stats.stop_reason
            self.ended = time.perf_counter()

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = time.perf_counter()
            self.stop_reason = reason

    @property
    def seconds(self) -> float:
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started - self.paused

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def decode_seconds(self) -> float:
        """The answer's time after a long prompt was read (that shown apart: `prefilled`, `prefill_seconds`)."""
        return self.seconds - self.prefill_seconds

    @property
    def tokens_per_second(self) -> float:
        s = self.decode_seconds
        return self.tokens / s if s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "tokens": self.tokens, "passes": self.passes,
                "tokens_per_pass": round(self.tokens_per_pass, 4), "seconds": round(self.seconds, 4),
                "tokens_per_second": round(self.tokens_per_second, 3), "stop_reason": self.stop_reason}
