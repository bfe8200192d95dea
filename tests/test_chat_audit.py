"""The local chat, continued (a mutation audit's findings): what the first suite let change unseen.

In-process, on the shipped tiny model (loaded once for the module; answers of a few tokens) and plain functions:
the context window's cut (one question is never cut, a template whose last message costs more than the others
still ends with a prompt that fits, in few renders) and a conversation undone back to its system message; the
slash commands' words and messages (/?, /q, an unknown command, a multi-line message that starts with `/`,
/system OFF, /think's state and the last thinking shown again, /set's refusals and its max_tokens cap, /stats'
figures and its refusal, /save's count, /file's quoting and question, /retry's seed note, the held-keys note);
the answer's limits said once; saved files (a missing folder, a missing file, a load that resets the window,
values of the wrong type); Tab completion's edges; /stats' runtime rows; the display's pieces (durations,
plurals, a too-narrow status line, a hidden thinking's summary, code blocks); a turn's counters; the chat
command's defaults and flags, and the demo's flow with its quantizing and loading stood in.
"""

from __future__ import annotations

import io
import json
import random
import string
import sys
import types
from pathlib import Path

import pytest
from rich.console import Console

from clover_local.chat import app as chat_app
from clover_local.chat.app import COMMAND_NAMES, ChatApp
from clover_local.chat.conversation import ChatSettings, Conversation, describe_settings, restore_settings
from clover_local.chat.window import fit, leave_out
from clover_local.errors import CloverError
from test_prompt_cache import chat_app as plain_chat  # noqa: F401 (the tiny model's piped chat, max_tokens 24)
from tests.conftest import run_cli


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 7))) for _ in range(n))


@pytest.fixture
def piped(tiny):
    """A piped chat on the tiny model (no thinking, answers of at most 24 tokens); its notes go to stderr."""
    return plain_chat(tiny)


@pytest.fixture
def screen_chat(tiny):
    """A terminal chat on the tiny model drawing into a string: (app, screen)."""
    screen = io.StringIO()
    app = ChatApp(tiny, "test", ChatSettings(think=False, max_tokens=24), interactive=True,
                  console=Console(file=screen, width=100, force_terminal=True, color_system=None))
    return app, screen


# ---------------------------------------------------------------------------------------------- the window
def test_a_conversation_with_one_question_is_never_cut():
    """Only exchanges (from a user message on) are left out: a loaded conversation that opens with an answer and
    has one question keeps it all, however far over the context — the chat then refuses the message."""
    rng = random.Random(3)
    msgs = [{"role": "assistant", "content": _words(rng, 80)}, {"role": "user", "content": _words(rng, 5)}]
    for excess in (1, 50, 10_000):
        assert leave_out(msgs, len, excess, step=10) == 0
    start, _, ids = fit(msgs, lambda m: (m, [0] * sum(5 + len(x["content"]) for x in m)), len, 100, 20)
    assert start == 0 and len(ids) > 100


def test_a_template_that_frames_the_last_message_more_still_ends_with_a_prompt_that_fits():
    """A template that adds more around the last message (a long generation prompt) than around the others: the
    estimate of what leaving out frees falls short, and `fit` leaves out a step more at a time — every kept prompt
    fits, in a few renders, the cut moving only now and then."""
    rng = random.Random(11)
    renders: list[int] = []

    def length(messages: list[dict]) -> int:
        return sum(5 + len(m["content"]) for m in messages) + 80

    def render(messages: list[dict]):
        renders[-1] += 1
        return messages, [0] * length(messages)

    conv, cuts = [{"role": "system", "content": "sys"}], []
    for _ in range(60):
        conv.append({"role": "user", "content": "q" * rng.randint(5, 11)})
        renders.append(0)
        start, kept, ids = fit(conv, render, len, context=400, room=40)
        assert len(ids) + 40 <= 400, (start, len(ids))
        assert kept[0] == conv[0] and kept[-1] is conv[-1]
        cuts.append(start)
        conv.append({"role": "assistant", "content": "a" * 10})
    assert max(renders) <= 3, renders
    assert cuts == sorted(cuts) and sum(a != b for a, b in zip(cuts, cuts[1:])) <= 20


