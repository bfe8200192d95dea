"""Structured outputs: an answer held to a JSON schema (serve's `response_format` json_schema, `generate
--json-schema`), byte by byte, as JSON mode holds one to any object (json_mode.py: the same token search, the same
left-to-right reveals in the decoder; only the automaton differs).

`compile_schema` turns the schema into a graph of nodes once per request; `SchemaPrefix` is where a byte string
stands in it. The subset is what pydantic's `model_json_schema()` and OpenAI's structured outputs emit: `type` (one
or a list), `properties`, `required`, `additionalProperties` (false, true / absent, or a schema), `items`,
`minItems` / `maxItems`, `enum` / `const` (any JSON values), `anyOf`, `$ref` into the document (`#/$defs/...`,
`#/definitions/...`, `#`; recursion included), `minLength` / `maxLength` (characters, as Python counts them), the
annotations (`title`, `description`, `default`, `examples`, ...), and `{}` / `true` for any value. Every other
keyword is refused at compile time with its JSON pointer (an answer that ignored a constraint would look like one
that kept it): `pattern`, `format`, `minimum` ..., `allOf`, `oneOf` (exactly one branch: not checkable byte by byte
without proving the branches disjoint), `not`, `prefixItems`, `uniqueItems`, ...

What the automaton writes is a subset of what the schema allows, on purpose: JSON mode's whitespace rules and depth
limit; `integer` is written without fraction or exponent (`3`, not `3.0`); an enum / const value is written as
`json.dumps` spells it (its strings with or without `ensure_ascii`; objects and arrays with any whitespace and key
order); a key of a closed object as `json.dumps` spells it; no key twice; strings valid UTF-8. Every state it
reaches can still be completed: unsatisfiable parts of the schema (an empty enum, `false`, minItems above maxItems,
a required key that cannot be written) are pruned at compile time, a schema that allows nothing is refused, and a
value (an optional property, a recursive child) is begun only where it can close within the depth limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from clover_local.errors import CloverError
from clover_local.generate.json_mode import (DIGITS, ESCAPES, HEX, MAX_DEPTH, MAX_INDENT, NUMBER_NEXT, WHITESPACE,
                                             ByteConstraint, Grammar, JsonObjectConstraint, PrefixState, TokenBytes,
                                             number_step)

TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                         "readOnly", "writeOnly", "$defs", "definitions"})
_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                       "enum", "const", "anyOf", "$ref", "minLength", "maxLength"}) | ANNOTATIONS
# The state is a set of alternatives (a union's branches, which die at the first byte that tells them apart); a
# schema whose unions nest inside each other's open values (anyOf of open objects, each holding an anyOf ...) could
# keep a product of them alive, so past MAX_ALTERNATIVES the first ones (in schema order) are kept: each is a real
# way to continue, so what is accepted still fits the schema and can still be finished; only some valid spellings
# become unreachable. Cost per byte grows with the number alive (one for schemas without unions).
MAX_ALTERNATIVES = 64
_INT_NEXT = {"minus": (DIGITS, False), "zero": (frozenset(), True), "int": (DIGITS, True)}


@dataclass(frozen=True)
class Document:
    """A schema whose `$ref`s point into `root` (by default the schema itself), not into the schema around it: a
    tool's parameters inside a forced call's schema (serve/tools.py), or one parameter of them compiled alone
    (serve/xml_calls.py), whose `#/$defs/...` point into the parameters."""

    schema: Any
    root: Any = None


# --- the compiled schema -------------------------------------------------------------------------------------------

class Node:
    """One compiled schema. `leaves` (after `_finish`): the Typed / Literal nodes a value of it starts as (a union or
    a reference flattened), `starts`: those leaves by the value's first byte; `least` (after `_depths`): how many
    objects and arrays deep its shallowest value nests."""

    leaves: tuple["Node", ...] = ()
    starts: dict[int, tuple["Node", ...]]
    least: int = 0


@dataclass(eq=False)
class Trie:
    next: dict[int, "Trie"] = field(default_factory=dict)
    end: bool = False

    def add(self, data: bytes) -> None:
        node = self
        for b in data:
            node = node.next.setdefault(b, Trie())
        node.end = True


@dataclass(eq=False)
class Literal(Node):
    """Scalars spelled exactly (an enum's or const's strings, numbers, true, false, null)."""

    trie: Trie = field(default_factory=Trie)


@dataclass(eq=False)
class Union(Node):
    members: list[Node] = field(default_factory=list)


@dataclass(eq=False)
class Ref(Node):
    pointer: str = ""
    target: Node | None = None


@dataclass(eq=False)
class Typed(Node):
    """A value of one of `types`, each with its own keywords (those of other types do not apply to it)."""

    types: frozenset[str] = frozenset(TYPES)
    props: dict[str, Node] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    extra: Node | None = None  # additionalProperties' schema; None: closed
    items: Node | None = None  # None with `fixed`: an array of exactly those (a const array)
    fixed: tuple[Node, ...] | None = None
    min_items: int = 0
    max_items: int | None = None
    min_len: int = 0
    max_len: int | None = None
    # made by _finish: the keys that can be written, and their spellings and prefixes (a closed object's keys are
    # written from them, and an open one's where its additionalProperties nest too deep for the levels left: made
    # by _depths for an open object whose additionalProperties cannot be a scalar)
    writable: frozenset[str] = frozenset()
    spelled: dict[bytes, str] = field(default_factory=dict)
    prefixes: dict[bytes, frozenset[str]] = field(default_factory=dict)
    # made by _depths: the levels an object / array of this node needs, itself included; the largest `least` of
    # its writable properties
    need_object: int = 0
    need_array: int = 0
    deepest_key: int = 0

    def item(self, i: int) -> Node:
        return self.fixed[i] if self.fixed is not None else self.items  # type: ignore[return-value]


_NEVER = Union()
_BOOL, _NULL = Trie(), Trie()
for _word in (b"true", b"false"):
    _BOOL.add(_word)
_NULL.add(b"null")


@dataclass
class Schema:
    """A compiled schema: `start()` is the state before the answer's first byte."""

    root: Node

    def start(self) -> "SchemaPrefix":
        return SchemaPrefix(((_VALUE, self.root, None),))


