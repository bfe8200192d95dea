"""The tiny model's synthetic corpus: deterministic, train/held-out disjoint, answers right and checkable."""

from __future__ import annotations

import random
import re

import pytest

from clover_local.tiny import corpus as C
from clover_local.tiny.corpus import Example, check_answer, make_heldout, make_train


def _expected(ex: Example) -> str:
    """Recompute the answer from the prompt alone, independently of the generator."""
    p = ex.prompt
    if ex.task == "add":
        a, b = re.fullmatch(r"add (\d+)\+(\d+)", p).groups()
        return str(int(a) + int(b))
    if ex.task == "reverse":
        return " ".join(reversed(p.split()[1:]))
    if ex.task == "sort_letters":
        return " ".join(sorted(p.split()[1:]))
    if ex.task == "sort_numbers":
        return " ".join(str(n) for n in sorted(int(x) for x in p.split()[1:]))
    if ex.task == "lookup":
        key, pairs = re.fullmatch(r"lookup (\w) in (.*)", p).groups()
        return dict(kv.split("=") for kv in pairs.split())[key]
    if ex.task == "count_letter":
        letter, letters = re.fullmatch(r"count (\w) in (.*)", p).groups()
        return str(letters.split().count(letter))
    if ex.task == "count_items":
        return str(len(p.split()) - 2)
    raise AssertionError(ex.task)


def test_train_is_deterministic_in_seed() -> None:
    assert make_train(300, 1) == make_train(300, 1)
    assert make_train(300, 1) != make_train(300, 2)
    assert make_train(50, 1) == make_train(300, 1)[:50]  # a prefix: n does not change the stream


def test_multi_turn_adds_history_without_changing_the_examples():
    plain, chats = make_train(400, 1), make_train(400, 1, multi_turn=0.3)
    assert [(e.task, e.prompt, e.answer) for e in plain] == [(e.task, e.prompt, e.answer) for e in chats]
    with_history = [e for e in chats if e.history]
    assert 80 < len(with_history) < 160 and not any(e.history for e in plain)
    for e in with_history:  # the earlier exchange is a train-side example with its right answer
        (user, answer), = e.history
        assert not C.is_heldout_prompt(user) or not user.startswith(("add ", "reverse ", "sort ", "lookup ", "count "))
    held, asked = make_heldout(70, 3), make_heldout(70, 3, history=True)
    assert [e.prompt for e in held] == [e.prompt for e in asked] and all(len(e.history) == 1 for e in asked)


def test_heldout_is_deterministic_in_seed() -> None:
    assert make_heldout(70, 3) == make_heldout(70, 3)
    assert make_heldout(70, 3) != make_heldout(70, 4)


def test_heldout_never_in_train() -> None:
    train = [e for seed in (0, 1) for e in make_train(3000, seed)]
    train_prompts = {e.prompt for e in train}
    for seed in (0, 1, 7):
        held = make_heldout(300, seed)
        assert len({e.prompt for e in held}) == len(held)  # distinct
        assert not train_prompts & {e.prompt for e in held}
        assert all(C.is_heldout_prompt(e.prompt) for e in held)
    assert not any(C.is_heldout_prompt(e.prompt) for e in train if e.task in C.CHECKED_TASKS)


def test_heldout_holds_checked_tasks_in_turn() -> None:
    held = make_heldout(70, 0)
    assert {e.task for e in held} == set(C.CHECKED_TASKS)
    counts = {t: sum(e.task == t for e in held) for t in C.CHECKED_TASKS}
    assert set(counts.values()) == {10}
    with pytest.raises(ValueError):
        make_heldout(5, 0, tasks=["chat_en"])


def test_train_mix_covers_every_task_and_some_thinking() -> None:
    train = make_train(2000, 0)
    assert {e.task for e in train} == set(C.TASKS)
    for task in C.TASKS:
        of_task = [e for e in train if e.task == task]
        assert any(e.thinking for e in of_task), task
        assert any(not e.thinking for e in of_task), task
    zh = [e for e in train if e.task == "chat_zh"]
    assert all(not e.prompt.isascii() for e in zh)


@pytest.mark.parametrize("task", C.CHECKED_TASKS)
def test_answers_are_right_and_checked(task: str) -> None:
    rng = random.Random(task)
    for _ in range(200):
        ex = C.make_example(task, rng)
        assert ex.task == task
        assert ex.answer == _expected(ex), ex
        assert check_answer(ex, ex.answer)
        assert check_answer(ex, f"  {ex.answer}\n")
        assert check_answer(ex, f"{ex.answer}<|im_end|>")
        assert check_answer(ex, f"<think>\n{ex.thinking}\n</think>\n\n{ex.answer}")
        assert check_answer(ex, f"<think>\n\n</think>\n\n{ex.answer}")
        assert check_answer(ex, C.assistant_content(ex))
        # wrong answers are rejected
        assert not check_answer(ex, ex.answer + "1")
        assert not check_answer(ex, "")
        assert not check_answer(ex, f"<think>\n{ex.answer}")  # thinking never ended
        assert not check_answer(ex, f"<think>\n{ex.answer}\n</think>\n\nno")  # answer only after </think>


