"""Ollama's native API on `serve` (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version), through
the official `ollama` client: the same answers as the OpenAI routes for the same request (streamed as NDJSON or
not), Ollama's final figures, JSON formats, tool calls read out of a scripted answer and a tool's result rendered
back, the refusals in Ollama's error shape, and the model routes."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from clover_local.errors import CloverError
from clover_local.generate.events import BlockCommitted
from tests.inprocess_server import running_server
from tests.test_serve_tools import TOOLS, XML_ARGS, XML_CALL

ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency")
openai = pytest.importorskip("openai", reason="the openai client is a test dependency")

SYSTEM = "Be brief."


@pytest.fixture(scope="module")
def tiny_server(tiny):
    with running_server(tiny, "tiny", max_tokens=48, context=1024) as served:
        yield served


def _openai(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _post(url: str, path: str, body: dict, headers: dict | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of a raw POST (what the client hides: the framing, the error body)."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_chat_answers_what_the_chat_route_answers_streamed_or_not(tiny_server):
    """Greedy, the same conversation answers the same on /api/chat as on /v1/chat/completions, thinking on and
    off; the NDJSON stream's pieces add up to the whole answer and its last object carries the usage's counts."""
    _, url = tiny_server
    chat, client = _openai(url), ollama.Client(host=url)
    for prompt, think in (("reverse a b c d", False), ("hello", True)):  # (the tiny model thinks on "hello")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        ref = chat.chat.completions.create(model="tiny", messages=messages, extra_body={"enable_thinking": think})
        ref_msg = ref.choices[0].message
        reasoning = ref_msg.model_extra.get("reasoning_content")
        assert bool(reasoning) == think
        r = client.chat(model="tiny", messages=messages, think=think)
        assert (r.message.content, r.message.thinking) == (ref_msg.content, reasoning)
        assert r.done and r.done_reason == ref.choices[0].finish_reason
        assert (r.prompt_eval_count, r.eval_count) == (ref.usage.prompt_tokens, ref.usage.completion_tokens)
        assert r.total_duration >= r.eval_duration > 0 and r.load_duration == 0

        parts = list(client.chat(model="tiny", messages=messages, think=think, stream=True))
        assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True] and len(parts) > 1
        assert "".join(p.message.content or "" for p in parts) == ref_msg.content
        assert "".join(p.message.thinking or "" for p in parts) == (reasoning or "")
        last = parts[-1]
        assert (last.done_reason, last.prompt_eval_count, last.eval_count) == (
            r.done_reason, r.prompt_eval_count, r.eval_count)
    # "high" is thinking on; the answer is the one asked with think true
    effort = client.chat(model="tiny", messages=[{"role": "user", "content": "hello"}], think="high")
    assert effort.message.thinking and effort.message == client.chat(
        model="tiny", messages=[{"role": "user", "content": "hello"}], think=True).message


def test_the_stream_is_newline_delimited_json(tiny_server):
    _, url = tiny_server
    status, kind, body = _post(url, "/api/chat", {"model": "other", "messages": [{"role": "user", "content": "hi"}]})
    lines = body.decode().splitlines()
    assert status == 200 and kind == "application/x-ndjson" and len(lines) > 1  # streamed: Ollama's default
    objects = [json.loads(line) for line in lines]
    assert objects[-1]["done"] is True and not any(o["done"] for o in objects[:-1])
    assert {o["model"] for o in objects} == {"other"}  # answered under the name asked for, as Ollama does


def test_generate_raw_is_a_completion_and_templated_is_a_chat(tiny_server):
    _, url = tiny_server
    chat, client = _openai(url), ollama.Client(host=url)
    prompt = "<|im_start|>user\nreverse a b c d<|im_end|>\n<|im_start|>assistant\n"
    ref = chat.completions.create(model="tiny", prompt=prompt, max_tokens=24).choices[0]
    raw = client.generate(model="tiny", prompt=prompt, raw=True, options={"num_predict": 24})
    assert raw.response == ref.text and raw.response and raw.done_reason == ref.finish_reason
    streamed = list(client.generate(model="tiny", prompt=prompt, raw=True, options={"num_predict": 24}, stream=True))
    assert "".join(p.response for p in streamed) == ref.text and streamed[-1].done

    ref_chat = chat.chat.completions.create(model="tiny", messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]).choices[0].message
    templated = client.generate(model="tiny", system=SYSTEM, prompt="hello")
    assert (templated.response, templated.thinking) == (ref_chat.content, ref_chat.model_extra["reasoning_content"])


def test_json_formats_hold_the_answer(tiny_server):
    _, url = tiny_server
    client = ollama.Client(host=url)
    messages = [{"role": "user", "content": "is 2 > 1?"}]
    r = client.chat(model="tiny", messages=messages, format="json")
    assert isinstance(json.loads(r.message.content), dict) and not r.message.thinking
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    r = client.chat(model="tiny", messages=messages, format=schema)
    assert json.loads(r.message.content)["answer"] in ("yes", "no")
    g = client.generate(model="tiny", prompt="is 2 > 1?", format=schema)
    assert json.loads(g.response)["answer"] in ("yes", "no")


def test_options_num_predict_stop_and_load_requests(tiny_server):
    _, url = tiny_server
    client = ollama.Client(host=url)
    messages = [{"role": "user", "content": "reverse a b c d"}]
    whole = client.chat(model="tiny", messages=messages, think=False, options={"num_predict": -1, "num_ctx": 8192})
    assert whole.done_reason == "stop" and len(whole.message.content) > 2
    short = client.chat(model="tiny", messages=messages, think=False, options={"num_predict": 1})
    assert short.done_reason == "length" and short.eval_count == 1
    stop = whole.message.content[1:3]
    cut = client.chat(model="tiny", messages=messages, think=False, options={"stop": [stop]}, keep_alive="5m")
    assert cut.message.content == whole.message.content[:1]
    # greedy, top_k changes nothing, so it is taken
    assert client.chat(model="tiny", messages=messages, think=False, options={"top_k": 5}).message == whole.message
    # sampling, top_k and min_p are taken (they cut the draw: sampling.choose)
    drawn = client.chat(model="tiny", messages=messages, think=False,
                        options={"temperature": 0.7, "top_k": 5, "min_p": 0.1, "seed": 1})
    assert drawn.done and drawn.message.content
    loaded = client.generate(model="tiny")  # Ollama's way to load a model: nothing to answer
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


@pytest.mark.parametrize("call, named", [
    (dict(route="generate", prompt="hi", images=["AAAA"]), "images"),
    (dict(route="generate", prompt="hi", suffix="end"), "suffix"),
    (dict(route="generate", prompt="hi", context=[1, 2, 3]), "context"),
    (dict(route="generate", prompt="hi", options={"temperature": 0.7, "typical_p": 0.5}), "typical_p"),
    (dict(route="chat", messages=[{"role": "user", "content": "hi", "images": ["AAAA"]}]), "images"),
    (dict(route="chat", messages=[{"role": "user", "content": "hi"}], options={"mirostat": 2}), "mirostat"),
    (dict(route="chat", messages=[{"role": "user", "content": "hi"}], format="json", think=True), "think"),
], ids=["images", "suffix", "context", "typical_p", "message-images", "mirostat", "format-and-think"])
def test_refusals_are_ollama_errors(tiny_server, call, named):
    _, url = tiny_server
    client = ollama.Client(host=url)
    route = call.pop("route")
    with pytest.raises(ollama.ResponseError) as err:
        getattr(client, route)(model="tiny", **call)
    assert err.value.status_code == 400 and (f"'{named}" in err.value.error or f".{named}'" in err.value.error)


def test_model_routes(tiny_server, tiny):
    _, url = tiny_server
    client = ollama.Client(host=url)
    (listed,) = client.list().models
    assert listed.model == "tiny:latest" and listed.size > 0 and len(listed.digest) == 64
    assert (listed.details.format, listed.details.family) == ("safetensors", "clover")
    # the checkpoint's files on disk, and its parameters counted (the tiny model: some millions)
    assert listed.size == sum(f.stat().st_size for f in Path(tiny.path).iterdir() if f.is_file())
    assert listed.details.parameter_size == f"{sum(p.numel() for p in tiny.model.parameters()) / 1e6:.1f}M"
    shown = client.show("tiny")
    assert shown.template == tiny.tokenizer.chat_template and shown.capabilities == ["completion", "thinking"]
    assert shown.modelinfo["clover.context_length"] == 1024 and shown.modified_at == listed.modified_at
    c = tiny.config
    want = {"embedding_length": c.hidden_size, "block_count": c.num_hidden_layers, "expert_count": c.num_experts,
            "expert_used_count": c.num_experts_per_tok, "vocab_size": c.vocab_size}
    assert {k: shown.modelinfo[f"clover.{k}"] for k in want} == want
    (running,) = client.ps().models
    assert running.model == "tiny:latest" and running.context_length == 1024 and running.size_vram is not None
    with urllib.request.urlopen(url + "/api/version", timeout=30) as r:
        from clover_local import __version__

        assert json.load(r) == {"version": __version__}
    status, _, body = _post(url, "/api/nothing", {})
    assert status == 404 and set(json.loads(body)) == {"error"}


def test_an_api_key_guards_the_api_routes(tiny):
    with running_server(tiny, "keyed", max_tokens=8, context=256, api_key="s3cret") as (_, url):
        with pytest.raises(ollama.ResponseError) as err:
            ollama.Client(host=url).list()
        assert err.value.status_code == 401 and "API key" in err.value.error
        keyed = ollama.Client(host=url, headers={"Authorization": "Bearer s3cret"})
        assert keyed.list().models[0].model == "keyed:latest"
        assert keyed.chat(model="keyed", messages=[{"role": "user", "content": "hi"}]).done


def test_tool_calls_come_back_and_results_are_rendered(tool_server):
    engine, url = tool_server
    client = ollama.Client(host=url)
    messages = [{"role": "user", "content": "Weather in SF?"}]
    r = client.chat(model="tools", messages=messages, tools=TOOLS)
    (call,) = r.message.tool_calls
    assert (call.function.name, dict(call.function.arguments)) == ("get_weather", XML_ARGS)
    assert r.message.content == "Let me check.\n" and r.done_reason == "stop"
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert '"name": "get_weather"' in prompt  # the model was told of the tool

    parts = list(client.chat(model="tools", messages=messages, tools=TOOLS, stream=True))
    assert "".join(p.message.content or "" for p in parts) == "Let me check.\n"
    with_calls = [k for k, p in enumerate(parts) if p.message.tool_calls]
    assert with_calls == [len(parts) - 2] and parts[-1].done  # in the last message before done
    assert dict(parts[with_calls[0]].message.tool_calls[0].function.arguments) == XML_ARGS

    client.chat(model="tools", tools=TOOLS, messages=messages + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                            "arguments": {"city": "San Francisco"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18 C and foggy"}])
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "<tool_response>\n18 C and foggy\n</tool_response>" in prompt
    assert "<parameter=city>\nSan Francisco\n</parameter>" in prompt


class FailingDecoder:
    """Writes one block, then fails as a generation that ran out of its runtime's room does."""

    def __init__(self, tokenizer, block_size: int) -> None:
        self.ids, self.block_size = tokenizer.encode("Let me"), block_size

    def generate(self, prompt_ids, settings, reuse=None, snapshot_at=None):
        yield BlockCommitted(0, self.ids, 1)
        raise CloverError("the runtime's context is full")