@dataclass
class SchemaConstraint(ByteConstraint):
    """The decoder's handle on a schema (or another grammar): the answer is what `schema` allows, then one of
    `stop_ids`."""

    schema: Grammar

    def start(self) -> PrefixState:
        return self.schema.start()


def answer_constraint(vocab: TokenBytes, stop_ids: list[int], json_object: bool = False,
                      schema: Grammar | None = None) -> ByteConstraint | None:
    """What holds an answer to JSON, if anything: a schema's automaton, else JSON mode's (any object)."""
    if schema is not None:
        return SchemaConstraint(vocab, stop_ids, schema)
    return JsonObjectConstraint(vocab, stop_ids) if json_object else None


# --- compiling -----------------------------------------------------------------------------------------------------

def compile_schema(schema: Any, lenient: bool = False) -> Schema:
    """The schema (a parsed JSON document, or a `Document`) compiled; CloverError naming the keyword and its JSON
    pointer for what is not supported or not well formed, and for a schema no value can satisfy. `lenient`: a
    keyword outside the supported subset (`minimum`, `pattern`, `oneOf` ...) is passed over instead, as is one
    beside `$ref`, `anyOf` or `enum`: what it holds to is then looser than the schema (serve's auto tool calls,
    where a best-effort grammar is better than none)."""
    try:
        root = _Compiler(schema, lenient).node(schema, "#")
        _finish(root)
    except RecursionError:  # the compiler recurses as the schema nests: a few hundred levels is its limit
        raise CloverError("the JSON schema is nested too deeply to compile (a few hundred levels at most)") from None
    if not root.leaves:
        raise CloverError("the JSON schema allows no value (an empty enum, false, minItems above maxItems, or a "
                          "required property that cannot be written)")
    if _depths(root) > MAX_DEPTH:
        raise CloverError(f"the JSON schema's values nest more than {MAX_DEPTH} objects or arrays deep (required "
                          f"properties or items inside each other); an answer is written at most {MAX_DEPTH} deep")
    return Schema(root)