def test_undoing_back_to_the_system_message_reads_the_next_question_whole():
    """A window past some messages, then /undo until only the system message is left: the next question is read
    with the system message, not cut by the old window."""
    conv = Conversation(system="be brief")
    for i in range(2):
        conv.add_user(f"q{i}")
        conv.add_assistant(f"a{i}")
    conv.read_from(3)
    assert conv.left_out == 2
    conv.pop_exchange()
    conv.pop_exchange()
    assert conv.messages == [{"role": "system", "content": "be brief"}] and conv.left_out == 0
    assert conv.template_messages() == [{"role": "system", "content": "be brief"}]
    conv.add_user("new")
    assert [m["content"] for m in conv.template_messages()] == ["be brief", "new"]


# ---------------------------------------------------------------------------------------------- slash commands
def test_quit_and_help_have_their_short_names_and_an_unknown_command_is_named(piped, capsys):
    for name in ("/exit", "/quit", "/q", "/QUIT"):
        assert piped.handle(name) is False
    assert piped.handle("/?") is True
    assert "/set NAME VALUE" in capsys.readouterr().err
    assert piped.handle("/frobnicate now") is True
    assert capsys.readouterr().err.strip() == "error: unknown command /frobnicate; /help lists the commands"
    assert "/quit " in [c for c in completions("/qu")]


def completions(line: str, cwd: Path | None = None) -> list[str]:
    from clover_local.chat.completion import candidates

    return candidates(line, COMMAND_NAMES, cwd)


def test_a_message_of_several_lines_that_starts_with_a_slash_is_asked(piped, capsys):
    """A pasted path or a `/`-led text of several lines is a message, not a command."""
    text = "/usr/bin/env python\nwhat is this line?"
    assert piped.handle(text) is True
    assert piped.conv.messages[0] == {"role": "user", "content": text}
    assert piped.conv.messages[1]["role"] == "assistant" and "unknown command" not in capsys.readouterr().err


def test_system_off_in_any_case_and_think_says_its_state(piped, capsys):
    piped.command("/system Answer briefly.")
    piped.command("/system OFF")
    assert piped.conv.system is None and "system message removed" in capsys.readouterr().err
    piped.settings.think, piped.settings.show_thinking = True, False
    piped.command("/think")
    assert "thinking on, hidden; /think on|off|show|hide" in capsys.readouterr().err
    piped.command("/think off")
    piped.command("/think show")
    capsys.readouterr()
    piped.command("/think")
    assert "thinking off, shown;" in capsys.readouterr().err


def test_think_show_prints_the_last_thinking_until_undo_or_reset(screen_chat):
    """/think show on a terminal prints the last answer's thinking again; once /undo or /reset took that answer
    away there is none to show."""
    app, screen = screen_chat
    thought = "they greet me, so I greet back"
    for clear in ("/undo", "/reset"):
        app.conv.add_user("hi")
        app._record("hello", thought, chat_app.TurnStats(), False)
        app.command("/think show")
        assert "thinking (last answer)" in screen.getvalue() and thought in screen.getvalue()
        app.command(clear)
        screen.truncate(0)
        screen.seek(0)
        app.command("/think show")
        assert thought not in screen.getvalue() and "thinking will be shown" in screen.getvalue()


def test_set_refuses_more_than_a_value_and_caps_max_tokens_at_the_context(piped, capsys):
    with pytest.raises(CloverError, match="/set takes a name and a value"):
        piped.command("/set threshold 0.8 0.7")
    assert piped.settings.threshold != 0.7
    ctx = piped.context
    piped.command(f"/set max_tokens {ctx * 3 + 7}")
    assert piped.settings.max_tokens == ctx
    assert f"max_tokens = {ctx} (the model's context)" in capsys.readouterr().err
    piped.command("/set max_tokens 33")
    assert piped.settings.max_tokens == 33 and "max_tokens = 33\n" in capsys.readouterr().err


def test_set_think_budget_refused_by_the_tokenizer_leaves_it_off(piped, monkeypatch):
    def refuse(tok, budget, opened):
        raise CloverError("this tokenizer has no <think> tokens")

    monkeypatch.setattr(chat_app.ThinkBudget, "for_tokenizer", refuse)
    with pytest.raises(CloverError, match="no <think> tokens"):
        piped.command("/set think_budget 64")
    assert piped.settings.think_budget is None


