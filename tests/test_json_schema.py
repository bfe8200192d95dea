"""Structured outputs: the schema automaton against `jsonschema` (valid instances accepted at every prefix and
complete at the end; one-byte mutants complete exactly when json.loads and jsonschema accept them), unsupported
keywords refused by name and pointer, and the shipped tiny model held to a schema through the decoder, serve's
response_format json_schema and `generate --json-schema`."""

from __future__ import annotations

import json
import random
import time

import pytest
import torch

from clover_local.errors import CloverError
from clover_local.generate.json_mode import MAX_DEPTH, MAX_INDENT
from clover_local.generate.json_schema import MAX_ALTERNATIVES, SchemaConstraint, compile_schema
from tests.conftest import run_cli
from tests.inprocess_server import running_server
from tests.test_json_mode import _post, one_byte_mutants

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test dependency (pip install -e '.[test]')")

# `integer` is written without fraction or exponent (documented in json_schema.py), so the oracle's integer is too
_CHECKER = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_CHECKER)

ADDRESS = {"type": "object", "properties": {"street": {"type": "string", "maxLength": 6},
                                            "city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
SCHEMAS = {
    "person": {
        "$defs": {"Address": ADDRESS},
        "type": "object", "title": "Person", "description": "a person",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 5, "title": "Name"},
            "age": {"type": "integer"},
            "email": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},  # pydantic's Optional
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3},
            "home": {"$ref": "#/$defs/Address", "description": "where"},
        },
        "required": ["name", "age", "home"], "additionalProperties": False,
    },
    "array": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    "enum": {"enum": ["red", "grün", 3, 100, True, None, [1, "x"], {"k": "v", "n": [None]}]},
    "typed enum": {"type": "string", "enum": ["a", "ab", "b", 3]},
    "const": {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
              "required": ["kind", "r"]},
    "any of objects": {"anyOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}}, "required": ["a", "b"],
         "additionalProperties": False}]},
    "tree": {"$defs": {"Node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/Node"},
    "definitions pair": {"definitions": {"P": {"anyOf": [{"type": "null"},
                                                         {"type": "array", "minItems": 2, "maxItems": 2}]}},
                         "type": "object", "properties": {"p": {"$ref": "#/definitions/P"}}, "required": ["p"]},
    "lengths": {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4},
                                                 "t": {"type": "string", "maxLength": 0}},
                "required": ["s"], "additionalProperties": False},
    "string": {"type": "string", "minLength": 1, "maxLength": 3},
    "extra schema": {"type": "object", "properties": {"id": {"type": "integer"}},
                     "additionalProperties": {"type": "string", "maxLength": 3}},
    "extra any": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    "type list": {"type": ["string", "integer", "null"], "maxLength": 2},
    "number or bool": {"type": ["number", "boolean"]},
    "any": {},
}


_AB = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
       "additionalProperties": False}


def pydantic_schema() -> dict | None:
    try:
        from pydantic import BaseModel
    except ImportError:
        return None

    class Item(BaseModel):
        name: str
        qty: int = 1

    class Order(BaseModel):
        id: int
        items: list[Item]
        note: str | None = None
        parent: "Order | None" = None

    Order.model_rebuild()
    return Order.model_json_schema()


if pydantic_schema() is not None:
    SCHEMAS["pydantic"] = pydantic_schema()


# --- random instances of a schema --------------------------------------------------------------------------------

TEXT = ["a", "Z", " ", '"', "\\", "\n", "\t", "\x01", "é", "中", "😀", "{", ":"]


def text(rng: random.Random, lo: int = 0, hi: int | None = None) -> str:
    hi = lo + 4 if hi is None else hi
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(lo, hi)))


