"""`clover-local serve` against the official `openai` client on loopback: streaming and not, thinking switches,
bad requests (400 with a JSON error), an over-long prompt, a client that disconnects mid-stream (its
generation stops), 20 concurrent requests queued and all answered; and, in-process, the queue bound (429) and
`reasoning_content` kept apart from `content`.

The model is a tiny random checkpoint (gibberish, same machinery); CLOVER_LOCAL_PASS_DELAY slows each pass so
a disconnect lands mid-generation.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.conftest import checkpoint_with_tokenizer
from tests.inprocess_server import running_server

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS, CONTEXT = 200, 512


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer_dir):
    ckpt = checkpoint_with_tokenizer(tmp_path_factory.mktemp("serve") / "ckpt", tokenizer_dir, seed=11)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOVER_LOCAL_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO), CLOVER_LOCAL_PASS_DELAY="0.01")
    proc = subprocess.Popen(
        [sys.executable, "-m", "clover_local", "serve", str(ckpt), "--port", "0", "--device", "cpu",
         "--dtype", "float32", "--model-name", "clover-test", "--max-tokens", str(MAX_TOKENS), "--context",
         str(CONTEXT), "--max-queue", "24", "--max-request-mb", "0.05", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        proc.kill()
        pytest.fail(f"the server did not start: {proc.stderr.read()}")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        return json.loads(r.read())


def post(url: str, body: bytes, path: str = "/v1/chat/completions") -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


MSG = [{"role": "user", "content": "add 12+30"}]


def test_models_and_health(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == ["clover-test"]
    h = health(server)
    assert h["status"] == "ok" and h["model"] == "clover-test" and h["queue"]["max_waiting"] == 24


def test_non_streaming_and_streaming_agree(client):
    full = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=12)
    choice = full.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    u = full.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    ours = u.model_extra["clover"]  # our own figures ride along in usage
    assert ours["passes"] >= 1 and ours["tokens_per_pass"] > 0

    stream = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=12, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == choice.message.content  # greedy: the same answer either way
    assert finish == [choice.finish_reason]
    assert chunks[-1].usage.completion_tokens == u.completion_tokens and not chunks[-1].choices


def test_enable_thinking_is_passed_to_the_template(client):
    def prompt_tokens(**extra) -> int:
        return client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=1, **extra).usage.prompt_tokens

    on = prompt_tokens()
    off_vllm = prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    off_top = prompt_tokens(extra_body={"enable_thinking": False})
    assert off_vllm == off_top > on  # the template adds an empty <think></think> when thinking is off


def test_malformed_requests_get_400_with_a_json_error(client, server):
    status, body = post(server, b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    # nested past Python's parser (it raised RecursionError: the connection closed with no answer), and a
    # response schema nested past the compiler's recursion
    status, body = post(server, b"[" * 5_000 + b"]" * 5_000)
    assert status == 400 and "not valid JSON: nested too deeply" in body["error"]["message"], body
    schema: dict = {"type": "object", "properties": {"a": {}}}
    for _ in range(400):
        schema = {"type": "object", "properties": {"a": schema}}
    status, body = post(server, json.dumps({"messages": MSG, "response_format": {
        "type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}}).encode())
    assert status == 400 and "nested too deeply to compile" in body["error"]["message"], body
    status, body = post(server, json.dumps({"messages": "hi"}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=[{"content": "no role"}])
    assert err.value.status_code == 400 and "role" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=MSG, temperature=2.5)
    assert err.value.body["param"] == "temperature"
    assert err.value.body["message"] == "'temperature' must be in [0, 2], got 2.5"
    status, body = post(server, b"{}", path="/v1/nothing")
    assert status == 404 and "error" in body


def test_limits_prompt_tokens_and_body_size(client, server):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", max_tokens=8,
                                       messages=[{"role": "user", "content": "add 12+30 " * 200}])
    assert err.value.body["code"] == "context_length_exceeded"
    assert f"maximum context length is {CONTEXT} tokens" in err.value.body["message"]
    assert "shorten them" in err.value.body["message"] and not re.search(r"-\d", err.value.body["message"])
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=MAX_TOKENS + 1)
    assert err.value.body["code"] == "max_tokens_too_large"
    status, body = post(server, json.dumps({"messages": [{"role": "user", "content": "x" * 60_000}]}).encode())
    assert status == 413 and "limit is 50000" in body["error"]["message"]
    assert health(server)["status"] == "ok"  # still serving


def test_the_context_error_counts_right():
    """Messages alone over the context: say so (no negative completion count); messages that fit but leave no room
    for max_tokens: OpenAI's wording, with the real figures; otherwise the completion gets what is asked (or what
    is left)."""
    from clover_local.serve.http import Limits, completion_budget
    from clover_local.serve.protocol import ApiError

    limits = Limits(max_tokens=48, context=64)
    for prompt, asked in ((90, None), (90, 8), (64, None), (64, 1)):
        with pytest.raises(ApiError) as err:
            completion_budget(prompt, asked, limits)
        e = err.value
        assert e.status == 400 and e.code == "context_length_exceeded" and e.param == "messages"
        assert e.message.startswith(f"the messages are {prompt} tokens; this server's maximum context length is "
                                    "64 tokens (--context)") and not re.search(r"-\d", e.message)
        assert e.message.endswith(": shorten them") and ("no room for an answer" in e.message) == (prompt == 64)
    with pytest.raises(ApiError) as err:
        completion_budget(40, 30, limits)
    assert err.value.message == ("This model's maximum context length is 64 tokens. However, you requested 70 "
                                 "tokens (40 in the messages, 30 in the completion). Please reduce the length of "
                                 "the messages or completion.")
    assert completion_budget(40, None, limits) == 24  # what is left
    assert completion_budget(10, None, limits) == 48  # the server's max_tokens
    assert completion_budget(40, 24, limits) == 24


@pytest.mark.parametrize("extra, param", [
    ({"functions": [{"name": "add", "parameters": {"type": "object"}}]}, "functions"),
    ({"function_call": {"name": "add"}}, "function_call"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
])
def test_features_it_lacks_are_refused_not_ignored(extra, param):
    """The deprecated function-calling fields and audio output would otherwise be ignored, as if honoured. (Tools
    themselves: test_serve_tools; forced calls: test_serve_forced_calls; logprobs' refusals:
    test_serve_chat_logprobs; a JSON schema's unsupported keywords: test_json_schema.)"""
    from clover_local.serve.protocol import ApiError, parse_chat_request

    with pytest.raises(ApiError) as err:
        parse_chat_request(json.dumps({"messages": MSG, **extra}).encode())
    e = err.value
    assert (e.status, e.type, e.param) == (400, "invalid_request_error", param)
    assert "not supported by clover-local serve" in e.message and param in e.message


@pytest.mark.parametrize("extra, param", [
    ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": -1}, "top_logprobs"),
    ({"top_logprobs": "2"}, "top_logprobs"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"tool_choice": 3}, "tool_choice"),
])
def test_malformed_feature_fields_get_a_clear_400(extra, param):
    from clover_local.serve.protocol import ApiError, parse_chat_request

    with pytest.raises(ApiError) as err:
        parse_chat_request(json.dumps({"messages": MSG, **extra}).encode())
    assert (err.value.status, err.value.param) == (400, param) and param in err.value.message


