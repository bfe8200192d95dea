"""serve/engine.py's worker driven directly, its decoder scripted: what each answer reports (`info`), the
counters and latencies /health shows, the queue bound, cancellation, stop strings, failures and `stop`.

The Engine runs on the shipped tiny model (its tokenizer: "abc" is three tokens, "<think>" and "</think>" one
each) with `engine.decoder` replaced by `Scripted`, which yields the events a test gives it, so every figure is
known in advance and nothing waits on a model pass."""

from __future__ import annotations

import threading
import time

import pytest

from clover_local.generate.block_diffusion import DecodeSettings
from clover_local.generate.events import BlockCommitted, DecodeStats, Finished, PassDone, PrefillProgress
from clover_local.serve.engine import Engine, Job
from clover_local.serve.protocol import ApiError


class Scripted:
    """A decoder whose `generate` yields `script(prompt_ids, settings)`'s events (a list, or a generator)."""

    block_size = 32

    def __init__(self, script) -> None:
        self.script = script
        self.calls: list[list[int]] = []

    def generate(self, prompt_ids, settings, reuse=None, snapshot_at=None):
        self.calls.append(list(prompt_ids))
        yield from self.script(prompt_ids, settings)


def pass_done(block: int = 0, index: int = 0) -> PassDone:
    return PassDone(block, index, [], [], 0)


def blocks(tok, *texts: str, stop_reason: str = "length", passes: int | None = None) -> list:
    """Each text committed as a block after one pass, then Finished (`passes`: its stats' count, default one a
    block)."""
    events, ids = [], []
    for b, text in enumerate(texts):
        part = tok.encode(text)
        ids += part
        events += [pass_done(b), BlockCommitted(b, part, 1)]
    n = len(texts) if passes is None else passes
    return events + [Finished(ids, DecodeStats(tokens=len(ids), passes=n, stop_reason=stop_reason))]


@pytest.fixture(scope="module")
def engine(tiny):
    eng = Engine(tiny, max_queue=1)
    yield eng
    assert eng.stop(timeout=10)


@pytest.fixture
def eng(engine):
    """The module's engine, its log collected and its decoder put back after the test."""
    real = engine.decoder
    logged: list[str] = []
    engine.log = logged.append
    engine.logged = logged
    engine.prompt_cache.stats.last_reused = 0
    yield engine
    engine.decoder = real
    engine.log = None
    engine.prompt_cache.clear()


def run(engine: Engine, job: Job, timeout: float = 20) -> list[tuple]:
    """All the job's items, up to its last ("done", "error" or "cancelled")."""
    engine.submit(job)
    items = []
    while not items or items[-1][0] in ("delta", "view"):
        items.append(job.out.get(timeout=timeout))
    return items


def job(tok, prompt: str = "abc", max_new: int = 16, **kw) -> Job:
    return Job(tok.encode(prompt), prompt, DecodeSettings(max_new_tokens=max_new), **kw)


def wait_idle(engine: Engine) -> dict:
    deadline = time.monotonic() + 10
    while True:
        h = engine.health()
        if not h["queue"]["running"] and h["queue"]["waiting"] == 0:
            return h
        assert time.monotonic() < deadline, h
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------- what an answer says

def test_an_answers_info_reports_each_figure(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "hel", "lo wor", stop_reason="stop", passes=5))
    before = eng.health()
    items = run(eng, job(tok, "abcd", max_new=40, read_from=3))
    kind, info = items[-1]
    assert kind == "done"
    assert "".join(i[2] for i in items if i[0] == "delta") == "hello wor" == info["content"]
    n = len(tok.encode("hel")) + len(tok.encode("lo wor"))
    assert (info["finish_reason"], info["prompt_tokens"], info["completion_tokens"]) == ("stop", 4, n)
    assert (info["reasoning_tokens"], info["reasoning"], info["stop_sequence"]) == (0, "", None)
    assert info["prefill_seconds"] == 0.0  # no PrefillProgress: the prompt was read in the first pass
    st = info["stats"]
    assert (st["passes"], st["max_tokens"], st["read_from"]) == (5, 40, 3)
    assert st["tokens_per_pass"] == round(n / 5, 4)
    after = wait_idle(eng)
    assert after["queue"] == {"waiting": 0, "running": False, "max_waiting": 1}
    assert after["passes"] - before["passes"] == 2  # the engine counts the PassDone events it saw
    assert after["tokens"] - before["tokens"] == n
    assert after["requests"]["completed"] - before["requests"]["completed"] == 1
    assert eng.logged == [f"answered: 4 prompt tokens · {n} tokens in {st['seconds']:.1f} s, "
                          f"{st['tokens_per_second']:.1f} tok/s, {st['tokens_per_pass']:.2f} tokens/pass · stop"]


