"""A forced call in the form the Qwen3.5/3.6 templates teach, held byte by byte (serve/tools.py's `ForcedCall` uses
it where the chat template shows that form):

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

The model writes the call it was trained to write, and the constraint keeps it one the server reads back: NAME one
of the candidates', each KEY one of that tool's properties at most once (the required ones before `</function>`),
and each VALUE what `split_tool_calls` turns into the schema's type — JSON held to the property's schema where that
has no string type (integers, booleans, objects ...), one of the values of a string enum, else text (its minLength /
maxLength kept) that holds neither `</parameter>` nor `</tool_call>`, so the reader cannot cut it short. Several
calls, one per line, where calls may go in parallel. What it writes is a subset of what the schemas allow, as the
JSON automata's is: only listed keys, only the template's own line breaks.

States are sets of alternatives (tuples), as json_schema.SchemaPrefix's are: a value's text may end at any line
break, so each `\\n` in it also starts a try at `</parameter>` that dies at the first byte that tells them apart.

`JsonFormCalls`: the same machinery for the older Qwen / Hermes form (`<tool_call>` around a JSON object), which
auto calls follow where the template teaches that one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clover_local.errors import CloverError
from clover_local.generate.json_schema import (Document, SchemaPrefix, compile_schema, pointer_target, type_of,
                                               utf8_lead)

OPEN = b"<tool_call>\n<function="
CLOSE = b"</function>\n</tool_call>"
PARAM_OPEN = b"<parameter="
PARAM_CLOSE = b"</parameter>\n"  # after the value's last line break
FORBIDDEN = (b"</parameter>", b"</tool_call>")  # inside a value: where the reader would cut it
_WINDOW = max(len(f) for f in FORBIDDEN)

_LIT, _TRIE, _TEXT, _JSON, _END = range(5)


@dataclass(eq=False)
class _Trie:
    """Byte strings, each ending at a node that holds its value; `values`: every value at or below the node."""

    next: dict[int, "_Trie"] = field(default_factory=dict)
    value: Any = None
    values: frozenset = frozenset()

    @classmethod
    def of(cls, items: dict[bytes, Any]) -> "_Trie":
        root = cls()
        for data, value in items.items():
            node = root
            node.values |= {value}
            for b in data:
                node = node.next.setdefault(b, cls())
                node.values |= {value}
            node.value = value
        return root


@dataclass
class _Tool:
    keys: _Trie  # each property's name + `>\n`
    required: frozenset[str]
    values: dict[str, tuple]  # key -> ("text", min, max) | ("enum", trie) | ("json", compiled schema)


def resolve_ref(schema: Any, root: Any) -> Any:
    """`schema` with a `$ref` into `root` followed (a chain of them too); unresolvable: as it is."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 32:
        try:
            schema, seen = pointer_target(root, schema["$ref"]), seen + 1
        except LookupError:
            return schema
    return schema


def value_kinds(schema: Any, root: Any, depth: int = 0) -> frozenset[str] | None:
    """The JSON types a property's schema allows (None: any): its `type`, else its enum's or const's values' types,
    else its anyOf / oneOf branches' together (pydantic's Optional[int] is an anyOf of integer and null). A value is
    written as text where a string is among them, else as JSON (`_value_form`), and read back the same way
    (tools.py)."""
    schema = resolve_ref(schema, root)
    if not isinstance(schema, dict) or depth > 32:
        return None
    kind = schema.get("type")
    if kind is not None:
        return frozenset(kind) if isinstance(kind, list) else frozenset({kind})
    choices = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(choices, list):
        return frozenset(type_of(c) for c in choices)
    branches = schema.get("anyOf", schema.get("oneOf"))
    if not (isinstance(branches, list) and branches):
        return None
    kinds: set[str] = set()
    for branch in branches:
        more = value_kinds(branch, root, depth + 1)
        if more is None:
            return None
        kinds |= more
    return frozenset(kinds)


def _value_form(prop: Any, params: dict) -> tuple | None:
    """How a property's value is written and checked (see the module docstring); None where none can be. A
    JSON-typed value whose schema goes past the supported subset is held to what is left of it (compile_schema's
    lenient: a strict tool's schema was checked whole before, protocol.read_tool_choice), or written as text where
    not even that compiles."""
    resolved = resolve_ref(prop, params)
    if not isinstance(resolved, dict):
        return ("text", 0, None)
    choices = resolved.get("enum", [resolved["const"]] if "const" in resolved else None)
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        writable = [c.encode() for c in choices if not any(f in c.encode() for f in FORBIDDEN)]
        return ("enum", _Trie.of({c + b"\n" + PARAM_CLOSE: True for c in writable})) if writable else None
    kinds = value_kinds(resolved, params)
    if kinds is None or "string" in kinds:
        low, high = resolved.get("minLength", 0), resolved.get("maxLength")
        return ("text", low, high) if high is None or low <= high else None  # (no text fits min above max)
    try:
        return ("json", compile_schema(Document(prop, root=params), lenient=True))
    except CloverError:
        return ("text", 0, None)


