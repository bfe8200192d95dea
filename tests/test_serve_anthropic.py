"""Anthropic's Messages API on `serve` (/v1/messages, /v1/messages/count_tokens), through the official `anthropic`
client: the same answer as /v1/chat/completions for the same conversation (streamed or not), Anthropic's blocks,
stop reasons, usage and errors, tool_use read out of a scripted answer and tool_result rendered back, structured
outputs, and the refusals."""

from __future__ import annotations

import inspect
import json

import pytest

from clover_local.serve.anthropic import parse_messages_request
from clover_local.serve.protocol import ApiError
from tests.inprocess_server import running_server
from tests.test_serve_tools import TOOLS, XML_ARGS

anthropic = pytest.importorskip("anthropic", reason="the anthropic client is a test dependency")
openai = pytest.importorskip("openai", reason="the openai client is a test dependency")

WEATHER = {"name": "get_weather", "description": TOOLS[0]["function"]["description"],
           "input_schema": TOOLS[0]["function"]["parameters"]}


def _client(url: str, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=120)


def _parse(body: dict, count_only: bool = False):
    return parse_messages_request(json.dumps({"max_tokens": 16, **body}).encode(), count_only)


@pytest.fixture(scope="module")
def tiny_server(tiny):
    with running_server(tiny, "tiny", max_tokens=48, context=1024) as served:
        yield served


def test_the_answer_is_the_chat_routes_answer_streamed_or_not(tiny_server):
    """Greedy, the same conversation answers the same on both routes: Anthropic's blocks carry the chat route's
    reasoning and content, its usage the same tokens (input split into read and cached); a stream's deltas add
    up to the whole answer, each block opened, filled and closed in order."""
    engine, url = tiny_server
    chat = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    client = _client(url)
    for prompt, thinking in (("reverse a b c d", {"type": "disabled"}),
                             ("hello", {"type": "enabled", "budget_tokens": 1024})):  # (the tiny model thinks here)
        ref = chat.chat.completions.create(model="tiny", max_tokens=48, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}],
            extra_body={"enable_thinking": thinking["type"] == "enabled"})
        ref_msg = ref.choices[0].message
        kwargs = dict(model="tiny", max_tokens=48, system=[{"type": "text", "text": "Be brief.",
                                                            "cache_control": {"type": "ephemeral"}}],
                      messages=[{"role": "user", "content": prompt}], thinking=thinking)
        msg = client.messages.create(**kwargs)
        texts = [b.text for b in msg.content if b.type == "text"]
        thoughts = [b.thinking for b in msg.content if b.type == "thinking"]
        assert texts == [ref_msg.content]
        reasoning = ref_msg.model_extra.get("reasoning_content")
        assert thoughts == ([reasoning] if thinking["type"] == "enabled" else []) and (reasoning or "") == "".join(
            thoughts)
        assert msg.stop_reason == ("max_tokens" if ref.choices[0].finish_reason == "length" else "end_turn")
        assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == ref.usage.prompt_tokens
        assert msg.usage.output_tokens == ref.usage.completion_tokens
        assert msg.usage.cache_read_input_tokens > 0  # the chat request just read this prompt: its prefill resumed
        assert msg.usage.cache_creation_input_tokens == 0 and msg.model == "tiny"  # the served model's name
        assert client.messages.count_tokens(model="tiny", system="Be brief.", thinking=thinking, messages=[
            {"role": "user", "content": prompt}]).input_tokens == ref.usage.prompt_tokens

        with client.messages.stream(**kwargs) as stream:
            events = list(stream)
            final = stream.get_final_message()
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
        kinds = [e.type for e in events if e.type in ("message_start", "content_block_start", "content_block_stop",
                                                      "message_delta", "message_stop")]
        blocks = len(msg.content)
        start = events[0].message.usage  # the prompt's tokens are known from the start (Claude Code shows them)
        assert start.input_tokens + (start.cache_read_input_tokens or 0) == ref.usage.prompt_tokens
        assert kinds == ["message_start"] + ["content_block_start", "content_block_stop"] * blocks + [
            "message_delta", "message_stop"]
        joined = "".join(e.delta.text for e in events if e.type == "content_block_delta"
                         and e.delta.type == "text_delta")
        assert joined == ref_msg.content and final.stop_reason == msg.stop_reason