def test_a_length_finish_and_no_read_from_key(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "abc", stop_reason="length"))
    kind, info = run(eng, job(tok, "ab", max_new=3))[-1]
    assert (kind, info["finish_reason"], info["completion_tokens"], info["content"]) == ("done", "length", 3, "abc")
    assert "read_from" not in info["stats"] and info["stats"]["max_tokens"] == 3


def test_an_answer_whose_events_end_without_finished_is_a_length_answer_not_a_cancelled_one(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: [pass_done(), BlockCommitted(0, tok.encode("ab"), 1)])
    before = eng.health()["requests"]
    kind, info = run(eng, job(tok))[-1]
    assert (kind, info["finish_reason"], info["content"]) == ("done", "length", "ab")
    after = wait_idle(eng)["requests"]
    assert (after["completed"] - before["completed"], after["cancelled"] - before["cancelled"]) == (1, 0)


def test_cached_tokens_are_what_the_prompt_cache_resumed(eng):
    tok = eng.tokenizer

    def resumed(ids, settings):
        eng.prompt_cache.stats.last_reused = 2  # as the decoder's prefill sets it
        return blocks(tok, "ab")

    eng.decoder = Scripted(resumed)
    kind, info = run(eng, job(tok, "abcde"))[-1]
    assert (info["prompt_tokens"], info["cached_tokens"]) == (5, 2)
    assert eng.logged[-1].startswith("answered: 5 prompt tokens (2 resumed) · 2 tokens in ")


def test_a_long_prompts_reading_time_is_reported_apart(eng):
    tok = eng.tokenizer

    def slow_prefill(ids, settings):
        yield PrefillProgress(0, 32)
        time.sleep(0.05)
        yield PrefillProgress(32, 32)
        yield from blocks(tok, "ab")

    eng.decoder = Scripted(slow_prefill)
    kind, info = run(eng, job(tok))[-1]
    assert kind == "done" and 0.05 <= info["prefill_seconds"] < 5
    assert eng.logged[-1].startswith(f"answered: 3 prompt tokens read in {info['prefill_seconds']:.1f} s · 2 tokens")


def test_thinking_tokens_and_text_are_reported_apart_from_the_content(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "<think>ab", "</think>cd"))
    items = run(eng, job(tok, "abc"))
    kind, info = items[-1]
    assert (info["reasoning"], info["content"], info["reasoning_tokens"], info["completion_tokens"]) == \
        ("ab", "cd", 4, 6)
    assert "".join(i[1] for i in items if i[0] == "delta") == "ab"
    assert "".join(i[2] for i in items if i[0] == "delta") == "cd"
    assert "· 6 tokens (4 thinking) in " in eng.logged[-1]


def test_a_reasoning_tail_let_out_only_at_the_end_is_streamed(eng):
    """The splitter holds back a possible `</think>` start while streaming; at the end it lets it out as
    reasoning only: that last piece must still go out as a delta."""
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "<think>ab</"))
    items = run(eng, job(tok, "abc"))
    kind, info = items[-1]
    assert info["content"] == ""
    assert "".join(i[1] for i in items if i[0] == "delta") == info["reasoning"] == "ab</"


def test_max_tokens_zero_runs_no_pass(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "ab"))
    kind, info = run(eng, job(tok, "abc", max_new=0))[-1]
    assert eng.decoder.calls == []
    assert (kind, info["finish_reason"], info["completion_tokens"], info["content"]) == ("done", "length", 0, "")
    assert eng.logged[-1] == "answered: 3 prompt tokens · 0 tokens · length"


