"""A `tool_choice` that forces a call (OpenAI's "required" or a named function, Anthropic's any or tool, the Responses
API's): what it holds the answer to — the JSON form's schema (names and arguments, a tool's own `$defs` resolved
inside its parameters) and the Qwen3.5 XML form's grammar, where the template teaches it (never stuck before the end:
random walks) — the calls read back, the requests each wire format refuses, and the whole route on the real decoder:
whatever a random model would write, the answer comes back as a call its tool's schema allows, streamed or not, on
all three wire formats, in either form."""

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
    state = forced.grammar.start()
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
    assert not req.enable_thinking and req.answer_grammar is req.forced.grammar  # the answer is the call
    req = _chat({"tool_choice": "required", "parallel_tool_calls": False})
    assert not req.forced.parallel
    req = _chat({"tool_choice": {"type": "function", "function": {"name": "stop"}}})
    assert req.forced.tools == [STOP] and not req.forced.parallel
    assert req.template_kwargs["tools"] == TOOLS  # the model is still told of every tool
    for auto in ({}, {"tool_choice": "auto"}, {"tool_choice": "none"}):
        assert _chat(auto).forced is None and _chat(auto).answer_grammar is None


@pytest.mark.parametrize("extra, param, words", [
    ({"tool_choice": {"type": "function", "function": {"name": "go"}}}, "tool_choice", "'go', which is not among"),
    ({"tool_choice": "required", "tools": []}, "tool_choice", "has no tools"),
    ({"tool_choice": "any"}, "tool_choice", "must be"),
    ({"tool_choice": 3}, "tool_choice", "must be"),
    ({"tool_choice": {"type": "function"}}, "tool_choice", "must be"),
    ({"tool_choice": "required", "enable_thinking": True}, "enable_thinking", "without thinking"),
    ({"tool_choice": "required", "tools": [PICK, {"type": "function", "function": {"name": "re", "strict": True,
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}}}]},
     "tools[1].function.parameters", "'pattern'"),
    ({"tool_choice": "required", "tools": [PICK, {"type": "function", "function": {"name": "re", "parameters": {
        "type": "object", "properties": {"q": {"type": "strung"}}}}}]}, "tools[1].function.parameters", "type"),
])
def test_a_forced_call_that_cannot_be_kept_is_a_400(extra, param, words):
    with pytest.raises(ApiError) as err:
        _chat(extra)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_a_tool_not_marked_strict_is_held_to_what_its_schema_supports():
    """Without `strict` (instructor's pydantic models: `exclusiveMinimum`, `pattern`), an unsupported keyword is
    passed over: the call is still forced and the rest of the schema held (keys, types)."""
    age = {"type": "function", "function": {"name": "person", "parameters": {
        "type": "object", "required": ["age"], "additionalProperties": False,
        "properties": {"age": {"type": "integer", "exclusiveMinimum": 0},
                       "name": {"type": "string", "pattern": "^A"}}}}}
    req = _chat({"tools": [age], "tool_choice": {"type": "function", "function": {"name": "person"}}})
    state = req.forced.grammar.start()
    assert state.feed_all(b'{"name": "person", "arguments": {"age": 0}}') and state.done  # the bound: not held
    assert not req.forced.grammar.start().feed_all(b'{"name": "person", "arguments": {"age": "0"}}')  # the type: held


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

    several = client.chat.completions.create(model="tools", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                             parallel_tool_calls=False)  # (a random model never stops adding calls)
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


# --- the XML form (serve/xml_calls.py): where the template teaches it -------------------------------------------

def _xml(*params: tuple[str, str], name: str = "pick") -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


GOOD = _xml(("city", "Oslo"), ("unit", "C"), ("metric", "true"))


def _xml_accepts(grammar, text: str) -> bool:
    state = grammar.start()
    return state.feed_all(text.encode()) and state.done


