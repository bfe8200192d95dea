"""A `tool_choice` that forces a call (OpenAI's "required" or a named function, Anthropic's any or tool, the Responses
API's): the schema it holds the answer to (names and arguments, a tool's own `$defs` resolved inside its parameters),
the calls read back, the requests each wire format refuses, and the whole route on the real decoder — whatever a
random model would write, the answer comes back as a call its tool's schema allows, streamed or not, on all three
wire formats."""

from __future__ import annotations

import json

import pytest

from clover_local.serve.protocol import ApiError, parse_chat_request
from clover_local.serve.tools import ForcedCall, ToolCallStream, split_tool_calls

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test dependency")
openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")
anthropic = pytest.importorskip("anthropic", reason="the anthropic client is a test dependency")

# small values, so that a random model's answer closes well within the token limit
UNIT = {"type": "string", "enum": ["C", "F"]}
PICK = {"type": "function", "function": {"name": "pick", "description": "Choose a city", "parameters": {
    "type": "object", "$defs": {"Unit": UNIT},
    "properties": {"city": {"type": "string", "maxLength": 4}, "unit": {"$ref": "#/$defs/Unit"},
                   "metric": {"type": "boolean"}},
    "required": ["city", "unit", "metric"], "additionalProperties": False}}}
STOP = {"type": "function", "function": {"name": "stop", "parameters": {
    "type": "object", "properties": {"now": {"type": "boolean"}}, "required": ["now"], "additionalProperties": False}}}
TOOLS = [PICK, STOP]
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]


def _accepts(forced: ForcedCall, text: str) -> bool:
    state = forced.schema.start()
    return state.feed_all(text.encode()) and state.done


def test_the_schema_holds_a_call_to_a_candidate_with_arguments_its_parameters_allow():
    named = ForcedCall([PICK])
    assert _accepts(named, '{"name": "pick", "arguments": {"city": "Oslo", "unit": "C", "metric": true}}')
    assert _accepts(named, '{"arguments": {"metric": false, "unit": "F", "city": ""}, "name": "pick"}')
    for wrong in ('{"name": "stop", "arguments": {"now": true}}',  # not the named tool
                  '{"name": "pick", "arguments": {"city": "Oslo", "unit": "K", "metric": true}}',  # $ref'd enum
                  '{"name": "pick", "arguments": {"city": "Oslo5", "unit": "C", "metric": true}}',  # maxLength
                  '{"name": "pick", "arguments": {"city": "Oslo", "unit": "C"}}',  # a required one missing
                  '{"name": "pick", "arguments": {"city": "Oslo", "unit": "C", "metric": true}, "x": 1}',
                  '[{"name": "pick", "arguments": {"city": "Oslo", "unit": "C", "metric": true}}]'):  # not parallel
        assert not _accepts(named, wrong), wrong
    either = ForcedCall(TOOLS, parallel=True)
    assert _accepts(either, '[{"name": "stop", "arguments": {"now": true}}, '
                            '{"name": "pick", "arguments": {"city": "A", "unit": "F", "metric": false}}]')
    assert not _accepts(either, "[]") and not _accepts(either, '{"name": "stop", "arguments": {"now": true}}')
    assert not _accepts(either, '[{"name": "go", "arguments": {}}]')
    assert _accepts(ForcedCall([{"type": "function", "function": {"name": "f"}}]), '{"name": "f", "arguments": {}}')


def test_a_forced_answer_is_read_back_as_calls_and_streams_nothing_before_them():
    one = '{"name": "pick", "arguments": {"city": "Oslo", "unit": "C", "metric": true}}'
    content, calls = split_tool_calls(one, [PICK], ForcedCall([PICK]))
    assert content == "" and [(c.name, c.arguments) for c in calls] == [
        ("pick", {"city": "Oslo", "unit": "C", "metric": True})]
    content, calls = split_tool_calls(f'[{one}, {{"name": "stop", "arguments": {{"now": false}}}}]', TOOLS,
                                      ForcedCall(TOOLS, parallel=True))
    assert content == "" and [c.name for c in calls] == ["pick", "stop"] and calls[0].id != calls[1].id
    # cut short by the token limit: not a call, so the text stays the content (nothing is lost)
    assert split_tool_calls(one[:30], [PICK], ForcedCall([PICK])) == (one[:30], [])
    held = ToolCallStream([PICK], ForcedCall([PICK]))
    assert [held.feed(piece) for piece in (one[:7], one[7:40], one[40:])] == ["", "", ""]
    content, calls = held.finish()
    assert content == "" and calls[0].arguments["unit"] == "C"


def _chat(extra: dict) -> object:
    return parse_chat_request(json.dumps({"messages": MESSAGES, "tools": TOOLS, **extra}).encode())


def test_chat_requests_that_force_a_call():
    req = _chat({"tool_choice": "required"})
    assert [t["function"]["name"] for t in req.forced.tools] == ["pick", "stop"] and req.forced.parallel
    assert not req.enable_thinking and req.answer_schema is req.forced.schema  # the answer is the call
    req = _chat({"tool_choice": "required", "parallel_tool_calls": False})
    assert not req.forced.parallel
    req = _chat({"tool_choice": {"type": "function", "function": {"name": "stop"}}})
    assert req.forced.tools == [STOP] and not req.forced.parallel
    assert req.template_kwargs["tools"] == TOOLS  # the model is still told of every tool
    for auto in ({}, {"tool_choice": "auto"}, {"tool_choice": "none"}):
        assert _chat(auto).forced is None and _chat(auto).answer_schema is None


