"""JSON mode: an answer that is one JSON object, whatever the model would rather write.

Why a byte automaton: structure in JSON is all ASCII, and a byte-level BPE token can be any run of bytes (half a
multi-byte character included), so the check runs on bytes: bytes of 0x80 and above are taken inside strings only.
`JsonPrefix` says whether a byte string can still grow into one JSON object (RFC 8259 numbers, strings with their
escapes, literals, nesting), and when the object is complete.

How it meets block diffusion (the decoder's side, `BlockDiffusionDecoder`): a token is only checked against the
text before it, so a constrained block is revealed left to right — each pass reveals the leftmost masked position
(the likeliest token the automaton allows there) and, while the model's own choices stay allowed and reach the
threshold, the positions right after it in the same pass. Once the object is complete the next token is a stop
token, so the answer ends there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from clover_local.errors import CloverError

WHITESPACE = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrt')
LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
# whitespace between tokens is one space or tab, or a newline and up to MAX_INDENT spaces or tabs (pretty-printed
# JSON's indentation): a model that spins on whitespace would otherwise never finish
MAX_INDENT = 24
MAX_DEPTH = 64
# number states: which byte may come next, and whether the number could end here
NUMBER_NEXT = {
    "minus": (DIGITS, False), "zero": (frozenset(b".eE"), True), "int": (DIGITS | frozenset(b".eE"), True),
    "dot": (DIGITS, False), "frac": (DIGITS | frozenset(b"eE"), True), "exp": (DIGITS | frozenset(b"+-"), False),
    "exp_sign": (DIGITS, False), "exp_digits": (DIGITS, True),
}


class JsonPrefix:
    """Where a byte string stands in one JSON object. `feed` takes a byte and says whether the string can still be
    (the start of) one; a refused byte leaves the state unusable, so try bytes on a `copy`.

    Modes: "start" (only `{` after whitespace), "value" (any value), "first_item" (a value or `]`), "first_key" (a key
    or `}`), "key" (after a comma in an object), "colon", "string" (`in_key` says which), "escape", "unicode"
    (`left` hex digits to go), "number" (`number` its state), "literal" (`left` the bytes to go), "after" (a comma
    or the closer), "done"."""

    __slots__ = ("stack", "mode", "in_key", "left", "number", "spaces")

    def __init__(self) -> None:
        self.stack: list[int] = []  # the open brackets, ord("{") or ord("[")
        self.mode = "start"
        self.in_key = False
        self.left: bytes | int = b""
        self.number = ""
        self.spaces: int | None = None  # in a run of whitespace: how many more bytes of it may come

    def copy(self) -> "JsonPrefix":
        other = JsonPrefix.__new__(JsonPrefix)
        other.stack, other.mode, other.in_key = list(self.stack), self.mode, self.in_key
        other.left, other.number, other.spaces = self.left, self.number, self.spaces
        return other

    @property
    def done(self) -> bool:
        return self.mode == "done"

    @property
    def final(self) -> bool:
        """Complete, and nothing may follow: the next token is the stop token."""
        return self.mode == "done"

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        mode = self.mode
        if mode == "string":
            return self._string(b)
        if mode == "number":
            allowed, may_end = NUMBER_NEXT[self.number]
            if b in allowed:
                self.number = number_step(self.number, b)
                return True
            if not may_end:
                return False
            self.mode = "after"  # the byte ends the number and belongs to what follows it
            return self._after(b)
        if mode == "literal":
            assert isinstance(self.left, bytes)
            if b != self.left[0]:
                return False
            self.left = self.left[1:]
            if not self.left:
                self.mode = "after"
            return True
        if mode == "escape":
            if b == ord("u"):
                self.mode, self.left = "unicode", 4
            elif b in ESCAPES:
                self.mode = "string"
            else:
                return False
            return True
        if mode == "unicode":
            assert isinstance(self.left, int)
            if b not in HEX:
                return False
            self.left -= 1
            if not self.left:
                self.mode = "string"
            return True
        if b in WHITESPACE:
            return mode != "done" and self._space(b)
        self.spaces = None
        if mode == "start":
            return b == ord("{") and self._open(b)
        if mode in ("value", "first_item"):
            if mode == "first_item" and b == ord("]"):
                return self._close(b)
            return self._value(b)
        if mode in ("first_key", "key"):
            if mode == "first_key" and b == ord("}"):
                return self._close(b)
            if b != ord('"'):
                return False
            self.mode, self.in_key = "string", True
            return True
        if mode == "colon":
            if b != ord(":"):
                return False
            self.mode = "value"
            return True
        if mode == "after":
            return self._after(b)
        return False  # done: nothing may follow the object

    def _space(self, b: int) -> bool:
        if self.spaces is None:  # a run starts
            if b == ord("\r"):
                return False
            self.spaces = MAX_INDENT if b == ord("\n") else 0
            return True
        if b in (ord("\n"), ord("\r")) or not self.spaces:
            return False
        self.spaces -= 1
        return True

    def _string(self, b: int) -> bool:
        if b == ord('"'):
            self.mode, self.in_key = ("colon" if self.in_key else "after"), False
            return True
        if b == ord("\\"):
            self.mode = "escape"
            return True
        return b >= 0x20  # control characters must be escaped; bytes >= 0x80 are parts of UTF-8 characters

    def _value(self, b: int) -> bool:
        if b in (ord("{"), ord("[")):
            return self._open(b)
        if b == ord('"'):
            self.mode, self.in_key = "string", False
            return True
        if b == ord("-"):
            self.mode, self.number = "number", "minus"
            return True
        if b in DIGITS:
            self.mode, self.number = "number", "zero" if b == ord("0") else "int"
            return True
        if b in LITERALS:
            self.mode, self.left = "literal", LITERALS[b]
            return True
        return False

    def _open(self, b: int) -> bool:
        if len(self.stack) >= MAX_DEPTH:
            return False
        self.stack.append(b)
        self.mode = "first_key" if b == ord("{") else "first_item"
        return True

    def _close(self, b: int) -> bool:
        if not self.stack or self.stack[-1] != (ord("{") if b == ord("}") else ord("[")):
            return False
        self.stack.pop()
        self.mode = "after" if self.stack else "done"
        return True

    def _after(self, b: int) -> bool:
        if b in WHITESPACE:
            return self._space(b)
        self.spaces = None
        if b in (ord("}"), ord("]")):
            return self._close(b)
        if b == ord(",") and self.stack:
            self.mode = "key" if self.stack[-1] == ord("{") else "value"
            return True
        return False


def number_step(state: str, b: int) -> str:
    if b in (ord("e"), ord("E")):
        return "exp"
    if b == ord("."):
        return "dot"
    if b in (ord("+"), ord("-")):
        return "exp_sign"
    # a digit
    return {"minus": "zero" if b == ord("0") else "int", "int": "int", "dot": "frac", "frac": "frac",
            "exp": "exp_digits", "exp_sign": "exp_digits", "exp_digits": "exp_digits"}[state]


class PrefixState(Protocol):
    """A byte automaton's state, as the constraint drives it: `feed` a byte (False: refused, the state is then
    unusable, so try bytes on a `copy`); `done` once the bytes so far are a complete answer (the stop token may
    come); `final` once nothing but the stop token may come. `JsonPrefix` here, `SchemaPrefix` (json_schema.py)."""

    @property
    def done(self) -> bool: ...

    @property
    def final(self) -> bool: ...

    def feed(self, b: int) -> bool: ...

    def feed_all(self, data: bytes) -> bool: ...

    def copy(self) -> "PrefixState": ...


class Grammar(Protocol):
    """What a constrained answer is held to: a compiled JSON schema (json_schema.Schema), or serve's forced tool
    calls (serve/xml_calls.XmlCalls); `start` gives the state before the answer's first byte."""

    def start(self) -> PrefixState: ...