def pointer_target(root: Any, pointer: str) -> Any:
    """What a `$ref`'s JSON pointer (`#` or `#/a/b`, `~1` and `~0` escaped) names in `root`; LookupError where it
    names nothing, or is not a pointer into this document."""
    if pointer != "#" and not pointer.startswith("#/"):
        raise LookupError(pointer)
    target = root
    for part in pointer[2:].split("/") if pointer != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise LookupError(pointer)
        target = target[part]
    return target


def _where(path: str) -> str:
    return f"the JSON schema's {path}"


class _Compiler:
    def __init__(self, root: Any, lenient: bool = False) -> None:
        self.root = root
        self.lenient = lenient
        self.refs: dict[str, Ref] = {}
        self.any = Typed()
        self.any.extra = self.any
        self.any.items = self.any

    def node(self, schema: Any, path: str) -> Node:
        if isinstance(schema, Document):
            return _Compiler(schema.schema if schema.root is None else schema.root, self.lenient).node(schema.schema,
                                                                                                      path)
        if schema is True or schema == {}:
            return self.any
        if schema is False:
            return _NEVER
        if not isinstance(schema, dict):
            raise CloverError(f"{_where(path)} must be an object, true or false")
        if self.lenient:
            schema = {k: v for k, v in schema.items() if k in _KEYWORDS}
        for key in schema:
            if key not in _KEYWORDS:
                raise CloverError(f"JSON schema keyword '{key}' at {path}/{_escape(key)} is not supported (answers "
                                  "are held to type, properties, required, additionalProperties, items, minItems, "
                                  "maxItems, enum, const, anyOf, $ref, minLength and maxLength): leave it out and "
                                  "describe the rule in the messages")
        for defs in ("$defs", "definitions"):
            if defs in schema and not isinstance(schema[defs], dict):
                raise CloverError(f"{_where(path)}/{defs} must be an object")
        rules = {k: v for k, v in schema.items() if k not in ANNOTATIONS}
        for combined in ("$ref", "anyOf"):
            if combined in rules:
                others = sorted(set(rules) - {combined})
                if others and not self.lenient:
                    raise CloverError(f"JSON schema keyword '{others[0]}' at {path}/{others[0]} beside '{combined}' "
                                      "is not supported: move it into the referenced or listed schemas")
                return self.ref(rules["$ref"], path) if combined == "$ref" else self.any_of(rules["anyOf"], path)
        types = self.types(rules.get("type", list(TYPES)), path)
        if "enum" in rules or "const" in rules:
            return self.values(rules, types, path)
        return self.typed(rules, types, path)

    def types(self, value: Any, path: str) -> frozenset[str]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or any(n not in TYPES for n in names):
            raise CloverError(f"{_where(path)}/type must be one of {', '.join(TYPES)} or a non-empty list of them")
        return frozenset(names)

    def ref(self, pointer: Any, path: str) -> Node:
        if not isinstance(pointer, str) or not (pointer == "#" or pointer.startswith("#/")):
            raise CloverError(f"{_where(path)}/$ref must point into this schema (#/$defs/NAME), got {pointer!r}")
        if pointer in self.refs:
            return self.refs[pointer]
        ref = self.refs[pointer] = Ref(pointer=pointer)
        try:
            target = pointer_target(self.root, pointer)
        except LookupError:
            raise CloverError(f"{_where(path)}/$ref {pointer!r} points at nothing in the schema") from None
        ref.target = self.node(target, pointer)
        return ref

    def any_of(self, branches: Any, path: str) -> Node:
        if not isinstance(branches, list) or not branches:
            raise CloverError(f"{_where(path)}/anyOf must be a non-empty list of schemas")
        return Union(members=[self.node(b, f"{path}/anyOf/{i}") for i, b in enumerate(branches)])

    def values(self, rules: dict, types: frozenset[str], path: str) -> Node:
        """enum / const: their values of `types` (the only other keyword taken beside them), each spelled exactly."""
        others = sorted(set(rules) - {"enum", "const", "type"})
        if others and not self.lenient:
            raise CloverError(f"JSON schema keyword '{others[0]}' at {path}/{others[0]} beside enum or const is not "
                              "supported: list only the values it allows")
        if "enum" in rules and not isinstance(rules["enum"], list):
            raise CloverError(f"{_where(path)}/enum must be a list of values")
        values = list(rules.get("enum", []))
        if "const" in rules:
            values = [v for v in values if _same(v, rules["const"])] if "enum" in rules else [rules["const"]]
        literal, compound = Literal(), []
        for v in values:
            if type_of(v) not in types and not (type_of(v) == "integer" and "number" in types):
                continue
            if isinstance(v, dict):
                compound.append(Typed(types=frozenset({"object"}), props={k: self.node({"const": x}, path)
                                                                          for k, x in v.items()},
                                      required=frozenset(v)))
            elif isinstance(v, list):
                compound.append(Typed(types=frozenset({"array"}), fixed=tuple(self.node({"const": x}, path)
                                                                              for x in v),
                                      min_items=len(v), max_items=len(v)))
            else:
                for ascii_only in (False, True):
                    literal.trie.add(json.dumps(v, ensure_ascii=ascii_only).encode())
        return Union(members=[literal, *compound])

    def typed(self, rules: dict, types: frozenset[str], path: str) -> Node:
        node = Typed(types=types)
        props = rules.get("properties", {})
        if not isinstance(props, dict):
            raise CloverError(f"{_where(path)}/properties must be an object of schemas")
        node.props = {name: self.node(s, f"{path}/properties/{_escape(name)}") for name, s in props.items()}
        required = rules.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise CloverError(f"{_where(path)}/required must be a list of property names")
        node.required = frozenset(required)
        extra = rules.get("additionalProperties", True)
        node.extra = None if extra is False else self.node(extra, f"{path}/additionalProperties")
        node.items = self.node(rules.get("items", True), f"{path}/items")
        node.min_items, node.max_items = self.bounds(rules, "minItems", "maxItems", path)
        node.min_len, node.max_len = self.bounds(rules, "minLength", "maxLength", path)
        return node

    def bounds(self, rules: dict, low: str, high: str, path: str) -> tuple[int, int | None]:
        for name in (low, high):
            v = rules.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise CloverError(f"{_where(path)}/{name} must be a non-negative integer")
        return rules.get(low) or 0, rules.get(high)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def type_of(v: Any) -> str:
    """A parsed JSON value's type as a schema names it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _graph(root: Node) -> list[Node]:
    seen: dict[int, Node] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, Union):
            todo.extend(node.members)
        elif isinstance(node, Ref):
            todo.append(node.target)  # type: ignore[arg-type]
        elif isinstance(node, Typed):
            todo.extend(node.props.values())
            todo.extend(n for n in (node.extra, node.items) if n is not None)
            todo.extend(node.fixed or ())
    return list(seen.values())


def _finish(root: Node) -> None:
    """Prune what no value can satisfy (a least fixpoint: a recursive schema is satisfiable only through a finite
    value), then each node's leaves, its leaves by first byte, and the closed objects' key spellings."""
    nodes = _graph(root)
    sat: set[int] = set()

    def ok(n: Node | None) -> bool:
        return n is not None and id(n) in sat

    def live_types(n: Typed) -> frozenset[str]:
        out = set(n.types)
        if "object" in out and not all(ok(n.props.get(r)) or (r not in n.props and ok(n.extra)) for r in n.required):
            out.discard("object")
        if "array" in out and not (
                (n.max_items is None or n.min_items <= n.max_items)
                and (all(ok(x) for x in n.fixed) if n.fixed is not None else n.min_items == 0 or ok(n.items))):
            out.discard("array")
        if "string" in out and n.max_len is not None and n.min_len > n.max_len:
            out.discard("string")
        return frozenset(out)

    changed = True
    while changed:
        changed = False
        for n in nodes:
            if id(n) in sat:
                continue
            if isinstance(n, Typed):
                good = bool(live_types(n))
            elif isinstance(n, Literal):
                good = bool(n.trie.next)
            elif isinstance(n, Union):
                good = any(ok(m) for m in n.members)
            else:
                good = ok(n.target)  # type: ignore[union-attr]
            if good:
                sat.add(id(n))
                changed = True
    for n in nodes:
        if isinstance(n, Typed):
            n.types = live_types(n)
            if n.fixed is None and not ok(n.items):
                n.max_items = 0
            n.writable = frozenset(k for k, v in n.props.items() if ok(v))
            if n.extra is not None and not ok(n.extra):
                n.extra = None
            if n.extra is None:
                _spell_keys(n)
    firsts = set(_FIRST) | set(DIGITS) | {ord("-")}
    for n in nodes:
        if isinstance(n, Literal):
            firsts |= set(n.trie.next)
    for n in nodes:
        n.leaves = tuple(dict.fromkeys(_leaves(n, ok, set())))
        n.starts = {}
        for b in firsts:
            hits = tuple(leaf for leaf in n.leaves if _may_start(leaf, b))
            if hits:
                n.starts[b] = hits


def _depths(root: Node) -> int:
    """Each node's `least`: how many objects and arrays deep its shallowest value nests (a scalar: 0), counted up to
    MAX_DEPTH + 1, and each typed node's `need_object` / `need_array` / `deepest_key`; returns the root's `least`.
    The automaton writes at most MAX_DEPTH deep, so it begins a value only where that value can close within it
    (`_fits`): a schema whose every value nests deeper is refused, and a deep optional branch is not begun where it
    could not be finished. A least fixpoint over the pruned graph, children first so a tree settles in one sweep."""
    past = MAX_DEPTH + 1
    nodes = _graph(root)[::-1]
    for n in nodes:
        n.least = past

    def of(n: Node | None) -> int:
        return n.least if n is not None else past

    changed = True
    while changed:
        changed = False
        for n in nodes:
            if isinstance(n, Literal):
                d = 0
            elif isinstance(n, Union):
                d = min((of(m) for m in n.members if m.leaves), default=past)
            elif isinstance(n, Ref):
                d = of(n.target)
            else:
                assert isinstance(n, Typed)
                n.need_object = min(past, 1 + max((of(n.props.get(r, n.extra)) for r in n.required), default=0))
                n.need_array = min(past, 1 + (max((of(x) for x in n.fixed), default=0) if n.fixed is not None else
                                              0 if n.min_items == 0 else of(n.items)))
                ways = [0] if n.types - {"object", "array"} else []
                ways += [n.need_object] * ("object" in n.types) + [n.need_array] * ("array" in n.types)
                d = min(ways, default=past)
            if d < n.least:
                n.least = d
                changed = True
    for n in nodes:
        if isinstance(n, Typed):
            n.deepest_key = max((n.props[k].least for k in n.writable), default=0)
            if n.extra is not None and n.extra.least > 0:  # (deep enough, only its named keys can be written)
                _spell_keys(n)
    return root.least


def _spell_keys(n: Typed) -> None:
    """The spellings of `n`'s writable keys and their prefixes, for writing them from a list (`_key`)."""
    for name in n.writable:
        for ascii_only in (False, True):
            spelling = json.dumps(name, ensure_ascii=ascii_only)[1:-1].encode()
            n.spelled[spelling] = name
            for i in range(len(spelling) + 1):
                n.prefixes[spelling[:i]] = n.prefixes.get(spelling[:i], frozenset()) | {name}


