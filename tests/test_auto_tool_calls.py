"""Auto tool calls: free text until the model writes `<tool_call>`, then held to the tools' grammar
(generate/trigger.py in the decoder, serve/tools.py's `auto_calls` on every chat route)."""

from __future__ import annotations

import json

import openai
import pytest

from clover_local.generate.json_schema import SchemaConstraint
from clover_local.generate.trigger import Trigger
from clover_local.serve.tools import split_tool_calls
from clover_local.serve.xml_calls import JsonFormCalls, TagVocab, XmlCalls

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["unit"], "additionalProperties": False}}}]
VALID = b"<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>"
# a call as a weak model might write it: a misspelt name, `</function>` left out (the reader would keep it as text)
MALFORMED = ("Let me check.\n<tool_call>\n<function=get_wether>\n<parameter=unit>\ncelsius\n</parameter>\n"
             "</tool_call>")


def _trigger(tok, stops, armed_by=None, parallel=False) -> Trigger:
    return Trigger(SchemaConstraint(TagVocab(tok), stops, XmlCalls(TOOLS, parallel)), b"<tool_call>", armed_by)


def _bytes(tok, ids) -> bytes:
    return b"".join(tok.token_bytes(i) or b"" for i in ids)


def test_the_trigger_keeps_the_text_before_it_and_what_the_grammar_takes_after_it(tiny):
    tok = tiny.tokenizer
    watch = _trigger(tok, tiny.stop_token_ids).watch()
    assert watch.find(tok.encode("Let me check.\n<tool")) is None  # not yet the whole trigger
    run = tok.encode(MALFORMED)
    kept, state = watch.find(run)
    before = b"Let me check.\n"
    data = _bytes(tok, run[:kept])
    assert data.startswith(before) and VALID.startswith(data[len(before):])  # up to where the name goes wrong
    assert kept < len(run) and len(data) > len(before) + len(b"<tool_call>\n<function=get_")
    assert state.feed_all(VALID[len(data) - len(before):]) and state.done  # the rest of a valid call completes it


def test_a_trigger_across_a_block_boundary_is_found_in_the_committed_tail(tiny):
    tok = tiny.tokenizer
    watch = _trigger(tok, tiny.stop_token_ids).watch()
    first = tok.encode("Sure <tool")
    assert watch.find(first) is None
    watch.committed(first)
    second = tok.encode("_call>\n<function=get_weather>\n")
    kept, state = watch.find(second)
    assert kept == len(second)  # all of it is a call's start: nothing masked again
    assert state.feed_all(VALID[len(b"<tool_call>\n<function=get_weather>\n"):]) and state.done
    # committed text the grammar refuses (the older JSON form here) cannot be taken back: the answer stays free
    refused = _trigger(tok, tiny.stop_token_ids).watch()
    refused.committed(tok.encode('<tool_call>\n{"name"'))
    assert refused.find(tok.encode(": 1")) is None