def test_stats_counts_the_session_and_refuses_other_words(piped, capsys, monkeypatch):
    rng = random.Random(5)
    with pytest.raises(CloverError, match="/stats takes nothing or 'all'; not 'last'"):
        piped.command("/stats last")
    piped.ask(_words(rng, 4))
    piped.command("/stats")
    err = capsys.readouterr().err
    ls = piped.last
    assert f"context used: {ls.prompt_tokens + ls.tokens:,} of {piped.context:,}\n" in err
    assert "answers stopped: 0\n" in err and "turns this session: 1\n" in err
    assert "/stats all" not in err  # no runtime: no counters to list
    assert "GPU memory: — (not on CUDA)" in err

    def stopped_events(*args, **kwargs):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(piped, "_events", stopped_events)
    piped.ask(_words(rng, 3))
    piped.command("/stats")
    err = capsys.readouterr().err
    assert "answers stopped: 1\n" in err and "turns this session: 2\n" in err
    assert piped.conv.messages[-1]["interrupted"] is True


def test_save_says_how_many_messages_and_refuses_a_missing_folder(piped, capsys, tmp_path):
    piped.conv.set_system("be brief")
    piped.command(f"/save {tmp_path / 'c.json'}")  # one message: no plural (it said "saved 1 messages")
    assert f"saved 1 message to {tmp_path / 'c.json'}" in capsys.readouterr().err
    piped.conv.set_system(None)
    piped.conv.add_user("hi")
    piped.conv.add_assistant("hello")
    piped.command(f"/save {tmp_path / 'c.json'}")
    assert f"saved 2 messages to {tmp_path / 'c.json'}" in capsys.readouterr().err
    missing = tmp_path / "nowhere" / "c.json"
    with pytest.raises(CloverError, match=f"cannot save to {missing}: folder {missing.parent} does not exist"):
        piped.command(f"/save {missing}")
    with pytest.raises(CloverError, match="no such file"):
        piped.command(f"/load {tmp_path / 'none.json'}")


def test_file_sends_a_quoted_name_and_the_question_after_a_blank_line(piped, tmp_path, monkeypatch, capsys):
    rng = random.Random(8)
    body, ask = _words(rng, 30), _words(rng, 5) + "?"
    (tmp_path / "my notes.txt").write_text(body + "\n\n", encoding="utf-8")
    (tmp_path / "blank.txt").write_text(" \n\t\n", encoding="utf-8")
    sent: list[str] = []
    monkeypatch.setattr(piped, "ask", sent.append)
    piped.command(f'/file "{tmp_path / "my notes.txt"}" {ask}')
    assert sent == [f"{body}\n\n{ask}"]
    assert "sending my notes.txt" in capsys.readouterr().err
    piped.command(f"/file '{tmp_path / 'my notes.txt'}'")
    assert sent[-1] == body
    with pytest.raises(CloverError, match="is empty: nothing to send"):
        piped.command(f"/file {tmp_path / 'blank.txt'}")
    assert len(sent) == 2


def test_retry_says_when_a_seed_gives_the_same_answer(piped, capsys):
    piped.ask("hello")
    piped.settings.temperature, piped.settings.seed = 0.7, 5
    capsys.readouterr()
    piped.command("/retry")
    assert "(seed 5: unchanged settings give the same answer" in capsys.readouterr().err
    piped.settings.seed = None
    piped.command("/retry")
    assert "unchanged settings" not in capsys.readouterr().err


def test_retry_names_a_long_or_multi_line_message_by_its_first_line(piped, capsys):
    piped.ask("first line\nsecond line")
    capsys.readouterr()
    piped.command("/retry")
    assert "asking again: first line…\n" in capsys.readouterr().err


def test_what_was_typed_during_an_answer_is_named_shortened(piped, monkeypatch, capsys):
    rng = random.Random(2)
    long = _words(rng, 20)
    lines = [long, "b", "c", "d", "e"]

    class Held:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.lines = lines

    monkeypatch.setattr(chat_app, "HeldKeys", Held)
    assert piped._answer_live(lambda: False) is False
    err = capsys.readouterr().err
    assert f'"{long[:39]}…", "b", "c" and 2 more; type it again at the prompt' in err and long not in err