def test_an_error_mid_stream_is_a_last_error_line(tool_server):
    engine, url = tool_server
    scripted, engine.decoder = engine.decoder, FailingDecoder(engine.tokenizer, engine.decoder.block_size)
    try:
        status, _, body = _post(url, "/api/chat", {"messages": [{"role": "user", "content": "hi"}]})
        with pytest.raises(ollama.ResponseError) as err:
            list(ollama.Client(host=url).chat(model="tools", messages=[{"role": "user", "content": "hi"}],
                                              stream=True))
    finally:
        engine.decoder = scripted
    *pieces, last = [json.loads(line) for line in body.decode().splitlines()]
    assert status == 200 and "".join(p["message"]["content"] for p in pieces) == "Let me"
    assert set(last) == {"error"} and "context is full" in last["error"] and "context is full" in err.value.error


def _long_conversation() -> list[dict]:
    """A system message, 14 exchanges and a question: 371 tokens rendered by the tiny model's template."""
    history = [{"role": "system", "content": SYSTEM}]
    for i in range(14):
        history += [{"role": "user", "content": f"reverse {' '.join('abcdefgh'[i % 4:])}"},
                    {"role": "assistant", "content": " ".join(reversed('abcdefgh'[i % 4:]))}]
    return history + [{"role": "user", "content": "count a in a b a"}]


