"""The decoding settings' values and ranges, written once for the flags, chat's /set and the request fields.

Apart from `sampling.py` (which re-exports them) so that the command line can check its flags without importing
torch: `clover-local --help`, `download` or `cache` would otherwise wait 1.5 s for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Penalties:
    """Repetition control, as OpenAI's API and vLLM define it: `presence` is subtracted from the logit of every
    token the answer already holds, `frequency` once per time it holds it; `repetition` (> 0; 1 is off) divides a
    positive logit and multiplies a negative one of every token in the prompt or the answer. A diffusion block
    reveals several tokens a pass: a pass sees the tokens revealed before it, not those revealed beside it."""

    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0

    @property
    def active(self) -> bool:
        return self.presence != 0.0 or self.frequency != 0.0 or self.repetition != 1.0


@dataclass(frozen=True)
class Range:
    """The values a setting takes, written once for its flag, chat's /set and its request field."""

    low: float
    high: float
    low_open: bool = False  # `low` itself refused
    off: float | None = None  # the value that changes nothing (None: no such value)

    def allows(self, x: float) -> bool:
        return (self.low < x if self.low_open else self.low <= x) and x <= self.high

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


# OpenAI's range for presence/frequency; repetition (vLLM's) must stay positive. The names are the request fields,
# the /set names and (with dashes) the flags.
PENALTY_RANGES = {"presence_penalty": Range(-2.0, 2.0, False, 0.0),
                  "frequency_penalty": Range(-2.0, 2.0, False, 0.0),
                  "repetition_penalty": Range(0.0, 10.0, True, 1.0)}

# The decoding settings' ranges, named as PENALTY_RANGES are. A threshold of 0 would reveal a whole block in its
# first pass: refused. A top_p of 0 keeps the top token (OpenAI's range and transformers' take it; `choose` keeps the
# likeliest token whatever the cut). The temperature's 10 is the command line's and /set's; the wire formats keep
# OpenAI's 2.
DECODE_RANGES = {"threshold": Range(0.0, 1.0, True),
                 "reveal_factor": Range(0.0, 100.0, False, 0.0),  # (past 33 a block is one pass)
                 "temperature": Range(0.0, 10.0, False, 0.0),
                 "top_p": Range(0.0, 1.0, False, 1.0),
                 "min_p": Range(0.0, 1.0, False, 0.0)}