def test_harmless_feature_fields_are_accepted(client, server):
    """What clients send by default (no tools, plain text, no logprobs) must not be refused; logprobs are
    answered (not streamed: refused there)."""
    from clover_local.serve.protocol import parse_chat_request

    for extra in ({"tools": [], "tool_choice": "none", "logprobs": False, "top_logprobs": 0,
                   "response_format": {"type": "text"}},
                  {"tools": None, "tool_choice": None, "logprobs": None, "top_logprobs": None,
                   "response_format": None},
                  {"tools": [], "tool_choice": "auto", "functions": [], "function_call": "none"}):
        parse_chat_request(json.dumps({"messages": MSG, **extra}).encode())
    status, body = post(server, json.dumps({"messages": MSG, "max_tokens": 2, "tools": [], "tool_choice": "none",
                                            "logprobs": False, "response_format": {"type": "text"}}).encode())
    assert status == 200 and body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["logprobs"] is None
    r = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=2, logprobs=True,
                                       extra_body={"enable_thinking": False})
    assert len(r.choices[0].logprobs.content) == r.usage.completion_tokens and r.choices[0].logprobs.refusal is None
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=2, logprobs=True, stream=True)
    assert err.value.body["param"] == "logprobs" and "not while streaming" in err.value.body["message"]


def _cut_by_reading(text: str, stops: list[str]) -> tuple[str, bool]:
    """The reference: read one character at a time and stop as soon as the text read ends with a stop string
    (the longest, when several end there); the answer is what came before it."""
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            return text[: end - max(map(len, ending))], True
    return text, False


def _compositions(n: int):
    """Every way to cut n characters into consecutive pieces of 1..n characters (2**(n-1) of them)."""
    for mask in range(2 ** (n - 1)):
        sizes, size = [], 1
        for bit in range(n - 1):
            if mask >> bit & 1:
                sizes.append(size)
                size = 1
            else:
                size += 1
        yield sizes + [size]


STOP_CASES = [
    ("a 0123456789AB", ["0123456789AB"]),  # the stop is longer than the pieces before it (the case that leaked)
    ("0123456789", ["0123456789ABCDEFGHIJ"]),  # longer than the whole text: never hit, all of it comes out
    ("xxabcdefab", ["abcdef", "cd"]),  # overlapping: "cd" ends first
    ("aaabab", ["aab", "ab"]),  # both end at once: the longer one cuts
    ("ABABABx", ["ABA", "BAB"]),
    ("Hello! How", ["Hello! How can I help?", "w", "o!"]),
    ("no stop in it", ["zz", "stop!"]),
    ("ends with stop", ["stop"]),
]


@pytest.mark.parametrize("text, stops", STOP_CASES)
def test_stop_strings_cut_streamed_text_where_they_cut_it_whole(text, stops):
    """However the text arrives (every split into pieces, for texts this short), the streamed pieces add up to
    the text cut at the first stop string, as the whole text fed at once does; nothing of a stop string leaks."""
    from clover_local.serve.protocol import StopText

    want, hit = _cut_by_reading(text, stops)
    whole = StopText(stops)
    assert (whole.feed(text, final=True), whole.hit) == (want, hit)
    for sizes in _compositions(len(text)):
        stop, out, at = StopText(stops), [], 0
        for size in sizes:
            out.append(stop.feed(text[at:at + size]))
            at += size
        out.append(stop.feed("", final=True))
        assert ("".join(out), stop.hit, stop.text) == (want, hit, want), sizes


def test_stop_text_holds_back_a_stop_string_still_arriving():
    from clover_local.serve.protocol import StopText

    stop = StopText(["0123456789ABCDEFGHIJ"])
    assert stop.feed("0123456789") == "" and not stop.hit
    assert stop.feed("ABCDEFGHIJ") == "" and stop.hit
    assert stop.feed("more", final=True) == ""
    long_text = "Hello! How can I help? I can add, sort and count." * 3
    stops = ["I can", "sort and", "Hello! How can I help? I can add"]
    want, _ = _cut_by_reading(long_text, stops)
    for size in range(1, len(long_text) + 1):
        stop = StopText(stops)
        got = "".join(stop.feed(long_text[i:i + size]) for i in range(0, len(long_text), size))
        assert got + stop.feed("", final=True) == want, size


def test_a_stop_string_cuts_streamed_and_plain_answers_alike(client):
    """A stop string longer than one block's text (the case that leaked into the stream) taken from the answer
    itself: both answers end just before it, with finish_reason 'stop', and generation ends there."""
    plain = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=60)
    text = plain.choices[0].message.content
    assert len(text) > 40, text  # the random model writes enough to take a stop string from
    stop = text[10:30]
    cut = text[: text.find(stop)]
    full = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=60, stop=[stop])
    assert full.choices[0].message.content == cut and full.choices[0].finish_reason == "stop"
    assert full.usage.completion_tokens < plain.usage.completion_tokens  # stopped there, not at max_tokens
    parts = list(client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=60, stop=[stop],
                                                stream=True, stream_options={"include_usage": True}))
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == cut
    assert [p.choices[0].finish_reason for p in parts if p.choices and p.choices[0].finish_reason] == ["stop"]
    assert parts[-1].usage.completion_tokens == full.usage.completion_tokens