def any_value(rng: random.Random, depth: int):
    kinds = ["str", "int", "float", "lit"] + (["obj", "arr"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "obj":
        return {text(rng): any_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "arr":
        return [any_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "str":
        return text(rng)
    if kind == "int":
        return rng.choice([0, 7, -12, 10**12])
    if kind == "float":
        return rng.choice([0.5, -1.25e-7, 3.0e21])
    return rng.choice([True, False, None])


def instance(schema, root: dict, rng: random.Random, depth: int = 0):
    """A random value `schema` allows (the subset compile_schema takes)."""
    if schema is True or schema == {} or set(schema) <= {"title", "description", "default"}:
        return any_value(rng, depth)
    if "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return instance(target, root, rng, depth)
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if depth > 2:  # end recursion: the branch with no object
            branches = [b for b in branches if b.get("type") == "null"] or branches
        return instance(rng.choice(branches), root, rng, depth)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        allowed = [v for v in schema["enum"] if "type" not in schema or isinstance(v, str)]
        return rng.choice(allowed)
    types = schema.get("type", ["object", "array", "string", "integer", "number", "boolean", "null"])
    kind = rng.choice([types] if isinstance(types, str) else types)
    if kind == "object":
        props = schema.get("properties", {})
        out = {}
        for name, sub in props.items():
            if name in schema.get("required", []) or (rng.random() < 0.5 and depth < 3):
                out[name] = instance(sub, root, rng, depth + 1)
        extra = schema.get("additionalProperties", True)
        if extra is not False:
            for _ in range(rng.randint(0, 2)):
                key = text(rng, 1)
                if key not in props:
                    out[key] = instance(extra, root, rng, depth + 1)
        keys = list(out)
        rng.shuffle(keys)  # any order
        return {k: out[k] for k in keys}
    if kind == "array":
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", 4)
        n = lo if depth > 2 else rng.randint(lo, hi)
        return [instance(schema.get("items", True), root, rng, depth + 1) for _ in range(n)]
    if kind == "string":
        return text(rng, schema.get("minLength", 0), schema.get("maxLength"))
    if kind == "integer":
        return rng.choice([0, 5, -3, 42, 10**15])
    if kind == "number":
        return rng.choice([0, 2.5, -1e-3, 6.02e23, 17])
    if kind == "boolean":
        return rng.choice([True, False])
    return None


def oracle(schema, data: bytes) -> bool:
    """json.loads (strict UTF-8, no NaN / Infinity, no key twice) and then jsonschema."""
    def refuse(name):
        raise ValueError(name)

    def pairs(items):
        if len({k for k, _ in items}) != len(items):
            raise ValueError("duplicate key")
        return dict(items)

    try:
        value = json.loads(data.decode(), parse_constant=refuse, object_pairs_hook=pairs)
    except ValueError:
        return False
    return Validator(schema).is_valid(value)


def complete(compiled, data: bytes) -> bool:
    state = compiled.start()
    return state.feed_all(data) and state.done


def dumps(value, rng: random.Random) -> bytes:
    indent = rng.choice([None, None, 2, 4])
    separators = rng.choice([(",", ":"), (", ", ": ")]) if indent is None else None
    return json.dumps(value, indent=indent, separators=separators, ensure_ascii=rng.random() < 0.5).encode()


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_valid_instances_are_accepted_at_every_byte_and_complete_at_the_end(name):
    schema, rng = SCHEMAS[name], random.Random(name)
    compiled = compile_schema(schema)
    for _ in range(60):
        value = instance(schema, schema, rng)
        assert Validator(schema).is_valid(value), value  # (the generator itself)
        doc = dumps(value, rng)
        state = compiled.start()
        for i, b in enumerate(doc):
            assert state.feed(b), (doc, i)
            if state.done and i < len(doc) - 1:  # complete early only where the prefix is itself valid (a number)
                assert oracle(schema, doc[:i + 1]), (doc, i)
        assert state.done, doc


ALPHABET = b'{}[]:,"\\0123456789-+.eEtrufalsnxabkv/'


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_one_byte_mutants_are_judged_as_jsonschema_judges_them(name):
    """Every mutant of a valid compact instance (a byte replaced, inserted or deleted; whitespace left out, its
    rules are stricter on purpose) is complete for the automaton exactly when the oracle accepts it."""
    schema, rng = SCHEMAS[name], random.Random("mutants " + name)
    compiled = compile_schema(schema)
    checked = valid = 0
    for _ in range(60):
        doc = json.dumps(instance(schema, schema, rng), separators=(",", ":"),
                         ensure_ascii=rng.random() < 0.5).encode()
        for mutant in one_byte_mutants(doc, rng, ALPHABET, 25):
            ours = complete(compiled, mutant)
            assert ours == oracle(schema, mutant), (mutant, ours)
            checked += 1
            valid += ours
    assert checked > 1000 and 5 <= valid < checked - 100, (checked, valid)  # both outcomes, many times


@pytest.mark.parametrize("schema, keyword, pointer", [
    ({"type": "string", "pattern": "^a"}, "pattern", "#/pattern"),
    ({"type": "string", "format": "date"}, "format", "#/format"),
    ({"properties": {"n": {"type": "integer", "minimum": 0}}}, "minimum", "#/properties/n/minimum"),
    ({"type": "number", "exclusiveMaximum": 3}, "exclusiveMaximum", "#/exclusiveMaximum"),
    ({"type": "number", "multipleOf": 2}, "multipleOf", "#/multipleOf"),
    ({"allOf": [{}]}, "allOf", "#/allOf"),
    ({"oneOf": [{}]}, "oneOf", "#/oneOf"),
    ({"not": {}}, "not", "#/not"),
    ({"if": {}, "then": {}}, "if", "#/if"),
    ({"patternProperties": {"a": {}}}, "patternProperties", "#/patternProperties"),
    ({"propertyNames": {}}, "propertyNames", "#/propertyNames"),
    ({"type": "array", "items": {"uniqueItems": True}}, "uniqueItems", "#/items/uniqueItems"),
    ({"contains": {}}, "contains", "#/contains"),
    ({"dependentRequired": {}}, "dependentRequired", "#/dependentRequired"),
    ({"prefixItems": [{}]}, "prefixItems", "#/prefixItems"),
    ({"$defs": {"A": {"maxProperties": 2}}, "$ref": "#/$defs/A"}, "maxProperties", "#/$defs/A/maxProperties"),
    ({"anyOf": [{"type": "string"}, {"nullable": True}]}, "nullable", "#/anyOf/1/nullable"),
    ({"type": "string", "anyOf": [{}]}, "type", "#/type"),  # beside anyOf: an intersection
    ({"enum": ["a"], "maxLength": 3}, "maxLength", "#/maxLength"),
])
def test_unsupported_keywords_are_refused_by_name_and_pointer(schema, keyword, pointer):
    with pytest.raises(CloverError) as err:
        compile_schema(schema)
    assert f"'{keyword}'" in str(err.value) and pointer in str(err.value)


@pytest.mark.parametrize("schema, good, looser, bad", [
    ({"type": "integer", "minimum": 1, "maximum": 10}, b"5", b"-3", b'"5"'),
    ({"type": "string", "pattern": "^a+$", "format": "email"}, b'"aa"', b'"b"', b"1"),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, b"1", b"[]", b"tru"),
    ({"$ref": "#/$defs/n", "minimum": 0, "$defs": {"n": {"type": "number", "exclusiveMinimum": 0}}}, b"2.5",
     b"-1", b'"x"'),
    ({"type": "object", "properties": {"n": {"type": "integer", "exclusiveMinimum": 0}}, "required": ["n"],
      "additionalProperties": False}, b'{"n": 3}', b'{"n": 0}', b'{"m": 3}'),
])
def test_lenient_compiling_passes_over_what_it_cannot_hold(schema, good, looser, bad):
    """Agents' tool schemas often carry keywords past the subset (`minimum`, `pattern`, `oneOf`): refused when
    compiled strictly (a forced call, response_format); compiled leniently (auto tool calls), the rest of the schema
    still holds — what the dropped keyword refused passes, what the rest refuses does not."""
    with pytest.raises(CloverError, match="not supported"):
        compile_schema(schema)
    compiled = compile_schema(schema, lenient=True)
    assert complete(compiled, good) and complete(compiled, looser) and not complete(compiled, bad)


@pytest.mark.parametrize("schema", [
    {"enum": []}, False, {"type": "array", "minItems": 3, "maxItems": 1},
    {"type": "object", "required": ["a"], "additionalProperties": False},
    {"$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "required": ["n"]}},
     "$ref": "#/$defs/N"},  # only infinite values
    {"enum": ["a", "b"], "const": "c"},  # both: the values in both
    {"type": "string", "minLength": 3, "maxLength": 1},
])
def test_a_schema_that_allows_nothing_is_refused(schema):
    with pytest.raises(CloverError, match="allows no value"):
        compile_schema(schema)


@pytest.mark.parametrize("schema", [{"$ref": "#/$defs/missing"}, {"$ref": "other.json#/a"}, {"type": "date"},
                                    {"minLength": -1}, {"required": "a"}, [], {"maxLength": True},
                                    {"$defs": [{"type": "string"}]}])
def test_malformed_schemas_are_refused(schema):
    with pytest.raises(CloverError):
        compile_schema(schema)


def test_unsatisfiable_parts_are_pruned_so_every_prefix_can_finish():
    schema = {"type": "object", "properties": {"a": {"enum": []}, "b": {"type": "integer"}},
              "additionalProperties": False, "required": ["b"]}
    compiled = compile_schema(schema)
    assert not compiled.start().feed_all(b'{"a')  # `a` could never get a value
    assert complete(compiled, b'{"b":1}')
    # a closed object whose keys are all used takes no comma; required keys gate the closing brace
    assert not compiled.start().feed_all(b'{"b":1,')
    assert not compiled.start().feed_all(b'{}')


@pytest.mark.parametrize("schema, data, ok", [
    # JSON mode's whitespace rules
    ({}, b"[1, 2]", True), ({}, b"[1,  2]", False), ({}, b"[\r1]", False), ({}, b"[\n\n1]", False),
    ({}, b"[\n" + b" " * MAX_INDENT + b"1]", True), ({}, b"[\n" + b" " * (MAX_INDENT + 1) + b"1]", False),
    # strings are valid UTF-8 (Python's strict decoder) without raw control characters
    ({"type": "string"}, b'"\xc3\xa9 \xe0\xa0\x80 \xed\x9f\xbf \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf \x7f"', True),
    ({"type": "string"}, b'"\xc0\x80"', False),  # overlong
    ({"type": "string"}, b'"\xc1\xbf"', False),
    ({"type": "string"}, b'"\xe0\x80\x80"', False),
    ({"type": "string"}, b'"\xed\xa0\x80"', False),  # a surrogate
    ({"type": "string"}, b'"\xf4\x90\x80\x80"', False),  # above U+10FFFF
    ({"type": "string"}, b'"\x1f"', False),
    # \u escapes count as characters; a surrogate pair as one
    ({"type": "string", "maxLength": 1}, b'"\\ud83d\\ude00"', True),
    ({"type": "string", "maxLength": 1}, b'"\\u0041"', True),
    ({"type": "string", "maxLength": 1}, b'"a\\u0041"', False),
    ({"type": "string", "maxLength": 1}, b'"\\u0041\\u0042"', False),
    ({"type": "string", "maxLength": 1}, b'"\\ud83d\\u0041"', False),  # after a high half: only a low half
    # an enum's integers are numbers too
    ({"type": "number", "enum": [1, 2.5, "x"]}, b"1", True),
    ({"type": "number", "enum": [1, 2.5, "x"]}, b"2.5", True),
    ({"type": "number", "enum": [1, 2.5, "x"]}, b'"x"', False),
    # no key twice, even where a longer key starts like it
    (_AB, b'{"a":1,"ab":2}', True), (_AB, b'{"a":1,"a":2}', False),
])
def test_spelling_rules(schema, data, ok):
    assert complete(compile_schema(schema), data) == ok
    if schema != {}:  # (the whitespace rules are stricter than JSON's on purpose)
        assert oracle(schema, data) == ok


def test_depth_is_bounded():
    assert compile_schema({}).start().feed_all(b"[" * MAX_DEPTH)
    assert not compile_schema({}).start().feed_all(b"[" * (MAX_DEPTH + 1))


def _nested(levels: int, inner: dict, kind: str) -> dict:
    for _ in range(levels):
        inner = ({"type": "object", "properties": {"a": inner}, "required": ["a"]} if kind == "object" else
                 {"type": "array", "items": inner, "minItems": 1})
    return inner


@pytest.mark.parametrize("kind", ["object", "array"])
def test_a_schema_whose_every_value_nests_past_the_depth_bound_is_refused(kind):
    """The automaton writes at most MAX_DEPTH levels: a schema that needs more compiled, and an answer held to it ran
    to max_tokens without closing. Exactly MAX_DEPTH compiles and is written whole; one more is refused, split
    between two levels of schema too; a way out at some level (an alternative, an optional property) keeps it."""
    def value(levels: int) -> bytes:
        return (b'{"a":' * levels + b"7" + b"}" * levels if kind == "object" else
                b"[" * levels + b"7" + b"]" * levels)

    integer = {"type": "integer"}
    assert complete(compile_schema(_nested(MAX_DEPTH, integer, kind)), value(MAX_DEPTH))
    for schema in (_nested(MAX_DEPTH + 1, integer, kind), _nested(40, _nested(30, integer, kind), kind)):
        with pytest.raises(CloverError, match=f"nest more than {MAX_DEPTH} objects or arrays deep"):
            compile_schema(schema)
    way_out = _nested(40, {"anyOf": [_nested(40, integer, kind), {"type": "null"}]}, kind)
    assert complete(compile_schema(way_out), value(40).replace(b"7", b"null"))
    assert compile_schema({"type": "object", "properties": {"x": _nested(MAX_DEPTH + 5, {}, kind)}})  # optional
    assert complete(compile_schema({"const": json.loads(value(MAX_DEPTH))}), value(MAX_DEPTH))  # a const's too
    with pytest.raises(CloverError, match="nest more than"):
        compile_schema({"const": json.loads(value(MAX_DEPTH + 1))})


def test_a_recursive_schema_counts_its_shallowest_value():
    """A tree whose children are required but may be an empty list nests 2 deep at least: compiles; one whose child
    is required and itself (no way out) allows no value at all."""
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["children"]}
    assert complete(compile_schema(tree), b'{"children":[{"children":[]}]}')
    with pytest.raises(CloverError, match="allows no value"):
        compile_schema({"type": "object", "properties": {"c": {"$ref": "#"}}, "required": ["c"]})


def test_keys_whose_value_cannot_be_written_are_refused_at_once():
    """A property or additionalProperties that allows nothing: its key is refused where it ends, not taken into a
    value that could never be finished."""
    compiled = compile_schema({"type": "object", "properties": {"a": {"enum": []}}})
    assert not compiled.start().feed_all(b'{"a"') and complete(compiled, b'{"b":1}')
    compiled = compile_schema({"type": "object", "additionalProperties": {"enum": []}})
    assert not compiled.start().feed_all(b'{"') and complete(compiled, b"{}")


def test_once_a_top_level_number_may_end_the_stop_token_is_found_past_the_top_tries():
    """After a complete top-level number, where the TOP_TRIES likeliest tokens are all refused, the search by
    first byte still offers the stop token (and it is likelier than the digit)."""
    from clover_local.generate.json_mode import TOP_TRIES

    class Wide:
        def token_bytes(self, i):
            return b"1" if i == 0 else None if i == 1 else b"x%d" % i

        def ids_by_first_byte(self):
            return {ord("1"): [0], ord("x"): list(range(2, TOP_TRIES + 10))}

    constraint = SchemaConstraint(Wide(), [1], compile_schema({"type": "integer"}))
    state = constraint.advance(constraint.start(), 0)
    logits = torch.arange(TOP_TRIES + 10, dtype=torch.float32)
    logits[0], logits[1] = -2.0, -1.0  # the stop token likelier than `1`, both below every `x`
    token, after = constraint.likeliest_allowed(state, logits)
    assert token == 1 and after is state


def test_top_level_numbers_may_stop_or_go_on():
    """A number at the top level is complete after each digit, yet more digits may come: the constraint offers
    the stop token and the next digit both."""
    class Vocab:
        TOKENS = [b"1", b"2", None]

        def token_bytes(self, i):
            return self.TOKENS[i]

        def ids_by_first_byte(self):
            return {ord("1"): [0], ord("2"): [1]}

    constraint = SchemaConstraint(Vocab(), [2], compile_schema({"type": "integer"}))
    state = constraint.advance(constraint.start(), 0)
    assert state.done and not state.final
    assert constraint.advance(state, 1) is not None and constraint.advance(state, 2) is state
    token, _ = constraint.likeliest_allowed(state, torch.tensor([0.0, 0.0, 5.0]))
    assert token == 2
    token, _ = constraint.likeliest_allowed(state, torch.tensor([0.0, 5.0, 0.0]))
    assert token == 1


def test_alternatives_stay_bounded():
    """Nested unions of open objects keep a product of branches alive; the state keeps at most MAX_ALTERNATIVES."""
    schema = {"$defs": {"U": {"anyOf": [{"type": "object", "additionalProperties": {"$ref": "#/$defs/U"}},
                                        {"type": "object", "additionalProperties": {"type": "integer"}},
                                        {"type": "object"}]}}, "$ref": "#/$defs/U"}
    state = compile_schema(schema).start()
    assert state.feed_all(b'{"a":' * 8)
    assert 1 < len(state.alts) <= MAX_ALTERNATIVES


def test_a_token_check_takes_microseconds():
    """What the decoder pays per token check (advance: copy and feed its bytes), for the pydantic-like schema."""
    compiled = compile_schema(SCHEMAS["person"])
    state = compiled.start()
    assert state.feed_all(b'{"name": "Ada", "home": {"city": "Lon')
    token = b"don Bridge"
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        state.copy().feed_all(token)
    per_token = (time.perf_counter() - t0) / n
    assert per_token < 200e-6, per_token  # tens of microseconds; generous for a loaded CI machine


# --- the tiny model ----------------------------------------------------------------------------------------------

SMALL = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 6}, "ok": {"type": "boolean"},
                                          "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
         "required": ["answer", "ok"], "additionalProperties": False}


