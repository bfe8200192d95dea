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
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from clover_local.checkpoint.synthetic import write_checkpoint
from tests.conftest import tokenizer_spec

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS, CONTEXT = 200, 512


def _checkpoint(folder: Path, tokenizer_dir: Path, seed: int) -> Path:
    out = write_checkpoint(folder, tokenizer_spec(tokenizer_dir), seed=seed)
    for f in tokenizer_dir.iterdir():
        if f.name != "generation_config.json":
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer_dir):
    ckpt = _checkpoint(tmp_path_factory.mktemp("serve") / "ckpt", tokenizer_dir, seed=11)
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
    status, body = post(server, json.dumps({"messages": "hi"}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=[{"content": "no role"}])
    assert err.value.status_code == 400 and "role" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=MSG, temperature=5)
    assert "temperature" in err.value.body["message"]
    status, body = post(server, b"{}", path="/v1/nothing")
    assert status == 404 and "error" in body


def test_limits_prompt_tokens_and_body_size(client, server):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", max_tokens=8,
                                       messages=[{"role": "user", "content": "add 12+30 " * 200}])
    assert err.value.body["code"] == "context_length_exceeded"
    assert f"maximum context length is {CONTEXT} tokens" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="clover-test", messages=MSG, max_tokens=MAX_TOKENS + 1)
    assert err.value.body["code"] == "max_tokens_too_large"
    status, body = post(server, json.dumps({"messages": [{"role": "user", "content": "x" * 60_000}]}).encode())
    assert status == 413 and "limit is 50000" in body["error"]["message"]
    assert health(server)["status"] == "ok"  # still serving


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
    from clover_local.serve.engine import Engine
    from clover_local.serve.http import Limits, make_server

    torch.set_num_threads(1)
    ckpt = make_checkpoint(seed=12)
    tpl = (ckpt / "chat_template.jinja").read_text()
    (ckpt / "chat_template.jinja").write_text(tpl.replace("{{- '<|im_start|>assistant\\n' }}",
                                                          "{{- '<|im_start|>assistant\\n<think>\\n' }}", 1))
    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", "0.01")
    engine = Engine(load(str(ckpt), "cpu", "float32"), max_queue=1)
    srv = make_server(engine, "127.0.0.1", 0, "opens-think", Limits(max_tokens=64, context=512), quiet=True)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield engine, f"http://127.0.0.1:{srv.server_address[1]}"
    engine.stop()
    srv.shutdown()
    srv.server_close()


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
    from clover_local.serve.engine import Engine
    from clover_local.serve.http import Limits, make_server

    engine = Engine(load(str(make_checkpoint(seed=12)), "cpu", "float32"), max_queue=1)
    srv = make_server(engine, "127.0.0.1", 0, "keyed", Limits(max_tokens=8, context=256), api_key="s3cret",
                      quiet=True)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"

    def get(path: str, key: str | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"} if key else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    try:
        assert get("/health") == (200, {"status": "ok"})
        assert get("/health", "wrong") == (200, {"status": "ok"})
        code, full = get("/health", "s3cret")
        assert code == 200 and full["model"] == "keyed" and "requests" in full and "runtime" in full
        code, body = get("/v1/models")
        assert code == 401 and body["error"]["code"] == "invalid_api_key" and "s3cret" not in json.dumps(body)
        assert get("/v1/models", "wrong")[0] == 401
        code, body = get("/v1/models", "s3cret")
        assert code == 200 and body["data"][0]["id"] == "keyed"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0, timeout=30).chat.completions.create(
                model="keyed", messages=MSG, max_tokens=2)
    finally:
        engine.stop()
        srv.shutdown()
        srv.server_close()


def test_queue_bound_answers_429(in_process):
    from clover_local.serve.engine import Job
    from clover_local.generate.block_diffusion import DecodeSettings

    engine, url = in_process
    ids = engine.tokenizer.encode("hello")
    running = Job(ids, "hello", DecodeSettings(max_new_tokens=60))
    engine.submit(running)
    assert running.started.wait(20)
    waiting = Job(ids, "hello", DecodeSettings(max_new_tokens=4))
    engine.submit(waiting)  # the one place in the queue
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