def _fits(node: Node | None, depth: int) -> bool:
    """Whether a value of `node` begun inside a container `depth` deep can still be closed."""
    return node is not None and depth + node.least <= MAX_DEPTH


def _keys_left(node: Typed, used: frozenset[str], depth: int, names: frozenset[str]) -> frozenset[str]:
    """Which of `names` may still be a key of `node`'s object `depth` deep: unused, and their value closable in the
    levels left (checked name by name only where the deepest of them could not be)."""
    left = names - used
    if depth + node.deepest_key <= MAX_DEPTH:
        return left
    return frozenset(k for k in left if _fits(node.props[k], depth))


def _leaves(n: Node, ok, seen: set[int]) -> list[Node]:
    if not ok(n) or id(n) in seen:
        return []
    seen.add(id(n))
    if isinstance(n, Union):
        return [leaf for m in n.members for leaf in _leaves(m, ok, seen)]
    if isinstance(n, Ref):
        return _leaves(n.target, ok, seen)  # type: ignore[arg-type]
    return [n]


_FIRST = {ord("{"): "object", ord("["): "array", ord('"'): "string", ord("t"): "boolean", ord("f"): "boolean",
          ord("n"): "null"}


def _may_start(leaf: Node, b: int) -> bool:
    if isinstance(leaf, Literal):
        return b in leaf.trie.next
    assert isinstance(leaf, Typed)
    if b in _FIRST:
        return _FIRST[b] in leaf.types
    return (b == ord("-") or b in DIGITS) and bool(leaf.types & {"integer", "number"})