def test_a_render_that_fails_leaves_the_conversation_as_it_was(piped, monkeypatch, capsys):
    piped.ask("hello")
    before = [dict(m) for m in piped.conv.messages]

    def refuse(*args, **kwargs):
        raise CloverError("the template refuses")

    monkeypatch.setattr(piped.tok, "apply_chat_template", refuse)
    assert piped.ask("again") is None
    assert piped.conv.messages == before and "error: the template refuses" in capsys.readouterr().err


def test_the_summary_says_max_tokens_was_reached_and_a_limit_of_one_token_less_is_said(piped, capsys):
    from clover_local.chat.turn import TurnStats

    assert piped._summary(TurnStats(stop_reason="length")).plain.endswith(" · reached max_tokens")
    assert "max_tokens" not in piped._summary(TurnStats(stop_reason="stop")).plain
    piped.settings.max_tokens = 200
    piped._answer_limit(199, piped.context - 199)
    assert f"(the answer is limited to 199 tokens: the context is {piped.context})" in capsys.readouterr().err
    piped._answer_limit(200, 10)
    assert capsys.readouterr().err == ""


def test_a_plain_answer_ends_its_line(piped):
    piped.ask("hello")
    out = piped.out.getvalue()
    assert out.endswith("\n") and out.rstrip("\n") == piped.conv.messages[-1]["content"].rstrip("\n")


def test_an_answer_limited_by_the_context_is_said_once_a_turn_and_the_outgrown_note_only_when_it_grows(
        tiny, monkeypatch, capsys):
    """A context that leaves less than max_tokens: each answer is limited to what is left (said, with why),
    never past the context; `outgrew the context` is said when more is left out, not at every turn."""
    ctx = 300
    monkeypatch.setattr(tiny.config, "max_position_embeddings", ctx)
    app = plain_chat(tiny)
    app.settings.max_tokens = 200
    rng = random.Random(4)
    notes = 0
    for _ in range(12):
        before = app.conv.left_out
        stats = app.ask("reverse " + _words(rng, 6))
        assert stats is not None and stats.prompt_tokens + stats.tokens <= ctx
        err = capsys.readouterr().err
        assert ("outgrew the context" in err) == (app.conv.left_out > before)
        notes += "outgrew" in err
        room = min(200, ctx - stats.prompt_tokens)
        assert (f"(the answer is limited to {room} tokens: the context is {ctx})" in err) == (room < 200)
        assert stats.prompt_tokens + min(200, ctx // 4) <= ctx or app.conv.left_out == 0
    assert notes >= 1


# ---------------------------------------------------------------------------------------------- saved settings
def test_restore_settings_skips_values_of_the_wrong_kind_and_names_what_changed():
    s = ChatSettings()
    changed = restore_settings(s, {"think_budget": True, "seed": 2.5, "top_k": 0, "max_tokens": 1024,
                                   "think": False, "show_thinking": True, "temperature": 0.5}, keep=set())
    assert changed == ["think", "temperature"] and s.think_budget is None and s.seed is None
    assert describe_settings(s, changed) == "thinking off, temperature 0.5"
    s.show_thinking = False
    assert describe_settings(s, ["show_thinking", "think"]) == "thinking summarized, thinking off"
    assert restore_settings(s, {"think_budget": 0}) == [] and restore_settings(s, {"think_budget": 64}) == \
        ["think_budget"]


def test_a_load_starts_the_window_anew_and_keeps_only_a_models_name(tmp_path):
    conv = Conversation()
    conv.add_user("q")
    conv.add_assistant("a")
    conv.left_out = 2
    (tmp_path / "c.json").write_text(json.dumps({"model": 7, "messages": [{"role": "user", "content": "x"}]}))
    assert conv.load(tmp_path / "c.json") == 1
    assert conv.left_out == 0 and conv.saved_model is None
    assert [m["content"] for m in conv.template_messages()] == ["x"]
    (tmp_path / "s.json").write_text(json.dumps([{"role": "user", "content": "x"},
                                                 {"role": "system", "content": "late"}]))
    with pytest.raises(CloverError, match=r"a system message may only come first \(message 1\)"):
        conv.load(tmp_path / "s.json")


# ---------------------------------------------------------------------------------------------- Tab completion
def test_tab_completes_only_commands_their_one_path_and_words(tmp_path, monkeypatch):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "report.txt").write_text("x")
    names = sorted(f"f{i:03d}.txt" for i in range(250))
    for name in names:
        (tmp_path / name).write_text("")
    assert completions("", tmp_path) == [] and completions("think", tmp_path) == []  # a message completes nothing
    assert completions("/save no", tmp_path) == ["notes/"]
    assert completions("/file notes/report.txt no", tmp_path) == []  # past the path: the question is the user's
    assert completions("/load f", tmp_path) == [n + " " for n in names[:200]]  # at most 200, sorted
    assert completions("/think h") == ["hide"] and completions("/set reveal_factor off o") == []
    home = tmp_path / "home"
    (home / "chats").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert completions("/load ~/ch", tmp_path) == ["~/chats/"]