def test_chat_past_the_context_leaves_the_oldest_exchanges_out_and_the_cut_stays_put(tiny):
    """As Ollama does, /api/chat answers a conversation longer than the context from its latest messages (the system
    message kept) where the OpenAI route refuses it; the cut comes in steps (chat/window.py), so the next turn,
    one exchange longer, keeps it and resumes the prompt's prefill."""
    from clover_local.chat.window import leave_out

    ask = _long_conversation()
    system = ask[0]
    with running_server(tiny, "tiny", max_tokens=24, context=256) as (engine, url):
        full = len(tiny.tokenizer.encode(tiny.tokenizer.apply_chat_template(ask, add_generation_prompt=True)))
        assert full + 24 > 256  # too long for the context with its answer
        with pytest.raises(openai.BadRequestError, match="context"):
            _openai(url).chat.completions.create(model="tiny", messages=ask, max_tokens=24)
        client = ollama.Client(host=url)
        first = client.chat(model="tiny", messages=ask, think=False, options={"num_predict": 24})
        assert first.message.content and first.prompt_eval_count + 24 <= 256 < full + 24
        again = client.chat(model="tiny", messages=ask + [{"role": "assistant", "content": first.message.content},
                                                          {"role": "user", "content": "count b in b b a"}],
                            think=False, options={"num_predict": 24})
        assert again.message.content and engine.prompt_cache.stats.last_reused > 0  # the same start: resumed
        assert first.prompt_eval_count > (256 - 24) // 2  # cut by a step, not to the bone
        # what the server read: the system message and the latest exchanges, whole
        cut = leave_out(ask, lambda t: len(tiny.tokenizer.encode(t)), full + 24 - 256, (256 - 24) // 4)
        kept = [system] + ask[cut:]
        assert ask[cut]["role"] == "user" and first.prompt_eval_count == len(tiny.tokenizer.encode(
            tiny.tokenizer.apply_chat_template(kept, add_generation_prompt=True, enable_thinking=False)))


def test_leave_out_counts_in_steps_and_keeps_the_last_question():
    from clover_local.chat.window import FRAME_TOKENS, exchange_starts, leave_out

    assert FRAME_TOKENS == 5

    msgs = [{"role": "system", "content": "s"}] + [{"role": r, "content": "x" * 5} for r in ["user", "assistant"] * 4]
    msgs.append({"role": "user", "content": "last"})
    count = len  # ten "tokens" a message, with FRAME_TOKENS 5
    assert exchange_starts(msgs) == [1, 3, 5, 7, 9] and leave_out(msgs, count, 0, 15) == 0
    assert leave_out(msgs, count, 1, 15) == 3  # 15 wanted: the first exchange (20)
    assert leave_out(msgs, count, 15, 15) == 3 and leave_out(msgs, count, 16, 15) == 5  # 30 wanted: two exchanges
    assert leave_out(msgs, count, 1000, 15) == 9  # never past the last question
    msgs[2]["tool_calls"] = [{"function": {"name": "f", "arguments": {}}}]  # a call's text counts too
    assert leave_out(msgs, count, 16, 15) == 3
    assert leave_out(msgs[:2], count, 50, 15) == 0  # one question: nothing to leave out


def test_drop_oldest_answers_a_long_conversation_on_the_openai_and_anthropic_routes_too(tiny):
    """serve --drop-oldest: the routes that answer 400 by default leave the oldest exchanges out as /api/chat does;
    an OpenAI max_tokens is kept whole (the window leaves it all), Anthropic's is a ceiling."""
    anthropic = pytest.importorskip("anthropic", reason="the anthropic client is a test dependency")
    ask = _long_conversation()
    with running_server(tiny, "tiny", max_tokens=120, context=256, drop_oldest=True) as (_, url):
        client = _openai(url)
        for max_tokens in (24, 100):
            r = client.chat.completions.create(model="tiny", messages=ask, max_tokens=max_tokens)
            assert r.choices[0].message.content is not None and r.usage.prompt_tokens + max_tokens <= 256
        claude = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=120)
        answer = claude.messages.create(model="tiny", max_tokens=24, system=SYSTEM, messages=ask[1:])
        assert answer.content and answer.usage.input_tokens + 24 <= 256
        with pytest.raises(openai.BadRequestError, match="context"):  # the question alone past it: still a 400
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a " * 300}],
                                           max_tokens=24)