class XmlCalls:
    """The grammar for one request's candidates (`start` once per answer, as a compiled schema's). CloverError where
    a candidate cannot be written in this form (a name or a required key holding `>` or a line break, a required
    key the schema does not list): the caller then uses the JSON form. A parameter's schema past the supported
    subset is held to what is left of it, not refused (`_value_form`)."""

    def __init__(self, tools: list[dict], parallel: bool) -> None:
        self.parallel = parallel
        self.tools: list[_Tool] = []
        names: dict[bytes, int] = {}
        for i, tool in enumerate(tools):
            function = tool["function"]
            name, params = function["name"], function.get("parameters") or {}
            properties = params.get("properties") or {}
            forms = {k: _value_form(v, params) for k, v in properties.items() if k and not set(k) & set(">\n<")}
            forms = {k: form for k, form in forms.items() if form is not None}
            required = frozenset(params.get("required") or ())
            if set(name) & set(">\n<") or not required <= forms.keys():
                raise CloverError(f"tool {name!r} cannot be written in the XML call form")
            names[name.encode() + b">\n"] = i
            self.tools.append(_Tool(_Trie.of({k.encode() + b">\n": k for k in forms}), required, forms))
        self.names = _Trie.of(names)

    def start(self) -> "XmlCallPrefix":
        return XmlCallPrefix(self, tuple(self._expand(("lit", OPEN, ("name",)))))

    # the states between bytes, each as the byte-reading alternatives it stands for
    def _expand(self, step: tuple) -> list[tuple]:
        what = step[0]
        if what == "lit":
            return [(_LIT, step[1], step[2])]
        if what == "name":
            return [(_TRIE, self.names, "name", ())]
        if what == "params":
            _, call, written = step
            tool = self.tools[call]
            out = []
            if tool.keys.values - written:
                out.append((_LIT, PARAM_OPEN, ("key", call, written)))
            if tool.required <= written:
                out.append((_LIT, CLOSE, ("after",)))
            return out
        if what == "key":
            return [(_TRIE, self.tools[step[1]].keys, "key", step[1:])]
        if what == "value":
            _, call, written, key = step
            form = self.tools[call].values[key]
            done = ("params", call, written | {key})
            if form[0] == "enum":
                return [(_TRIE, form[1], "enum", done)]
            if form[0] == "json":
                return [(_JSON, form[1].start().alts, done, b"", PARAM_CLOSE)]
            return [(_TEXT, done, form[1], form[2], 0, b"", 0, 0, 0)]
        assert what == "after"
        return [(_END,)] + ([(_LIT, b"\n" + OPEN, ("name",))] if self.parallel else [])

    def _step(self, alt: tuple, b: int, out: list[tuple]) -> None:
        kind = alt[0]
        if kind == _LIT:
            _, left, then = alt
            if left[0] == b:
                out.extend([(_LIT, left[1:], then)] if len(left) > 1 else self._expand(then))
        elif kind == _TRIE:
            _, node, role, ctx = alt
            child = node.next.get(b)
            if child is None or (role == "key" and not child.values - ctx[1]):
                return
            if child.value is None:
                out.append((_TRIE, child, role, ctx))
            elif role == "name":
                out.extend(self._expand(("params", child.value, frozenset())))
            elif role == "key":
                out.extend(self._expand(("value", ctx[0], ctx[1], child.value)))
            else:  # an enum value and its `</parameter>`
                out.extend(self._expand(ctx))
        elif kind == _JSON:  # (a JSON string in it may not hold what would cut the value either)
            _, alts, then, window, close = alt
            inner = SchemaPrefix(alts)
            if b == 0x0A and inner.done:  # the line break before the closing tag
                out.append((_LIT, close, then))
            window = (window + bytes((b,)))[-_WINDOW:]
            if inner.feed(b) and not any(window.endswith(f) for f in FORBIDDEN):
                out.append((_JSON, inner.alts, then, window, close))
        elif kind == _TEXT:
            self._text(alt, b, out)

    @staticmethod
    def _text(alt: tuple, b: int, out: list[tuple]) -> None:
        _, then, low, high, chars, window, cont, lo, hi = alt
        if b == 0x0A and cont == 0 and chars >= low:  # the line break before `</parameter>`, perhaps
            out.append((_LIT, PARAM_CLOSE, then))
        if cont:  # inside a character: a continuation byte in range
            if not lo <= b <= hi:
                return
            cont, lo, hi = cont - 1, 0x80, 0xBF
        else:  # a character starts (counted now, so one that would pass maxLength is refused at its first byte)
            if high is not None and chars >= high:
                return
            chars += 1
            if b >= 0x80:
                lead = utf8_lead(b)
                if lead is None:
                    return
                cont, lo, hi = lead
        window = (window + bytes((b,)))[-_WINDOW:]
        if any(window.endswith(f) for f in FORBIDDEN):
            return
        out.append((_TEXT, then, low, high, chars, window, cont, lo, hi))