def test_a_client_that_disconnects_stops_its_generation(client, server):
    before = health(server)
    stream = client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=MAX_TOKENS, stream=True)
    it = iter(stream)
    next(it)  # the role chunk: generation is under way
    next(it)  # and some text
    stream.close()
    deadline = time.monotonic() + 20
    while True:
        h = health(server)
        if h["requests"]["cancelled"] > before["requests"]["cancelled"] and not h["queue"]["running"]:
            break
        assert time.monotonic() < deadline, f"generation was not stopped: {h}"
        time.sleep(0.05)
    assert h["requests"]["completed"] == before["requests"]["completed"]
    passes = h["passes"] - before["passes"]
    assert passes < MAX_TOKENS  # stopped well before max_tokens (one token per pass at most on this model)
    time.sleep(0.3)
    assert health(server)["passes"] == h["passes"]  # and nothing runs after it


def test_twenty_concurrent_requests_are_queued_and_all_answered(server):
    before = health(server)

    def ask(i: int) -> str:
        c = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)
        msgs = [{"role": "user", "content": f"add {i}+{i}"}]
        if i % 2:
            parts = c.chat.completions.create(model="clover-test", messages=msgs, max_tokens=6, stream=True)
            return "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
        return c.chat.completions.create(model="clover-test", messages=msgs, max_tokens=6).choices[0].message.content

    t0 = time.monotonic()
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(ask, range(20)))
    assert len(answers) == 20 and all(isinstance(a, str) for a in answers)
    after = health(server)
    assert after["requests"]["completed"] - before["requests"]["completed"] == 20
    assert after["requests"]["rejected"] == before["requests"]["rejected"]
    assert time.monotonic() - t0 < 90


# ---------------------------------------------------------------------------------------------- in-process

@pytest.fixture
def in_process(make_checkpoint, monkeypatch):
    """A server in this process (a thread), on a checkpoint whose template opens <think> itself."""
    from clover_local.loader import load

    torch.set_num_threads(1)
    ckpt = make_checkpoint(seed=12)
    tpl = (ckpt / "chat_template.jinja").read_text()
    (ckpt / "chat_template.jinja").write_text(tpl.replace("{{- '<|im_start|>assistant\\n' }}",
                                                          "{{- '<|im_start|>assistant\\n<think>\\n' }}", 1))
    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", "0.01")
    with running_server(load(str(ckpt), "cpu", "float32"), "opens-think", max_tokens=64, context=512,
                        max_queue=1) as served:
        yield served


def test_reasoning_content_is_apart_from_content(in_process):
    engine, url = in_process
    assert "<think>\n" in engine.tokenizer.apply_chat_template(MSG)  # the template under test opens thinking
    c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    full = c.chat.completions.create(model="opens-think", messages=MSG, max_tokens=10)
    msg = full.choices[0].message
    reasoning = msg.model_extra.get("reasoning_content")
    # a random model never writes </think>: everything it wrote is thinking, none of it content
    assert reasoning and msg.content == ""
    assert full.usage.completion_tokens_details.reasoning_tokens == full.usage.completion_tokens
    parts = list(c.chat.completions.create(model="opens-think", messages=MSG, max_tokens=10, stream=True))
    streamed = "".join((p.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for p in parts if p.choices)
    assert streamed == reasoning
    assert all(not p.choices[0].delta.content for p in parts if p.choices)


def test_an_api_key_guards_the_routes_and_the_health_figures(make_checkpoint):
    """With --api-key: every /v1 route answers 401 without the key; /health tells anyone the server is alive but
    its figures (requests, tokens, the runtime's counters) only to a caller with the key."""
    from clover_local.loader import load

    loaded = load(str(make_checkpoint(seed=12)), "cpu", "float32")
    with running_server(loaded, "keyed", max_tokens=8, context=256, max_queue=1, api_key="s3cret") as (_, url):

        def get(path: str, key: str | None = None) -> tuple[int, dict]:
            req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"} if key else {})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        assert get("/health") == (200, {"status": "ok"})
        assert get("/health", "wrong") == (200, {"status": "ok"})
        code, full = get("/health", "s3cret")
        assert code == 200 and full["model"] == "keyed" and "requests" in full and "runtime" in full
        code, body = get("/v1/models")
        assert code == 401 and body["error"]["code"] == "invalid_api_key" and "s3cret" not in json.dumps(body)
        assert get("/v1/models", "wrong")[0] == 401
        assert get("/tokenizer_info")[0] == 401 and get("/tokenizer_info", "s3cret")[0] == 200
        code, body = get("/v1/models", "s3cret")
        assert code == 200 and body["data"][0]["id"] == "keyed"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0, timeout=30).chat.completions.create(
                model="keyed", messages=MSG, max_tokens=2)
        assert get("/metrics")[0] == 401  # Prometheus' text: /health's figures, so the key too