def _jobs(engine, monkeypatch) -> list:
    """The jobs the server submits from now on: their settings and stop strings are what a request asked for."""
    jobs, submit = [], engine.submit
    monkeypatch.setattr(engine, "submit", lambda job: (jobs.append(job), submit(job))[1])
    return jobs


def test_options_land_on_the_settings_they_name(tool_server, monkeypatch):
    """Each of Ollama's `options` reaches the decoder as the setting it names (read from `options`, not from the
    body's top level), on /api/chat and raw /api/generate alike; without options an answer is greedy (this server's
    default, not Ollama's 0.8); num_predict -2 and one past --max-tokens are the server's limit, not a 400."""
    engine, url = tool_server
    jobs = _jobs(engine, monkeypatch)
    client = ollama.Client(host=url)
    hi = [{"role": "user", "content": "hi"}]
    client.chat(model="tools", messages=hi)
    options = {"temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.05, "seed": 11, "repeat_penalty": 1.2,
               "presence_penalty": 0.3, "frequency_penalty": 0.4, "num_predict": 5, "stop": ["END"]}
    client.chat(model="tools", messages=hi, options=options)
    client.generate(model="tools", prompt="hi", raw=True, options=options)
    plain, *asked = jobs
    assert (plain.settings.temperature, plain.settings.top_p, plain.settings.top_k, plain.settings.seed) == (
        0.0, 1.0, 0, None)
    for job in asked:
        s = job.settings
        assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed, s.max_new_tokens) == (0.5, 0.9, 7, 0.05, 11, 5)
        assert (s.penalties.repetition, s.penalties.presence, s.penalties.frequency) == (1.2, 0.3, 0.4)
        assert job.stop == ["END"]
    assert asked[1].score_top is None  # raw: a completion, but no scoring pass (no logprobs on Ollama's routes)
    # options a client sends at their off values are taken: mirostat 0, typical_p 1 when sampling, any typical_p
    # on a greedy answer
    for taken in ({"num_predict": -2}, {"num_predict": 5000}, {"mirostat": 0},
                  {"temperature": 0.5, "typical_p": 1.0}, {"typical_p": 0.5}):
        assert client.chat(model="tools", messages=hi, options=taken).done, taken
    assert [j.settings.max_new_tokens for j in jobs[3:5]] == [1024, 1024]  # serve --max-tokens


