"""Assembles the `code` category from the hand-written pools."""

from __future__ import annotations

import difflib
import re

from . import code_debug, code_explain, code_gen, code_multi, code_write_data, code_write_py, code_write_sys, code_write_web, code_zh
from .common import asst, conv, d, sample, sys_, user

SYSTEMS = [
    "You are a helpful coding assistant.",
    "You are Clover, an AI assistant. Use markdown code blocks and keep explanations short.",
    "You are an expert software engineer. Prefer idiomatic, production-quality code and point out pitfalls.",
    "You are a patient programming tutor. Explain the reasoning behind the code, not just the code.",
    "You are a code reviewer at a fintech company. Correctness and clarity matter more than cleverness.",
]

FENCE = {"python": "python", "javascript": "js", "typescript": "tsx", "rust": "rust", "go": "go", "sql": "sql", "bash": "bash"}


def _unified(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        d(before).splitlines(keepends=True),
        d(after).splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(lines).rstrip("\n")


SYSTEMS_ZH = ["你是一个资深的软件工程师，回答要准确、简洁，并给出可运行的代码。", "你是一个耐心的编程老师，请用中文解释代码背后的原理。"]


def _maybe_system(rng, p=0.35, zh=False):
    if rng.random() < p:
        pool = SYSTEMS_ZH if zh else SYSTEMS
        return [sys_(pool[rng.randrange(len(pool))])]
    return []


def _single(rng, entry):
    msgs = _maybe_system(rng, zh=bool(re.search(r"[\u4e00-\u9fff]", entry["ask"])))
    msgs.append(user(entry["ask"]))
    msgs.append(asst(entry["answer"], entry.get("think")))
    return sample("code", msgs)


def _debug(rng, entry):
    fence = FENCE[entry["lang"]]
    code_block = f"```{fence}\n{d(entry['buggy'])}\n```"
    ask = d(entry["ask"]).replace("{CODE}", code_block)
    diff = "```diff\n" + _unified(entry["path"], entry["buggy"], entry["fixed"]) + "\n```"
    fixed = f"```{fence}\n{d(entry['fixed'])}\n```"
    answer = d(entry["answer"]).replace("{DIFF}", diff).replace("{FIXED}", fixed)
    msgs = _maybe_system(rng)
    msgs.append(user(ask))
    msgs.append(asst(answer, entry.get("think")))
    return sample("code", msgs)


def _conversation(turns):
    return conv("code", turns)


def build(rng) -> list[dict]:
    out = []
    for pool in (code_write_py, code_write_web, code_write_sys, code_write_data, code_explain, code_zh):
        for entry in pool.ENTRIES:
            out.append(_single(rng, entry))
    for entry in code_debug.ENTRIES:
        out.append(_debug(rng, entry))
    for turns in code_multi.CONVERSATIONS:
        out.append(_conversation(turns))
    out.extend(code_gen.build(rng))
    return out