# --- the automaton -------------------------------------------------------------------------------------------------
# An alternative is a tuple whose first item is its mode; `stack` is the open containers, innermost first, as a
# linked list (frame, rest) | None, each frame ("o", node, keys used, depth) or ("a", node, items begun, depth).
# Alternatives are immutable, so a state's copy shares them.

_VALUE = 0      # (_VALUE, node, stack): a value of `node` comes next
_SPACE = 1      # (_SPACE, more, alt): in whitespace before what `alt` expects; `more` bytes of it may still come
_AFTER = 2      # (_AFTER, stack): a value just ended inside stack's innermost container
_END = 3        # (_END,): the answer is complete; nothing may follow
_OBJ_OPEN = 4   # (_OBJ_OPEN, stack): after `{`
_OBJ_KEY = 5    # (_OBJ_KEY, stack): after `,` in an object
_KEY = 6        # (_KEY, spelled, stack): in a key of a closed object, `spelled` so far
_COLON = 7      # (_COLON, node, stack): after a key, its value's node
_ARR_OPEN = 8   # (_ARR_OPEN, stack): after `[`
_STRING = 9     # (_STRING, node | None, chars, sub, after_high, raw | None, stack): in a string (a key of an open
#                 object: node None, raw its bytes); sub: 0, "\\" after a backslash, (left, value) in \uXXXX,
#                 (left, lo, hi) in a UTF-8 character; after_high: the last character a \u high surrogate
_NUMBER = 10    # (_NUMBER, state, integer only, stack)
_LITERAL = 11   # (_LITERAL, trie node, stack)
_SPACED = frozenset({_VALUE, _AFTER, _OBJ_OPEN, _OBJ_KEY, _COLON, _ARR_OPEN})
_END_ALT = (_END,)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def utf8_lead(b: int) -> tuple[int, int, int] | None:
    """(continuation bytes to come, range of the next one) for a UTF-8 lead byte, None for a byte no character
    starts with (as Python's strict decoder: no overlong forms, surrogates or code points above U+10FFFF)."""
    if 0xC2 <= b <= 0xDF:
        return 1, 0x80, 0xBF
    if 0xE0 <= b <= 0xEF:
        return 2, 0xA0 if b == 0xE0 else 0x80, 0x9F if b == 0xED else 0xBF
    if 0xF0 <= b <= 0xF4:
        return 3, 0x90 if b == 0xF0 else 0x80, 0x8F if b == 0xF4 else 0xBF
    return None