def test_seed_minus_one_is_a_fresh_draw_as_ollama_takes_it(tool_server, monkeypatch):
    """Ollama's default seed is -1, "draw anew" (llama.cpp's LLAMA_DEFAULT_SEED): a client that sends its whole
    option set must get a sampled answer, not the fixed seed −1's same answer every time; any other seed, negative
    ones too, is a fixed seed."""
    engine, url = tool_server
    jobs = _jobs(engine, monkeypatch)
    client = ollama.Client(host=url)
    hi = [{"role": "user", "content": "hi"}]
    for seed in (-1, -2, 0, 7):
        client.chat(model="tools", messages=hi, options={"temperature": 0.9, "seed": seed})
    client.generate(model="tools", prompt="hi", raw=True, options={"seed": -1})
    assert [j.settings.seed for j in jobs] == [None, -2, 0, 7, None]


@pytest.mark.parametrize("path, body, named", [
    ("/api/chat", {"options": "fast"}, "options"),
    ("/api/chat", {"format": "xml"}, "format"),
    ("/api/chat", {"format": {"type": "nonsense"}}, "format"),
    ("/api/chat", {"think": "extreme"}, "think"),
    ("/api/chat", {"logprobs": True}, "logprobs"),
    ("/api/generate", {"template": "{{ .Prompt }}"}, "template"),
    ("/api/generate", {"raw": True, "think": True}, "think"),
], ids=["options", "format-word", "format-schema", "think-level", "chat-logprobs", "template", "raw-think"])
def test_malformed_or_unhonoured_fields_are_400s_naming_them(tool_server, path, body, named):
    """What the client libraries would not send but other clients may: a 400 in Ollama's shape naming the field,
    not a 500 and not silently ignored."""
    _, url = tool_server
    ask = {"messages": [{"role": "user", "content": "hi"}]} if path == "/api/chat" else {"prompt": "hi"}
    status, _, answer = _post(url, path, {"model": "tools", "stream": False, **ask, **body})
    error = json.loads(answer)
    assert status == 400 and set(error) == {"error"} and f"'{named}" in error["error"], error


