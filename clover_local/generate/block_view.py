"""The block being denoised, as front ends show it: folded from the decoder's PassDone events, each generated
position's token (or still masked), a short label for it, and the confidence it was revealed with. chat draws it
as a row of Rich cells (chat/display.py); serve streams it to its chat page on request."""

from __future__ import annotations

import re
from collections.abc import Callable

from clover_local.generate.events import PassDone

_SPECIAL = re.compile(r"<\|([^|]+)\|>")
_NAMED = {"<think>": "think", "</think>": "/think", "<|im_end|>": "EOS", "<|endoftext|>": "EOS"}


def token_label(text: str) -> str:
    """A token's text made visible in one short cell."""
    if text == "":
        return "∅"
    if text in _NAMED:
        return _NAMED[text]
    special = _SPECIAL.fullmatch(text)
    if special:
        return special.group(1)
    if text.strip() == "":
        return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")
    return text.strip().replace("\n", "↵").replace("\t", "⇥")


class BlockView:
    """The block being denoised: one entry per position, the leading `fixed` ones prompt text rather than
    generated. A token's label is decoded once, when it is first shown, and again where the position's token
    changes."""

    def __init__(self, decode_token: Callable[[int], str], block_size: int) -> None:
        self.decode_token = decode_token
        self.block_size = block_size
        self.reset(0)

    def reset(self, block: int) -> None:
        self.block = block
        self.passes = 0
        self.fixed = 0
        self.tokens: list[int | None] = [None] * self.block_size
        self.conf: dict[int, float] = {}
        self.fresh: set[int] = set()
        self.labels: dict[int, str] = {}

    def update(self, ev: PassDone) -> None:
        if ev.block != self.block:
            self.reset(ev.block)
        self.passes = ev.pass_index + 1
        self.fixed = ev.fixed
        for pos, (was, now) in enumerate(zip(self.tokens, ev.tokens)):
            if was != now:  # (masked again, then another token: a grammar took back what it did not hold)
                self.labels.pop(pos, None)
        self.tokens = list(ev.tokens)
        self.fresh = {r.position for r in ev.revealed}
        for r in ev.revealed:
            self.conf[r.position] = r.confidence

    @property
    def revealed(self) -> int:
        return sum(t is not None for t in self.tokens[self.fixed:])

    @property
    def size(self) -> int:
        return len(self.tokens) - self.fixed

    def label(self, pos: int, token: int) -> str:
        if pos not in self.labels:
            self.labels[pos] = token_label(self.decode_token(token))
        return self.labels[pos]

    def show(self, view: dict) -> None:
        """The block as a server sent it (`to_dict`'s form, chat/remote.py): its labels in place of token ids."""
        if view["block"] != self.block:
            self.reset(view["block"])
        cells = view["cells"]
        self.passes, self.fixed = view["pass"], 0
        self.tokens = [None if c is None else pos for pos, c in enumerate(cells)]
        shown = [(pos, c) for pos, c in enumerate(cells) if c is not None]
        self.labels = {pos: c["text"] for pos, c in shown}
        self.conf = {pos: c["confidence"] for pos, c in shown}
        self.fresh = {pos for pos, c in shown if c["new"]}

    def to_dict(self) -> dict:
        """The block for a client to draw: its generated positions, each null while masked, else its label, the
        confidence it was revealed with and whether this pass revealed it."""
        cells = [None if tok is None else {"text": self.label(pos, tok), "new": pos in self.fresh,
                                           "confidence": round(self.conf.get(pos, 1.0), 3)}
                 for pos, tok in enumerate(self.tokens) if pos >= self.fixed]
        return {"block": self.block, "pass": self.passes, "cells": cells}