def test_the_xml_form_holds_names_keys_and_values_to_the_schemas():
    from clover_local.serve.xml_calls import XmlCalls

    one = XmlCalls([PICK], parallel=False)
    assert _xml_accepts(one, GOOD)
    assert _xml_accepts(one, _xml(("metric", "false"), ("unit", "F"), ("city", "")))  # any order, empty text
    assert _xml_accepts(one, _xml(("city", "</b>"), ("unit", "C"), ("metric", "true")))  # markup in a value
    assert _xml_accepts(one, _xml(("city", "a\nb"), ("unit", "C"), ("metric", "true")))  # a line break in one
    for wrong in (_xml(("now", "true"), name="stop"),  # not the named tool
                  _xml(("city", "Oslo"), ("unit", "C")),  # a required one missing before </function>
                  _xml(("city", "Oslo"), ("city", "Rome"), ("unit", "C"), ("metric", "true")),  # twice
                  _xml(("town", "Oslo"), ("unit", "C"), ("metric", "true")),  # not a property
                  _xml(("city", "Oslo"), ("unit", "K"), ("metric", "true")),  # the $ref'd enum
                  _xml(("city", "Oslo5"), ("unit", "C"), ("metric", "true")),  # maxLength 4
                  _xml(("city", "O</parameter>"), ("unit", "C"), ("metric", "true")),  # would cut the value
                  _xml(("city", "</tool_call>"), ("unit", "C"), ("metric", "true")),
                  _xml(("city", "Oslo"), ("unit", "C"), ("metric", "yes")),  # a boolean is JSON
                  GOOD + "\n" + GOOD):  # one call only
        assert not _xml_accepts(one, wrong), wrong
    state = one.start()
    # inside a character, only its continuation bytes
    assert state.feed_all(b"<tool_call>\n<function=pick>\n<parameter=city>\n\xc3") and not state.copy().feed(0x41)
    state = one.start()
    assert state.feed_all(GOOD.encode()) and state.done and state.final
    both = XmlCalls(TOOLS, parallel=True)
    two = GOOD + "\n" + _xml(("now", "false"), name="stop")
    state = both.start()
    assert state.feed_all(two.encode()) and state.done and not state.final  # another call may follow
    content, calls = split_tool_calls(two, TOOLS)
    assert content == "\n" and [(c.name, c.arguments) for c in calls] == [
        ("pick", {"city": "Oslo", "unit": "C", "metric": True}), ("stop", {"now": False})]
    # a JSON value (an object here) is held to its schema, and its strings may not cut the value short either
    nested = {"type": "function", "function": {"name": "put", "parameters": {
        "type": "object", "properties": {"doc": {"type": "object", "properties": {"t": {"type": "string"}}}},
        "required": ["doc"]}}}
    put = XmlCalls([nested], parallel=False)
    assert _xml_accepts(put, _xml(("doc", '{"t": "</b>"}'), name="put"))
    assert not _xml_accepts(put, _xml(("doc", '{"t": "</parameter>"}'), name="put"))
    assert not _xml_accepts(put, _xml(("doc", "[1]"), name="put"))
    _, calls = split_tool_calls(_xml(("doc", '{"t": "</b>"}'), name="put"), [nested])
    assert calls[0].arguments == {"doc": {"t": "</b>"}}


def test_the_xml_form_never_reaches_a_state_it_cannot_finish():
    """Random walks through the grammar, a byte at a time among those it takes: never stuck before it is done."""
    import random

    from clover_local.serve.xml_calls import XmlCalls

    grammar = XmlCalls(TOOLS, parallel=True)
    rng = random.Random(0)
    for _ in range(8):
        state, steps = grammar.start(), 0
        while not state.final and steps < 300:
            allowed = [b for b in range(256) if state.copy().feed(b)]
            assert allowed or state.done, f"stuck after {steps} bytes"
            if not allowed or (state.done and rng.random() < 0.2):
                break
            # the structure's own bytes often, so walks get through values and reach the end
            likely = [b for b in allowed if b in b"<>/\n_=abcdefghijklmnopqrstuvwxyz"] or allowed
            assert state.feed(rng.choice(likely if rng.random() < 0.9 else allowed))
            steps += 1