def test_the_tiny_model_is_held_to_a_schema(tiny):
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished

    tok, compiled = tiny.tokenizer, compile_schema(SMALL)
    decoder = BlockDiffusionDecoder(tiny.model, tiny.mask_token_id)
    finished = 0
    for prompt, temperature in [("hi", 0.0), ("What is 12 + 7?", 0.0), ("hi", 0.8)]:
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], enable_thinking=False)
        settings = DecodeSettings(max_new_tokens=160, threshold=tiny.config.diffusion.threshold,
                                  temperature=temperature, seed=5, stop_token_ids=tiny.stop_token_ids,
                                  constraint=SchemaConstraint(tok, tiny.stop_token_ids, compiled))
        fin = [ev for ev in decoder.generate(tok.encode(text), settings) if isinstance(ev, Finished)][0]
        data = b"".join(tok.token_bytes(i) for i in fin.token_ids)
        assert compiled.start().feed_all(data), (prompt, data)  # a prefix of a valid answer, ended or not
        if fin.stats.stop_reason == "stop":
            assert Validator(SMALL).is_valid(json.loads(data)), data
            finished += 1
    assert finished >= 1


def _chat(schema) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}}


def test_serve_response_format_json_schema(tiny):
    with running_server(tiny, "tiny", max_tokens=160, context=512) as (_, url):
        status, body = _post(url, "/v1/chat/completions", _chat(SMALL))
        assert status == 200, body
        content = body["choices"][0]["message"]["content"]
        assert body["choices"][0]["finish_reason"] == "stop" and Validator(SMALL).is_valid(json.loads(content))
        status, chunks = _post(url, "/v1/chat/completions", {**_chat(SMALL), "stream": True})
        assert status == 200
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == content
        # the raw endpoint too
        prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        status, body = _post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 160,
                                                      "response_format": _chat(SMALL)["response_format"]})
        assert status == 200
        text = body["choices"][0]["text"]
        assert compile_schema(SMALL).start().feed_all(text.encode())
        # refusals: a keyword outside the subset, thinking, tools
        status, body = _post(url, "/v1/chat/completions", _chat({"type": "string", "pattern": "a+"}))
        assert status == 400 and body["error"]["param"] == "response_format"
        assert "'pattern'" in body["error"]["message"] and "#/pattern" in body["error"]["message"]
        status, body = _post(url, "/v1/chat/completions", {**_chat(SMALL), "enable_thinking": True})
        assert status == 400 and body["error"]["param"] == "enable_thinking"
        status, body = _post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                           "response_format": {"type": "json_schema"}})
        assert status == 400 and body["error"]["param"] == "response_format"