def test_an_echo_only_request_reports_no_cached_tokens_after_a_resumed_one(eng):
    """A max_tokens 0 (echo) request runs no pass: it reported the request before's cached_tokens (the prompt
    cache's last figure, read though no lookup ran)."""
    tok = eng.tokenizer

    def resumed(ids, settings):
        eng.prompt_cache.stats.last_reused = 2  # the previous request resumed 2 tokens
        return blocks(tok, "ab")

    eng.decoder = Scripted(resumed)
    assert run(eng, job(tok, "abcde"))[-1][1]["cached_tokens"] == 2
    kind, info = run(eng, job(tok, "abc", max_new=0, raw=True))[-1]
    assert eng.decoder.calls == [tok.encode("abcde")]  # the echo ran no pass, read nothing from the cache
    assert info["cached_tokens"] == 0


# ---------------------------------------------------------------------------------------------- stop strings

def test_a_stop_string_ends_the_answer_and_stops_the_decoder(eng):
    tok = eng.tokenizer
    looked = []

    def script(ids, settings):
        yield from blocks(tok, "hello ST", "OP more", "never")[:4]
        looked.append("after the stop")  # the generator is not resumed once the stop string is met
        yield from blocks(tok, "hello ST", "OP more", "never")[4:]

    eng.decoder = Scripted(script)
    before = eng.health()["tokens"]
    items = run(eng, job(tok, stop=["STOP"]))
    kind, info = items[-1]
    assert (info["finish_reason"], info["content"], info["stop_sequence"]) == ("stop", "hello ", "STOP")
    assert "".join(i[2] for i in items if i[0] == "delta") == "hello "
    assert looked == []
    assert wait_idle(eng)["tokens"] - before == len(tok.encode("hello ST")) + len(tok.encode("OP more"))


def test_a_stop_string_in_the_last_text_still_says_stop(eng):
    """The decoder finished ("length") with text still held back for a possible stop string: the final feed
    finds the stop, so the answer says "stop"."""
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "abc", stop_reason="length"))
    kind, info = run(eng, job(tok, stop=["bc"]))[-1]
    assert (info["finish_reason"], info["content"], info["stop_sequence"]) == ("stop", "a", "bc")


def test_a_stop_string_met_only_in_the_text_let_out_at_the_end_says_stop(eng):
    """While the answer may still be opening `<think>` ("<th"), no content is let out; the final text ("<th")
    meets the stop string then, after the decoder said "length": the answer says "stop"."""
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "<th", stop_reason="length"))
    items = run(eng, job(tok, stop=["th"]))
    kind, info = items[-1]
    assert (info["finish_reason"], info["content"], info["stop_sequence"]) == ("stop", "<", "th")
    assert [i[2] for i in items if i[0] == "delta"] == ["<"]


def test_text_held_back_for_a_stop_string_that_never_came_is_let_out(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "hello", stop_reason="stop"))
    items = run(eng, job(tok, stop=["never-this-long"]))
    kind, info = items[-1]
    assert (info["finish_reason"], info["content"], info["stop_sequence"]) == ("stop", "hello", None)
    assert "".join(i[2] for i in items if i[0] == "delta") == "hello"


# ---------------------------------------------------------------------------------------------- latencies, started

def test_each_answer_observes_its_queue_wait_first_token_and_whole_time_once(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "ab", "cd", "ef"))

    def counts() -> dict:
        return {k: v["count"] for k, v in eng.health()["latency"].items()}

    before = counts()
    j = job(tok)
    assert run(eng, j)[-1][0] == "done" and j.started.is_set()
    wait_idle(eng)
    after = counts()
    assert {k: after[k] - before[k] for k in after} == {"queue": 1, "first_token": 1, "request": 1}


def test_an_empty_first_block_does_not_count_as_the_first_token(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: [pass_done(), BlockCommitted(0, [], 1)])
    before = eng.health()["latency"]["first_token"]["count"]
    assert run(eng, job(tok))[-1][0] == "done"
    assert wait_idle(eng)["latency"]["first_token"]["count"] == before


# ---------------------------------------------------------------------------------------------- the block view