def _close(stack: Any) -> tuple:
    """The alternative once a value ends inside `stack`."""
    return (_AFTER, stack) if stack is not None else _END_ALT


class SchemaPrefix:
    """Where a byte string stands in a compiled schema: a set of alternatives (see MAX_ALTERNATIVES). Same interface
    as json_mode.JsonPrefix; a refused byte leaves the state as it was."""

    __slots__ = ("alts",)

    def __init__(self, alts: tuple) -> None:
        self.alts = alts

    def copy(self) -> "SchemaPrefix":
        return SchemaPrefix(self.alts)

    @property
    def done(self) -> bool:
        return any(_complete(a) for a in self.alts)

    @property
    def final(self) -> bool:
        return all(a[0] == _END for a in self.alts)

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        out: list[tuple] = []
        for alt in self.alts:
            _step(alt, b, out)
        if not out:
            return False
        if len(out) > 1:
            out = list(dict.fromkeys(out))[:MAX_ALTERNATIVES]
        self.alts = tuple(out)
        return True


def _complete(alt: tuple) -> bool:
    mode = alt[0]
    if mode == _END:
        return True
    if mode == _NUMBER:
        return alt[3] is None and (_INT_NEXT if alt[2] else NUMBER_NEXT)[alt[1]][1]
    return mode == _LITERAL and alt[2] is None and alt[1].end


