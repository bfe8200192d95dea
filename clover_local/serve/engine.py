"""One request generates at a time; others wait in a bounded queue.

HTTP handler threads (one per connection) parse, render and tokenize a request, then `submit` it; a single
worker thread owns the model and runs the jobs in order, putting their output on each job's own queue:
("delta", reasoning, content), then ("done", info) or ("error", ApiError). A handler whose client went away
sets `job.cancel`; the worker checks it after each pass (and each layer of a long prompt's pass) and stops that
generation (a job cancelled while still
waiting is skipped).

`stop` (the server shutting down) answers every job 503 and waits for the worker to end: a worker still running at
exit would drop the last reference to the model while the interpreter finalizes, and torch aborts the process
when a tensor's release wants the GIL back then ("terminate called without an active exception").

The worker keeps one PromptCache: consecutive requests of one conversation re-send its history, so a request
whose prompt starts with the last one's saved prefix (token ids compared) prefills only the rest. A request of
another conversation in between takes the cache over, and the saved prefix is parked in host memory (up to
`park_bytes`, oldest dropped first), so the conversation's next request resumes from there all the same: agents
interleave sub-agents' and side requests with their main conversation.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from clover_local.chat.stats import gpu_memory, hit_rate, runtime_stats, scalar_stats
from clover_local.chat.turn import OUT_OF_MEMORY, PlainText, TurnStats, TurnText, decode_events, release_memory
from clover_local.errors import CloverError, host_allocations_as_memory_error, what_ran_out
from clover_local.generate.block_view import BlockView
from clover_local.generate.events import BlockCommitted, Finished, PassDone, PrefillProgress
from clover_local.generate.block_diffusion import whole_blocks
from clover_local.generate.scoring import (Scored, Scores, Stopped, score_from_snapshot, score_ids, score_prefix,
                                           score_rest)
from clover_local.serve.metrics import Latency
from clover_local.serve.protocol import ApiError, StopText


@dataclass
class Job:
    prompt_ids: list[int]
    prompt_text: str
    settings: Any  # DecodeSettings
    stop: list[str] = field(default_factory=list)
    history_tokens: int | None = None  # the messages rendered without the generation prompt (prompt cache)
    raw: bool = False  # /v1/completions: the text as generated, no reasoning split
    score_top: int | None = None  # logprobs: score the answer (a completion's prompt too), listing this many likeliest
    blocks: bool = False  # put out a long prompt's reading and the block being denoised after each pass ("view")
    read_from: int = 0  # the conversation outgrew the context: the prompt reads its messages from this one on
    out: queue.Queue = field(default_factory=queue.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    arrived: float = field(default_factory=time.monotonic)  # made once the request is read: its latencies' start


# The block being denoised is sent at most this often (a pass's view replaces the one before): no front end draws
# faster than its screen (chat redraws at 30 a second), and a GPU pass takes about 12 ms.
VIEW_INTERVAL = 1 / 30

# Host memory for conversations parked while another's request runs (generate/prompt_cache.py): at 35B, a
# 20K-token prompt parks in about 0.5 GiB (Claude Code 2.1.197's first request, its system prompt and tools, is
# 78 KB of JSON: on the order of 20K tokens).
DEFAULT_PARK_BYTES = 2 << 30


class Engine:
    def __init__(self, loaded: Any, max_queue: int = 32, park_bytes: int = DEFAULT_PARK_BYTES,
                 log: Callable[[str], None] | None = None) -> None:
        from clover_local.generate.block_diffusion import BlockDiffusionDecoder
        from clover_local.generate.prompt_cache import PromptCache

        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
        self.prompt_cache = PromptCache(park_bytes=park_bytes)  # the worker's alone
        self.scored: Scored | None = None  # the scores of the prompt prefix a scoring request saved in it
        self.max_queue = max_queue
        self.waiting: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.lock = threading.Lock()
        self.running: Job | None = None
        self.closed = False  # set by `stop`: no more jobs
        self.log = log  # a line per request as it ends (`answer_line`), for the person watching the server
        self.counts = {"completed": 0, "cancelled": 0, "failed": 0, "rejected": 0}
        self.passes = 0
        self.tokens = 0
        self.latency = Latency()  # the queue wait, the first token, the whole request (serve/metrics.py)
        self.started = time.time()
        self.worker = threading.Thread(target=self._work, name="clover-generate", daemon=True)
        self.worker.start()

    # ------------------------------------------------------------------ front side (handler threads)
    def submit(self, job: Job) -> None:
        with self.lock:  # under the lock: a job is either queued before `stop` drains the queue, or refused
            if self.closed:
                raise shutting_down()
            try:
                self.waiting.put_nowait(job)
            except queue.Full:
                self.counts["rejected"] += 1
                raise ApiError(429, f"the server is busy: {self.max_queue} requests are already waiting; retry "
                               "later", type="server_busy", code="queue_full", headers={"Retry-After": "1"}) from None

    def health(self) -> dict:
        runtime = self._runtime()
        mem = gpu_memory(self.loaded.model)  # (torch's allocator figures: no CUDA call, as chat's status line reads)
        with self.lock:
            return {
                "status": "ok",
                "queue": {"waiting": self.waiting.qsize(), "running": self.running is not None,
                          "max_waiting": self.max_queue},
                "requests": dict(self.counts),
                "passes": self.passes,
                "tokens": self.tokens,
                "uptime_seconds": round(time.time() - self.started, 1),
                "prompt_cache": {**self.prompt_cache.stats.to_dict(), "parked_bytes": self.prompt_cache.parked_bytes},
                "latency": self.latency.to_dict(),
                "runtime": runtime,
                **({"gpu_memory": {"allocated_bytes": mem[0], "total_bytes": mem[1]}} if mem else {}),
            }

    def _runtime(self) -> dict:
        rt = runtime_stats(self.loaded.model)
        return {"expert_cache_hit_rate": hit_rate(rt), **scalar_stats(rt)}

    def stop(self, timeout: float = 10.0) -> bool:
        """Refuse new jobs, answer the waiting ones and the running one 503, and wait up to `timeout` seconds for
        the worker to end (it stops at its next pass, or layer of a long prompt's). True once it has ended: only
        then may the caller drop the model and exit (see the module's docstring). Calling it again is harmless."""
        with self.lock:
            self.closed = True
            if self.running is not None:
                self.running.cancel.set()
            while True:
                try:
                    job = self.waiting.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job.cancel.set()
                    job.out.put(("error", shutting_down()))
            self.waiting.put_nowait(None)  # just drained, and `submit` adds nothing now
        self.worker.join(timeout)
        return not self.worker.is_alive()

    # ------------------------------------------------------------------ worker side
    def _work(self) -> None:
        while True:
            job = self.waiting.get()
            if job is None:
                return
            if job.cancel.is_set():
                with self.lock:
                    self.counts["cancelled"] += 1
                continue
            with self.lock:
                self.running = job
                self.latency.observe("queue", time.monotonic() - job.arrived)
            job.started.set()
            error = None
            try:
                with host_allocations_as_memory_error():  # the prompt's logprobs too, not only decode_events
                    self._generate(job)
            except (CloverError, *OUT_OF_MEMORY) as exc:
                error = failed_request(exc)
            except Exception as exc:  # a bug: answer 500, keep serving
                traceback.print_exc(file=sys.stderr)
                error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")
            finally:
                with self.lock:
                    self.running = None
            if error is not None:  # outside the handler, so the failed pass's tensors are freed first
                self.prompt_cache.clear()  # never resume from a failed generation's cache
                release_memory()
                self._count("failed")
                self._log(f"failed ({error.status}): {error.message}")
                job.out.put(("error", error))

    def _count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def _generate(self, job: Job) -> None:
        """One request: its prompt's logprobs read first where it asks for them and is also answered, the answer's
        passes, then what it reports (`_info`) and the logprobs of what was written (`_scores`)."""
        turn = PlainText(self.tokenizer) if job.raw else TurnText(self.tokenizer, job.prompt_text)
        stats = TurnStats(prompt_tokens=len(job.prompt_ids))
        stop = StopText(job.stop)
        finish_reason = None
        upto = whole_blocks(len(job.prompt_ids), self.decoder.block_size)
        try:
            head, reused = self._score_head(job, upto)
        except Stopped:
            return self._cancelled(job, stats)
        if job.settings.max_new_tokens > 0:  # 0: a completions request that only scores its prompt (echo)
            finish_reason = self._decode(job, turn, stats, stop)
            if job.cancel.is_set() and finish_reason is None:
                return self._cancelled(job, stats)
        stats.end(finish_reason or "length")
        dr, dc = turn.finish()
        dc = stop.feed(dc, final=True)
        if dr or dc:
            job.out.put(("delta", dr, dc))
        if stop.hit:  # also when the stop string came only with the last of the text
            finish_reason = "stop"
        if head is None:  # what the answer's passes resumed (none ran for an echo of max_tokens 0: a figure left
            # by the request before would be read)
            reused = self.prompt_cache.stats.last_reused if job.settings.max_new_tokens > 0 else 0
        info = self._info(job, turn, stats, stop, finish_reason, reused)
        try:
            info.update(self._scores(job, turn, stop, head, upto))
        except Stopped:
            return self._cancelled(job, stats)
        with self.lock:
            self.counts["completed"] += 1
            self.latency.observe("request", time.monotonic() - job.arrived)
        self._log(answer_line(info))
        job.out.put(("done", info))

    def _score_head(self, job: Job, upto: int) -> tuple[Any, int]:
        """The logprobs of a raw prompt that will also be answered, up to its last whole block: read once, scoring
        as it goes, and decoded on from there. (None, 0) where the request does not ask for them."""
        if not (job.raw and job.score_top is not None and job.settings.max_new_tokens > 0 and upto > 0):
            return None, 0
        known, self.scored = self.scored, None  # (kept only while the prompt cache holds its snapshot)
        head, reused = score_prefix(self.loaded.model, job.prompt_ids, upto, job.score_top, self.prompt_cache,
                                    job.cancel.is_set, known)
        self.scored = Scored(job.prompt_ids[:upto], Scores(head.logprobs[:], head.top[:]))
        return head, reused

    @staticmethod
    def _info(job: Job, turn: PlainText, stats: TurnStats, stop: StopText, finish_reason: str | None,
              reused: int) -> dict:
        """What a finished answer reports: why it ended, the tokens it read, reused and wrote, its text, its speed."""
        return {"finish_reason": "stop" if finish_reason == "stop" else "length",
                "prompt_tokens": len(job.prompt_ids), "cached_tokens": reused,
                "completion_tokens": stats.tokens,
                # the streamed pieces, joined: a plain answer is cut where a streamed one is
                "reasoning_tokens": turn.reasoning_tokens, "reasoning": turn.reasoning, "content": stop.text,
                "stop_sequence": stop.matched,
                # of `seconds`, the time reading a long prompt took before the answer's passes (0 for a prompt read
                # in the answer's first pass, which is not timed apart)
                "prefill_seconds": round(stats.prefill_seconds, 4),
                "stats": {"passes": stats.passes, "tokens_per_pass": round(stats.tokens_per_pass, 4),
                          "seconds": round(stats.seconds, 4), "tokens_per_second": round(stats.tokens_per_second, 3),
                          # the tokens the answer was allowed (max_tokens, or less where the context or
                          # --max-tokens cut it), and the first message read where the conversation outgrew the
                          # context (`chat URL` says both, as the local chat does)
                          "max_tokens": job.settings.max_new_tokens,
                          **({"read_from": job.read_from} if job.read_from else {})}}

    def _scores(self, job: Job, turn: PlainText, stop: StopText, head, upto: int) -> dict:
        """The logprobs a request asked for: a chat's of its content (`_score_content`), a raw prompt's of the
        prompt and the answer (the rest of it after `head`, where the prompt was scored as it was read)."""
        if job.score_top is None:
            return {}
        if not job.raw:
            return self._score_content(job, turn, len(stop.text))
        answer = turn.ids_covering(len(stop.text)) if stop.hit else turn.ids
        ids = job.prompt_ids + answer
        scores = (score_ids(self.loaded.model, ids, job.score_top, job.cancel.is_set) if head is None
                  else score_rest(self.loaded.model, ids, upto, job.score_top, self.prompt_cache, head,
                                  job.cancel.is_set))
        return {"scored_ids": ids, "scores": scores}

    def _score_content(self, job: Job, turn: PlainText, chars: int) -> dict:
        """A chat's logprobs: the answer's ids up to its content's end ("answer_ids"), where the content starts in
        them ("content_from") and the scores of the content's tokens, from a causal pass after the answer that
        resumes at the decoder's prompt snapshot (`score_from_snapshot`): the conversation's history is not read
        again, and stays saved for its next turn."""
        first, last = turn.content_ids(chars)
        ids = job.prompt_ids + turn.ids[:last]
        scores = score_from_snapshot(self.loaded.model, ids, len(job.prompt_ids) + first, job.score_top,
                                     self.prompt_cache, job.cancel.is_set)
        return {"answer_ids": turn.ids[:last], "content_from": first, "scores": scores}

    def _decode(self, job: Job, turn: PlainText, stats: TurnStats, stop: StopText) -> str | None:
        """The answer's passes, its text put out as blocks commit; the finish reason (None: cancelled)."""
        events = decode_events(self.decoder, job.prompt_ids, job.settings, should_stop=job.cancel.is_set,
                               reuse=self.prompt_cache, snapshot_at=job.history_tokens)
        view = BlockView(lambda i: self.tokenizer.decode([i]), self.decoder.block_size) if job.blocks else None
        if view is not None:  # what the answer reads and may write, before its first pass (the notes a chat shows)
            job.out.put(("view", {"clover_prompt": {"tokens": len(job.prompt_ids),
                                                    "max_tokens": job.settings.max_new_tokens,
                                                    "read_from": job.read_from}}))
        first, shown = True, 0.0
        for ev in events:
            stats.on_event(ev)
            if isinstance(ev, PrefillProgress) and view is not None:
                job.out.put(("view", {"clover_prefill": {"done": ev.done, "total": ev.total}}))
            elif isinstance(ev, PassDone):
                with self.lock:
                    self.passes += 1
                if view is not None:
                    view.update(ev)
                    now = time.monotonic()
                    if now - shown >= VIEW_INTERVAL:  # (with the answer's passes and tokens so far)
                        shown = now
                        job.out.put(("view", {"clover_block": {**view.to_dict(), "passes": stats.passes,
                                                               "tokens": stats.tokens}}))
            elif isinstance(ev, BlockCommitted):
                with self.lock:
                    self.tokens += len(ev.token_ids)
                    if first and ev.token_ids:  # (a thinking token counts: the user sees the answer begin)
                        self.latency.observe("first_token", time.monotonic() - job.arrived)
                        first = False
                dr, dc = turn.add(ev.token_ids)
                dc = stop.feed(dc)
                if view is not None:  # the answer's tokens and its thought's, exact before the text they end with
                    job.out.put(("view", {"clover_commit": {"block": ev.block, "tokens": stats.tokens,
                                                            "thought": turn.reasoning_tokens}}))
                if dr or dc:
                    job.out.put(("delta", dr, dc))
                if stop.hit:
                    return "stop"
            elif isinstance(ev, Finished):
                return ev.stats.stop_reason
        return None

    def _log(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

    def _cancelled(self, job: Job, stats: TurnStats) -> None:
        stats.end("cancelled")
        self._count("cancelled")
        self._log(f"stopped after {stats.tokens:,} tokens ({stats.seconds:.1f} s): "
                  + ("the server is stopping" if self.closed else "the client went away"))
        job.out.put(("error", shutting_down()) if self.closed else ("cancelled", None))


def answer_line(info: dict) -> str:
    """A finished request in one line: what it read (and resumed), what it wrote, how fast, and why it ended, as a
    local server's log shows it (an agent's requests come and go unseen otherwise)."""
    stats = info["stats"]
    read = f"{info['prompt_tokens']:,} prompt tokens"
    if info["cached_tokens"]:
        read += f" ({info['cached_tokens']:,} resumed)"
    if info["prefill_seconds"]:
        read += f" read in {info['prefill_seconds']:.1f} s"
    wrote = f"{info['completion_tokens']:,} tokens"
    if info["reasoning_tokens"]:
        wrote += f" ({info['reasoning_tokens']:,} thinking)"
    speed = (f" in {stats['seconds']:.1f} s, {stats['tokens_per_second']:.1f} tok/s, "
             f"{stats['tokens_per_pass']:.2f} tokens/pass" if info["completion_tokens"] else "")
    return f"answered: {read} · {wrote}{speed} · {info['finish_reason']}"


def failed_request(exc: BaseException) -> ApiError:
    """A generation that failed for want of memory or on a runtime limit: 503 (the server is fine, this request
    did not fit now), with what to change. Requests are checked before they are queued, so a CloverError here
    comes from the model side (the runtime's device memory, its preallocated context), not from the client."""
    if isinstance(exc, OUT_OF_MEMORY):
        return ApiError(503, f"the server ran out of {what_ran_out(exc)} while generating this answer; retry with "
                        "fewer messages or a lower max_tokens (or restart the server with a lower --vram-budget or "
                        "--context)", type="server_error", code="out_of_memory")
    return ApiError(503, f"the server could not finish this answer: {exc}", type="server_error",
                    code="generation_failed")


def shutting_down() -> ApiError:
    """The answer to a job the server will not finish because it is stopping."""
    return ApiError(503, "the server is shutting down; retry once it is back", type="server_error",
                    code="shutting_down")
