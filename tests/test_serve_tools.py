"""Function calling in `serve`: tool calls read out of an answer in both forms the Qwen templates teach (typed by the
tool's schema, text around them kept), the same calls whether streamed or not however the text arrives, the
request's checks, and the whole route — tools rendered into the prompt, a scripted answer read back as OpenAI's
`tool_calls` through the official client, a tool's result sent back rendered — on a checkpoint whose template reads
tools. The decoder is scripted there: a random model never writes a call."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request

import pytest

from clover_local.generate.events import BlockCommitted, DecodeStats, Finished
from clover_local.serve.tools import ToolCallStream, split_tool_calls
from tests.inprocess_server import running_server

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "hours": {"type": "array"}, "where": {"type": "object"}, "zip": {"type": "string"},
        "ratio": {"type": ["number", "null"]}}}}}
TOOLS = [WEATHER]

XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
            "<parameter=hours>\n[9, 12]\n</parameter>\n<parameter=where>\n{\"lat\": 37.7}\n</parameter>\n"
            "<parameter=zip>\n94103\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n</function>\n</tool_call>")
XML_ARGS = {"city": "San Francisco", "days": 3, "metric": True, "hours": [9, 12], "where": {"lat": 37.7},
            "zip": "94103", "ratio": 0.5}


def test_the_xml_form_is_read_with_the_schemas_types():
    content, calls = split_tool_calls("Let me look.\n\n" + XML_CALL, TOOLS)
    assert content == "Let me look.\n\n"
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", XML_ARGS)]
    # a value that will not parse as its type stays the text the model wrote; a parameter the schema lacks is text
    _, calls = split_tool_calls("<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n"
                                "<parameter=extra>\n12\n</parameter>\n</function>\n</tool_call>", TOOLS)
    assert calls[0].arguments == {"days": "three", "extra": "12"}


def test_parameter_text_types_and_lookups():
    """A string parameter loses one newline each side, nothing more; a boolean in any case; each call typed by its
    own tool's schema; the JSON form's `parameters`; a block that is not a call does not hide the calls after it."""
    other = {"type": "function", "function": {"name": "other", "parameters": {
        "type": "object", "properties": {"days": {"type": "string"}}}}}
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n  Oslo \n\n</parameter>\n"
            "<parameter=metric>\nTrue\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")
    _, calls = split_tool_calls(text, [other, WEATHER])
    assert calls[0].arguments == {"city": "  Oslo \n", "metric": True, "days": 3}
    _, calls = split_tool_calls(text.replace("get_weather", "other"), [other, WEATHER])
    assert calls[0].arguments["days"] == "3"
    _, calls = split_tool_calls('<tool_call>{"name": "get_weather", "parameters": {"city": "Oslo"}}</tool_call>',
                                TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Oslo"})]
    content, calls = split_tool_calls("<tool_call>\nnot a call\n</tool_call> then " + XML_CALL, TOOLS)
    assert content == "<tool_call>\nnot a call\n</tool_call> then " and [c.arguments for c in calls] == [XML_ARGS]


def test_a_message_with_calls_has_content_null_unless_it_says_something():
    from clover_local.serve.protocol import completion

    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    for content, expected in [("\n\n", None), ("Checking.", "Checking.")]:
        choice = completion("c", "m", content, None, "stop", {}, [call])["choices"][0]
        assert (choice["message"]["content"], choice["finish_reason"]) == (expected, "tool_calls")


def test_the_json_form_and_several_calls():
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>')
    content, calls = split_tool_calls(text, TOOLS)
    assert [c.arguments for c in calls] == [{"city": "Oslo"}, {"city": "Rome"}] and content.strip() == ""
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    api = calls[0].to_api(0)
    assert api["index"] == 0 and api["type"] == "function"
    assert json.loads(api["function"]["arguments"]) == {"city": "Oslo"}


@pytest.mark.parametrize("text", [
    "<tool_call>\nnot a call\n</tool_call>",  # neither form
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
    '<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n',  # cut off by the token limit
    "I would call <tool_call",
    '<tool_call>{"name": "get_weather", "arguments": [1]}</tool_call>',  # arguments not an object
    "<tool_call>\n<function=get_weather>\n</function>\nand more\n</tool_call>",  # text after the function
])
def test_what_is_not_a_call_stays_in_the_content(text):
    assert split_tool_calls(text, TOOLS) == (text, [])


@pytest.mark.parametrize("text, leading", [
    ("Plain answer, no calls, with a < and a <tool in it.", False),
    ("Checking.\n" + XML_CALL + "\nDone.", False),
    (XML_CALL + XML_CALL, False),
    ("<tool_call>\nnot a call\n</tool_call> then " + XML_CALL, False),
    ("Cut: " + XML_CALL[:40], False),
    # a JSON format beside tools: the answer's first bytes decide between the JSON and calls
    ("  " + XML_CALL + XML_CALL, True),
    (' {"note": ' + json.dumps(XML_CALL) + "}", True),
    ('{"note": "<tool_call><function=get_weather></function></tool_call>"}', True),
])
def test_a_stream_adds_up_to_the_whole_answer_however_it_arrives(text, leading):
    whole, calls = split_tool_calls(text, TOOLS, leading=leading)
    if leading:  # calls where it starts with one, else the whole answer is the JSON
        assert (len(calls) == 2) if text.lstrip().startswith("<tool_call>") else (whole, calls) == (text, [])
    rng = random.Random(len(text))
    for _ in range(40):
        stream = ToolCallStream(TOOLS, leading=leading)
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(0, 12))))
        sent = "".join(stream.feed(text[a:b]) for a, b in zip([0] + cuts, cuts + [len(text)]))
        assert "<tool_call>" not in sent or not calls  # a call's text never streams as content
        rest, found = stream.finish()
        assert sent + rest == whole
        assert [(c.name, c.arguments) for c in found] == [(c.name, c.arguments) for c in calls]


def _parse(extra: dict, messages: list | None = None):
    from clover_local.serve.protocol import parse_chat_request

    return parse_chat_request(json.dumps({"messages": messages or [{"role": "user", "content": "hi"}],
                                          **extra}).encode())


@pytest.mark.parametrize("extra, param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"functions": [{"name": "add"}]}, "functions"),
    ({"function_call": {"name": "add"}}, "function_call"),
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools[0].function.parameters"),
    # a schema the call grammars cannot read (the handler failed on it: the connection closed with no answer)
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": True}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": {}}}}}}]},
     "tools[0].function.parameters"),
    ({"tools": [TOOLS[0], {"type": "function", "function": {"name": "f", "parameters": {"required": 5}}}]},
     "tools[1].function.parameters"),
])
def test_tool_requests_it_cannot_honour_get_a_400(extra, param):
    from clover_local.serve.protocol import ApiError

    with pytest.raises(ApiError) as err:
        _parse(extra)
    assert (err.value.status, err.value.param) == (400, param)


def test_a_tools_schema_is_checked_once_across_requests_and_a_bad_one_every_time(monkeypatch):
    """Agents send the same tools with every request: each schema is compiled once (≈ 1 ms a tool), then known by
    its JSON (key order aside); a malformed one is refused each time it comes, not remembered as checked."""
    from clover_local.serve import protocol

    compiled = []
    real = protocol.compile_schema
    monkeypatch.setattr(protocol, "compile_schema", lambda schema, **kw: compiled.append(schema) or real(schema, **kw))
    protocol._well_formed.cache_clear()
    first = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    reordered = {"properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "type": "object"}
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": p}} for i, p in enumerate([first, {}])]
    for _ in range(3):
        _parse({"tools": tools})
    _parse({"tools": [{"type": "function", "function": {"name": "g", "parameters": reordered}}]})
    assert compiled == [first, {"type": "object"}]
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"properties": True}}}]
    for _ in range(2):
        with pytest.raises(protocol.ApiError):
            _parse({"tools": bad})
    assert len(compiled) == 4


def test_a_tool_whose_schema_goes_past_the_supported_subset_is_still_offered():
    """Only malformed schemas are refused: `pattern` or `format` in a tool left to the model (even a strict one:
    its whole schema is held only where a call is forced) is passed over, as the call grammar passes over it."""
    tool = {"type": "function", "function": {"name": "find", "strict": True, "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "pattern": "^a", "format": "email"}}}}}
    assert _parse({"tools": [tool]}).tools == [tool]


def test_tools_reach_the_template_and_past_calls_become_objects():
    req = _parse({"tools": TOOLS, "tool_choice": "auto"}, [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    assert req.template_kwargs["tools"] == TOOLS
    assert req.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    assert req.messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    assert req.messages[1]["tool_calls"][0]["id"] == "call_1"
    past = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}]
    assert _parse({"tools": TOOLS}, past).messages[1]["tool_calls"][0]["function"]["arguments"] == {}  # no arguments
    from clover_local.serve.protocol import ApiError

    past[1]["tool_calls"][0]["function"]["arguments"] = "[1]"
    with pytest.raises(ApiError) as err:
        _parse({"tools": TOOLS}, past)
    assert err.value.param == "messages[1].tool_calls" and "JSON object" in err.value.message
    assert _parse({"tools": TOOLS, "tool_choice": "none"}).tools is None  # "none": the model is not told of them
    assert _parse({"tools": []}).tools is None


# a template that reads tools (our own, in the shape of the Qwen3.5 ones)
TOOL_TEMPLATE = """{%- if tools %}<|im_start|>system
# Tools
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Call one as <tool_call>
<function=NAME>
<parameter=NAME>
VALUE
</parameter>
</function>
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{{ message.content }}
{%- for call in message.tool_calls or [] %}
<tool_call>
<function={{ call.function.name }}>
{%- for k, v in call.function.arguments.items() %}
<parameter={{ k }}>
{{ v }}
</parameter>
{%- endfor %}
</function>
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
<think>