def test_the_empty_values_clients_send_are_taken(tool_server):
    """Older ollama clients send `format: ""` and empty `images` / `context`; an empty `messages` or `prompt` is
    Ollama's documented way to load a model, answered done with reason "load" under the name asked for."""
    _, url = tool_server
    for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "format": ""}),
                       ("/api/generate", {"prompt": "hi", "format": "", "images": [], "context": []})):
        status, _, answer = _post(url, path, {"model": "tools", "stream": False, **body})
        assert status == 200 and json.loads(answer)["done_reason"] == "stop", answer
    for path, body in (("/api/chat", {"messages": []}), ("/api/generate", {"prompt": ""})):
        status, _, answer = _post(url, path, {"model": "asked:7b", **body})
        loaded = json.loads(answer)
        assert status == 200 and (loaded["done_reason"], loaded["model"]) == ("load", "asked:7b"), answer


def test_durations_are_nanoseconds(tiny_server):
    """Ollama's figures are nanoseconds: the handler's total is close to what the client waited (not a thousandth
    of it), and the prompt's and the answer's durations fit inside it."""
    _, url = tiny_server
    client = ollama.Client(host=url)
    started = time.perf_counter()
    r = client.chat(model="tiny", messages=[{"role": "user", "content": "reverse a b c d"}], think=False)
    waited = (time.perf_counter() - started) * 1e9
    assert waited >= r.total_duration > waited / 10
    assert r.prompt_eval_duration + r.eval_duration <= r.total_duration


def test_tools_without_a_type_are_functions_and_the_template_reads_them(tool_server):
    """Ollama's clients may send a tool without `"type": "function"`; /api/show lists the "tools" capability of a
    template that reads them."""
    engine, url = tool_server
    status, _, answer = _post(url, "/api/chat", {"model": "tools", "stream": False, "tools": [
        {"function": TOOLS[0]["function"]}], "messages": [{"role": "user", "content": "Weather in SF?"}]})
    assert status == 200 and json.loads(answer)["message"]["tool_calls"], answer
    assert '"name": "get_weather"' in engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "tools" in ollama.Client(host=url).show("tools").capabilities


def test_a_tagged_model_name_is_listed_as_it_is(tiny):
    with running_server(tiny, "tiny:q4", max_tokens=8, context=256) as (_, url):
        client = ollama.Client(host=url)
        assert client.list().models[0].model == client.ps().models[0].model == "tiny:q4"


