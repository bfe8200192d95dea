"""Checks for the bundled GPTQ calibration set, calib_data/clover_calib.jsonl (see calib_data/README.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALIB_DIR = ROOT / "calib_data"
CALIB = CALIB_DIR / "clover_calib.jsonl"
BUILDER = CALIB_DIR / "build_calib.py"

TARGET_SHARES = {
    "code": 0.22,
    "math": 0.15,
    "tool_call": 0.15,
    "chat_en": 0.15,
    "chat_zh": 0.15,
    "thinking": 0.10,
    "agentic": 0.08,
}
SHARE_TOLERANCE = 0.03
ROLES = {"system", "user", "assistant", "tool"}
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
CJK_RE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def raw_text() -> str:
    assert CALIB.is_file(), f"missing {CALIB}"
    return CALIB.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def records(raw_text) -> list[dict]:
    out = []
    for n, line in enumerate(raw_text.splitlines(), 1):
        assert line.strip(), f"blank line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:  # pragma: no cover - reported as a failure
            pytest.fail(f"line {n} is not valid JSON: {exc}")
        assert isinstance(rec, dict), f"line {n} is not a JSON object"
        out.append(rec)
    return out


def _assistant_calls(msg: dict) -> list[dict]:
    if msg["role"] != "assistant":
        return []
    return [json.loads(body) for body in TOOL_CALL_RE.findall(msg["content"])]


def test_file_format(raw_text):
    assert not raw_text.startswith("\ufeff"), "file must not start with a BOM"
    assert raw_text.endswith("\n"), "file must end with a newline"
    assert "\r" not in raw_text, "use LF line endings"
    assert len(raw_text.encode("utf-8")) < 3 * 1024 * 1024, "keep the calibration file under ~3 MB"


def test_schema(records):
    for rec in records:
        assert set(rec) == {"id", "category", "messages"}, rec.get("id")
        assert isinstance(rec["id"], str) and rec["id"], rec
        assert rec["category"] in TARGET_SHARES, rec["category"]
        msgs = rec["messages"]
        assert isinstance(msgs, list) and len(msgs) >= 2, rec["id"]
        for m in msgs:
            assert isinstance(m, dict), rec["id"]
            assert m.get("role") in ROLES, (rec["id"], m.get("role"))
            assert set(m) <= {"role", "content", "reasoning_content"}, (rec["id"], set(m))
            assert isinstance(m["content"], str) and m["content"].strip(), (rec["id"], m["role"])
            if "reasoning_content" in m:
                assert m["role"] == "assistant", rec["id"]
                assert isinstance(m["reasoning_content"], str) and m["reasoning_content"].strip(), rec["id"]
        roles = [m["role"] for m in msgs]
        assert "system" not in roles[1:], f"{rec['id']}: system message only allowed first"
        assert "user" in roles, rec["id"]
        assert roles[-1] == "assistant", f"{rec['id']}: must end with an assistant turn"


def test_ids_unique(records):
    ids = [r["id"] for r in records]
    dupes = [i for i, n in Counter(ids).items() if n > 1]
    assert not dupes, dupes


def test_enough_samples(records):
    assert len(records) >= 400


def test_category_shares(records):
    counts = Counter(r["category"] for r in records)
    total = len(records)
    assert set(counts) == set(TARGET_SHARES), counts
    for cat, target in TARGET_SHARES.items():
        share = counts[cat] / total
        assert abs(share - target) <= SHARE_TOLERANCE, f"{cat}: {share:.1%} vs target {target:.0%}"


def test_categories_interleaved(records):
    """Quantizers often use only the first N samples, so a prefix should already be mixed."""
    head = Counter(r["category"] for r in records[:60])
    assert set(head) == set(TARGET_SHARES), head


def test_tool_calls_are_valid_json(records):
    n_calls = 0
    for rec in records:
        for m in rec["messages"]:
            for body in TOOL_CALL_RE.findall(m["content"]) if m["role"] == "assistant" else []:
                obj = json.loads(body)  # raises on invalid JSON
                assert isinstance(obj, dict), rec["id"]
                assert isinstance(obj.get("name"), str) and obj["name"], rec["id"]
                assert isinstance(obj.get("arguments"), dict), rec["id"]
                n_calls += 1
    assert n_calls > 0


def test_tool_results_follow_tool_calls(records):
    """Every `tool` message answers a call made by the preceding assistant turn, one result per call."""
    for rec in records:
        pending = 0
        for m in rec["messages"]:
            if m["role"] == "assistant":
                assert pending == 0, f"{rec['id']}: assistant spoke before all tool results arrived"
                pending = len(_assistant_calls(m))
            elif m["role"] == "tool":
                assert pending > 0, f"{rec['id']}: tool message without a pending call"
                pending -= 1
            else:
                assert pending == 0, f"{rec['id']}: {m['role']} message while tool results are pending"
        assert pending == 0, rec["id"]


def test_tool_call_and_agentic_samples_use_tools(records):
    for rec in records:
        if rec["category"] not in ("tool_call", "agentic"):
            continue
        msgs = rec["messages"]
        assert msgs[0]["role"] == "system" and "<tools>" in msgs[0]["content"], rec["id"]
        tools = json.loads("[" + ",".join(msgs[0]["content"].split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()) + "]")
        names = {t["function"]["name"] for t in tools}
        calls = [c for m in msgs for c in _assistant_calls(m)]
        assert calls, f"{rec['id']}: no tool call"
        assert any(m["role"] == "tool" for m in msgs), rec["id"]
        for c in calls:
            assert c["name"] in names, f"{rec['id']}: call to undeclared tool {c['name']}"
    agentic_steps = sorted(sum(m["role"] == "tool" for m in r["messages"]) for r in records if r["category"] == "agentic")
    assert agentic_steps[len(agentic_steps) // 2] >= 3, "agentic sessions should usually involve several tool steps"


def test_chinese_samples_contain_cjk(records):
    for rec in records:
        if rec["category"] != "chat_zh":
            continue
        for role in ("user", "assistant"):
            text = "".join(m["content"] for m in rec["messages"] if m["role"] == role)
            assert CJK_RE.search(text), f"{rec['id']}: {role} turns have no Chinese text"
            minimum = 5 if role == "user" else 30
            assert len(CJK_RE.findall(text)) >= minimum, f"{rec['id']}: too little Chinese in {role} turns"


def test_thinking_samples_have_reasoning(records):
    langs = Counter()
    for rec in records:
        if rec["category"] != "thinking":
            continue
        for m in rec["messages"]:
            if m["role"] == "assistant":
                assert m.get("reasoning_content", "").strip(), f"{rec['id']}: thinking sample without reasoning_content"
        langs["zh" if CJK_RE.search(rec["messages"][-1]["content"]) else "en"] += 1
    assert langs["en"] and langs["zh"], langs


def test_reasoning_appears_in_other_categories_too(records):
    with_reasoning = Counter(
        r["category"] for r in records if any("reasoning_content" in m for m in r["messages"])
    )
    for cat in ("math", "code", "tool_call", "agentic"):
        assert with_reasoning[cat] > 0, cat


def test_lengths_are_varied(records):
    sizes = sorted(sum(len(m["content"]) + len(m.get("reasoning_content", "")) for m in r["messages"]) for r in records)
    assert sizes[0] > 150, "no near-empty samples"
    assert sizes[len(sizes) // 2] > 1000, "median sample is too short"
    assert sizes[-1] > 8000, "a few long samples are needed for long-context calibration"
    assert sum(s > 6000 for s in sizes) >= 5


@pytest.mark.skipif(not BUILDER.exists(), reason="no generator script")
@pytest.mark.parametrize("hashseed", ["0", "12345"])
def test_regeneration_is_byte_identical(tmp_path, raw_text, hashseed):
    out = tmp_path / "regen.jsonl"
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    proc = subprocess.run(
        [sys.executable, str(BUILDER), "--out", str(out), "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == raw_text, "regenerated file differs; run python calib_data/build_calib.py"


# --- mutation-testing additions: quantize.calibration's split, sizing and masking ---------------------------


class _IdTokenizer:
    """Text "sample <i>" → 40 copies of token 100 + i, so every token says which sample it came from."""

    def encode(self, text: str) -> list[int]:
        return [100 + int(text.split()[1])] * 40

    def apply_chat_template(self, messages, add_generation_prompt=False):  # pragma: no cover - .txt input only
        raise AssertionError("not used")


def _calib_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"calib{n}.txt"
    path.write_text("\n\n".join(f"sample {i}" for i in range(n)), encoding="utf-8")
    return path


def _sources(ids) -> set[int]:
    return {int(t) - 100 for t in ids.unique() if int(t) >= 100}


def test_holdout_split_is_every_tenth_sample_and_disjoint(tmp_path):
    from quantize.calibration import build_calibration

    path = _calib_file(tmp_path, 25)
    tok = _IdTokenizer()
    calib = build_calibration(path, tok, samples=100, seq_len=32, block_size=8, mask_id=1, seed=3)
    held = build_calibration(path, tok, samples=100, seq_len=32, block_size=8, mask_id=1, seed=3, holdout=True)
    assert _sources(held.clean) == {9, 19}
    assert _sources(calib.clean) == set(range(25)) - {9, 19}
    assert (calib.n_texts, held.n_texts) == (23, 2)
    # exactly ten samples: the split already applies (sample 9 is held out); under ten, both use everything
    ten = _calib_file(tmp_path, 10)
    assert _sources(build_calibration(ten, tok, 100, 32, 8, 1, 0).clean) == set(range(9))
    assert _sources(build_calibration(ten, tok, 100, 32, 8, 1, 0, holdout=True).clean) == {9}
    nine = _calib_file(tmp_path, 9)
    for holdout in (False, True):
        assert _sources(build_calibration(nine, tok, 100, 32, 8, 1, 0, holdout=holdout).clean) == set(range(9))


def test_calibration_sizes_and_masks_the_noisy_copy(tmp_path):
    import torch

    from quantize.calibration import build_calibration

    path = _calib_file(tmp_path, 25)  # 23 calibration samples x 40 tokens = 920 tokens
    tok = _IdTokenizer()
    few = build_calibration(path, tok, samples=3, seq_len=32, block_size=8, mask_id=1, seed=5)
    assert tuple(few.clean.shape) == (3, 32) and few.tokens == 96
    many = build_calibration(path, tok, samples=1000, seq_len=32, block_size=8, mask_id=1, seed=5)
    assert tuple(many.clean.shape) == (920 // 32, 32) and many.tokens == 920 // 32 * 32
    for c in (few, many):
        masked = c.noisy == 1
        assert torch.equal(c.noisy[~masked], c.clean[~masked])  # unmasked positions keep their tokens
        assert 0 < float(masked.float().mean()) < 1
    again = build_calibration(path, tok, samples=1000, seq_len=32, block_size=8, mask_id=1, seed=5)
    assert torch.equal(again.clean, many.clean) and torch.equal(again.noisy, many.noisy)
    other = build_calibration(path, tok, samples=1000, seq_len=32, block_size=8, mask_id=1, seed=6)
    assert not torch.equal(other.clean, many.clean)  # the seed shuffles the sample order