def _step(alt: tuple, b: int, out: list) -> None:
    """Append to `out` what `alt` becomes after byte `b` (nothing where it refuses it)."""
    mode = alt[0]
    if mode == _STRING:
        _string(alt, b, out)
    elif mode == _KEY:
        _key(alt, b, out)
    elif mode == _NUMBER:
        allowed, may_end = (_INT_NEXT if alt[2] else NUMBER_NEXT)[alt[1]]
        if b in allowed:
            out.append((_NUMBER, number_step(alt[1], b), alt[2], alt[3]))
        elif may_end:
            _step(_close(alt[3]), b, out)
    elif mode == _LITERAL:
        nxt = alt[1].next.get(b)
        if nxt is not None:
            out.append((_LITERAL, nxt, alt[2]) if nxt.next else _close(alt[2]))
        elif alt[1].end:
            _step(_close(alt[2]), b, out)
    elif mode == _SPACE:
        if b in WHITESPACE:
            if alt[1] and b != ord("\n") and b != ord("\r"):
                out.append((_SPACE, alt[1] - 1, alt[2]))
        else:
            _step(alt[2], b, out)
    elif b in WHITESPACE:
        if mode in _SPACED and b != ord("\r"):
            out.append((_SPACE, MAX_INDENT if b == ord("\n") else 0, alt))
    elif mode == _VALUE:
        for leaf in alt[1].starts.get(b, ()):
            _start(leaf, b, alt[2], out)
    elif mode == _AFTER:
        _after(alt[1], b, out)
    elif mode == _OBJ_OPEN or mode == _OBJ_KEY:
        stack = alt[1]
        _, node, used, depth = stack[0]
        if b == _QUOTE:
            if _fits(node.extra, depth):
                out.append((_STRING, None, 0, 0, False, b"", stack))
            elif _keys_left(node, used, depth, node.writable):
                out.append((_KEY, b"", stack))
        elif b == ord("}") and mode == _OBJ_OPEN and not node.required:
            out.append(_close(stack[1]))
    elif mode == _COLON:
        if b == ord(":"):
            out.append((_VALUE, alt[1], alt[2]))
    elif mode == _ARR_OPEN:
        stack = alt[1]
        _, node, _, depth = stack[0]
        if b == ord("]"):
            if not node.min_items:
                out.append(_close(stack[1]))
        elif node.max_items != 0:
            item = node.item(0)
            for leaf in item.starts.get(b, ()):
                _start(leaf, b, (("a", node, 1, depth), stack[1]), out)


def _start(leaf: Node, b: int, stack: Any, out: list) -> None:
    """A value of `leaf` begun with byte `b` (one `leaf.starts` says it may begin with)."""
    if isinstance(leaf, Literal):
        nxt = leaf.trie.next[b]
        out.append((_LITERAL, nxt, stack) if nxt.next else _close(stack))
        return
    assert isinstance(leaf, Typed)
    if b == _QUOTE:
        out.append((_STRING, leaf, 0, 0, False, None, stack))
    elif b == ord("{") or b == ord("["):
        depth = stack[0][3] if stack is not None else 0
        opened = b == ord("{")
        if depth + (leaf.need_object if opened else leaf.need_array) <= MAX_DEPTH:
            frame = ("o", leaf, frozenset(), depth + 1) if opened else ("a", leaf, 0, depth + 1)
            out.append((_OBJ_OPEN if opened else _ARR_OPEN, (frame, stack)))
    elif b in DIGITS or b == ord("-"):
        state = "minus" if b == ord("-") else "zero" if b == ord("0") else "int"
        out.append((_NUMBER, state, "number" not in leaf.types, stack))
    else:
        nxt = (_NULL if b == ord("n") else _BOOL).next[b]
        out.append((_LITERAL, nxt, stack))