def test_auto_calls_hold_agents_schemas_past_the_supported_subset(tiny):
    """A Read-like tool (integer bounds, a pattern) still gets the grammar in auto mode: its keys and the integer's
    type are held, its bounds are not (the forced path refuses such a schema with a 400 instead)."""
    import copy

    from clover_local.serve.tools import auto_calls, json_or_calls
    from tests.test_serve_tools import TOOL_TEMPLATE

    tok = copy.copy(tiny.tokenizer)
    tok.chat_template = TOOL_TEMPLATE
    read = {"type": "function", "function": {"name": "Read", "parameters": {
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
        "properties": {"file_path": {"type": "string", "pattern": "^/"},
                       "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9007199254740991}},
        "required": ["file_path"]}}}
    trigger = auto_calls([read], True, tok, tiny.stop_token_ids, opens_thinking=False)
    assert trigger is not None
    call = b"<tool_call>\n<function=Read>\n<parameter=file_path>\n/a.txt\n</parameter>\n<parameter=limit>\n%s\n"
    for limit, ok in ((b"20", True), (b"0", True), (b"twenty", False)):
        state = trigger.constraint.start()
        assert state.feed_all(call % limit + b"</parameter>\n</function>\n</tool_call>") == ok, limit
    tok.chat_template = "{{ tools }} as <tool_call>{json}</tool_call>"  # the older JSON form: that one's grammar
    json_form = auto_calls([read], True, tok, tiny.stop_token_ids, opens_thinking=False)
    assert isinstance(json_form.constraint.schema, JsonFormCalls)
    tok.chat_template = "{{ tools }}"  # no call form shown: no grammar (nor one beside a JSON format: a 400)
    assert auto_calls([read], True, tok, tiny.stop_token_ids, opens_thinking=False) is None
    assert json_or_calls([read], True, tok, tiny.stop_token_ids, None) is None


def test_inside_the_thinking_the_tag_is_text(tiny):
    tok = tiny.tokenizer
    end = tok.token_to_id("</think>")
    watch = _trigger(tok, tiny.stop_token_ids, armed_by=end).watch()
    assert watch.find(tok.encode("I could use <tool_call>\n")) is None
    watch.committed(tok.encode("I could use <tool_call>\n"))
    assert watch.find(tok.encode("<tool_call>\n")) is None  # still thinking: not armed
    after = tok.encode("So <tool_call>\n") + [end] + tok.encode("\n\nOK.\n<tool_call>\n<function=")
    kept, state = watch.find(after)
    assert kept == len(after) and state.feed_all(b"get_weather>\n")
    # armed by a committed block: the next block's trigger counts
    armed = _trigger(tok, tiny.stop_token_ids, armed_by=end).watch()
    armed.committed(tok.encode("hmm") + [end])
    assert armed.find(tok.encode("<tool_call>\n")) is not None


def _pushed(model, start: int, script: list[int], shifted: bool, push: float = 40.0):
    """`model.forward` with the logits that predict absolute position start + i pushed toward script[i]: the tiny
    model (random weights) made to write a given answer, as surely as a trained one writes its own."""
    forward = model.forward

    def pushed(ids, cache=None, preview=False, rows=None):
        out = forward(ids, cache, preview, rows)
        n = ids.shape[1]
        picked = range(n)[rows] if rows is None or isinstance(rows, slice) else rows
        base = cache.length if cache is not None else 0
        for k, r in enumerate(picked):  # row r predicts position r (+1 where logits are shifted, or causal)
            at = base + r + (1 if shifted or not preview else 0) - start
            if 0 <= at < len(script):
                out[0, k, script[at]] += push
        return out

    return pushed


def _decode(tiny, monkeypatch, trigger, answer: str = MALFORMED, max_new: int = 160):
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished, PassDone

    tok = tiny.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Weather?"}], enable_thinking=False))
    decoder = BlockDiffusionDecoder(tiny.model, tiny.mask_token_id, merge_commits=False)
    script = tok.encode(answer) + [tiny.stop_token_ids[0]]
    monkeypatch.setattr(tiny.model, "forward", _pushed(tiny.model, len(prompt), script, decoder.shifted))
    settings = DecodeSettings(max_new_tokens=max_new, threshold=0.9, stop_token_ids=tiny.stop_token_ids,
                              trigger=trigger)
    events = list(decoder.generate(prompt, settings))
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.stats.stop_reason == "stop"
    return tok.decode(fin.token_ids), [e for e in events if isinstance(e, PassDone)]


def test_a_malformed_call_is_written_as_one_the_server_reads(tiny, monkeypatch):
    free, _ = _decode(tiny, monkeypatch, None)
    assert free == MALFORMED  # the push makes the model write it...
    assert split_tool_calls(free, TOOLS) == (MALFORMED, [])  # ... and, free, it would stay text

    held, passes = _decode(tiny, monkeypatch, _trigger(tiny.tokenizer, tiny.stop_token_ids))
    content, calls = split_tool_calls(held, TOOLS)
    assert content == "Let me check.\n"  # the text before the call is the model's own
    (call,) = calls
    assert call.name == "get_weather" and call.arguments["unit"] in ("celsius", "fahrenheit"), held
    # from the pass that found the trigger on, each block is revealed left to right (as the grammar takes it)
    done: list[int] = []
    found = None
    for i, p in enumerate(passes):
        if i and p.block != passes[i - 1].block:
            done += passes[i - 1].tokens[passes[i - 1].fixed:]
        run = p.tokens[p.fixed:p.tokens.index(None)] if None in p.tokens else p.tokens[p.fixed:]
        if found is None and b"<tool_call>" in _bytes(tiny.tokenizer, done + run):
            found = i
    assert found is not None
    for p in passes[found:]:
        revealed = [q for q, t in enumerate(p.tokens) if t is not None]
        assert revealed == list(range(revealed[-1] + 1))


def test_in_the_older_json_form_too(tiny, monkeypatch):
    """A template that teaches `<tool_call>` around {"name", "arguments"}: a malformed call in that form (a misspelt
    name, a brace left out) comes back as a call of the tool, in that form."""
    malformed = 'Let me check.\n<tool_call>\n{"name": "get_wether", "arguments": {"unit": "celsius"}\n</tool_call>'
    free, _ = _decode(tiny, monkeypatch, None, malformed)
    assert free == malformed and split_tool_calls(free, TOOLS) == (malformed, [])
    trigger = Trigger(SchemaConstraint(TagVocab(tiny.tokenizer), tiny.stop_token_ids, JsonFormCalls(TOOLS, False)))
    held, _ = _decode(tiny, monkeypatch, trigger, malformed, max_new=480)  # (the random model, off its script,
    # likes JSON's whitespace: up to a line break and 24 spaces between any two tokens)
    content, calls = split_tool_calls(held, TOOLS)
    assert content == "Let me check.\n" and held.startswith('Let me check.\n<tool_call>\n{"name": "get_'), held
    (call,) = calls
    assert call.name == "get_weather" and call.arguments["unit"] in ("celsius", "fahrenheit"), held


def _served_call(engine, url, monkeypatch, answer: str = MALFORMED, **request):
    """The message a server answers with when its model is pushed to write `answer` (one call allowed)."""
    tok, model = engine.tokenizer, engine.loaded.model
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    prompt = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False,
                                                tools=TOOLS))
    script = tok.encode(answer) + [engine.loaded.stop_token_ids[0]]
    monkeypatch.setattr(model, "forward", _pushed(model, len(prompt), script, engine.decoder.shifted))
    monkeypatch.setattr(engine.decoder, "merge_commits", False)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    # (one call: after it only the stop may come; the pushed model, off its script, would go on calling)
    return client.chat.completions.create(model="tools", messages=messages, tools=TOOLS, max_tokens=160,
                                          parallel_tool_calls=False, extra_body={"enable_thinking": False},
                                          **request).choices[0]


