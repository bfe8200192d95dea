"""Tool calls at their edges (an audit by mutation of serve/xml_calls.py, serve/tools.py and serve/engine.py): the
XML form's grammar for property schemas the other tests leave out (no type, `const`, mixed enums, schemas past
the supported subset), its byte-level limits (UTF-8, min/maxLength, where `</parameter>` may start), the older
JSON form, the tag tokens, the reader's typing and leniency, the stream, and the engine's pure helpers. Every test
calls the module functions directly: no server, no model."""

from __future__ import annotations

import pytest

from clover_local.errors import CloverError
from clover_local.serve.tools import ForcedCall, ToolCall, ToolCallStream, split_tool_calls, template_grammar
from clover_local.serve.xml_calls import JsonFormCalls, TagVocab, XmlCalls
from tests.conftest import ByteTagVocab


def _tool(properties: dict, required=(), name: str = "f", **extra) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": list(required), **extra}}}


def _xml(*params: tuple[str, str], name: str = "f") -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _accepts(grammar, data) -> bool:
    state = grammar.start()
    return state.feed_all(data if isinstance(data, bytes) else data.encode()) and state.done


def _args(text: str, tools: list[dict]) -> dict:
    (call,) = split_tool_calls(text, tools)[1]
    return call.arguments


# --- the XML form: how each property's value is written -----------------------------------------------------------

def test_a_property_without_a_type_or_with_a_schema_past_what_compiles_is_written_as_text():
    """No `type` (a description only), `true` as the schema, a type no compiler knows, an enum of mixed kinds: the
    value is text, so the tool is still written in the XML form and its calls take any text there."""
    for schema in ({"description": "where"}, True, {"type": "strung"}, {"enum": ["a", 1]}):
        grammar = XmlCalls([_tool({"q": schema}, required=["q"])], parallel=False)
        assert _accepts(grammar, _xml(("q", "Oslo and zz"))), schema
        assert _accepts(grammar, _xml(("q", "a"))), schema


def test_a_const_string_is_the_one_value_written():
    grammar = XmlCalls([_tool({"mode": {"const": "fast"}}, required=["mode"])], parallel=False)
    assert _accepts(grammar, _xml(("mode", "fast")))
    assert not _accepts(grammar, _xml(("mode", "slow")))
    assert not _accepts(grammar, _xml(("mode", "fastest")))


def test_a_key_or_name_holding_a_tag_character_cannot_be_written():
    with pytest.raises(CloverError):
        XmlCalls([_tool({"a<b": {"type": "string"}}, required=["a<b"])], parallel=False)
    with pytest.raises(CloverError):
        XmlCalls([_tool({}, name="a<b")], parallel=False)
    with pytest.raises(CloverError):
        XmlCalls([_tool({}, name="a\nb")], parallel=False)
    # not required: the key is left out of the grammar, the rest of the tool is still written
    grammar = XmlCalls([_tool({"a<b": {"type": "string"}, "c": {"type": "string"}})], parallel=False)
    assert _accepts(grammar, _xml(("c", "x")))
    assert not _accepts(grammar, _xml(("a<b", "x")))


def test_a_json_value_ends_only_at_its_own_line_break():
    """`</parameter>` comes after the value's line break, in a JSON value as in text: `3</parameter>` is refused."""
    grammar = XmlCalls([_tool({"n": {"type": "integer"}}, required=["n"])], parallel=False)
    assert _accepts(grammar, _xml(("n", "3")))
    head = "<tool_call>\n<function=f>\n<parameter=n>\n3"
    assert not _accepts(grammar, head + "</parameter>\n</function>\n</tool_call>")
    state = grammar.start()
    assert state.feed_all(head.encode()) and not state.copy().feed(ord("<"))


def test_text_lengths_count_characters_between_min_and_max_length():
    grammar = XmlCalls([_tool({"s": {"type": "string", "minLength": 2, "maxLength": 3}}, required=["s"])],
                       parallel=False)
    for value, ok in (("a", False), ("ab", True), ("abc", True), ("abcd", False),
                      ("é", False), ("éé", True), ("ééé", True), ("éééé", False), ("€𝄞", True)):
        assert _accepts(grammar, _xml(("s", value))) == ok, value


def test_text_is_well_formed_utf8():
    grammar = XmlCalls([_tool({"s": {"type": "string"}}, required=["s"])], parallel=False)
    head = b"<tool_call>\n<function=f>\n<parameter=s>\n"
    tail = b"\n</parameter>\n</function>\n</tool_call>"
    assert _accepts(grammar, head + "é€𝄞".encode() + tail)
    for bad in (b"\x80", b"\xff", b"\xc3\xff", b"\xc3\x41", b"\xc3", b"\xe2\x82"):
        assert not _accepts(grammar, head + bad + tail), bad
    state = grammar.start()
    assert state.feed_all(head + b"\xc3") and not state.copy().feed(0xC0) and state.copy().feed(0xBF)


def test_the_tag_tokens_are_added_to_the_first_byte_groups_not_in_place_of_them():
    tagged = TagVocab(ByteTagVocab())
    groups = tagged.ids_by_first_byte()
    assert groups[ord("<")] == [ord("<"), 256, 257] and groups[ord("a")] == [ord("a")]
    assert tagged.token_bytes(257) == b"</tool_call>" and tagged.token_bytes(300) is None