</think>

{% endif %}"""


class ScriptedDecoder:
    """Writes `answer` for any prompt, in blocks of 32 tokens, and remembers the prompts it was given."""

    def __init__(self, tokenizer, answer: str, block_size: int) -> None:
        self.ids = tokenizer.encode(answer)
        self.block_size = block_size
        self.prompts: list[list[int]] = []

    def generate(self, prompt_ids, settings, reuse=None, snapshot_at=None):
        self.prompts.append(list(prompt_ids))
        ids = self.ids[:settings.max_new_tokens]
        for b in range(0, len(ids), 32):
            yield BlockCommitted(b // 32, ids[b:b + 32], 1)
        yield Finished(ids, DecodeStats(tokens=len(ids), passes=1, stop_reason="stop"))


def test_a_call_comes_back_as_tool_calls_streamed_or_not(tool_server):
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Weather in SF?"}]
    full = client.chat.completions.create(model="tools", messages=messages, tools=TOOLS)
    choice = full.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check.\n"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == XML_ARGS
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert '"name": "get_weather"' in prompt and "# Tools" in prompt  # the model was told of the tool
    req = urllib.request.Request(url + "/tokenize", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"messages": messages, "tools": TOOLS}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:  # vLLM's /tokenize counts the tools too
        assert json.loads(r.read())["tokens"] == engine.decoder.prompts[-1]

    parts = list(client.chat.completions.create(model="tools", messages=messages, tools=TOOLS, stream=True))
    streamed = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert streamed == "Let me check.\n" and "<tool" not in streamed
    deltas = [tc for p in parts if p.choices for tc in p.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == \
        [(0, "get_weather", XML_ARGS)]
    assert [p.choices[0].finish_reason for p in parts if p.choices and p.choices[0].finish_reason] == ["tool_calls"]

    # the tool's answer sent back: rendered where the template puts it, the past call with it
    client.chat.completions.create(model="tools", tools=TOOLS, messages=messages + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and foggy"}])
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "<tool_response>\n18 C and foggy\n</tool_response>" in prompt
    assert "<function=get_weather>" in prompt and "<parameter=city>\nSan Francisco\n</parameter>" in prompt

    # without tools the same answer is plain content: nothing read out of it
    plain = client.chat.completions.create(model="tools", messages=messages)
    assert plain.choices[0].message.content == "Let me check.\n" + XML_CALL
    assert not plain.choices[0].message.tool_calls and plain.choices[0].finish_reason == "stop"


def test_text_after_a_streamed_call_still_comes_out(tool_server):
    """What the model wrote after its call (held back while streaming) still comes out, in the last content
    delta, and the streamed content equals the complete answer's."""
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Weather in SF?"}]
    scripted = engine.decoder.ids
    engine.decoder.ids = engine.tokenizer.encode("Checking.\n" + XML_CALL + "\nDone.")
    try:
        full = client.chat.completions.create(model="tools", messages=messages, tools=TOOLS).choices[0].message
        parts = list(client.chat.completions.create(model="tools", messages=messages, tools=TOOLS, stream=True))
    finally:
        engine.decoder.ids = scripted
    assert full.content == "Checking.\n\nDone." and len(full.tool_calls) == 1
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == full.content