# ---------------------------------------------------------------------------------------------- /stats' rows
def test_key_stats_rows_follow_what_the_runtime_reports():
    from clover_local.chat.stats import format_hit_rate, key_stats, runtime_stats, scalar_stats

    rng = random.Random(9)
    uses, slots, total = rng.randint(1000, 9000), rng.randint(10, 99), rng.randint(100, 999)
    misses, resident, copied = rng.randint(1, uses - 1), rng.randint(1, slots), rng.randint(1, 9999)
    rate = rng.random()
    rows = dict(key_stats({"hit_rate": rate, "expert_uses": uses, "misses": misses, "resident": resident,
                           "experts_total": total, "slots": slots, "copied": copied, "bytes_h2d": 3 * 2**30,
                           "host_reads_on": True, "host_reads": 1234}))
    assert rows["expert cache hit rate"] == f"{100 * rate:.0f}%"
    assert rows["expert cache misses"] == f"{misses:,} of {uses:,} expert uses"
    assert rows["experts resident"] == f"{resident:,} of {total:,} ({slots:,} slots)"
    assert rows["expert copies"] == f"{copied:,} (3 GiB over PCIe)"
    assert rows["host reads"] == "1,234 experts read in place from host memory"
    quiet = dict(key_stats({"hit_rate": True, "expert_uses": 0, "misses": 0, "resident": 5, "copied": False,
                            "host_reads_on": "yes"}))
    assert quiet == {"expert cache hit rate": "—"}  # a bool is no rate, no uses no misses, no total no row
    assert dict(key_stats({"copied": 7})) == {"expert cache hit rate": "—", "expert copies": "7"}
    assert format_hit_rate({"expert_cache_hit_rate": 0.5}) == "50%"
    assert scalar_stats({"hit_rate": 0.5, "expert_cache_hit_rate": 0.5, "slots": 3, "error": None,
                         "layers": []}) == {"slots": 3, "error": None}

    def broken():
        raise RuntimeError("a counter read failed")

    assert runtime_stats(types.SimpleNamespace(runtime_stats=broken)) == {}
    assert runtime_stats(types.SimpleNamespace(runtime_stats=lambda: [("slots", 3)])) == {}
    assert runtime_stats(types.SimpleNamespace(runtime_stats=lambda: {"slots": 3})) == {"slots": 3}


def test_the_status_line_shows_the_gpu_in_gib(piped, monkeypatch):
    from clover_local.chat.turn import TurnStats

    monkeypatch.setattr(chat_app, "gpu_memory", lambda model: (3 * 2**30, 80 * 2**30))
    assert "GPU 3.0/80.0 GiB" in piped._status(TurnStats(), None, 200).plain


# ---------------------------------------------------------------------------------------------- the display
def test_code_blocks_close_only_with_a_fence_as_long_and_run_to_the_end_unclosed():
    from clover_local.chat.display import code_blocks

    assert code_blocks("````\na\n```\nb\n````") == ["a\n```\nb\n"]
    assert code_blocks("x\n```py\nopen") == ["open\n"]