# --- the reader: typing and what is a call -------------------------------------------------------------------------

def test_the_reader_types_null_and_booleans_as_written_and_leaves_other_text_alone():
    tools = [_tool({"none": {"type": "null"}, "maybe": {"type": ["string", "null"]}, "flag": {"type": "boolean"},
                    "n": {"type": "integer"}})]
    args = _args(_xml(("none", "null"), ("maybe", "null"), ("flag", "True "), ("n", "True")), tools)
    assert args == {"none": None, "maybe": None, "flag": True, "n": "True"}
    assert _args(_xml(("flag", " FALSE")), tools) == {"flag": False}
    assert _args(_xml(("maybe", "Oslo")), tools) == {"maybe": "Oslo"}


def test_the_reader_takes_names_and_keys_with_spaces_around_them():
    tools = [_tool({"n": {"type": "integer"}}, name="get")]
    text = "<tool_call>\n<function= get >\n<parameter= n >\n4\n</parameter>\n</function>\n</tool_call>"
    (call,) = split_tool_calls(text, tools)[1]
    assert (call.name, call.arguments) == ("get", {"n": 4})


@pytest.mark.parametrize("block", [
    '{"name": 3, "arguments": {}}',  # a name that is not a string
    '{"name": ["f"], "arguments": {}}',
    '{"name": "f", "arguments": "not json"}',  # arguments as a string that is not JSON
    '{"name": "f", "arguments": "[1, 2]"}',  # ... or not an object
    '["f", {}]',  # not an object
])
def test_a_json_block_that_is_not_a_call_stays_text(block):
    text = f"<tool_call>\n{block}\n</tool_call>"
    assert split_tool_calls(text, [_tool({})]) == (text, [])


def test_without_tools_nothing_is_read_out():
    text = "Here: " + _xml(("n", "1"))
    assert split_tool_calls(text, []) == (text, [])
    assert split_tool_calls(text, None) == (text, [])
    stream = ToolCallStream([])
    assert stream.feed(text) == text and stream.finish() == ("", [])


def test_the_arguments_json_keeps_characters_as_they_are():
    call = ToolCall("f", {"city": "Zürich", "n": 1}, id="call_x")
    assert call.to_api() == {"id": "call_x", "type": "function",
                             "function": {"name": "f", "arguments": '{"city": "Zürich", "n": 1}'}}
    assert call.to_api(0)["index"] == 0 and call.to_api(2)["index"] == 2


# --- which grammar a request gets ----------------------------------------------------------------------------------

XML_TEMPLATE = "{{ tools }} <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>"
JSON_TEMPLATE = '{{ tools }} <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>'
N = _tool({"n": {"type": "integer"}}, required=["n"])


def test_a_template_that_shows_both_forms_gets_the_xml_one():
    assert isinstance(template_grammar([N], False, XML_TEMPLATE), XmlCalls)
    assert type(template_grammar([N], False, JSON_TEMPLATE)) is JsonFormCalls
    assert template_grammar([N], False, "{{ tools }}") is None


def test_auto_calls_are_armed_by_the_thinkings_end_only_where_the_prompt_opens_it():
    from clover_local.serve.tools import auto_calls

    free = auto_calls([N], False, ByteTagVocab(XML_TEMPLATE), [300], opens_thinking=False)
    assert free is not None and free.armed_by is None and free.text == b"<tool_call>"
    assert isinstance(free.constraint.vocab, TagVocab) and free.constraint.stop_ids == [300]
    assert _accepts(free.constraint.schema, _xml(("n", "2")))
    thinking = auto_calls([N], False, ByteTagVocab(XML_TEMPLATE), [300], opens_thinking=True)
    assert thinking is not None and thinking.armed_by == 258

    class NoThinkEnd(ByteTagVocab):
        think_end_id = None

    assert auto_calls([N], False, NoThinkEnd(XML_TEMPLATE), [300], opens_thinking=True) is None
    plain = auto_calls([N], False, NoThinkEnd(XML_TEMPLATE), [300], opens_thinking=False)
    assert plain is not None and plain.armed_by is None
    assert auto_calls([N], False, ByteTagVocab(), [300], opens_thinking=False) is None


def test_a_json_format_beside_tools_is_an_object_or_a_call():
    from clover_local.generate.json_schema import compile_schema
    from clover_local.serve.tools import json_or_calls

    either = json_or_calls([N], False, ByteTagVocab(XML_TEMPLATE), [300], None).schema
    assert _accepts(either, '{"a": 1}') and _accepts(either, _xml(("n", "2")))
    for other in ("[1]", "3", '"x"', "null"):  # any object, nothing else
        assert not _accepts(either, other), other
    city = compile_schema({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                           "additionalProperties": False})
    either = json_or_calls([N], False, ByteTagVocab(XML_TEMPLATE), [300], city).schema
    assert _accepts(either, '{"city": "Oslo"}') and not _accepts(either, '{"a": 1}')
    assert _accepts(either, _xml(("n", "2")))
    assert json_or_calls([N], False, ByteTagVocab("{{ tools }}"), [300], city) is None