def test_metrics_are_the_health_figures_in_prometheus_text(client, server):
    """GET /metrics: every line a comment or `name{labels} number`, each family typed once, and the figures those
    of /health at the same moment (counters `_total`)."""
    client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=4)
    with urllib.request.urlopen(server + "/metrics", timeout=10) as r:
        kind, text = r.headers["Content-Type"], r.read().decode()
    h = health(server)
    assert kind.startswith("text/plain; version=0.0.4")
    values, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            assert name not in types and typ in ("counter", "gauge", "histogram")
            types[name] = typ
        elif not line.startswith("# HELP "):
            m = re.fullmatch(r'([a-z_]+)(\{[^}]*\}) (-?[0-9.]+(?:e[+-]?[0-9]+)?)', line)  # (9.6e-05 too)
            assert m, line
            family = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
            assert (m.group(1) in types or types.get(family) == "histogram") and 'model="clover-test"' in m.group(2)
            values[m.group(1) + m.group(2)] = float(m.group(3))
    assert values['clover_requests_total{model="clover-test",outcome="completed"}'] == h["requests"]["completed"]
    assert values['clover_generated_tokens_total{model="clover-test"}'] == h["tokens"] > 0
    assert values['clover_passes_total{model="clover-test"}'] == h["passes"]
    assert values['clover_prompt_cache_lookups_total{model="clover-test"}'] == h["prompt_cache"]["lookups"]
    assert values['clover_queue_waiting{model="clover-test"}'] == h["queue"]["waiting"]
    assert all(name.endswith("_total") for name, typ in types.items() if typ == "counter")
    # latency histograms: cumulative buckets up to +Inf, which is the count; as many requests as /health says
    for name, key in (("clover_queue_wait_seconds", "queue"), ("clover_time_to_first_token_seconds", "first_token"),
                      ("clover_request_seconds", "request")):
        assert types[name] == "histogram"
        buckets = [(k, v) for k, v in values.items() if k.startswith(name + "_bucket{")]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0].endswith('le="+Inf"}')
        count = values[name + '_count{model="clover-test"}']
        assert counts[-1] == count == h["latency"][key]["count"] >= 1
        assert values[name + '_sum{model="clover-test"}'] > 0
    assert values['clover_request_seconds_count{model="clover-test"}'] == h["requests"]["completed"]


def test_the_gpus_memory_is_a_gauge_where_the_model_is_on_cuda():
    """/health's gpu_memory (only where the model is on CUDA) as two gauges; none without it."""
    from clover_local.serve.metrics import prometheus_text

    text = prometheus_text({"gpu_memory": {"allocated_bytes": 13 << 30, "total_bytes": 16 << 30}}, "m")
    assert 'clover_gpu_memory_allocated_bytes{model="m"} 13958643712' in text.splitlines()
    assert 'clover_gpu_memory_total_bytes{model="m"} 17179869184' in text.splitlines()
    assert "# TYPE clover_gpu_memory_total_bytes gauge" in text and "gpu_memory" not in prometheus_text({}, "m")


def test_the_start_shows_how_clients_connect():
    from clover_local.commands.serve import client_hints

    lines = client_hints("http://127.0.0.1:8000", "clover", keyed=False)
    assert any("ANTHROPIC_BASE_URL=http://127.0.0.1:8000 " in line and "ANTHROPIC_MODEL=clover" in line
               for line in lines)
    assert any("http://127.0.0.1:8000/v1" in line and "responses" in line for line in lines)  # Codex
    assert any("OLLAMA_HOST=http://127.0.0.1:8000" in line for line in lines)
    assert lines[:2] == ["  A browser:      http://127.0.0.1:8000 (a chat page)",
                         "  A terminal:     clover-local chat http://127.0.0.1:8000"]
    assert "chat http://127.0.0.1:8000 --api-key KEY" in " ".join(client_hints("http://127.0.0.1:8000", "clover",
                                                                               keyed=True))


def test_a_latency_histogram_counts_each_observation_at_or_under_its_bounds():
    from clover_local.serve.metrics import BUCKETS, Histogram

    h = Histogram()
    for seconds in (0.05, 0.051, 3.0, 400.0):
        h.observe(seconds)
    d = h.to_dict()
    assert d["le"] == list(BUCKETS) and d["count"] == 4 and d["sum"] == pytest.approx(403.101)
    at = dict(zip(d["le"], d["counts"]))
    assert (at[0.05], at[0.1], at[2.5], at[5.0], at[300.0]) == (1, 2, 2, 3, 3)  # 400 s: past the last, +Inf only


def _busy(engine):
    """A long job running and a short one waiting (the one place in the queue): (running, waiting)."""
    from clover_local.generate.block_diffusion import DecodeSettings
    from clover_local.serve.engine import Job

    ids = engine.tokenizer.encode("hello")
    running = Job(ids, "hello", DecodeSettings(max_new_tokens=60))
    engine.submit(running)
    assert running.started.wait(20)
    waiting = Job(ids, "hello", DecodeSettings(max_new_tokens=4))
    engine.submit(waiting)
    return running, waiting


def test_queue_bound_answers_429(in_process):
    engine, url = in_process
    running, waiting = _busy(engine)
    status, body = post(url, json.dumps({"messages": MSG, "max_tokens": 4}).encode())
    assert status == 429 and body["error"]["code"] == "queue_full"
    running.cancel.set()
    kinds = []
    while not kinds or kinds[-1] not in ("done", "error"):
        kinds.append(waiting.out.get(timeout=30)[0])
    assert kinds[-1] == "done"
    assert engine.health()["requests"]["rejected"] == 1


def test_a_failed_generation_answers_503_and_serving_goes_on(in_process):
    """Out of memory (or a runtime limit) mid-answer: an OpenAI-style error for that request, then business as
    usual; streamed, the error arrives as an event before [DONE]."""
    from clover_local.errors import CloverError
    from clover_local.generate.events import PassDone

    engine, url = in_process
    real = engine.decoder.generate
    failures = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                CloverError("the sequence reached the 64-token context the runtime was loaded for")]

    def flaky(prompt_ids, settings, **options):  # options: the worker's prompt-cache reuse, passed on
        for event in real(prompt_ids, settings, **options):
            yield event
            if failures and isinstance(event, PassDone):
                raise failures.pop(0)

    engine.decoder.generate = flaky
    logged: list[str] = []
    engine.log = logged.append  # (serve prints each line on stderr, unless --quiet)
    before = engine.health()["requests"]["failed"]
    status, body = post(url, json.dumps({"messages": MSG, "max_tokens": 8}).encode())
    assert status == 503 and body["error"]["code"] == "out_of_memory"
    assert "max_tokens" in body["error"]["message"] and body["error"]["type"] == "server_error"
    req = urllib.request.Request(url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"messages": MSG, "max_tokens": 8, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])["error"]
    assert err["code"] == "generation_failed" and "64-token context" in err["message"]
    status, body = post(url, json.dumps({"messages": MSG, "max_tokens": 4}).encode())
    assert status == 200 and body["choices"][0]["message"] is not None
    assert engine.health()["requests"]["failed"] - before == 2
    # the server's log says what became of each request
    assert logged[0].startswith("failed (503): the server ran out of memory while generating this answer")
    assert logged[1].startswith("failed (503): the server could not finish this answer: the sequence reached")
    usage = body["usage"]
    assert re.fullmatch(rf"answered: {usage['prompt_tokens']} prompt tokens · {usage['completion_tokens']} tokens"
                        r"( \(\d+ thinking\))? in [\d.]+ s, [\d.]+ tok/s, [\d.]+ tokens/pass · (stop|length)",
                        logged[2]), logged
    assert len(logged) == 3