def test_stop_sequences_and_the_max_tokens_ceiling(tiny_server):
    """A stop sequence is named in `stop_sequence`; a max_tokens far above the server's limit is a ceiling (cut to
    the server's --max-tokens), and one the answer reaches ends it with stop_reason max_tokens."""
    _, url = tiny_server
    client = _client(url)
    messages = [{"role": "user", "content": "reverse a b c d"}]
    whole = client.messages.create(model="tiny", max_tokens=100_000, messages=messages, thinking={"type": "disabled"})
    text = whole.content[0].text
    assert whole.stop_reason == "end_turn" and len(text) > 2
    stop = text[1:3]
    cut = client.messages.create(model="tiny", max_tokens=48, messages=messages, thinking={"type": "disabled"},
                                 stop_sequences=["zzz", stop])
    assert (cut.content[0].text, cut.stop_reason, cut.stop_sequence) == (text[:1], "stop_sequence", stop)
    with client.messages.stream(model="tiny", max_tokens=48, messages=messages, thinking={"type": "disabled"},
                                stop_sequences=[stop]) as stream:
        final = stream.get_final_message()
    assert (final.content[0].text, final.stop_reason, final.stop_sequence) == (text[:1], "stop_sequence", stop)
    short = client.messages.create(model="tiny", max_tokens=1, messages=messages, thinking={"type": "disabled"})
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 1


def test_structured_output_holds_the_answer_to_the_schema(tiny_server):
    _, url = tiny_server
    client = _client(url)
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    msg = client.messages.create(model="tiny", max_tokens=48, messages=[{"role": "user", "content": "is 2 > 1?"}],
                                 extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}})
    assert [b.type for b in msg.content] == ["text"] and msg.stop_reason == "end_turn"
    assert json.loads(msg.content[0].text)["answer"] in ("yes", "no")


def test_errors_come_in_anthropics_shape(tiny_server):
    _, url = tiny_server
    client = _client(url)
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "invalid_request_error"
    assert "'image' block is not supported" in err.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as err:  # Claude Code compacts on this wording
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": "a b " * 600}])
    assert err.value.body["error"]["message"].startswith("prompt is too long: ")
    with pytest.raises(anthropic.NotFoundError) as err:  # a route error on /v1/messages/… is Anthropic's too
        client.post("/v1/messages/batches", body={}, cast_to=dict)
    assert err.value.body["error"]["type"] == "not_found_error"


def test_a_key_is_taken_as_x_api_key_or_bearer(tiny):
    with running_server(tiny, "keyed", max_tokens=4, context=256, api_key="s3cret") as (_, url):
        messages = [{"role": "user", "content": "hi"}]
        assert _client(url, "s3cret").messages.create(model="k", max_tokens=2, messages=messages).content
        assert anthropic.Anthropic(base_url=url, auth_token="s3cret", max_retries=0).messages.count_tokens(
            model="k", messages=messages).input_tokens > 0
        with pytest.raises(anthropic.AuthenticationError) as err:
            _client(url, "wrong").messages.create(model="k", max_tokens=2, messages=messages)
        assert err.value.body["error"]["type"] == "authentication_error" and "s3cret" not in str(err.value.body)
        with pytest.raises(openai.AuthenticationError):  # and the OpenAI routes read x-api-key as well
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           default_headers={"x-api-key": "s3cret"})
        assert ok.models.list().data[0].id == "keyed"


def test_blocks_become_the_chat_messages_the_template_reads():
    req = _parse({"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}], "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "look it up", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}],
             "cache_control": {"type": "ephemeral"}},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": True},
            {"type": "text", "text": "and tomorrow?"}]}],
        "tools": [WEATHER], "tool_choice": {"type": "auto"}})
    assert req.messages == [
        {"role": "system", "content": "A\nB"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "look it up", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": "Error: boom", "tool_call_id": "toolu_2"},
        {"role": "user", "content": "and tomorrow?"}]
    assert req.template_kwargs["tools"] == TOOLS and req.tools == TOOLS
    assert req.enable_thinking is True and req.max_tokens_ceiling
    assert _parse({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "disabled"}}).enable_thinking \
        is False
    assert _parse({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
                   "tool_choice": {"type": "none"}}).tools is None
    assert _parse({"messages": [{"role": "user", "content": "x"}]}, count_only=True).max_tokens == 16
    assert _parse({"messages": [{"role": "user", "content": "x"}], "top_k": 20}).top_k == 20