def test_a_no_think_server_thinks_only_when_asked_and_levels_are_budgets(tiny, monkeypatch):
    """serve --no-think: a request that leaves `think` out answers without thinking, one that sends it thinks; a
    level below "high" is a thinking budget (protocol.EFFORT_BUDGETS), "high" none; an assistant's `thinking` sent
    back is the reasoning the template renders."""
    with running_server(tiny, "tiny", max_tokens=8, context=256, think=False, answer_room=False) as (engine, url):
        jobs = _jobs(engine, monkeypatch)
        client = ollama.Client(host=url)
        hello = [{"role": "user", "content": "hello"}]
        assert not client.chat(model="tiny", messages=hello).message.thinking
        assert client.chat(model="tiny", messages=hello, think=True).message.thinking
        client.chat(model="tiny", messages=hello, think="low")
        client.chat(model="tiny", messages=hello, think="high")
        assert (jobs[2].settings.think_budget.tokens, jobs[3].settings.think_budget) == (1024, None)
        client.chat(model="tiny", messages=hello + [{"role": "assistant", "content": "hi", "thinking": "I ponder"}])
        assert "<think>\nI ponder\n</think>" in jobs[-1].prompt_text


def test_the_last_objects_figures_in_ollamas_units():
    """The done object's figures: durations in nanoseconds, the prompt's read (prefill) apart from the rest of
    the generation, the counts and finish reason as the engine reported them."""
    from clover_local.serve.ollama import Answer

    info = {"stats": {"seconds": 2.0}, "prefill_seconds": 0.5, "finish_reason": "length", "prompt_tokens": 30,
            "completion_tokens": 7}
    done = Answer(True, "m", time.perf_counter() - 3.0).done(info)
    assert 3e9 <= done.pop("total_duration") < 60e9
    assert done == {"done": True, "done_reason": "length", "load_duration": 0, "prompt_eval_count": 30,
                    "prompt_eval_duration": 500_000_000, "eval_count": 7, "eval_duration": 1_500_000_000}


def test_generate_renders_its_system_and_prompt_through_the_template(tool_server, monkeypatch):
    engine, url = tool_server
    jobs = _jobs(engine, monkeypatch)
    ollama.Client(host=url).generate(model="tools", system="Answer in French.", prompt="Weather in SF?")
    text = jobs[-1].prompt_text
    assert "Answer in French." in text and text.index("Answer in French.") < text.index("Weather in SF?")


@contextlib.contextmanager
def _answering(engine, answer: str):
    """The tool server's decoder scripted to write `answer` for a while."""
    from tests.test_serve_tools import ScriptedDecoder

    scripted = engine.decoder
    engine.decoder = ScriptedDecoder(engine.tokenizer, answer, scripted.block_size)
    try:
        yield
    finally:
        engine.decoder = scripted


def test_calls_in_one_answer_are_numbered_in_order(tool_server):
    """Two calls in one answer come back as two tool_calls, each with its own `function.index` and object
    arguments, in the order the model wrote them."""
    engine, url = tool_server
    with _answering(engine, XML_CALL + "\n" + XML_CALL.replace("San Francisco", "Oslo")):
        status, _, body = _post(url, "/api/chat", {"model": "tools", "stream": False, "tools": TOOLS,
                                                   "messages": [{"role": "user", "content": "SF and Oslo?"}]})
    calls = [c["function"] for c in json.loads(body)["message"]["tool_calls"]]
    assert [(c["index"], c["arguments"]["city"]) for c in calls] == [(0, "San Francisco"), (1, "Oslo")]


def test_a_stream_ending_like_the_start_of_a_call_loses_nothing(tool_server):
    """With tools, text that may open a call is held back while streaming; an answer that ends there still gets it,
    in the last piece before the done object."""
    engine, url = tool_server
    with _answering(engine, "Sunny. <tool_c"):
        parts = list(ollama.Client(host=url).chat(model="tools", messages=[{"role": "user", "content": "SF?"}],
                                                  tools=TOOLS, stream=True))
    assert "".join(p.message.content or "" for p in parts) == "Sunny. <tool_c" and parts[-1].done