def test_a_job_that_asks_for_blocks_first_gets_what_it_reads_and_may_write(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "ab", "cd"))
    items = run(eng, job(tok, "abcde", max_new=9, blocks=True, read_from=2))
    views = [i[1] for i in items if i[0] == "view"]
    assert views[0] == {"clover_prompt": {"tokens": 5, "max_tokens": 9, "read_from": 2}}
    shown = [v["clover_block"] for v in views if "clover_block" in v]
    assert shown and shown[0]["passes"] == 1 and shown[0]["tokens"] == 0  # drawn after the first pass
    commits = [v["clover_commit"] for v in views if "clover_commit" in v]
    assert [(c["block"], c["tokens"]) for c in commits] == [(0, 2), (1, 4)]


# ---------------------------------------------------------------------------------------------- cancellation

def test_a_client_gone_mid_answer_is_cancelled_counted_and_logged(eng):
    tok = eng.tokenizer
    j = job(tok)

    def script(ids, settings):
        yield pass_done()
        yield BlockCommitted(0, tok.encode("ab"), 1)
        j.cancel.set()  # the handler saw the client go
        yield pass_done(1)
        yield BlockCommitted(1, tok.encode("cd"), 1)
        yield Finished(tok.encode("abcd"), DecodeStats(tokens=4, passes=2, stop_reason="length"))

    eng.decoder = Scripted(script)
    before = eng.health()["requests"]
    items = run(eng, j)
    assert items[-1] == ("cancelled", None)
    after = wait_idle(eng)["requests"]
    assert (after["cancelled"] - before["cancelled"], after["completed"] - before["completed"]) == (1, 0)
    assert eng.logged[-1].startswith("stopped after 2 tokens (") and eng.logged[-1].endswith(
        "s): the client went away")


def test_a_job_cancelled_before_its_turn_is_skipped_and_counted(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "ab"))
    j = job(tok)
    j.cancel.set()
    before = eng.health()["requests"]
    eng.submit(j)
    deadline = time.monotonic() + 10
    while (after := wait_idle(eng)["requests"]) == before:  # (taken off the queue, not yet counted)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)
    assert (after["cancelled"] - before["cancelled"], after["completed"] - before["completed"]) == (1, 0)
    assert eng.decoder.calls == [] and j.out.empty() and not j.started.is_set()


# ---------------------------------------------------------------------------------------------- failures

def test_a_bug_in_a_generation_answers_500_clears_the_cache_and_serving_goes_on(eng, monkeypatch):
    tok = eng.tokenizer

    def boom(ids, settings):
        yield pass_done()
        raise ValueError("scripted")

    cleared = []
    monkeypatch.setattr(eng.prompt_cache, "clear", lambda: cleared.append(True))
    eng.decoder = Scripted(boom)
    before = eng.health()["requests"]
    kind, err = run(eng, job(tok))[-1]
    assert kind == "error" and isinstance(err, ApiError)
    assert (err.status, err.message) == (500, "internal error: ValueError: scripted")
    assert cleared == [True]
    h = wait_idle(eng)
    assert h["requests"]["failed"] - before["failed"] == 1 and h["queue"]["running"] is False
    assert eng.logged[-1] == "failed (500): internal error: ValueError: scripted"
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "ab"))
    assert run(eng, job(tok))[-1][0] == "done"


# ---------------------------------------------------------------------------------------------- queue bound, stop

def test_the_queue_holds_max_queue_jobs_then_answers_429_and_stop_answers_them_all(tiny):
    """max_queue=1: one job running, one waiting, the next refused (429, Retry-After); /health says so; then
    `stop` answers the running one and the waiting one 503 and refuses new ones."""
    go = threading.Event()
    tok = tiny.tokenizer

    def held(ids, settings):
        while not go.is_set():
            yield pass_done()
            time.sleep(0.005)
        yield from blocks(tok, "ab")

    eng = Engine(tiny, max_queue=1)
    logged: list[str] = []
    eng.log = logged.append
    try:
        eng.decoder = Scripted(held)
        running, waiting = job(tok), job(tok)
        eng.submit(running)
        assert running.started.wait(10)
        eng.submit(waiting)
        with pytest.raises(ApiError) as refused:
            eng.submit(job(tok))
        err = refused.value
        assert (err.status, err.code, err.headers) == (429, "queue_full", {"Retry-After": "1"})
        h = eng.health()
        assert h["queue"] == {"waiting": 1, "running": True, "max_waiting": 1}
        assert h["requests"]["rejected"] == 1
        assert eng.stop(timeout=10) is True
    finally:
        go.set()
        eng.stop(timeout=10)
    for j in (running, waiting):
        items = []
        while not items or items[-1][0] in ("delta", "view"):
            items.append(j.out.get(timeout=5))
        kind, err = items[-1]
        assert kind == "error" and (err.status, err.code) == (503, "shutting_down")
    assert logged[-1].endswith("s): the server is stopping")
    with pytest.raises(ApiError) as late:
        eng.submit(job(tok))
    assert (late.value.status, late.value.code) == (503, "shutting_down")