USER = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("body, param, words", [
    ({"messages": USER, "max_tokens": None}, "max_tokens", "required"),
    ({"messages": USER, "top_k": -2}, "top_k", "whole number"),
    ({"messages": USER, "top_k": 2.5}, "top_k", "whole number"),
    ({"messages": USER, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]",
     "custom tool"),
    ({"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "some"}}, "tool_choice", "must be"),
    ({"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "x"}}, "tool_choice",
     "not among the tools"),
    ({"messages": USER + [{"role": "assistant", "content": "The answer is"}]}, "messages", "prefill"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "user, assistant or system"),
    ({"messages": USER, "thinking": {"type": "maybe"}}, "thinking", "enabled"),
    ({"messages": USER, "stop_sequences": ["END", ""]}, "stop_sequences", "non-empty strings"),
    ({"messages": USER, "output_config": {"format": {"type": "json_schema", "schema": {"pattern": "a+"}}}},
     "output_config", "pattern"),
    ({"messages": USER, "output_format": {"type": "json_schema", "schema": {"type": "string"}},
      "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", "without thinking"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {}}]}]}]}, "messages[0].content[0].content", "text"),
    ({"messages": USER, "thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking", "positive integer"),
    ({"messages": USER, "mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}, "mcp_servers",
     "not supported"),
    ({"messages": USER + [{"role": "assistant",
                           "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": "Oslo"}]}]
      + USER},
     "messages[1]", "'input' object"),
])
def test_requests_it_cannot_honour_get_a_400(body, param, words):
    with pytest.raises(ApiError) as err:
        _parse(body)
    assert (err.value.status, err.value.param) == (400, param) and words in err.value.message


def test_an_assistant_turns_blocks_join_in_order():
    """Claude Code sends back an assistant turn as the blocks it got, several text and thinking blocks among
    them (interleaved with tool_use): all of their text is the turn's, joined as one answer, and all of its thinking
    its reasoning."""
    req = _parse({"messages": USER + [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "first", "signature": ""}, {"type": "text", "text": "Checking"},
        {"type": "thinking", "thinking": "second", "signature": ""}, {"type": "text", "text": " twice."}]}] + USER})
    assert req.messages[1] == {"role": "assistant", "content": "Checking twice.", "reasoning_content": "first\nsecond"}