class EitherPrefix:
    """Where a byte string stands in one of several grammars at once: each grammar's own state, the ones that
    refused a byte dropped (`Either`)."""

    __slots__ = ("states",)

    def __init__(self, states: list[PrefixState]) -> None:
        self.states = states

    def copy(self) -> "EitherPrefix":
        return EitherPrefix([s.copy() for s in self.states])

    @property
    def done(self) -> bool:
        return any(s.done for s in self.states)

    @property
    def final(self) -> bool:
        return all(s.final for s in self.states)

    def feed_all(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        self.states = [s for s in self.states if s.feed(b)]
        return bool(self.states)


@dataclass
class Either:
    """An answer any one of `grammars` allows (serve: a response_format's JSON, or a call of the request's tools,
    the choice made by the answer's first bytes)."""

    grammars: list[Grammar]

    def start(self) -> EitherPrefix:
        return EitherPrefix([g.start() for g in self.grammars])


class TokenBytes(Protocol):
    """What JSON mode needs from a tokenizer: each token's bytes (None for a special token, never allowed inside
    the object), and the tokens grouped by first byte (for the search when the likeliest ones are all refused)."""

    def token_bytes(self, token_id: int) -> bytes | None: ...

    def ids_by_first_byte(self) -> dict[int, list[int]]: ...


# how many of a position's likeliest tokens are tried before the search goes by first byte
TOP_TRIES = 64


@dataclass
class ByteConstraint:
    """The decoder's handle on a byte automaton (`start`, one per answer): the answer is what the automaton accepts,
    then one of `stop_ids`. JSON mode (`JsonObjectConstraint`) and a JSON schema (json_schema.SchemaConstraint)
    differ only in their start state."""

    vocab: TokenBytes
    stop_ids: list[int]

    def __post_init__(self) -> None:
        if not self.stop_ids:
            raise CloverError("JSON mode needs a stop token to end the answer after the JSON; this model's "
                              "tokenizer names none")

    def start(self) -> PrefixState:
        raise NotImplementedError

    def advance(self, state: PrefixState, token_id: int) -> PrefixState | None:
        """The state after `token_id`, or None where the token may not come next."""
        if state.done and token_id in self.stop_ids:
            return state
        data = self.vocab.token_bytes(token_id)
        if not data or state.final:  # a special token (a stop token included), an empty one, or past the end
            return None
        nxt = state.copy()
        return nxt if nxt.feed_all(data) else None

    def likeliest_allowed(self, state: PrefixState, logits: torch.Tensor) -> tuple[int, PrefixState]:
        """The likeliest token `logits` [V] allows after `state`: its TOP_TRIES likeliest first, then every token
        whose first byte the state takes (and the stop tokens once the answer may end), likeliest first. Why by
        first byte: where the structure leaves a few choices (after a key only `:` or whitespace) the top tokens of
        a model that is not writing JSON may all be refused; the first byte narrows 248,320 tokens to those few
        before any is checked whole."""
        if state.final:
            stop = max(self.stop_ids, key=lambda i: float(logits[i]))
            return stop, state
        for token in logits.topk(min(TOP_TRIES, logits.shape[-1])).indices.tolist():
            nxt = self.advance(state, token)
            if nxt is not None:
                return token, nxt
        firsts = [b for b in range(256) if state.copy().feed(b)]
        groups = self.vocab.ids_by_first_byte()
        ids = [i for b in firsts for i in groups.get(b, ())] + (list(self.stop_ids) if state.done else [])
        if ids:
            index = torch.tensor(ids, device=logits.device)
            order = logits[index].argsort(descending=True).tolist()
            for k in order:
                nxt = self.advance(state, ids[k])
                if nxt is not None:
                    return ids[k], nxt
        raise CloverError("JSON mode found no token that continues the JSON (the tokenizer cannot write the "
                          "bytes it needs)")


class JsonObjectConstraint(ByteConstraint):
    """JSON mode: the answer is one JSON object, then one of `stop_ids`."""

    def start(self) -> JsonPrefix:
        return JsonPrefix()