def test_a_tool_the_xml_form_cannot_write_falls_back_to_the_json_form():
    from clover_local.serve.tools import ForcedCall
    from clover_local.serve.xml_calls import XmlCalls

    odd = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a>b": {"type": "string"}}, "required": ["a>b"]}}}
    forced = ForcedCall([odd])
    forced.for_template("… <function=NAME> …")
    assert forced.tagged is None and _accepts(forced, '{"name": "f", "arguments": {"a>b": "x"}}')
    forced = ForcedCall([PICK])
    forced.for_template("a template that shows no call form")
    assert forced.tagged is None
    forced.for_template("… <function=NAME> …")
    assert isinstance(forced.tagged, XmlCalls) and forced.grammar is forced.tagged


def test_a_template_that_teaches_the_older_json_form_gets_its_calls_in_that_form():
    """`<tool_call>` around {"name", "arguments"} (Qwen2.5 / Hermes templates): the forced call is written so, and
    read back out of it."""
    from clover_local.serve.tools import ForcedCall
    from clover_local.serve.xml_calls import JsonFormCalls

    forced = ForcedCall([PICK, STOP], parallel=True)
    forced.for_template('… <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call> …')
    assert isinstance(forced.tagged, JsonFormCalls)
    answer = ('<tool_call>\n{"name": "stop", "arguments": {"now": true}}\n</tool_call>\n'
              '<tool_call>\n{"name": "stop", "arguments": {"now": false}}\n</tool_call>')
    assert _accepts(forced, answer)
    assert not forced.grammar.start().feed_all(b'{"name": "stop", "arguments": {"now": true}}')  # bare: not so
    content, calls = forced.read(answer)
    assert content == "\n" and [c.name for c in calls] == ["stop", "stop"]


def test_a_refd_parameter_is_typed_by_what_it_points_at():
    """The reader (auto calls too) follows a property's $ref into the tool's $defs for its type."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "$defs": {"N": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/N"}}}}}
    _, calls = split_tool_calls(_xml(("n", "3"), name="f"), [tool])
    assert calls[0].arguments == {"n": 3}


def test_a_forced_call_in_the_json_form_through_the_server(forced_call_server, monkeypatch):
    from clover_local.serve.tools import ForcedCall

    monkeypatch.setattr(ForcedCall, "for_template", lambda self, template: None)  # as a template without XML
    engine, url = forced_call_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    answer = client.chat.completions.create(model="tools", messages=MESSAGES, tools=TOOLS,
                                            tool_choice={"type": "function", "function": {"name": "pick"}})
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "pick" and answer.choices[0].finish_reason == "tool_calls"
    _check("pick", json.loads(call.function.arguments))


def test_the_xml_form_takes_the_tag_tokens_a_qwen_vocabulary_holds():
    """`<tool_call>` and `</tool_call>` are added tokens in Qwen vocabularies: the XML form's constraint takes them
    (the JSON automata never take added tokens), so the model can write its call with the tokens it was trained
    on."""
    from clover_local.generate.json_schema import SchemaConstraint
    from clover_local.serve.xml_calls import TagVocab, XmlCalls

    from tests.conftest import ByteTagVocab

    plain, tagged = ByteTagVocab(), TagVocab(ByteTagVocab())
    assert tagged.token_bytes(256) == b"<tool_call>" and tagged.token_bytes(65) == b"A"
    assert 256 in tagged.ids_by_first_byte()[ord("<")] and 256 not in plain.ids_by_first_byte()[ord("<")]
    grammar = XmlCalls([PICK], parallel=False)
    assert SchemaConstraint(tagged, [300], grammar).advance(grammar.start(), 256) is not None
    assert SchemaConstraint(plain, [300], grammar).advance(grammar.start(), 256) is None
    state = grammar.start()
    assert state.feed_all(GOOD.encode()[:-len("</tool_call>")])
    state = SchemaConstraint(tagged, [300], grammar).advance(state, 257)
    assert state is not None and state.final