def test_a_forced_call_reads_with_the_tag_tokens_only_in_a_tagged_form():
    tok = ByteTagVocab(XML_TEMPLATE)
    forced = ForcedCall([N])
    assert forced.vocab(tok) is tok
    forced.for_template(XML_TEMPLATE)
    assert isinstance(forced.vocab(tok), TagVocab) and forced.vocab(tok).token_bytes(256) == b"<tool_call>"


def test_a_parameter_tag_broken_over_lines_is_not_read():
    tools = [_tool({"city": {"type": "string"}})]
    text = "<tool_call>\n<function=f>\n<parameter=ci\nty>\nOslo\n</parameter>\n</function>\n</tool_call>"
    assert _args(text, tools) == {}


# --- the stream ----------------------------------------------------------------------------------------------------

def test_a_stream_holds_back_only_what_may_start_a_call():
    tools = [N]
    stream = ToolCallStream(tools)
    assert stream.feed("Hi <tool_cal") == "Hi "  # (all of the tag but its last byte: held)
    assert stream.feed("l>\n<function=f>\n") == ""
    assert stream.feed("<parameter=n>\n5\n</parameter>\n</function>\n</tool_call> ok") == ""
    content, calls = stream.finish()
    assert content == " ok" and [(c.name, c.arguments) for c in calls] == [("f", {"n": 5})]
    stream = ToolCallStream(tools)
    assert stream.feed("a <b") == "a <b" and stream.feed(" <tool") == " " and stream.finish() == ("<tool", [])


def test_a_leading_stream_that_is_not_a_call_passes_its_held_whitespace_on():
    stream = ToolCallStream([N], leading=True)
    assert stream.feed("  ") == "  " and stream.feed(" <tool") == " " and stream.feed("x: 1") == "<toolx: 1"
    assert stream.finish() == ("", [])


def test_a_forced_stream_holds_everything_for_the_end():
    forced = ForcedCall([N])
    stream = ToolCallStream([N], forced)
    assert stream.feed('{"name": "f", ') == "" and stream.feed('"arguments": {"n": 1}}') == ""
    content, calls = stream.finish()
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("f", {"n": 1})]


def test_a_value_is_read_back_as_the_grammar_writes_it_string_where_a_string_is_allowed():
    """The reader parsed any value of a type list that held another type besides string as JSON: a zip code
    `94103` for `["string", "null"]` came back as the integer 94103, `true` for `["string", "integer"]` as a boolean
    neither type allows; the grammar writes those values as text."""
    tools = [_tool({"zip": {"type": ["string", "null"]}, "s": {"type": ["string", "integer"]}})]
    assert _args(_xml(("zip", "94103"), ("s", "true")), tools) == {"zip": "94103", "s": "true"}
    assert _args(_xml(("zip", "null"), ("s", "null")), tools) == {"zip": None, "s": "null"}


@pytest.mark.parametrize("schema, good, value, bad", [
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "5", 5, "banana"),  # pydantic's Optional[int]
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "null", None, "nil"),
    ({"oneOf": [{"$ref": "#/$defs/n"}, {"type": "boolean"}]}, "true", True, "yes"),
    ({"enum": [1, 2]}, "2", 2, "3"),
    ({"const": 7}, "7", 7, "8"),
])
def test_a_property_typed_only_by_its_branches_or_values_is_held_to_json_and_read_as_it(schema, good, value, bad):
    """No `type` of its own, and no string among its branches or values: it was free text, in a forced call's
    grammar too (`banana` for an Optional[int]), and read back as the string '5'."""
    tools = [_tool({"p": schema}, required=["p"], **{"$defs": {"n": {"type": "integer"}}})]
    grammar = XmlCalls(tools, parallel=False)
    assert _accepts(grammar, _xml(("p", good))) and not _accepts(grammar, _xml(("p", bad)))
    assert _args(_xml(("p", good)), tools) == {"p": value}


def test_a_property_whose_branches_allow_a_string_stays_text():
    tools = [_tool({"p": {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "q": {"anyOf": [{"type": "null"}, {}]},
                    "r": {"enum": ["a", 1]}}, required=["p"])]
    grammar = XmlCalls(tools, parallel=False)
    assert _accepts(grammar, _xml(("p", "5 apples"), ("q", "x"), ("r", "b")))
    assert _args(_xml(("p", "5"), ("q", "5")), tools) == {"p": "5", "q": "5"}


def test_an_optional_text_value_no_text_fits_is_not_begun():
    """minLength above maxLength: its key was taken, and no value could then be finished (the request's own check
    refuses such a property where it is required; an optional one is left out of the grammar)."""
    grammar = XmlCalls([_tool({"a": {"type": "string", "minLength": 3, "maxLength": 1}, "b": {"type": "integer"}})],
                       parallel=False)
    state = grammar.start()
    assert state.feed_all(b"<tool_call>\n<function=f>\n") and not state.copy().feed_all(b"<parameter=a")
    assert _accepts(grammar, _xml(("b", "4")))