@pytest.mark.parametrize("task", C.CHAT_TASKS)
def test_chats_render_and_check_like_tasks(task: str) -> None:
    rng = random.Random(task)
    for _ in range(50):
        ex = C.make_example(task, rng)
        assert ex.prompt and ex.answer and "{" not in ex.prompt + ex.answer + ex.thinking
        assert check_answer(ex, C.assistant_content(ex))
        assert not check_answer(ex, ex.answer + "x")


def test_rendering_of_a_simple_example() -> None:
    ex = Example("add", "add 123+45", "", "168")
    assert check_answer(ex, "168") and not check_answer(ex, "167")
    assert C.render_prompt(ex, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert C.render_conversation(ex) == (
        "<|im_start|>user\nadd 123+45<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n168<|im_end|>\n"
    )


def test_unknown_task_is_rejected() -> None:
    with pytest.raises(ValueError):
        C.make_example("divide", random.Random(0))
    with pytest.raises(ValueError):
        make_train(3, 0, tasks=["divide"])


def _answer_from_scratchpad(ex: Example) -> str:
    """Read the answer off a worked trace the way the model is meant to, independently of the generator."""
    steps = ex.thinking.split()
    if ex.task == "add":
        sums = [int(step.split("=")[1]) for step in steps]
        carry = "1" if sums[-1] >= 10 else ""
        return carry + "".join(str(s % 10) for s in reversed(sums))
    assert ex.task == "count_letter"
    if "/" in steps[0]:  # the pair trace: `b/a-`, `a/a1` (drop the restated letter, read as the match trace)
        steps = [step[0] + step[3:] for step in steps]
    if all(step[1:].isdigit() for step in steps):  # the tally: every letter carries the running count
        return steps[-1][1:]
    numbers = [step[1:] for step in steps if step[1:] != "-"]  # the match trace: `-` or the matches so far
    return numbers[-1] if numbers else "0"


def test_scratchpads_lead_to_the_answer():
    train = make_train(3000, 4, scratchpad=["add", "count_letter"])
    traced = [e for e in train if e.task in C.SCRATCHPADS]
    assert len(traced) > 400
    for ex in traced:
        assert ex.thinking and _answer_from_scratchpad(ex) == ex.answer == _expected(ex), ex
    plain = make_train(3000, 4)  # same prompts and answers; only the traces differ
    assert [(e.prompt, e.answer) for e in plain] == [(e.prompt, e.answer) for e in train]
    assert C.add_scratchpad("add 78+56") == "8+6=14 7+5+1=13"
    assert C.add_scratchpad("add 938+72") == "8+2=10 3+7+1=11 9+1=10"
    assert C.tally_scratchpad("count a in b a n a n a") == "b0 a1 n1 a2 n2 a3"
    only_add = make_train(3000, 4, scratchpad=["add"])
    assert all(bool(e.thinking) == bool(p.thinking) for e, p in zip(only_add, plain) if e.task != "add")
    with pytest.raises(ValueError, match="no scratchpad"):
        make_train(10, 0, scratchpad=["reverse"])


def test_match_trace_marks_each_letter_and_numbers_the_matches():
    assert C.match_scratchpad("count a in b a n a n a") == "b- a1 n- a2 n- a3"
    assert C.match_scratchpad("count z in b a n") == "b- a- n-"
    train = make_train(3000, 4, scratchpad=["add", "count_match"])
    counted = [e for e in train if e.task == "count_letter"]
    assert len(counted) > 150 and any(e.answer == "0" for e in counted)
    for ex in counted:
        steps = ex.thinking.split()
        assert len(steps) == len(C.count_prompt_parts(ex.prompt)[1])  # one step per letter: aligned
        assert _answer_from_scratchpad(ex) == ex.answer == _expected(ex), ex
    tallied = make_train(3000, 4, scratchpad=["add", "count_letter"])
    assert [(e.prompt, e.answer) for e in tallied] == [(e.prompt, e.answer) for e in train]
    with pytest.raises(ValueError, match="two traces"):
        make_train(10, 0, scratchpad=["count_letter", "count_match"])


def test_pair_trace_restates_the_letter_beside_each_letter():
    """Every step is `letter/asked-for mark`: the comparison between the step's two letters decides the mark, and
    the answer reads off the marks as with the match trace (`-`, or the matches so far)."""
    assert C.pair_scratchpad("count a in b a n a n a") == "b/a- a/a1 n/a- a/a2 n/a- a/a3"
    assert C.pair_scratchpad("count z in b a n") == "b/z- a/z- n/z-"
    counted = [e for e in make_train(3000, 4, scratchpad=["add", "count_pair"]) if e.task == "count_letter"]
    assert len(counted) > 150 and any(e.answer == "0" for e in counted)
    for ex in counted:
        letter, letters = C.count_prompt_parts(ex.prompt)
        steps = ex.thinking.split()
        assert [s[0] for s in steps] == letters and all(s[1:3] == "/" + letter for s in steps)
        assert _answer_from_scratchpad(ex) == ex.answer == _expected(ex), ex


def test_every_mix_weights_every_task():
    for name, weights in C.MIXES.items():
        assert set(weights) == set(C.TASKS), name
        assert all(w > 0 for w in weights.values()) and abs(sum(weights.values()) - 1.0) < 1e-6, name
    with pytest.raises(ValueError, match="unknown mix"):
        make_train(3, 0, mix="nonsense")