def test_no_think_answers_at_once_where_a_request_says_nothing_of_thinking(make_checkpoint):
    """serve --no-think: on every route a request that says nothing of thinking is rendered as one that turns it
    off (the template's own empty thought: the same prompt, token for token), and one that asks for it thinks."""
    from clover_local.loader import load

    loaded = load(str(make_checkpoint(seed=12)), "cpu", "float32")
    msgs = [{"role": "user", "content": "add 12+30"}]

    def prompt_tokens(url: str, route: str, extra: dict) -> int:
        body = {"openai": {"messages": msgs, "max_tokens": 1},
                "anthropic": {"messages": msgs},
                "ollama": {"messages": msgs, "stream": False, "options": {"num_predict": 1}},
                "responses": {"input": "add 12+30", "max_output_tokens": 1}}[route]
        path = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages/count_tokens", "ollama": "/api/chat",
                "responses": "/v1/responses"}[route]
        status, out = post(url, json.dumps({**body, **extra}).encode(), path)
        assert status == 200, out
        return {"openai": lambda: out["usage"]["prompt_tokens"], "anthropic": lambda: out["input_tokens"],
                "ollama": lambda: out["prompt_eval_count"], "responses": lambda: out["usage"]["input_tokens"]}[route]()

    off = {"openai": {"enable_thinking": False}, "anthropic": {"thinking": {"type": "disabled"}},
           "ollama": {"think": False}, "responses": {"reasoning": {"effort": "none"}}}
    on = {"openai": {"reasoning_effort": "high"}, "anthropic": {"thinking": {"type": "enabled", "budget_tokens": 64}},
          "ollama": {"think": True}, "responses": {"reasoning": {"effort": "high"}}}
    with running_server(loaded, "t", max_tokens=8, context=256, think=True) as (_, url):
        thinking = {r: prompt_tokens(url, r, {}) for r in off}
        assert all(prompt_tokens(url, r, off[r]) != thinking[r] for r in off)  # (the two renderings differ)
    with running_server(loaded, "t", max_tokens=8, context=256, think=False) as (_, url):
        for route in off:
            assert prompt_tokens(url, route, {}) == prompt_tokens(url, route, off[route]), route
            assert prompt_tokens(url, route, on[route]) == thinking[route], route


def test_the_log_line_of_an_answer_says_what_it_read_resumed_and_wrote():
    from clover_local.serve.engine import answer_line

    info = {"prompt_tokens": 20134, "cached_tokens": 18900, "prefill_seconds": 1.23, "completion_tokens": 312,
            "reasoning_tokens": 120, "finish_reason": "stop",
            "stats": {"passes": 97, "tokens_per_pass": 3.2165, "seconds": 3.14, "tokens_per_second": 99.36}}
    assert answer_line(info) == ("answered: 20,134 prompt tokens (18,900 resumed) read in 1.2 s · 312 tokens (120 "
                                 "thinking) in 3.1 s, 99.4 tok/s, 3.22 tokens/pass · stop")
    scored = {**info, "cached_tokens": 0, "prefill_seconds": 0.0, "completion_tokens": 0, "reasoning_tokens": 0,
              "finish_reason": "length"}  # (a completions request that only scores its prompt)
    assert answer_line(scored) == "answered: 20,134 prompt tokens · 0 tokens · length"


def test_engine_stop_answers_every_job_and_waits_for_its_worker(in_process):
    """Stopping answers the running job and the waiting ones (503, shutting down), refuses new ones, and returns
    once the worker thread has ended: a worker still alive at exit could free the model (its last reference)
    while the interpreter finalizes, which aborts the process."""
    from clover_local.generate.block_diffusion import DecodeSettings
    from clover_local.serve.engine import Job
    from clover_local.serve.protocol import ApiError

    engine, _ = in_process
    running, waiting = _busy(engine)
    assert engine.stop(timeout=20) is True
    assert not engine.worker.is_alive()
    for job in (running, waiting):
        items = []
        while not items or items[-1][0] == "delta":
            items.append(job.out.get(timeout=1))
        kind, err = items[-1]
        assert kind == "error" and err.status == 503 and "shutting down" in err.message
    with pytest.raises(ApiError) as err:
        engine.submit(Job(running.prompt_ids, "hello", DecodeSettings(max_new_tokens=4)))
    assert err.value.status == 503 and "shutting down" in err.value.message
    assert engine.stop(timeout=1) is True  # again: nothing left to do


def _serve_tiny(env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "clover_local", "serve", "tiny", "--port", "0", "--device", "cpu",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
    if m is None:
        proc.kill()
        pytest.fail(f"the server did not start: {line}{proc.communicate()[1]}")
    return proc, m.group(1)


def test_sigterm_stops_the_server_in_order_and_exits_0():
    """SIGTERM (a service manager, `kill`) after a few answers, with an idle keep-alive connection open and, in the
    last round, an answer still streaming: 'stopping', exit code 0, no abort. The worker used to free the model
    while the interpreter finalized ('terminate called without an active exception', SIGABRT) in about one
    shutdown in four, so a few rounds make a regression show."""
    import http.client
    import signal

    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOVER_LOCAL_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    for i in range(2):  # SIGTERM as soon as it serves (the worker has run nothing): the same abort, as often
        proc, _ = _serve_tiny(env)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, "terminate called" in err, "stopping" in err) == (0, False, True), err
    rounds = 4
    for i in range(rounds):
        last = i == rounds - 1
        if last:
            env["CLOVER_LOCAL_PASS_DELAY"] = "0.2"  # slow passes: the answer is still streaming at SIGTERM
        proc, url = _serve_tiny(env)
        try:
            host, port = url.removeprefix("http://").split(":")
            idle = http.client.HTTPConnection(host, int(port), timeout=30)  # kept open (keep-alive) past SIGTERM
            idle.request("GET", "/v1/models")
            assert idle.getresponse().read()
            if not last:
                status, body = post(url, json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode())
                assert status == 200 and body["choices"][0]["message"]["content"]
            req = urllib.request.Request(url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"messages": [{"role": "user", "content": "add 12+30"}],
                                                          "stream": True}).encode())
            with urllib.request.urlopen(req, timeout=30) as r:
                if last:
                    assert r.readline().startswith(b"data: ")  # the role chunk: generation is under way
                    proc.send_signal(signal.SIGTERM)
                events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            if last:  # told why the answer ended early
                assert "shutting down" in json.loads(events[-2])["error"]["message"]
            else:
                proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            out, err = proc.communicate(timeout=30)
            assert (proc.returncode, "terminate called" in err) == (0, False), (i, err)
            assert "stopping" in err and time.monotonic() - t0 < 15
            idle.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------------------------- mutation-found gaps