def test_a_template_that_never_reads_tools_is_refused(make_checkpoint):
    from clover_local.loader import load

    loaded = load(str(make_checkpoint(seed=4)), "cpu", "float32")
    with running_server(loaded, "plain", max_tokens=8, context=256) as (_, url):
        req = urllib.request.Request(url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                      "tools": TOOLS}).encode())
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        body = json.loads(err.value.read())
        assert err.value.code == 400 and body["error"]["param"] == "tools" and "template" in body["error"]["message"]


def test_the_calls_grammar_is_kept_for_the_same_tools():
    """Agents send the same tools with every request: their grammar is built once (kept by the tools' JSON, so
    the same tools in another request's dicts find it, and other tools or another form do not)."""
    from clover_local.serve.tools import template_grammar

    first = template_grammar(TOOLS, True, "<function=")
    assert first is not None and template_grammar(json.loads(json.dumps(TOOLS)), True, "<function=") is first
    assert template_grammar(TOOLS, False, "<function=") is not first
    assert template_grammar(TOOLS, True, "<tool_call>") not in (None, first)
    renamed = json.loads(json.dumps(TOOLS).replace("get_weather", "get_time"))
    assert template_grammar(renamed, True, "<function=") is not first
    assert template_grammar(TOOLS, True, "no call form") is None
