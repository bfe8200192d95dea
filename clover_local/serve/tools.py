"""Function calling: OpenAI's `tools` handed to the model's chat template, its tool calls read back out of the answer.

The model writes a call as the Qwen3.5/3.6 templates teach it (Clover is built on that backbone):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

and the older Qwen/Hermes form, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, is read too. A parameter's
text becomes the JSON type the tool's schema gives it (a number, a boolean, an object ...; a string otherwise). A
block that is not a call in either form, or one cut off by the token limit, stays in the content as written, so
nothing the model wrote is lost.

A `tool_choice` that forces a call (`ForcedCall`) is kept by constraint rather than by asking: the answer is held,
byte by byte as structured outputs are, to a call of one of the candidates — in the form the chat template teaches
(`template_grammar`: the XML form above, or the older `<tool_call>`-wrapped JSON form; xml_calls.py), else as a bare
JSON call, `{"name": ..., "arguments": {...}}` (a list of them where calls may go in parallel) — with arguments its
parameters allow. With `tool_choice` auto the answer is free, but a call the model starts is held to the template's
form from its `<tool_call>` on (`auto_calls`; generate/trigger.py), so what it writes is a call the reader reads back.

(The request's side — `tools`, `tool_choice`, the messages' `tool_calls` and `tool` role — is checked in
protocol.py.)
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from clover_local.errors import CloverError
from clover_local.generate.json_mode import Either
from clover_local.generate.json_schema import Schema, SchemaConstraint, compile_schema
from clover_local.generate.trigger import Trigger
from clover_local.serve.xml_calls import JsonFormCalls, TagVocab, XmlCalls, json_call_schema, value_kinds

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*\Z", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_SCALAR_TYPES = {"integer", "number", "boolean", "null", "object", "array"}


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or "call_" + uuid.uuid4().hex[:24]

    def to_api(self, index: int | None = None) -> dict:
        out: dict[str, Any] = {"id": self.id, "type": "function",
                               "function": {"name": self.name, "arguments": json.dumps(self.arguments,
                                                                                       ensure_ascii=False)}}
        return out if index is None else {"index": index, **out}


def _typed(value: str, schema: Any, root: Any) -> Any:
    """A parameter's text as its schema's types say (`xml_calls.value_kinds`, the grammar's own reading): the text
    where a string is allowed (None for `null` where null is too), or nothing is said; else its JSON, or the text
    where it will not parse."""
    kinds = value_kinds(schema, root)
    if kinds is None or "string" in kinds or not kinds & _SCALAR_TYPES:
        return None if value == "null" and kinds is not None and "null" in kinds else value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if "boolean" in kinds and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value


def _call(block: str, tools: list[dict]) -> ToolCall | None:
    """One `<tool_call>` block's call, in either form; None when it is neither."""
    m = _FUNCTION.match(block)
    if m:
        name = m.group(1).strip()
        schema = next((t["function"].get("parameters") or {} for t in tools if t["function"]["name"] == name), {})
        properties = schema.get("properties") or {}
        arguments = {}
        for p in _PARAMETER.finditer(m.group(2)):
            key, value = p.group(1).strip(), p.group(2)
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            arguments[key] = _typed(value, properties.get(key), schema)
        return ToolCall(name, arguments)
    try:
        data = json.loads(block)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return ToolCall(data["name"], arguments) if isinstance(arguments, dict) else None


@dataclass
class ForcedCall:
    """A call the request forces (OpenAI's "required" or a named function, Anthropic's any or tool, the Responses
    API's): one of `tools`, or (`parallel`) one or more, written without thinking — the answer is the call. Held
    to `grammar`: the form the chat template teaches (`for_template`: the Qwen3.5 XML form, or the older
    `<tool_call>`-wrapped JSON form; the call the model was trained to write); else a bare JSON call, as one JSON
    schema of names and parameters (vLLM holds every forced call this way). Compiled leniently: a strict
    candidate's schema was checked whole when the request was read (protocol.read_tool_choice), any other's keywords
    outside the supported subset are passed over."""

    tools: list[dict]  # the candidates: every tool ("required", any) or the one named
    parallel: bool = False
    tagged: XmlCalls | None = field(default=None, init=False)  # the template's own form's grammar, where it is used
    _json: Schema | None = field(default=None, init=False, repr=False)

    def for_template(self, template: str) -> None:
        """The template's own call form where it shows one and every candidate can be written in it."""
        self.tagged = template_grammar(self.tools, self.parallel, template)

    @property
    def grammar(self) -> XmlCalls | Schema:
        if self.tagged is not None:
            return self.tagged
        if self._json is None:
            self._json = self._json_form()
        return self._json

    def _json_form(self) -> Schema:
        one = json_call_schema(self.tools)
        return compile_schema({"type": "array", "items": one, "minItems": 1} if self.parallel else one, lenient=True)

    def vocab(self, tokenizer: Any) -> Any:
        """The token bytes the constraint reads: in a tagged form, with the tag tokens allowed (xml_calls.TagVocab)."""
        return TagVocab(tokenizer) if self.tagged is not None else tokenizer

    def read(self, content: str) -> tuple[str, list[ToolCall]]:
        """(content, calls): the answer's calls; what the token limit cut short stays content (in a tagged form, the
        calls before it still come back)."""
        if self.tagged is not None:
            return split_tool_calls(content, self.tools)
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            return content, []
        return "", [ToolCall(c["name"], c["arguments"]) for c in (value if self.parallel else [value])]


def template_grammar(tools: list[dict], parallel: bool, template: str) -> XmlCalls | None:
    """The calls' grammar in the form the chat template teaches: the Qwen3.5 XML form where it shows `<function=`
    (xml_calls.XmlCalls), else the older JSON form where it shows `<tool_call>` (xml_calls.JsonFormCalls); their
    parameters' schemas held as far as they are supported (lenient). None where it shows neither, or a tool cannot
    be written in its form."""
    form = "xml" if "<function=" in template else "json" if CALL_OPEN in template else None
    return None if form is None else _grammar(form, json.dumps(tools, sort_keys=True), parallel)


@functools.lru_cache(maxsize=16)
def _grammar(form: str, tools: str, parallel: bool) -> XmlCalls | None:
    """`template_grammar`'s, kept by the tools' JSON: agents send the same tools with every request, and building
    the grammar of 20 of them took 5–7.5 ms (docs/sampling_cost.py). A grammar holds no request's state."""
    try:
        return (XmlCalls if form == "xml" else JsonFormCalls)(json.loads(tools), parallel)
    except CloverError:
        return None


def auto_calls(tools: list[dict], parallel: bool, tokenizer: Any, stop_ids: list[int],
               opens_thinking: bool) -> Trigger | None:
    """`tool_choice` auto: the answer free until the model writes `<tool_call>` (after the thinking, where the prompt
    opens it), then held to the grammar of the template's call form (`template_grammar`) — calls of known tools with
    their parameters, then the stop — so a call it starts comes back as a call, not as text (generate/trigger.py).
    Agents' schemas often use keywords past the supported subset (`minimum`, `maximum`, `pattern`): those values
    are held to the rest of their schema. None where the template shows no call form, a tool cannot be written in
    it, or the thinking's end has no token of its own: the answer is free."""
    grammar = template_grammar(tools, parallel, tokenizer.chat_template or "")
    armed_by = tokenizer.think_end_id if opens_thinking else None
    if grammar is None or (opens_thinking and armed_by is None):
        return None
    return Trigger(SchemaConstraint(TagVocab(tokenizer), stop_ids, grammar), CALL_OPEN.encode(), armed_by)


def json_or_calls(tools: list[dict], parallel: bool, tokenizer: Any, stop_ids: list[int],
                  schema: Schema | None) -> SchemaConstraint | None:
    """A JSON answer format beside tools (OpenAI's Agents SDK sends both for an agent with an output type): the
    answer is the format's JSON (`schema`, or any object) or a call of the tools in the template's form, whichever
    its first bytes start (json_mode.Either); written without thinking, as a JSON answer is. None where the template
    teaches no call form."""
    calls = template_grammar(tools, parallel, tokenizer.chat_template or "")
    if calls is None:
        return None
    answer = schema if schema is not None else compile_schema({"type": "object"})
    return SchemaConstraint(TagVocab(tokenizer), stop_ids, Either([answer, calls]))


def split_tool_calls(content: str, tools: list[dict] | None, forced: ForcedCall | None = None,
                     leading: bool = False) -> tuple[str, list[ToolCall]]:
    """(the content without its tool calls, the calls in order). Blocks that are not calls stay in the content,
    and so does whatever was written around the calls, whitespace included. Without tools nothing is read out:
    the model was told of none, so a `<tool_call>` it writes is text. A forced call's answer is the call alone.
    `leading` (a JSON format beside tools, `json_or_calls`): calls only where the answer starts with one — else it
    is the format's JSON, whose strings may hold a call's text."""
    if forced is not None:
        return forced.read(content)
    calls: list[ToolCall] = []
    if not tools or (leading and not content.lstrip().startswith(CALL_OPEN)):
        return content, calls
    kept: list[str] = []
    last = 0
    for m in _CALL.finditer(content):
        call = _call(m.group(1), tools)
        if call is None:
            continue
        kept.append(content[last:m.start()])
        calls.append(call)
        last = m.end()
    kept.append(content[last:])
    return "".join(kept), calls


class ToolCallStream:
    """A streamed answer's content with its tool calls held back: text before the first `<tool_call>` goes out as
    it comes (less what may be the start of one), everything from there on waits for the end, when `finish` reads
    the calls out of it. The streamed pieces add up to `split_tool_calls`' content. Without tools, text passes
    straight through; a forced call's answer is all held. `leading` as in `split_tool_calls`: the answer's first
    bytes decide, and an answer that starts otherwise than a call passes straight through."""

    def __init__(self, tools: list[dict] | None, forced: ForcedCall | None = None, leading: bool = False) -> None:
        self.tools = tools
        self.forced = forced
        self.leading = leading
        self.sent = ""
        self.held = ""
        self.opened = forced is not None

    def feed(self, text: str) -> str:
        if self.leading and self.tools and not self.opened:
            start = (self.held + text).lstrip()[:len(CALL_OPEN)]
            if start and not CALL_OPEN.startswith(start):  # not a call: text from here on (held whitespace too)
                self.tools, text, self.held = None, self.held + text, ""
        if not self.tools:
            self.sent += text
            return text
        if self.opened:
            self.held += text
            return ""
        self.held += text
        at = self.held.find(CALL_OPEN)
        if at >= 0:
            self.opened = True
            out, self.held = self.held[:at], self.held[at:]
        else:
            keep = next((n for n in range(min(len(CALL_OPEN) - 1, len(self.held)), 0, -1)
                         if CALL_OPEN.startswith(self.held[-n:])), 0)
            out, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        self.sent += out
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(the rest of the content, the calls)."""
        whole, calls = split_tool_calls(self.sent + self.held, self.tools, self.forced, self.leading)
        return whole[len(self.sent):], calls  # (the calls all follow what was sent)