def test_display_pieces_read_as_a_person_reads_them():
    from clover_local.chat.display import _duration, confidence_color, fit, fit_parts, plural, Part, think_lines

    assert [_duration(s) for s in (0.2, 59.4, 60, 65, 3599, 3600, 7384)] == [
        "1 s", "59 s", "1 min 00 s", "1 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 03 min"]
    assert [plural(n, "token") for n in (0, 1, 2, 1024)] == ["0 tokens", "1 token", "2 tokens", "1,024 tokens"]
    assert plural(1, "pass", "passes") == "1 pass" and plural(3, "pass", "passes") == "3 passes"
    assert fit("abcdefgh", 5) == "abcd…" and fit("ab", 5) == "ab   "
    assert confidence_color(-3) == confidence_color(0) and confidence_color(7) == confidence_color(1)
    line = fit_parts([Part(("a" * 30,)), Part(("b" * 30,))], [], 40)
    assert line.cell_len <= 40 and line.plain.endswith("…")
    assert think_lines("one\ntwo").plain == "┊ one\n┊ two"


def test_a_prompts_reading_shows_a_rate_only_after_half_a_second_and_drops_it_before_the_time_left():
    from clover_local.chat.display import prefill_line
    from clover_local.generate.events import PrefillProgress

    early = prefill_line(PrefillProgress(1000, 4000), 0.3).plain
    assert "tok/s" not in early and "left" not in early and early.endswith("1,000/4,000 tokens")
    line = prefill_line(PrefillProgress(2000, 4000), 1.0, max_width=64).plain
    assert len(line) <= 64 and "tok/s" not in line and line.endswith("2,000/4,000 tokens · 1 s left")


def test_hidden_thinking_is_one_summary_line_and_a_count_while_it_runs():
    from clover_local.chat.display import TurnView
    from clover_local.generate.events import PrefillProgress

    view = TurnView(str, 8, show_thinking=False, status=lambda width: "status")
    assert view.on_text("I think", "", True, 3) == []  # no header: the thinking is not shown
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(view)
    assert "thinking… 3 tokens" in console.export_text()
    out = view.on_text("", "Hello.", False, 17)
    texts = [getattr(r, "plain", None) for r in out]
    assert "▸ thought for 17 tokens (/think show to expand)" in texts
    view.on_prefill(PrefillProgress(8, 16))
    assert view.prefill is not None
    view.on_prefill(PrefillProgress(16, 16))
    assert view.prefill is None  # read: the cells again


def test_paragraphs_after_the_first_are_set_apart_by_a_blank_line():
    from rich.markdown import Markdown

    from clover_local.chat.display import TurnView

    view = TurnView(str, 8, show_thinking=True, status=lambda width: "status")
    first = view.on_text("", "One paragraph.\n\n", False, 0)
    second = view.on_text("", "Another one.\n\n", False, 0)
    assert [type(r) for r in first] == [Markdown]
    assert [type(r).__name__ for r in second] == ["Text", "Markdown"] and second[0].plain == ""


def test_a_block_on_a_narrow_terminal_gets_narrower_cells():
    from clover_local.chat.display import BlockCells
    from clover_local.generate.events import PassDone, Reveal

    cells = BlockCells(lambda i: "tokenword", 8)
    cells.update(PassDone(0, 0, [Reveal(0, 5, 0.9)], [5] + [None] * 7, 0))
    for width, first in ((80, "token… ░░░░░░ "), (40, "to… ░░░ ")):
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(cells)
        row = console.export_text().splitlines()[-1]
        assert row.startswith(first), row


# ---------------------------------------------------------------------------------------------- one turn
def test_a_turns_figures_leave_out_the_paced_and_the_reading_time():
    from clover_local.chat.turn import TurnStats
    from clover_local.generate.events import BlockCommitted, DecodeStats, Finished, PrefillProgress

    stats = TurnStats(started=100.0)
    stats.on_event(BlockCommitted(0, [1, 2, 3], 2))
    stats.on_event(Finished([1, 2, 3, 4, 5], DecodeStats(passes=4, stop_reason="stop")))
    assert (stats.tokens, stats.passes, stats.stop_reason) == (5, 4, "stop")
    stats.end("cancelled")
    assert stats.stop_reason == "stop"  # a finished answer stays finished
    stats.ended, stats.paused, stats.prefill_seconds = 110.0, 3.0, 2.0
    assert stats.seconds == pytest.approx(7.0) and stats.decode_seconds == pytest.approx(5.0)
    assert stats.tokens_per_second == pytest.approx(1.0)
    s2 = TurnStats()
    s2.on_event(PrefillProgress(64, 128))
    assert s2.prefilled == 64 and s2.prefill_seconds >= 0