def _after(stack: Any, b: int, out: list) -> None:
    kind, node, seen, depth = stack[0]
    if kind == "o":
        if b == ord(","):
            if _fits(node.extra, depth) or _keys_left(node, seen, depth, node.writable):
                out.append((_OBJ_KEY, stack))
        elif b == ord("}") and node.required <= seen:
            out.append(_close(stack[1]))
    elif b == ord(","):
        if node.max_items is None or seen < node.max_items:
            item = node.item(seen)
            out.append((_VALUE, item, (("a", node, seen + 1, depth), stack[1])))
    elif b == ord("]") and seen >= node.min_items:
        out.append(_close(stack[1]))


def _key(alt: tuple, b: int, out: list) -> None:
    """A key of a closed object: a prefix of an unused property's spelling whose value fits the levels left, closed
    once it is one whole."""
    _, spelled, stack = alt
    _, node, used, depth = stack[0]
    if b == _QUOTE:
        name = node.spelled.get(spelled)
        if name is not None and name not in used and _fits(node.props[name], depth):
            out.append((_COLON, node.props[name], (("o", node, used | {name}, depth), stack[1])))
            return
    longer = spelled + bytes((b,))
    names = node.prefixes.get(longer)
    if names is not None and _keys_left(node, used, depth, names):
        out.append((_KEY, longer, stack))


def _string(alt: tuple, b: int, out: list) -> None:
    _, node, chars, sub, high, raw, stack = alt
    limit = node.max_len if node is not None else None
    if raw is not None:
        raw += bytes((b,))
    if sub == 0:
        if b == _QUOTE:
            if node is not None:
                if chars >= node.min_len:
                    out.append(_close(stack))
            else:
                _key_done(raw[:-1], stack, out)  # type: ignore[index]
            return
        if b == _BACKSLASH:
            # an escape is one more character, unless it is the low half of a surrogate pair
            if limit is None or chars < limit or high:
                out.append((_STRING, node, chars, "\\", high, raw, stack))
            return
        if b < 0x20 or (limit is not None and chars >= limit):
            return
        if b < 0x80:
            out.append((_STRING, node, chars + 1, 0, False, raw, stack))
            return
        lead = utf8_lead(b)
        if lead is not None:
            out.append((_STRING, node, chars + 1, lead, False, raw, stack))
        return
    if sub == "\\":
        full = limit is not None and chars >= limit  # only a low surrogate may follow
        if b == ord("u"):
            out.append((_STRING, node, chars, (4, 0), high, raw, stack))
        elif b in ESCAPES and not full:
            out.append((_STRING, node, chars + 1, 0, False, raw, stack))
        return
    if len(sub) == 2:  # \uXXXX
        left, value = sub
        if b not in HEX:
            return
        value = value * 16 + int(chr(b), 16)
        if limit is not None and chars >= limit:  # full: only the low half of a pair may complete
            lowest = value << 4 * (left - 1)
            if not (high and lowest <= 0xDFFF and lowest + (1 << 4 * (left - 1)) - 1 >= 0xDC00):
                return
        if left > 1:
            out.append((_STRING, node, chars, (left - 1, value), high, raw, stack))
        elif high and 0xDC00 <= value <= 0xDFFF:  # the pair is one character
            out.append((_STRING, node, chars, 0, False, raw, stack))
        else:
            out.append((_STRING, node, chars + 1, 0, 0xD800 <= value <= 0xDBFF, raw, stack))
        return
    left, lo, hi = sub  # a UTF-8 continuation byte
    if lo <= b <= hi:
        out.append((_STRING, node, chars, (left - 1, 0x80, 0xBF) if left > 1 else 0, False, raw, stack))



def _key_done(raw: bytes, stack: Any, out: list) -> None:
    """A key of an open object, whole: its property's schema if it has one, else additionalProperties'."""
    _, node, used, depth = stack[0]
    name = json.loads(b'"' + raw + b'"')
    if name in used:
        return
    value = node.props[name] if name in node.props else node.extra
    if (name in node.props and name not in node.writable) or not _fits(value, depth):
        return
    out.append((_COLON, value, (("o", node, used | {name}, depth), stack[1])))