def _parse(**fields):
    from clover_local.serve.protocol import parse_chat_request

    return parse_chat_request(json.dumps({"messages": MSG, **fields}).encode())


def _refused(**fields):
    from clover_local.serve.protocol import ApiError

    with pytest.raises(ApiError) as err:
        _parse(**fields)
    assert err.value.status == 400
    return err.value


def test_sampling_fields_are_checked_at_their_bounds():
    """The ranges' ends: temperature [0, 2], top_p [0, 1], threshold (0, 1], reveal_factor [0, 100]; an open end
    refuses its own value."""
    assert _parse(temperature=2).temperature == 2.0 and _parse(temperature=0).temperature == 0.0
    assert _refused(temperature=-0.01).param == "temperature"
    assert _refused(temperature=2.5).message == "'temperature' must be in [0, 2], got 2.5"
    assert _parse(top_p=1).top_p == 1.0 and _parse(top_p=0).top_p == 0.0
    e = _refused(top_p=1.01)
    assert e.param == "top_p" and e.message == "'top_p' must be in [0, 1], got 1.01"
    assert _parse(threshold=1).threshold == 1.0 and _parse().threshold is None
    assert _refused(threshold=0).param == "threshold"
    assert _refused(threshold=1.5).param == "threshold"
    assert _parse(reveal_factor=0).reveal_factor == 0.0 and _parse().reveal_factor is None
    assert _parse(reveal_factor=100).reveal_factor == 100.0 and _refused(reveal_factor=-1).param == "reveal_factor"


def test_max_tokens_and_max_completion_tokens():
    """max_completion_tokens (OpenAI's current name) wins over the older max_tokens; at least 1 either way."""
    assert _parse(max_tokens=1).max_tokens == 1
    assert _parse(max_completion_tokens=5, max_tokens=9).max_tokens == 5
    assert _parse(max_completion_tokens=5).max_tokens == 5
    assert _parse().max_tokens is None
    assert _refused(max_tokens=0).param == "max_tokens"
    assert _refused(max_completion_tokens=0).param == "max_completion_tokens"


def test_stop_is_one_string_or_up_to_sixteen_non_empty_ones():
    assert _parse(stop="END").stop == ["END"]
    many = [chr(ord("a") + i) for i in range(16)]  # more than OpenAI's 4: lm-eval's completions send a task's all
    assert _parse(stop=many).stop == many
    assert _refused(stop=[*many, "q"]).param == "stop"
    assert _refused(stop=["a", ""]).param == "stop"
    assert _refused(stop="").param == "stop"
    assert _refused(stop=[1]).param == "stop"


def test_chat_template_kwargs_enable_thinking_wins_and_reserved_keys_are_dropped():
    req = _parse(enable_thinking=True, chat_template_kwargs={"enable_thinking": False, "messages": [],
                                                             "add_generation_prompt": False, "extra": 1})
    assert req.enable_thinking is False and req.template_kwargs == {"extra": 1}
    req = _parse(enable_thinking=False, chat_template_kwargs={"enable_thinking": True})
    assert req.enable_thinking is True
    assert _parse(enable_thinking=False).enable_thinking is False and _parse().enable_thinking is True
    assert _refused(chat_template_kwargs={"enable_thinking": "no"}).param == "enable_thinking"


def test_reasoning_effort_none_or_minimal_turns_thinking_off_unless_enable_thinking_says_otherwise():
    """As the Responses API's reasoning.effort: the model has no levels between thinking and not."""
    assert [_parse(reasoning_effort=e).enable_thinking for e in ("none", "minimal", "low", "high")] == \
        [False, False, True, True]
    assert _parse(reasoning_effort="none", enable_thinking=True).enable_thinking is True
    assert _parse(reasoning_effort="high", response_format={"type": "json_object"}).enable_thinking is False
    assert _refused(reasoning_effort=5).param == "reasoning_effort"


def test_reasoning_effort_low_and_medium_size_a_thinking_budget():
    from clover_local.serve.protocol import EFFORT_BUDGETS

    assert [_parse(reasoning_effort=e).think_budget for e in ("none", "low", "medium", "high", "xhigh")] == \
        [None, EFFORT_BUDGETS["low"], EFFORT_BUDGETS["medium"], None, None]
    assert EFFORT_BUDGETS["low"] < EFFORT_BUDGETS["medium"]
    assert _parse(reasoning_effort="low", thinking_token_budget=99).think_budget == 99  # asked for: it wins
    assert _parse().think_budget is None


def test_messages_map_developer_to_system_and_keep_an_assistants_reasoning():
    from clover_local.serve.protocol import parse_messages

    got = parse_messages([{"role": "developer", "content": "be brief"},
                          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                           "reasoning_content": "not a user's"},
                          {"role": "assistant", "content": None, "reasoning_content": "I thought"}])
    assert got == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"},
                   {"role": "assistant", "content": "", "reasoning_content": "I thought"}]


