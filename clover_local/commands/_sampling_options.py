"""Sampling flags shared by `chat` and `generate`: their checks and the repetition penalties."""

from __future__ import annotations

from typing import Any

import typer

from clover_local.errors import CloverError
from clover_local.generate.ranges import DECODE_RANGES, PENALTY_RANGES, Penalties, Range


def check_range(name: str, value: float, r: Range) -> None:
    if not r.allows(value):
        raise CloverError(f"--{name.replace('_', '-')} must be in {r}, got {value:g}")


def presence_penalty_option() -> Any:
    return typer.Option(0.0, "--presence-penalty",
                        help="Subtracted from the logit of each token the answer already holds (-2 to 2; 0: off).")


def frequency_penalty_option() -> Any:
    return typer.Option(0.0, "--frequency-penalty",
                        help="Subtracted once per time the answer holds a token (-2 to 2; 0: off).")


def repetition_penalty_option() -> Any:
    return typer.Option(1.0, "--repetition-penalty",
                        help="Divides the positive logits of tokens in the prompt or answer (above 1 repeats "
                             "less; 1: off).")


def top_k_option() -> Any:
    return typer.Option(0, "--top-k", help="When sampling, draw only among the k likeliest tokens (Qwen's "
                        "cards recommend 20 for the family; 0: all).")


def min_p_option() -> Any:
    return typer.Option(0.0, "--min-p",
                        help="When sampling, drop tokens less than this times as likely as the likeliest (0: off).")


def reveal_factor_option(serve: bool = False) -> Any:
    whom = ("instead of the model's threshold, for requests that send neither 'threshold' nor 'reveal_factor'"
            if serve else "instead of --threshold")
    return typer.Option(0.0, "--reveal-factor", metavar="F",
                        help=f"Reveal by Fast-dLLM's factor rule {whom}: each pass the n most confident positions, "
                             "for the largest n with (n + 1) x (1 - the n-th's confidence) under F (on the tiny model "
                             "1 reveals 13-18% more tokens a pass than threshold 0.9, within a point of its accuracy; "
                             "0: the threshold rule).")


def check_decoding(temperature: float, top_p: float, top_k: int, min_p: float, threshold: float | None,
                   reveal_factor: float) -> None:
    """`chat`'s and `generate`'s decoding flags, each against its range in DECODE_RANGES (as /set and the request
    fields check them), and the two reveal rules not given together."""
    given = {"threshold": threshold, "reveal_factor": reveal_factor, "temperature": temperature, "top_p": top_p,
             "min_p": min_p}
    for name, r in DECODE_RANGES.items():
        if given[name] is not None:
            check_range(name, given[name], r)
    if top_k < 0:
        raise CloverError(f"--top-k must be 0 (all tokens) or more, got {top_k}")
    if reveal_factor and threshold is not None:
        raise CloverError("--threshold and --reveal-factor are two rules for what a pass reveals: give one")


def think_budget_option() -> Any:
    return typer.Option(None, "--think-budget", metavar="TOKENS",
                        help="The most tokens the thinking may take: where it runs out, clover-local writes the "
                             "thinking's end itself (one sentence, then </think>) and the answer follows, so a long "
                             "thought cannot eat the whole --max-tokens. Default: no limit.")


def check_think_budget(tokens: int | None) -> None:
    if tokens is not None and tokens < 1:
        raise CloverError(f"--think-budget must be at least 1 token, got {tokens}")


def serve_think_budget(value: str | None) -> tuple[int | None, bool]:
    """serve's --think-budget TOKENS|off as (a cap for every answer, whether the answer keeps its room): absent, no
    cap but the room (thinking.answer_room_budget); a number, that cap too; off, neither."""
    if value is None:
        return None, True
    if value.strip().lower() == "off":
        return None, False
    try:
        tokens = int(value)
    except ValueError:
        raise CloverError(f"--think-budget takes a number of tokens or off, got {value!r}") from None
    check_think_budget(tokens)
    return tokens, True


def penalties(presence_penalty: float, frequency_penalty: float, repetition_penalty: float) -> Penalties:
    """The three flags checked (one line naming the flag and its range when out of it)."""
    given = {"presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty,
             "repetition_penalty": repetition_penalty}
    for name, r in PENALTY_RANGES.items():
        check_range(name, given[name], r)
    return Penalties(**{name.removesuffix("_penalty"): value for name, value in given.items()})