def test_either_grammar_takes_what_one_of_its_grammars_takes():
    """`Either`: a response_format's JSON or a call (the Agents SDK sends both); the first bytes choose."""
    from clover_local.generate.json_mode import Either
    from clover_local.serve.xml_calls import XmlCalls

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
    either = Either([compile_schema(SMALL), XmlCalls(tools, parallel=False)])
    assert complete(either, b'{"answer": "yes", "ok": true}')
    assert complete(either, b"<tool_call>\n<function=f>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call>")
    for bad in (b'{"answer": 1}', b"<tool_call>\n<function=g>", b"[1]", b"hello"):
        state = either.start()
        assert not (state.feed_all(bad) and state.done), bad
    state = either.start()
    assert state.feed_all(b"<tool_call>") and not state.done and not state.final
    copy = state.copy()
    assert copy.feed_all(b"\n<function=f>") and not state.copy().feed_all(b"x")  # copies go their own ways


def test_generate_json_schema(tiny, capsys, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SMALL))
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(path), "--max-new-tokens", "160",
                    "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert Validator(SMALL).is_valid(json.loads(out["text"])) and out["reasoning"] == ""
    path.write_text(json.dumps({"type": "string", "format": "email"}))
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(path), "--device", "cpu"]) == 2
    assert "'format'" in capsys.readouterr().err
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(path), "--format", "json",
                    "--device", "cpu"]) == 2


