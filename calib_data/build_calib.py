#!/usr/bin/env python3
"""Build calib_data/clover_calib.jsonl, the GPTQ calibration set for Clover-35B-A3B-Preview.

All content comes from the hand-written pools and generators in calib_data/pieces/. The build is
deterministic: running it again produces a byte-identical file.

    python calib_data/build_calib.py              # (re)write calib_data/clover_calib.jsonl
    python calib_data/build_calib.py --out X      # write somewhere else
    python calib_data/build_calib.py --check      # exit 1 if the committed file is out of date

Only the standard library is needed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pieces import (  # noqa: E402
    agentic,
    chat_en_a,
    chat_en_b,
    chat_en_c,
    chat_en_d,
    chat_zh_a,
    chat_zh_b,
    chat_zh_c,
    chat_zh_d,
    chat_zh_e,
    code_pool,
    long_gen,
    math_gen,
    math_hand,
    thinking_gen,
    thinking_hand,
    tools_gen,
)
from pieces.common import asst, conv, sample, sys_, user  # noqa: E402

SEED = "clover-calib-v1"
DEFAULT_OUT = HERE / "clover_calib.jsonl"

# category -> target share of the whole set (used for reporting and by the tests)
TARGET_SHARES = {
    "code": 0.22,
    "math": 0.15,
    "tool_call": 0.15,
    "chat_en": 0.15,
    "chat_zh": 0.15,
    "thinking": 0.10,
    "agentic": 0.08,
}
ROLES = {"system", "user", "assistant", "tool"}
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
CJK_RE = re.compile(r"[\u4e00-\u9fff]")

CHAT_SYSTEMS_EN = [
    "You are a helpful assistant.",
    "You are Clover, a friendly and knowledgeable assistant. Be clear and practical.",
    "You are a helpful assistant. Prefer concise answers with concrete examples.",
]
CHAT_SYSTEMS_ZH = [
    "你是一个乐于助人的智能助手。",
    "你是 Clover，一个知识丰富、表达清晰的中文助手。",
    "请用简洁、友好的中文回答用户的问题。",
]


def _rng(category: str) -> random.Random:
    # str seeds are hashed with SHA-512 by `random`, so this is stable across runs and machines
    return random.Random(f"{SEED}/{category}")


def build_chat(category, modules, systems, rng):
    out = []
    for mod in modules:
        for turns in mod.CONVERSATIONS:
            s = conv(category, turns)
            if s["messages"][0]["role"] != "system" and rng.random() < 0.3:
                s["messages"].insert(0, sys_(systems[rng.randrange(len(systems))]))
            out.append(s)
    return out


def build_math(rng):
    out = math_gen.build(rng)
    for e in math_hand.ENTRIES:
        out.append(sample("math", [user(e["q"]), asst(e["a"], e.get("think"))]))
    return out


def build_thinking(rng):
    out = thinking_gen.build(rng)
    for e in thinking_hand.ENTRIES:
        out.append(sample("thinking", [user(e["q"]), asst(e["a"], e["think"])]))
    return out


def build_all() -> dict[str, list[dict]]:
    cats = {
        "code": code_pool.build(_rng("code")),
        "math": build_math(_rng("math")),
        "tool_call": tools_gen.build(_rng("tool_call")),
        "chat_en": build_chat("chat_en", [chat_en_a, chat_en_b, chat_en_c, chat_en_d], CHAT_SYSTEMS_EN, _rng("chat_en")),
        "chat_zh": build_chat("chat_zh", [chat_zh_a, chat_zh_b, chat_zh_c, chat_zh_d, chat_zh_e], CHAT_SYSTEMS_ZH, _rng("chat_zh")),
        "thinking": build_thinking(_rng("thinking")),
        "agentic": agentic.build(_rng("agentic")),
    }
    for cat, items in long_gen.build(_rng("long")).items():
        cats[cat].extend(items)
    return cats


def validate(sample_: dict) -> None:
    msgs = sample_["messages"]
    assert msgs, "empty sample"
    for m in msgs:
        assert m["role"] in ROLES, m["role"]
        assert isinstance(m["content"], str) and m["content"].strip(), f"empty {m['role']} message"
        if "reasoning_content" in m:
            assert m["role"] == "assistant" and m["reasoning_content"].strip()
        # the system prompt's format description contains a placeholder <tool_call> template
        # (as in Qwen's own chat template); only calls emitted by the assistant must be real JSON
        for body in TOOL_CALL_RE.findall(m["content"]) if m["role"] == "assistant" else []:
            obj = json.loads(body)
            assert isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict), body
        for marker in ("{DIFF}", "{FIXED}", "{CODE}"):
            assert marker not in m["content"], f"unfilled placeholder {marker}"
    assert msgs[-1]["role"] == "assistant", "sample must end with an assistant turn"
    if sample_["category"] == "chat_zh":
        assert CJK_RE.search("".join(m["content"] for m in msgs)), "chat_zh sample without CJK text"


def assemble() -> list[dict]:
    """Assign ids and interleave categories so that every prefix of the file has roughly the
    target mix (quantizers often take only the first N samples)."""
    by_cat = build_all()
    keyed = []
    for cat_idx, (cat, items) in enumerate(by_cat.items()):
        _rng(cat + "/order").shuffle(items)
        n = len(items)
        for i, s in enumerate(items):
            validate(s)
            rec = {"id": f"{cat}-{i + 1:04d}", "category": cat, "messages": s["messages"]}
            keyed.append(((i + 0.5) / n, cat_idx, rec))
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [rec for _, _, rec in keyed]


def render(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def stats(records: list[dict]) -> str:
    counts = Counter(r["category"] for r in records)
    chars = Counter()
    for r in records:
        chars[r["category"]] += sum(len(m["content"]) + len(m.get("reasoning_content", "")) for m in r["messages"])
    total = len(records)
    lines = [f"{'category':<10} {'n':>4} {'share':>6} {'target':>6} {'chars':>9} {'~tokens':>8}"]
    for cat in TARGET_SHARES:
        lines.append(f"{cat:<10} {counts[cat]:>4} {counts[cat] / total:>6.1%} {TARGET_SHARES[cat]:>6.0%} {chars[cat]:>9,} {chars[cat] / 3.5:>8,.0f}")
    lines.append(f"{'total':<10} {total:>4} {'':>6} {'':>6} {sum(chars.values()):>9,} {sum(chars.values()) / 3.5:>8,.0f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output path (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="verify that --out is up to date instead of writing it")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    records = assemble()
    text = render(records)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date; run: python calib_data/build_calib.py", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"{args.out} is up to date ({len(records)} samples)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    if not args.quiet:
        print(f"wrote {len(records)} samples, {len(text.encode('utf-8')):,} bytes to {args.out}")
        print(stats(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