@pytest.mark.parametrize("extra, param, words", [
    ({"tool_choice": {"type": "function", "function": {"name": "go"}}}, "tool_choice", "'go', which is not among"),
    ({"tool_choice": "required", "tools": []}, "tool_choice", "has no tools"),
    ({"tool_choice": "any"}, "tool_choice", "must be"),
    ({"tool_choice": 3}, "tool_choice", "must be"),
    ({"tool_choice": {"type": "function"}}, "tool_choice", "must be"),
    ({"tool_choice": "required", "enable_thinking": True}, "enable_thinking", "without thinking"),
    ({"tool_choice": "required", "tools": [PICK, {"type": "function", "function": {"name": "re", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}}}]},
     "tools[1].function.parameters", "'pattern'"),
])
def test_a_forced_call_that_cannot_be_kept_is_a_400(extra, param, words):
    with pytest.raises(ApiError) as err:
        _chat(extra)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_a_named_call_to_a_tool_with_an_unsupported_keyword_elsewhere_is_still_kept():
    """Only the candidates' schemas must compile: a named call is not refused for another tool's `pattern`."""
    other = {"type": "function", "function": {"name": "re", "parameters": {"properties": {"q": {"pattern": "a"}}}}}
    req = _chat({"tools": [PICK, other], "tool_choice": {"type": "function", "function": {"name": "pick"}}})
    assert req.forced.tools == [PICK]


def test_the_other_wire_formats_translate_their_tool_choice():
    from clover_local.serve.anthropic import parse_messages_request
    from clover_local.serve.responses import parse_responses_request

    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]

    def messages(choice: dict, **extra) -> object:
        body = {"messages": MESSAGES, "max_tokens": 64, "tools": tools, "tool_choice": choice, **extra}
        return parse_messages_request(json.dumps(body).encode())

    assert messages({"type": "any"}).forced.parallel and len(messages({"type": "any"}).forced.tools) == 2
    assert not messages({"type": "any", "disable_parallel_tool_use": True}).forced.parallel
    assert [t["function"]["name"] for t in messages({"type": "tool", "name": "stop"}).forced.tools] == ["stop"]
    assert messages({"type": "auto"}).forced is None and not messages({"type": "tool", "name": "stop"}).enable_thinking

    flat = [{"type": "function", **t["function"]} for t in TOOLS]

    def responses(choice, **extra) -> object:
        body = {"input": "hi", "tools": flat, "tool_choice": choice, **extra}
        return parse_responses_request(json.dumps(body).encode()).chat

    req = responses("required", parallel_tool_calls=False, reasoning={"effort": "high"})
    assert len(req.forced.tools) == 2 and not req.forced.parallel
    assert not req.enable_thinking  # as JSON mode on this route: the effort is for answers that think
    assert responses({"type": "function", "name": "pick"}).forced.tools == [PICK]
    with pytest.raises(ApiError, match="hosted tools"):
        responses({"type": "file_search"})


def _check(name: str, arguments: dict) -> None:
    tool = {t["function"]["name"]: t for t in TOOLS}[name]
    jsonschema.validate(arguments, tool["function"]["parameters"])


def test_a_forced_call_comes_back_as_tool_calls_streamed_or_not(forced_call_server):
    engine, url = forced_call_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    named = {"type": "function", "function": {"name": "pick"}}
    full = client.chat.completions.create(model="tools", messages=MESSAGES, tools=TOOLS, tool_choice=named)
    choice = full.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "pick"
    _check("pick", json.loads(call.function.arguments))
    assert full.usage.completion_tokens_details.reasoning_tokens == 0

    parts = list(client.chat.completions.create(model="tools", messages=MESSAGES, tools=TOOLS, tool_choice=named,
                                                stream=True))
    assert not "".join(p.choices[0].delta.content or "" for p in parts if p.choices)  # the JSON is not text
    deltas = [tc for p in parts if p.choices for tc in p.choices[0].delta.tool_calls or []]
    assert [(d.function.name, d.function.arguments) for d in deltas] == [("pick", call.function.arguments)]

    several = client.chat.completions.create(model="tools", messages=MESSAGES, tools=TOOLS, tool_choice="required")
    calls = several.choices[0].message.tool_calls
    assert calls and several.choices[0].finish_reason == "tool_calls"
    for c in calls:
        _check(c.function.name, json.loads(c.function.arguments))


def test_anthropic_and_responses_clients_force_calls_too(forced_call_server):
    engine, url = forced_call_server
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    message = client.messages.create(model="tools", max_tokens=512, messages=MESSAGES, tools=tools,
                                     tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert message.stop_reason == "tool_use" and [b.type for b in message.content] == ["tool_use"]
    _check(message.content[0].name, message.content[0].input)
    message = client.messages.create(model="tools", max_tokens=512, messages=MESSAGES, tools=tools,
                                     tool_choice={"type": "tool", "name": "stop"})
    assert [(b.type, b.name) for b in message.content] == [("tool_use", "stop")]
    with pytest.raises(anthropic.BadRequestError, match="without thinking"):
        client.messages.create(model="tools", max_tokens=512, messages=MESSAGES, tools=tools,
                               tool_choice={"type": "any"}, thinking={"type": "enabled", "budget_tokens": 1024})

    responses = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120).responses
    flat = [{"type": "function", **t["function"]} for t in TOOLS]
    answer = responses.create(model="tools", input="Weather in Oslo?", tools=flat,
                              tool_choice={"type": "function", "name": "pick"})
    (item,) = answer.output
    assert item.type == "function_call" and item.name == "pick"
    _check("pick", json.loads(item.arguments))
    with pytest.raises(openai.BadRequestError, match="hosted tools"):
        responses.create(model="tools", input="hi", tools=flat, tool_choice={"type": "web_search_preview"})