def test_the_budget_allows_max_tokens_up_to_the_servers_limit():
    from clover_local.serve.http import Limits, completion_budget
    from clover_local.serve.protocol import ApiError

    limits = Limits(max_tokens=48, context=64)
    assert completion_budget(16, 48, limits) == 48  # exactly --max-tokens, exactly filling the context
    with pytest.raises(ApiError) as err:
        completion_budget(1, 49, limits)
    assert err.value.code == "max_tokens_too_large"


def _sse(url: str, body: dict) -> list[str]:
    req = urllib.request.Request(url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                                 data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        return [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]


def test_streams_end_with_finish_reason_then_usage_only_when_asked_then_done(in_process):
    """SSE framing: a role chunk first; a chunk with the finish reason; the usage chunk (no choices) only with
    stream_options.include_usage; then [DONE]. An answer cut by max_tokens ends with finish_reason 'length',
    streamed or not, and counts exactly max_tokens completion tokens."""
    _, url = in_process
    status, plain = post(url, json.dumps({"messages": MSG, "max_tokens": 4}).encode())
    assert status == 200 and plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 4
    assert plain["usage"]["total_tokens"] == plain["usage"]["prompt_tokens"] + 4
    for asked in (None, False, True):
        body = {"messages": MSG, "max_tokens": 4, "stream": True}
        if asked is not None:
            body["stream_options"] = {"include_usage": asked}
        events = _sse(url, body)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and
                    c["choices"][0]["finish_reason"]]
        assert finishes == ["length"]
        with_usage = [c for c in chunks if "usage" in c]
        if asked:
            assert with_usage == [chunks[-1]] and chunks[-1]["choices"] == []
            assert chunks[-1]["usage"]["completion_tokens"] == 4
            assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        else:
            assert with_usage == [] and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_a_stream_that_asks_for_blocks_gets_the_block_being_denoised_after_each_pass(in_process, monkeypatch):
    """stream_options.include_blocks (ours, for serve's chat page): after a pass a chunk with no choices holding
    the block as it stands, one cell per generated position, null while masked, else the token's label and the
    confidence it was revealed with, and the answer's passes and tokens so far; one such chunk per pass the usage
    counts where passes take longer than a screen's frame (VIEW_INTERVAL: faster ones are sent at that rate), the
    answer's text unchanged, and none for a stream that does not ask. Before them the prompt's tokens and the
    answer's allowance (clover_prompt); a prompt read in several passes is reported as it is read, first. Each
    block's commit (clover_commit) precedes its text."""
    from clover_local.serve.engine import VIEW_INTERVAL

    engine, url = in_process
    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", str(VIEW_INTERVAL + 0.01))
    body = {"messages": MSG, "max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}}
    plain = [json.loads(e) for e in _sse(url, body)[:-1]]
    body["stream_options"]["include_blocks"] = True
    chunks = [json.loads(e) for e in _sse(url, body)[:-1]]
    blocks = [c["clover_block"] for c in chunks if "clover_block" in c]
    assert not any("clover_block" in c or "clover_prompt" in c for c in plain)
    # first, what the prompt is and leaves the answer (the usage's figures, before any pass)
    first = next(k for k, c in enumerate(chunks) if not c["choices"])
    use = chunks[-1]["usage"]
    assert chunks[first]["clover_prompt"] == {"tokens": use["prompt_tokens"], "max_tokens": 40, "read_from": 0}
    assert use["clover"]["max_tokens"] == 40 and "read_from" not in use["clover"]
    assert all(c["choices"] == [] and c["object"] == "chat.completion.chunk" for c in chunks if "clover_block" in c)

    def text(cs: list[dict]) -> str:
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in cs if c["choices"])

    assert text(chunks) == text(plain)  # greedy: the same answer
    assert len(blocks) == chunks[-1]["usage"]["clover"]["passes"] >= 2
    # each block's commit, before its text: the answer's tokens and its thought's, as the usage ends with them
    commits = [(k, c["clover_commit"]) for k, c in enumerate(chunks) if "clover_commit" in c]
    assert [c["block"] for _, c in commits] == list(range(len(commits))) and len(commits) >= 1
    assert commits[-1][1]["tokens"] == use["completion_tokens"]
    assert commits[-1][1]["thought"] == use["completion_tokens_details"]["reasoning_tokens"]
    texts = [k for k, c in enumerate(chunks)
             if c["choices"] and any(c["choices"][0]["delta"].get(f) for f in ("content", "reasoning_content"))]
    assert texts and all("clover_commit" in chunks[k - 1] or k - 1 in texts for k in texts)  # right after its commit
    assert [b["passes"] for b in blocks] == list(range(1, len(blocks) + 1))
    assert blocks[-1]["tokens"] <= chunks[-1]["usage"]["completion_tokens"]
    for before, now in zip(blocks, blocks[1:]):
        assert now["tokens"] >= before["tokens"]
        if now["block"] == before["block"]:  # within a block: the next pass, nothing revealed taken back
            assert now["pass"] == before["pass"] + 1 and len(now["cells"]) == len(before["cells"])
            assert all(n is not None for b, n in zip(before["cells"], now["cells"]) if b is not None)
        else:
            assert now["block"] > before["block"] and now["pass"] == 1
    for view in blocks:
        shown = [c for c in view["cells"] if c is not None]
        assert shown and all(isinstance(c["text"], str) and c["text"] and 0 <= c["confidence"] <= 1 for c in shown)
        assert any(c["new"] for c in shown)  # each pass reveals at least one position

    # a new prompt of ≈ 60 tokens, read 16 rows a pass (the runtime's prefill span, on a model loaded whole)
    monkeypatch.setattr(type(engine.loaded.model), "prefill_rows", property(lambda self: 16))
    body["messages"] = [{"role": "user", "content": "count the words: " + " ".join(["one two three"] * 12)}]
    chunks = [json.loads(e) for e in _sse(url, body)[:-1]]
    views = [c for c in chunks if "clover_prefill" in c or "clover_block" in c]
    read = [c["clover_prefill"] for c in views[:views.index(next(c for c in views if "clover_block" in c))]]
    assert all("clover_prefill" not in c for c in views[len(read):])  # the prompt's reading, then the passes
    prompt, block = chunks[-1]["usage"]["prompt_tokens"], engine.decoder.block_size  # (the prompt up to its last
    assert read[0]["done"] == 0 and prompt - block < read[-1]["done"] == read[-1]["total"] <= prompt  # whole block)
    assert [r["done"] for r in read] == sorted(r["done"] for r in read) and len(read) >= 4