def test_generate_json_schema_flags(tiny, capsys, tmp_path, monkeypatch):
    """--json-schema with --format json is refused (with a schema that compiles), a file that is not JSON is named,
    and the answer is asked for without thinking unless the flags say otherwise."""
    from clover_local.tokenizer import ChatTokenizer

    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "boolean"}))
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(path), "--format", "json",
                    "--device", "cpu"]) == 2
    assert "leave --format out" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{type: boolean")
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(bad), "--device", "cpu"]) == 2
    assert "is not JSON" in capsys.readouterr().err
    asked = []
    real = ChatTokenizer.apply_chat_template

    def recorded(self, messages, *args, **kwargs):
        asked.append(kwargs.get("enable_thinking"))
        return real(self, messages, *args, **kwargs)

    monkeypatch.setattr(ChatTokenizer, "apply_chat_template", recorded)
    assert run_cli(["generate", "tiny", "-p", "hi", "--json-schema", str(path), "--max-new-tokens", "8",
                    "--device", "cpu", "--json"]) == 0
    assert asked == [False]


@pytest.mark.parametrize("kind", ["object", "array"])
@pytest.mark.parametrize("extra", [False, True])
def test_an_optional_property_too_deep_for_the_levels_left_is_not_begun(kind, extra):
    """A value the automaton could begin but not close within MAX_DEPTH levels is refused where it would begin: its
    key (closed object) or the key's closing quote (open object). It was taken, and the answer nested on until no
    byte was allowed (run to max_tokens without closing)."""
    deep = _nested(MAX_DEPTH + 6, {"type": "integer"}, kind)
    compiled = compile_schema({"type": "object", "properties": {"x": deep, "y": {"type": "integer"},
                                                                "xy": {"type": "null"}}, "additionalProperties": extra})
    assert not compiled.start().feed_all(b'{"x"')  # (where "x" begins a key that fits too, at its closing quote)
    assert complete(compiled, b'{"y":1}') and complete(compiled, b'{"xy":null}')
    assert complete(compiled, b'{"y":1,"z":[]}') == extra