CITY = {"type": "json_schema", "json_schema": {"name": "city", "schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}}


@pytest.mark.parametrize("answer, called", [
    ("<tool_call>\n<function=get_wether>\n<parameter=unit>\ncelsius\n</parameter>\n</tool_call>", True),
    ('{"city": "Oslo"}', False),
    ('{"city": "<tool_call><function=get_weather><parameter=unit>celsius</parameter></function></tool_call>"}', False)],
    ids=["call", "json", "json-holding-a-call"])
def test_a_json_format_beside_tools_answers_with_the_json_or_a_call(forced_call_server, monkeypatch, answer, called):
    """response_format json_schema with tools (OpenAI's Agents SDK sends both for an agent with an output type):
    the answer is the schema's JSON or a call of the tools, whichever the model starts — a misspelt call comes back
    as a call, JSON as the content."""
    choice = _served_call(*forced_call_server, monkeypatch, answer, response_format=CITY)
    if called:
        (call,) = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and call.function.name == "get_weather"
        assert not choice.message.content
    else:  # (a call's text inside the JSON's strings is the JSON's)
        assert not choice.message.tool_calls and json.loads(choice.message.content) == json.loads(answer)
    # streamed: the JSON as content deltas, a call as one tool_calls delta at the end
    _, url = forced_call_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    parts = list(client.chat.completions.create(
        model="tools", messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS, max_tokens=160,
        parallel_tool_calls=False, response_format=CITY, stream=True, extra_body={"enable_thinking": False}))
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    calls = [c for p in parts if p.choices for c in p.choices[0].delta.tool_calls or []]
    if called:
        assert text == "" and [c.function.name for c in calls] == ["get_weather"]
    else:
        assert calls == [] and json.loads(text) == json.loads(answer)


def test_serve_holds_an_auto_call_to_the_tools(forced_call_server, monkeypatch):
    choice = _served_call(*forced_call_server, monkeypatch)
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check.\n"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["unit"] in ("celsius", "fahrenheit")


def test_serve_free_tool_calls_leaves_the_call_as_written(tmp_path_factory, tokenizer_dir, monkeypatch):
    from tests.conftest import tools_template_server

    with tools_template_server(tmp_path_factory, tokenizer_dir, free_tool_calls=True) as (engine, url):
        choice = _served_call(engine, url, monkeypatch)
    assert choice.finish_reason == "stop" and choice.message.content == MALFORMED and not choice.message.tool_calls