def test_a_turn_stops_when_asked_and_a_negative_pass_delay_is_none(monkeypatch):
    from clover_local.chat.turn import PASS_DELAY_ENV, decode_events, pass_delay
    from clover_local.generate.events import PassDone

    monkeypatch.setenv(PASS_DELAY_ENV, "-1")
    assert pass_delay() == 0.0
    monkeypatch.setenv(PASS_DELAY_ENV, "0")
    closed = []

    class Decoder:
        def generate(self, ids, settings, reuse=None, snapshot_at=None):
            try:
                for i in range(100):
                    yield PassDone(0, i, [], [], 0)
            finally:
                closed.append(True)

    seen: list = []
    for ev in decode_events(Decoder(), [1], None, should_stop=lambda: len(seen) >= 3):
        seen.append(ev)
    assert len(seen) == 3 and closed == [True]


def test_thinking_counts_all_its_tokens_while_it_runs_and_the_answer_loses_its_leading_newlines():
    from clover_local.chat.turn import ReasoningSplitter, TurnText, _partial_suffix
    from test_chat_tui import _ByteTokenizer

    turn = TurnText(_ByteTokenizer())
    turn.add([1000, *b"still thinking"])
    assert turn.thinking and turn.reasoning_tokens == 15  # <think> and 14 characters, no </think> yet
    assert _partial_suffix("abc</thin", "</think>") == 6 and _partial_suffix("abc<", "</think>") == 1
    split = ReasoningSplitter()
    assert split.update("\n\nHello", final=True) == ("", "Hello")


def test_history_is_counted_without_the_generation_prompt(tiny):
    from clover_local.chat.turn import history_tokens

    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    text = tiny.tokenizer.apply_chat_template(msgs, add_generation_prompt=False, enable_thinking=False)
    assert history_tokens(tiny.tokenizer, msgs, enable_thinking=False) == len(tiny.tokenizer.encode(text))


# ---------------------------------------------------------------------------------------------- the chat command
@pytest.fixture
def sessions(monkeypatch):
    """`clover-local chat` in-process, its loop stood in: the sessions it would have run."""
    seen: list[ChatApp] = []

    def run(self):
        seen.append(self)
        return 0

    monkeypatch.setattr(ChatApp, "run", run)
    return seen


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_chat_takes_the_models_threshold_and_context_unless_the_command_line_sets_them(sessions, tiny):
    assert run_cli(["chat", "tiny", "--max-tokens", "999999"]) == 0
    s = sessions[-1].settings
    assert s.threshold == tiny.config.diffusion.threshold and s.max_tokens == tiny.config.max_context
    assert sessions[-1].interactive is False and sessions[-1].label == "tiny"
    assert run_cli(["chat", "tiny", "--threshold", "0.55", "--max-tokens", "7"]) == 0
    assert (sessions[-1].settings.threshold, sessions[-1].settings.max_tokens) == (0.55, 7)


def test_chat_refuses_an_answer_of_no_tokens_before_loading(capsys):
    from test_cli_errors import expect_error

    expect_error(capsys, ["chat", "no-such-model", "--max-tokens", "0"], "--max-tokens must be at least 1")


def test_chat_load_keeps_the_command_lines_settings_over_the_saved_ones(sessions, tmp_path, capsys):
    conv = Conversation()
    conv.add_user("hi")
    conv.add_assistant("hello")
    conv.save(tmp_path / "c.json", ChatSettings(temperature=0.5, top_p=0.8, think=False), "tiny")
    assert run_cli(["chat", "tiny", "--load", str(tmp_path / "c.json"), "--temperature", "0.2"]) == 0
    s = sessions[-1].settings
    assert (s.temperature, s.top_p, s.think) == (0.2, 0.8, False)
    assert "(its settings: top_p 0.8, thinking off" in capsys.readouterr().err