def test_a_recursive_tree_closes_at_the_depth_bound():
    """An optional child that is the tree itself: at the last level its key is refused (its value, an object, would
    be one level too many) and the object closes. It was taken, and `{` then refused: no byte allowed."""
    tree = {"type": "object", "properties": {"c": {"$ref": "#"}, "n": {"type": "integer"}},
            "additionalProperties": False}
    compiled = compile_schema(tree)
    assert not compiled.start().feed_all(b'{"c":' * MAX_DEPTH)
    state = compiled.start()
    assert state.feed_all(b'{"c":' * (MAX_DEPTH - 1) + b"{")
    assert not state.copy().feed_all(b'"c') and state.copy().feed_all(b'"n":1}') and state.copy().feed_all(b' }')
    assert complete(compiled, b'{"c":' * (MAX_DEPTH - 1) + b"{}" + b"}" * (MAX_DEPTH - 1))
    # the same tree whose children are an open object's additionalProperties: no key at the last level
    open_tree = {"type": "object", "additionalProperties": {"$ref": "#"}}
    state = compile_schema(open_tree).start()
    assert state.feed_all(b'{"c":' * (MAX_DEPTH - 1) + b'{')
    assert not state.copy().feed(ord('"')) and state.feed(ord("}"))


def test_an_open_object_whose_additional_values_nest_too_deep_keeps_its_named_keys():
    """additionalProperties too deep for the levels left: the object's own properties are still written (as a
    closed object's keys are), no other key is begun, and no comma leads to a key that could not be written."""
    compiled = compile_schema({"type": "object", "properties": {"y": {"type": "integer"}, "yy": {"type": "null"}},
                               "additionalProperties": _nested(MAX_DEPTH + 6, {}, "object")})
    assert complete(compiled, b'{"y":1,"yy":null}')
    assert not compiled.start().feed_all(b'{"z"')
    state = compiled.start()
    assert state.feed_all(b'{"yy":null,"y":2') and not state.copy().feed(ord(","))
    assert state.feed(ord("}")) and state.done
    nested_arrays = compile_schema({"anyOf": [{"type": "array", "items": {"$ref": "#"}},
                                              _nested(3, {"type": "integer"}, "object")]})
    state = nested_arrays.start()
    assert state.feed_all(b"[" * (MAX_DEPTH - 2))  # an item 3 objects deep cannot begin 62 deep
    assert not state.copy().feed(ord("{")) and state.feed_all(b"]" * (MAX_DEPTH - 2)) and state.done


@pytest.mark.parametrize("schema, dead, finished", [
    # an array whose items are arrays of two containers: the inner array could not hold its items
    ({"type": "array", "items": {"type": "array", "items": {"type": ["array", "object"]}, "minItems": 2}},
     b"[[", b"[]"),
    ({"type": "array", "items": {"const": {"q": [1]}}}, b"[{", b"[]"),  # a const's nesting counts
    # an open object whose other keys are the object again: its named key still goes in, another does not
    ({"type": "object", "properties": {"k": {}}, "additionalProperties": {"$ref": "#"}}, b'{"x":{"y"',
     b'{"x":{"k":1}}'),
])
def test_no_state_is_a_dead_end_at_a_small_depth_bound(monkeypatch, schema, dead, finished):
    """Shapes a fuzz found (random schemas, random walks, a search for a way to finish from each state) with the
    depth bound patched to 2: each prefix in `dead` was accepted and then allowed no way to finish."""
    import clover_local.generate.json_schema as json_schema

    monkeypatch.setattr(json_schema, "MAX_DEPTH", 2)
    compiled = compile_schema(schema)
    assert not compiled.start().feed_all(dead)
    assert complete(compiled, finished)