def test_stop_says_false_while_the_worker_is_still_busy(tiny):
    """A worker inside a pass that does not end within the timeout: `stop` says False (the caller must not drop
    the model yet)."""
    tok = tiny.tokenizer
    release = threading.Event()

    def stuck(ids, settings):
        release.wait(10)  # one long pass, not cancellable until it ends
        yield pass_done()
        yield from blocks(tok, "ab")

    eng = Engine(tiny, max_queue=1)
    eng.decoder = Scripted(stuck)
    j = job(tok)
    eng.submit(j)
    assert j.started.wait(10)
    try:
        assert eng.stop(timeout=0.1) is False
    finally:
        release.set()
    assert eng.stop(timeout=10) is True


# ---------------------------------------------------------------------------------------------- logprobs

def test_a_raw_answer_cut_by_a_stop_string_scores_only_the_tokens_of_its_text(eng):
    """/v1/completions with logprobs: the scored ids are the prompt's and the fewest answer tokens that hold the
    content ("hello " → he, l, lo, " "), not the tokens after the stop string."""
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "hello ST", "OP more"))
    kind, info = run(eng, job(tok, "abc", raw=True, score_top=1, stop=["STOP"]))[-1]
    assert (kind, info["content"], info["finish_reason"]) == ("done", "hello ", "stop")
    assert tok.decode(tok.encode("hello ST")[:4]) == "hello "
    assert info["scored_ids"] == tok.encode("abc") + tok.encode("hello ST")[:4]
    assert len(info["scores"].logprobs) == len(info["scored_ids"]) - 1


def test_a_chat_answer_cut_by_a_stop_string_scores_only_its_content(eng):
    tok = eng.tokenizer
    eng.decoder = Scripted(lambda ids, s: blocks(tok, "hello ST", "OP more"))
    kind, info = run(eng, job(tok, "abc", score_top=1, stop=["STOP"]))[-1]
    assert (kind, info["content"]) == ("done", "hello ")
    assert (info["answer_ids"], info["content_from"]) == (tok.encode("hello ST")[:4], 0)
    assert len(info["scores"].logprobs) == 4


def test_a_client_gone_while_its_answer_is_scored_is_cancelled(eng):
    tok = eng.tokenizer
    j = job(tok, "abc", raw=True, score_top=1)

    def script(ids, settings):
        yield from blocks(tok, "hello")[:-1]
        j.cancel.set()  # gone as the last block came: the answer is whole, its scoring not begun
        yield blocks(tok, "hello")[-1]

    eng.decoder = Scripted(script)
    before = eng.health()["requests"]
    assert run(eng, j)[-1] == ("cancelled", None)
    after = wait_idle(eng)["requests"]
    assert (after["cancelled"] - before["cancelled"], after["completed"] - before["completed"]) == (1, 0)


# ---------------------------------------------------------------------------------------------- failures (503)

def test_out_of_memory_and_runtime_limits_answer_503_with_their_own_codes(eng):
    import torch

    from clover_local.errors import CloverError
    from clover_local.serve.engine import failed_request

    oom = failed_request(torch.OutOfMemoryError("CUDA out of memory"))
    limit = failed_request(CloverError("the sequence reached the context"))
    assert (oom.status, oom.code, limit.status, limit.code) == (503, "out_of_memory", 503, "generation_failed")
    assert limit.message == "the server could not finish this answer: the sequence reached the context"

    def limited(ids, settings):
        yield pass_done()
        raise CloverError("the sequence reached the context")

    tok = eng.tokenizer
    eng.decoder = Scripted(limited)
    kind, err = run(eng, job(tok))[-1]
    assert (kind, err.status, err.code) == ("error", 503, "generation_failed")