def json_call_schema(tools: list[dict]) -> dict:
    """One call of one of `tools` in the JSON form, `{"name": ..., "arguments": {...}}`, as a JSON schema (each
    tool's parameters a `Document`: their `$ref`s point into them)."""
    calls = [{"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
              "properties": {"name": {"const": t["function"]["name"]},
                             "arguments": Document(t["function"].get("parameters") or {"type": "object"})}}
             for t in tools]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


class JsonFormCalls(XmlCalls):
    """The calls in the form the older Qwen / Hermes templates teach, for auto calls where the template shows no
    `<function=` (tools.auto_calls): `<tool_call>`, a line break, `{"name": ..., "arguments": {...}}` of one of the
    tools (one JSON schema of their names and parameters, compiled leniently), a line break, `</tool_call>`; one
    call, or (parallel) one per line. Its states are XmlCalls' (the JSON alternative closed by `</tool_call>`)."""

    CALL_OPEN, CALL_CLOSE = b"<tool_call>\n", b"</tool_call>"

    def __init__(self, tools: list[dict], parallel: bool) -> None:
        self.parallel = parallel
        self.call = compile_schema(json_call_schema(tools), lenient=True)

    def start(self) -> "XmlCallPrefix":
        return XmlCallPrefix(self, tuple(self._expand(("lit", self.CALL_OPEN, ("call",)))))

    def _expand(self, step: tuple) -> list[tuple]:
        if step[0] == "call":
            return [(_JSON, self.call.start().alts, ("after",), b"", self.CALL_CLOSE)]
        if step[0] == "after":
            return [(_END,)] + ([(_LIT, b"\n" + self.CALL_OPEN, ("call",))] if self.parallel else [])
        return super()._expand(step)


class TagVocab:
    """A tokenizer's token bytes (json_mode.TokenBytes) with the tool-call tags' own tokens allowed: Qwen-family
    vocabularies hold `<tool_call>` and `</tool_call>` as added tokens, which the JSON automata never take (added
    tokens such as `<think>` mean something apart from their text), but a call the model writes with its trained
    tag tokens is the call it was trained to write, not one spelled out in pieces."""

    TAGS = ("<tool_call>", "</tool_call>")

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.tags = {i: tag.encode() for tag in self.TAGS if (i := tokenizer.token_to_id(tag)) is not None}
        self._groups: dict[int, list[int]] | None = None

    def token_bytes(self, token_id: int) -> bytes | None:
        return self.tags.get(token_id) or self.tokenizer.token_bytes(token_id)

    def ids_by_first_byte(self) -> dict[int, list[int]]:
        if self._groups is None:  # (the tokenizer's lists shared, read only; a new one only where a tag starts)
            self._groups = dict(self.tokenizer.ids_by_first_byte())
            for i, data in self.tags.items():
                self._groups[data[0]] = [*self._groups.get(data[0], ()), i]
        return self._groups


class XmlCallPrefix:
    """Where a byte string stands in an `XmlCalls` grammar; the interface of json_mode's prefix states."""

    __slots__ = ("grammar", "alts")

    def __init__(self, grammar: XmlCalls, alts: tuple) -> None:
        self.grammar, self.alts = grammar, alts

    def copy(self) -> "XmlCallPrefix":
        return XmlCallPrefix(self.grammar, self.alts)

    @property
    def done(self) -> bool:
        return any(a[0] == _END for a in self.alts)

    @property
    def final(self) -> bool:
        return all(a[0] == _END for a in self.alts)

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        out: list[tuple] = []
        for alt in self.alts:
            self.grammar._step(alt, b, out)
        if not out:
            return False
        self.alts = tuple(dict.fromkeys(out)) if len(out) > 1 else tuple(out)
        return True