def test_a_model_can_be_looked_up_by_name(in_process):
    _, url = in_process
    with urllib.request.urlopen(url + "/v1/models/opens-think", timeout=10) as r:
        model = json.loads(r.read())
    assert model["id"] == "opens-think" and model["object"] == "model" and model["max_model_len"] == 512
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url + "/v1/models/another", timeout=10)
    assert err.value.code == 404 and json.loads(err.value.read())["error"]["code"] == "not_found"


def test_a_client_that_hangs_up_on_a_plain_request_stops_its_generation(in_process, monkeypatch):
    """Not streamed, nothing is written until the answer is done: the handler must notice the closed connection
    while it waits, and cancel the job (counted as cancelled, not completed)."""
    import socket

    engine, url = in_process
    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", "0.05")  # 64 passes: seconds, well past the hang-up
    before = dict(engine.health()["requests"])
    logged: list[str] = []
    engine.log = logged.append
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"messages": MSG, "max_tokens": 64}).encode()
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 20
    while engine.health()["passes"] == 0:  # generating
        assert time.monotonic() < deadline
        time.sleep(0.02)
    sock.close()
    while True:
        h = engine.health()
        if h["requests"]["cancelled"] > before["cancelled"] and not h["queue"]["running"]:
            break
        assert time.monotonic() < deadline, f"generation was not stopped: {h}"
        time.sleep(0.05)
    assert h["requests"]["completed"] == before["completed"]
    assert h["tokens"] < 64
    assert logged and re.fullmatch(r"stopped after \d+ tokens \([\d.]+ s\): the client went away", logged[-1]), logged


def test_a_body_of_exactly_the_limit_is_read(server):
    """--max-request-mb 0.05: 50000 bytes are read (and answered on their merits), 50001 are refused unread."""
    def padded(size: int) -> bytes:
        head = b'{"messages": [], "pad": "'
        return head + b"x" * (size - len(head) - 2) + b'"}'

    status, body = post(server, padded(50_000))
    assert status == 400 and body["error"]["param"] == "messages"
    status, body = post(server, padded(50_001))
    assert status == 413 and body["error"]["code"] == "request_too_large"


def _raw_post(url: str, head: bytes, raw: bytes, half_close: bool = False) -> tuple[int, dict]:
    """One request written as bytes (what urllib will not send: a chunked body, a body short of its length)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + head + b"\r\n" + raw)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status, _, body = answer.partition(b"\r\n\r\n")
    return int(status.split()[1]), json.loads(body)


def test_a_chunked_body_is_read_as_its_chunks_joined(server):
    """curl -T - and clients that stream their upload send Transfer-Encoding: chunked (it was a 411): the chunks,
    an extension and a trailer are read through, and the request answers as the same body with a length does."""
    text = "".join(random.Random(3).choice("abc xyz,.") for _ in range(300))
    body = json.dumps({"prompt": text}).encode()
    status, whole = post(server, body, "/tokenize")
    assert status == 200 and whole["count"] > 10
    cut = [0, 7, 150, len(body)]
    chunks = b"".join(b"%x%s\r\n%s\r\n" % (b - a, b";note=1" if i == 1 else b"", body[a:b])
                      for i, (a, b) in enumerate(zip(cut, cut[1:])))
    assert _raw_post(server, b"Transfer-Encoding: chunked\r\n", chunks + b"0\r\nX-Trailer: 1\r\n\r\n") == (200, whole)


@pytest.mark.parametrize("raw, status, says", [
    (b"0x10\r\n", 400, "does not start with its size in hex"),  # what int(x, 16) would take
    (b"-5\r\n", 400, "does not start with its size in hex"),
    (b"5\r\nabcdefg\r\n0\r\n\r\n", 400, "not the size its line gave"),
    (b"5\r\nab", 400, "not the size its line gave"),
    (b"", 400, "ended before its last chunk"),
    (b"c351\r\n", 413, "is at least 50001 bytes; the limit is 50000"),  # refused unread
    (b"8000\r\n" + b"x" * 0x8000 + b"\r\n8000\r\n", 413, "is at least 65536 bytes"),
], ids=["0x", "negative", "longer", "shorter", "empty", "one-too-large", "two-too-large"])
def test_a_chunked_body_that_breaks_its_framing_or_the_limit_is_refused(server, raw, status, says):
    code, body = _raw_post(server, b"Transfer-Encoding: chunked\r\n", raw, half_close=True)
    assert (code, body["error"]["code"] == "request_too_large") == (status, status == 413) and says in \
        body["error"]["message"], body


def test_a_body_shorter_than_its_content_length_is_refused_not_read_as_far_as_it_goes(server):
    """A client that ends its body early (or lies about its length) gets a 400; the part that came was a valid
    request, and was answered 200 before."""
    body = json.dumps({"prompt": "hello"}).encode()
    status, answer = _raw_post(server, b"Content-Length: %d\r\n" % (len(body) + 9), body, half_close=True)
    assert status == 400 and answer["error"]["message"] == f"the body ended after {len(body)} of its Content-" \
        f"Length's {len(body) + 9} bytes"
    assert _raw_post(server, b"Content-Length: %d\r\n" % len(body), body, half_close=True)[0] == 200


def test_a_job_cancelled_while_waiting_is_skipped(in_process):
    """A client gone before its turn: the worker skips its job (no pass run for it), counting it cancelled."""
    engine, _ = in_process
    running, waiting = _busy(engine)
    waiting.cancel.set()
    running.cancel.set()
    deadline = time.monotonic() + 20
    while True:
        h = engine.health()
        if h["requests"]["cancelled"] == 2 and not h["queue"]["running"] and h["queue"]["waiting"] == 0:
            break
        assert time.monotonic() < deadline, h
        time.sleep(0.02)
    time.sleep(0.2)
    assert not waiting.started.is_set() and waiting.out.empty()
    assert engine.health()["requests"]["cancelled"] == 2