def test_chat_plain_draws_no_live_display_on_a_terminal(sessions, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Terminal())
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert run_cli(["chat", "tiny", "--plain"]) == 0
    assert sessions[-1].interactive is False and sessions[-1].keep_at is None
    assert run_cli(["chat", "tiny"]) == 0
    assert sessions[-1].interactive is True and sessions[-1].keep_at is not None


def test_chat_with_a_server_takes_its_defaults_where_the_command_line_sets_none(sessions, monkeypatch):
    from clover_local.chat import remote

    server = types.SimpleNamespace(about={"threshold": 0.6, "reveal_factor": 2.0, "think": False, "max_tokens": 100},
                                   context=512, model="m", url="http://127.0.0.1:9")
    monkeypatch.setattr(remote.Server, "connect", staticmethod(lambda url, key: server))
    assert run_cli(["chat", "http://127.0.0.1:9"]) == 0
    s = sessions[-1].settings
    assert (s.threshold, s.reveal_factor, s.think, s.max_tokens) == (0.6, 2.0, False, 100)
    assert run_cli(["chat", "http://127.0.0.1:9", "--threshold", "0.8", "--max-tokens", "900"]) == 0
    s = sessions[-1].settings
    assert (s.threshold, s.reveal_factor, s.max_tokens) == (0.8, 0.0, 100)  # a threshold given: its rule
    server.about.pop("max_tokens")
    assert run_cli(["chat", "http://127.0.0.1:9", "--max-tokens", "900"]) == 0
    assert sessions[-1].settings.max_tokens == 512  # the server's context


# ---------------------------------------------------------------------------------------------- the demo
@pytest.fixture
def demo_stood_in(tiny, monkeypatch, tmp_path):
    """`clover-local demo` with its quantizing and loading stood in (the tiny model answers): what each ask saw."""
    from clover_local.commands import demo

    pack = tmp_path / "tiny-int4"
    pack.mkdir()
    monkeypatch.setattr(demo, "ensure_pack", lambda src, out, err: (pack, True))
    monkeypatch.setattr(demo, "load_for_demo", lambda pack, console=None: tiny)
    asks: list[ChatApp] = []
    real = ChatApp.ask

    def ask(self, text):
        asks.append(self)
        return real(self, text)

    monkeypatch.setattr(ChatApp, "ask", ask)
    return pack, asks


def test_demo_runs_one_turn_at_full_speed_when_piped_and_says_what_to_try(demo_stood_in, capsys, tiny):
    pack, asks = demo_stood_in
    assert run_cli(["demo", "--pace", "0.5"]) == 0
    out, err = capsys.readouterr()
    app = asks[-1]
    assert app.pace == 0.0 and app.settings.threshold == tiny.config.diffusion.threshold
    assert app.settings.max_tokens == 256
    ls = app.last
    assert "you › good morning\n" in out
    assert f"[{ls.tokens} tokens, {ls.passes} passes, {ls.tokens_per_pass:.2f} tokens/pass]" in out
    assert f"  clover-local chat {pack}   # chat with the INT4 pack" in out and "reused from the cache" in err


def test_demo_says_a_failed_or_stopped_turn_in_one_line(demo_stood_in, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(ChatApp, "ask", lambda self, text: None)
    assert run_cli(["demo"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: the demo's chat turn failed"
    from clover_local.chat.turn import TurnStats

    monkeypatch.setattr(ChatApp, "ask", lambda self, text: TurnStats(stop_reason="cancelled"))
    assert run_cli(["demo"]) == 130
    (tmp_path / "empty").mkdir()
    assert run_cli(["demo", "--source", str(tmp_path / "empty")]) == 2
    assert f"{tmp_path / 'empty'} is not a model folder (no config.json)" in capsys.readouterr().err


def test_set_takes_top_k_zero_and_refuses_a_think_budget_of_zero():
    from clover_local.chat.conversation import set_value

    s = ChatSettings(top_k=5, think_budget=64)
    assert set_value(s, "top_k", "0") == 0 and s.top_k == 0
    with pytest.raises(CloverError, match="at least 1, or off"):
        set_value(s, "think_budget", "0")
    assert s.think_budget == 64 and set_value(s, "think_budget", "OFF") is None