def test_tool_choice_any_or_a_named_tool_forces_a_call_without_thinking():
    """`any` is OpenAI's "required" (a call of any tool), `{"type": "tool"}` one call of that tool — each written
    without thinking, which a request that does not mention thinking gets rather than a 400;
    `disable_parallel_tool_use` is one call at most, whatever the choice; custom tools (`type: custom`) and their
    `strict` pass to the chat tools."""
    forced = _parse({"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "any"}})
    assert forced.forced is not None and forced.forced.tools == TOOLS and forced.forced.parallel
    assert forced.enable_thinking is False and forced.parallel_calls
    one = _parse({"messages": USER, "tools": [WEATHER],
                  "tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    assert one.forced.parallel is False and one.parallel_calls is False
    named = _parse({"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert named.forced.tools == TOOLS and not named.forced.parallel and named.enable_thinking is False
    auto = _parse({"messages": USER, "tools": [WEATHER],
                   "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}})
    assert auto.forced is None and auto.parallel_calls is False
    assert _parse({"messages": USER, "tools": [WEATHER]}).parallel_calls
    strict = _parse({"messages": USER, "tools": [{**WEATHER, "type": "custom", "strict": True}]})
    assert strict.tools == [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]


def test_thinking_types_and_budget_are_read():
    """`adaptive` thinks as `enabled` does, `budget_tokens` is the thinking's budget, and a request that sends
    `thinking` at all has asked (so serve --no-think leaves it be); one that does not takes the default."""
    adaptive = _parse({"messages": USER, "thinking": {"type": "adaptive"}})
    assert adaptive.enable_thinking is True and adaptive.think_budget is None and adaptive.thinking_asked
    budget = _parse({"messages": USER, "thinking": {"type": "enabled", "budget_tokens": 2048}})
    assert (budget.enable_thinking, budget.think_budget, budget.thinking_asked) == (True, 2048, True)
    off = _parse({"messages": USER, "thinking": {"type": "disabled"}})
    assert off.enable_thinking is False and off.thinking_asked
    plain = _parse({"messages": USER})
    assert plain.enable_thinking is True and plain.think_budget is None and not plain.thinking_asked


def test_errors_are_typed_by_status_as_anthropic_types_them():
    """Anthropic's SDKs and Claude Code read `error.type`: a queue full (429) is a rate limit, an out-of-memory
    (503) and 529 are overloaded, which clients retry."""
    from clover_local.serve.anthropic import error_body

    statuses = (400, 401, 404, 413, 429, 500, 503, 529)
    types = {status: error_body(ApiError(status, "x"))["error"]["type"] for status in statuses}
    assert types == {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                     413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
                     529: "overloaded_error"}


def test_a_call_comes_back_as_tool_use_and_its_result_goes_back(tool_server):
    engine, url = tool_server
    client = _client(url)
    messages = [{"role": "user", "content": "Weather in SF?"}]
    msg = client.messages.create(model="tools", max_tokens=32000, messages=messages, tools=[WEATHER])
    assert [b.type for b in msg.content] == ["text", "tool_use"] and msg.stop_reason == "tool_use"
    assert msg.content[0].text == "Let me check.\n"
    use = msg.content[1]
    assert use.name == "get_weather" and use.input == XML_ARGS and use.id.startswith("toolu_")
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert '"name": "get_weather"' in prompt and "# Tools" in prompt  # the model was told of the tool

    with client.messages.stream(model="tools", max_tokens=32000, messages=messages, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert "<tool" not in "".join(e.delta.text for e in events if e.type == "content_block_delta"
                                  and e.delta.type == "text_delta")
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [("text", None), ("tool_use", XML_ARGS)]
    assert final.stop_reason == "tool_use"

    client.messages.create(model="tools", max_tokens=64, tools=[WEATHER], messages=messages + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C and foggy"}]}])
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "<tool_response>\n18 C and foggy\n</tool_response>" in prompt
    assert "<function=get_weather>" in prompt and "<parameter=city>\nSan Francisco\n</parameter>" in prompt


def test_a_failure_mid_stream_is_an_error_event(tool_server):
    """A generation that fails while streaming ends the stream with Anthropic's `error` event (no message_stop),
    which the client raises; the server goes on."""
    from clover_local.errors import CloverError

    engine, url = tool_server
    real = engine.decoder.generate

    def failing(prompt_ids, settings, **options):
        yield from (e for _, e in zip(range(1), real(prompt_ids, settings, **options)))
        raise CloverError("the sequence reached the 64-token context the runtime was loaded for")

    engine.decoder.generate = failing
    try:
        with pytest.raises(anthropic.APIStatusError) as err:
            with _client(url).messages.stream(model="tools", max_tokens=64, messages=[
                    {"role": "user", "content": "hi"}]) as stream:
                list(stream)
        assert "64-token context" in str(err.value)
    finally:
        engine.decoder.generate = real
    assert _client(url).messages.create(model="tools", max_tokens=64, messages=[
        {"role": "user", "content": "hi"}]).stop_reason == "end_turn"


def test_a_late_system_message_reaches_a_template_that_takes_one_only_first(tiny_server):
    """Claude Code sends context as a system message after the first user turn; the tiny template, like the
    Qwen3.5/3.6 ones, refuses a system message anywhere but first. Such a message becomes a user turn in place,
    marked as a system reminder — on both routes, and only for a template that refuses it as sent."""
    from clover_local.serve.protocol import late_system_as_user

    _, url = tiny_server
    late = [{"role": "user", "content": "hello"}, {"role": "system", "content": "Be brief."}]
    as_user = [late[0], {"role": "user", "content": "<system-reminder>\nBe brief.\n</system-reminder>"}]
    assert late_system_as_user(late) == as_user
    assert late_system_as_user([{"role": "system", "content": "s"}] + as_user) is None  # a first one stays
    chat = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    ref = chat.chat.completions.create(model="tiny", max_tokens=24, messages=as_user).choices[0].message
    again = chat.chat.completions.create(model="tiny", max_tokens=24, messages=late).choices[0].message
    msg = _client(url).messages.create(model="tiny", max_tokens=24, messages=late)
    assert again.content == ref.content == [b.text for b in msg.content if b.type == "text"][0]


def test_a_head_request_finds_the_server(tiny_server):
    """Claude Code checks the base URL with `HEAD /` first: 200, no body (an unknown path 404)."""
    import urllib.error
    import urllib.request

    _, url = tiny_server
    with urllib.request.urlopen(urllib.request.Request(url + "/", method="HEAD"), timeout=10) as r:
        assert r.status == 200 and r.read() == b""
    with urllib.request.urlopen(url + "/", timeout=10) as r:  # and GET / (Ollama's clients) in plain text
        assert r.status == 200 and r.read() == b"clover-local is running"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(url + "/nothing", method="HEAD"), timeout=10)
    assert err.value.code == 404


def test_a_side_request_does_not_cost_the_conversation_its_prefill(tiny_server):
    """An agent's pattern: its conversation, a request with another prompt (a sub-agent's, a side question), the
    conversation's next turn.
    The side request parks the conversation's saved prefix in host memory; the next turn resumes from it (that a
    resumed answer equals a fresh one: test_prompt_cache.py)."""
    from clover_local.serve.engine import Engine

    engine, url = tiny_server
    client = _client(url)
    system = "You are a small model. Answer the user briefly and do not think for long. " * 3  # > one block
    talk = [{"role": "user", "content": "hello"}]
    first = client.messages.create(model="tiny", max_tokens=24, system=system, messages=talk,
                                   thinking={"type": "disabled"})
    client.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "what is your name?"}],
                           thinking={"type": "disabled"})
    before = engine.health()["prompt_cache"]
    talk += [{"role": "assistant", "content": first.content[0].text}, {"role": "user", "content": "thanks"}]
    second = client.messages.create(model="tiny", max_tokens=24, system=system, messages=talk,
                                    thinking={"type": "disabled"})
    after = engine.health()["prompt_cache"]
    assert after["parked_hits"] - before["parked_hits"] == 1 and second.usage.cache_read_input_tokens >= 32
    assert before["parked_bytes"] > 0  # the conversation, parked while the side question ran
    assert inspect.signature(Engine).parameters["park_bytes"].default > 0  # served with parking on by default


def test_the_blocks_are_the_same_streamed_or_not():
    """`MessageAnswer` shapes one answer alike whole and streamed, for every mix of thinking, text and calls."""
    from clover_local.serve.anthropic import MessageAnswer
    from clover_local.serve.tools import ToolCall

    call = ToolCall("get_weather", {"city": "Oslo"}, "call_1")
    for reasoning in ("", "hmm"):
        for content in ("", "Sure."):
            for calls in ([], [call]):
                info = {"reasoning": reasoning, "finish_reason": "stop", "stop_sequence": None, "cached_tokens": 0,
                        "prompt_tokens": 5, "completion_tokens": 3, "stats": {}}
                whole = MessageAnswer("m", 5).whole(info, content, calls)["content"]
                stream = MessageAnswer("m", 5)
                events = stream.start() + stream.delta(reasoning, "") + stream.end(info, content, calls)
                blocks = [e["content_block"] for name, e in events if name == "content_block_start"]
                # a tool_use block opens with an empty input object, which its input_json_delta fills
                assert all(b["input"] == {} for b in blocks if b["type"] == "tool_use")
                for name, e in events:
                    if name == "content_block_delta":
                        block, delta = blocks[e["index"]], e["delta"]
                        key = {"thinking_delta": "thinking", "text_delta": "text"}.get(delta["type"])
                        if key:
                            block[key] += delta[key]
                        else:
                            block["input"] = json.loads(delta["partial_json"])
                assert blocks == whole, (reasoning, content, calls)
