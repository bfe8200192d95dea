"""What JSON mode's, a JSON schema's and a forced tool call's (serve/xml_calls.py) token search costs at the 35B
vocabulary size (248,320 tokens): `python docs/json_mode_cost.py` (figures in BENCHMARKS.md).

The vocabulary is synthetic (random byte strings of 1-8 bytes; the real tokenizer cannot be downloaded here), so
this times the automata and the search, not the tokenizer's own lookups (`ChatTokenizer.token_bytes`)."""

from __future__ import annotations

import random
import time

import torch

from clover_local.generate.json_mode import ByteConstraint, JsonObjectConstraint
from clover_local.generate.json_schema import SchemaConstraint, compile_schema
from clover_local.serve.xml_calls import XmlCalls

VOCAB = 248_320
STOP = VOCAB - 1
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
                         "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
# a forced call in the Qwen3.5 XML form: the same parameters as a tool's
TOOL = {"type": "function", "function": {"name": "save_person", "parameters": SCHEMA}}


class SyntheticVocab:
    """TokenBytes over random byte strings (printable ASCII and high bytes)."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        alphabet = [bytes([b]) for b in range(32, 127)] + [bytes([b]) for b in range(128, 256)]
        self.tokens = [b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(VOCAB)]
        self._groups: dict[int, list[int]] | None = None

    def token_bytes(self, token_id: int) -> bytes | None:
        return self.tokens[token_id]

    def ids_by_first_byte(self) -> dict[int, list[int]]:
        if self._groups is None:
            self._groups = {}
            for i, t in enumerate(self.tokens):
                self._groups.setdefault(t[0], []).append(i)
        return self._groups


def search_ms(constraint: ByteConstraint, prefix: bytes, runs: int = 20) -> tuple[float, int]:
    """(ms per `likeliest_allowed` after `prefix` with random logits, how many of the top 64 the state allows)."""
    state = constraint.start()
    assert state.feed_all(prefix), prefix
    logits = torch.randn(VOCAB)
    for _ in range(2):
        constraint.likeliest_allowed(state, logits)
    t = time.perf_counter()
    for _ in range(runs):
        constraint.likeliest_allowed(state, logits)
    allowed = sum(constraint.advance(state, i) is not None for i in logits.topk(64).indices.tolist())
    return (time.perf_counter() - t) / runs * 1e3, allowed


def check_us(constraint: ByteConstraint, prefix: bytes, runs: int = 10_000) -> float:
    """µs per `advance` (one token checked: the common case, the model's own choice) after `prefix`."""
    state = constraint.start()
    assert state.feed_all(prefix), prefix
    t = time.perf_counter()
    for i in range(runs):
        constraint.advance(state, i)
    return (time.perf_counter() - t) / runs * 1e6


def main() -> None:
    torch.manual_seed(0)
    vocab = SyntheticVocab()
    t = time.perf_counter()
    vocab.ids_by_first_byte()
    print(f"group build: {time.perf_counter() - t:.3f} s")
    json_mode = JsonObjectConstraint(vocab, [STOP])
    for name, prefix in [("inside a string", b'{"a": "x'), ("after a key (only : or whitespace)", b'{"a"'),
                         ("after a value (, or })", b'{"a": 1'), ("start (only { or whitespace)", b"")]:
        ms, allowed = search_ms(json_mode, prefix)
        print(f"{name}: {ms:.1f} ms per refused choice ({allowed}/64 of the top tokens allowed)")
    us = check_us(json_mode, b'{"a": "x')
    print(f"advance (one token check): {us:.1f} us")
    schema = SchemaConstraint(vocab, [STOP], compile_schema(SCHEMA))
    for name, prefix in [("inside a string", b'{"name": "Ad'), ("a key being written", b'{"na'),
                         ("after a key", b'{"name"'), ("an enum value", b'{"name": "A", "age": 3, "tags": ["r')]:
        print(f"schema: {name}: {search_ms(schema, prefix)[0]:.1f} ms per refused choice")
    us = check_us(schema, b'{"name": "Ad')
    print(f"schema advance (one token check, inside a string): {us:.1f} us")
    call = SchemaConstraint(vocab, [STOP], XmlCalls([TOOL], parallel=False))
    head = b"<tool_call>\n<function=save_person>\n"
    for name, prefix in [("the opening tag", b"<tool_c"), ("a key being written", head + b"<parameter=na"),
                         ("after a value (<parameter= or </function>)", head + b"<parameter=age>\n3\n</parameter>\n"),
                         ("inside a text value", head + b"<parameter=name>\nAd"),
                         ("inside a JSON value (an integer)", head + b"<parameter=age>\n4")]:
        print(f"forced call (XML): {name}: {search_ms(call, prefix)[0]:.1f} ms per refused choice")
    us = check_us(call, head + b"<parameter=name>\nAd")
    print(f"forced call advance (one token check, inside a text value): {us:.1f} us")


if __name__ == "__main__":
    main()
