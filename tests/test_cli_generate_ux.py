"""What a user sees from `generate`, `score` and `demo`: a file's trailing newline is not part of the question,
the thinking is kept off stdout (and apart in --json), empty messages are refused, Ctrl-C ends with one
`interrupted` line (keeping what was made), help text shows what the flags take, and limits and ignored flags
are named for what set them."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clover_local.loader import SHORT_NAMES
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
TINY = SHORT_NAMES["tiny"]
GEN = ["--device", "cpu", "--dtype", "float32"]

needs_tiny = pytest.mark.skipif(not (TINY / "config.json").is_file(), reason="tiny model not shipped")


def expect_error(capsys, args, *needles: str) -> str:
    """The CLI, in-process, fails with exactly one `error: …` line on stderr naming every needle."""
    code = run_cli(args)
    out, err = capsys.readouterr()
    assert code != 0, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and out == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def generate_json(capsys, *args: str) -> dict:
    assert run_cli(["generate", "tiny", *args, "--json", *GEN]) == 0
    return json.loads(capsys.readouterr().out)


def tiny_tokenizer():
    from clover_local.tokenizer import ChatTokenizer

    return ChatTokenizer.from_folder(TINY)


# ---------------------------------------------------------------------------------------------- 1. -f's newline


@needs_tiny
def test_a_files_trailing_newlines_are_not_part_of_the_message(tmp_path, capsys, monkeypatch):
    """`-f q.txt` (and `-f -`) asks what `-p` with the same words asks: the newline an editor or `echo` leaves at
    the end was answered as part of the question (`c c b a` for `reverse a b c`); line breaks inside stay."""
    want = generate_json(capsys, "-p", "reverse a b c")["token_ids"]
    for i, text in enumerate(["reverse a b c\n", "reverse a b c\r\n\n", "reverse a b c \n"]):
        f = tmp_path / f"q{i}.txt"
        f.write_bytes(text.encode())
        assert generate_json(capsys, "-f", str(f))["token_ids"] == want, repr(text)
    monkeypatch.setattr("sys.stdin", io.StringIO("reverse a b c\n"))
    assert generate_json(capsys, "-f", "-")["token_ids"] == want

    inside = tmp_path / "two-lines.txt"
    inside.write_text("reverse a b c\nd e\n", encoding="utf-8")
    assert (generate_json(capsys, "-f", str(inside), "--raw", "--max-new-tokens", "4")["token_ids"]
            == generate_json(capsys, "-p", "reverse a b c\nd e", "--raw", "--max-new-tokens", "4")["token_ids"])


@needs_tiny
def test_words_after_the_model_are_the_prompt_as_ollama_run_takes_them(tmp_path, capsys):
    """`generate tiny reverse a b c` asks what `-p "reverse a b c"` asks (it was 'unexpected extra argument'); with
    --file they are the question after the document, and with --prompt too, the message is given twice."""
    want = generate_json(capsys, "-p", "reverse a b c")["token_ids"]
    for words in (["reverse a b c"], ["reverse", "a", "b", "c"]):
        assert run_cli(["generate", "tiny", *words, "--json", *GEN]) == 0
        assert json.loads(capsys.readouterr().out)["token_ids"] == want, words
    doc = tmp_path / "doc.txt"
    doc.write_text("a b c\n", encoding="utf-8")
    assert (generate_json(capsys, "-f", str(doc), "-p", "reverse it", "--raw", "--max-new-tokens", "4")["token_ids"]
            == generate_json(capsys, "-f", str(doc), "reverse", "it", "--raw", "--max-new-tokens", "4")["token_ids"])
    expect_error(capsys, ["generate", "tiny", "reverse", "a", "-p", "b", *GEN],
                 "give the message once: after MODEL ('reverse a') or as --prompt ('b')")


def test_words_after_chats_model_point_to_generate_for_one_answer(capsys):
    """`ollama run MODEL TEXT` answers once: chat's words after MODEL were 'unexpected extra argument'; now one
    line with the generate command that asks them (quoted where the shell needs it), before anything loads."""
    expect_error(capsys, ["chat", "tiny", "hi there", "--no-think"],
                 "chat takes its messages once it starts, not after MODEL; for one answer: clover-local generate "
                 "tiny 'hi there'")
    expect_error(capsys, ["chat", "tiny", "why", "is", "it"], "clover-local generate tiny why is it")


def test_prompts_show_their_progress_on_a_terminal_while_the_answers_go_to_a_file(monkeypatch):
    """--prompts draws prompts answered of the file's on a terminal's stderr, and nothing where stderr is a log,
    where the answers come to the terminal too, or for one prompt."""
    from rich.console import Console

    from clover_local.commands.generate import prompts_progress

    def drawn(total: int, terminal: bool = True, stdout_tty: bool = False) -> str:
        out = io.StringIO()
        monkeypatch.setattr("sys.stdout", type("Out", (io.StringIO,), {"isatty": lambda self: stdout_tty})())
        with prompts_progress(total, Console(file=out, force_terminal=terminal, width=100)) as answered:
            for _ in range(total):
                answered()
        return out.getvalue()

    assert re.search(r"prompts .*3/3", drawn(3))
    assert drawn(3, terminal=False) == "" and drawn(3, stdout_tty=True) == "" and drawn(1) == ""


@needs_tiny
def test_prompts_answers_each_line_with_one_load(tmp_path, capsys, monkeypatch):
    """`--prompts F` answers every non-blank line of F (or standard input) as `-p` would answer it alone, one JSON
    line each, the message first, with one load of the model; a line that cannot be answered gets its error in
    its place and the rest go on (exit 2, as any error); given with -p, or empty, it is one error line."""
    asked = ["reverse a b c", "hi", "sort 3 1 2"]
    alone = [generate_json(capsys, "-p", q, "--no-think") for q in asked]
    f = tmp_path / "questions.txt"
    f.write_text("reverse a b c\n\n  \nhi  \nsort 3 1 2\n", encoding="utf-8")
    loads: list[str] = []
    import clover_local.loader as loader

    real = loader.load
    monkeypatch.setattr(loader, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    for source in (str(f), "-"):
        monkeypatch.setattr("sys.stdin", io.StringIO(f.read_text(encoding="utf-8")))
        assert run_cli(["generate", "tiny", "--prompts", source, "--no-think", *GEN]) == 0
        lines = capsys.readouterr().out.splitlines()
        got = [json.loads(line) for line in lines]
        assert [g["prompt"] for g in got] == asked and all(list(g)[0] == "prompt" for g in got)
        assert [(g["text"], g["token_ids"]) for g in got] == [(a["text"], a["token_ids"]) for a in alone]
    assert loads == ["tiny", "tiny"]  # one load a run

    # a line that cannot be answered (past --context) is answered by its error; the others go on; exit 2, one line
    f.write_text("hi\n" + "reverse " + "a " * 80 + "\nreverse a b c\n", encoding="utf-8")
    assert run_cli(["generate", "tiny", "--prompts", str(f), "--no-think", "--context", "80", "--max-new-tokens", "24",
                    *GEN]) == 2
    out, err = capsys.readouterr()
    got = [json.loads(line) for line in out.splitlines()]
    assert [g.get("text") for g in got] == [alone[1]["text"], None, alone[0]["text"]]
    assert "--context 80" in got[1]["error"] and got[1]["prompt"].startswith("reverse a a")
    assert err == 'error: 1 of 3 prompts not answered: their lines carry "error"\n'

    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    expect_error(capsys, ["generate", "tiny", "--prompts", str(f), "-p", "hi", *GEN], "--prompts", "--prompt")
    expect_error(capsys, ["generate", "tiny", "--prompts", str(tmp_path / "blank.txt"), *GEN], "no prompts in")


def test_prompts_jsonl_takes_multiline_prompts_and_conversations(tmp_path, capsys, monkeypatch):
    """A `.jsonl` --prompts file holds what a line of text cannot: a prompt with line breaks, and a conversation
    (its last turn the user's) — each answered as the same thing asked alone (-p, --system, or the conversation's
    own rendering with --raw), its "id" and what it asked echoed first; --system goes to conversations without a
    system message of their own. A bad line is one error naming it, before the model loads."""
    tok = tiny_tokenizer()
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "reverse a b c"}]
    lines = [{"id": 7, "prompt": "reverse a b c\nsort 3 1 2"},
             {"messages": [{"role": "user", "content": "hi"}]},
             {"id": "own", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]},
             {"id": "turns", "messages": chat}]
    f = tmp_path / "asked.jsonl"
    f.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    assert run_cli(["generate", "tiny", "--prompts", str(f), "--no-think", "--system", "Answer.", *GEN]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [list(g)[:2] for g in got] == [["id", "prompt"], ["messages", "text"], ["id", "messages"],
                                          ["id", "messages"]]
    assert [g.get("id") for g in got] == [7, None, "own", "turns"] and got[3]["messages"] == chat
    alone = [generate_json(capsys, "-p", "reverse a b c\nsort 3 1 2", "--no-think", "--system", "Answer."),
             generate_json(capsys, "-p", "hi", "--no-think", "--system", "Answer."),
             generate_json(capsys, "-p", "hi", "--no-think", "--system", "Be brief.")]
    rendered = tok.apply_chat_template([{"role": "system", "content": "Answer."}, *chat], add_generation_prompt=True,
                                       enable_thinking=False)
    alone.append(generate_json(capsys, "--raw", "-p", rendered))
    assert [g["token_ids"] for g in got] == [a["token_ids"] for a in alone]
    assert got[1]["token_ids"] != got[2]["token_ids"]  # the system messages reached the model

    import clover_local.loader as loader

    monkeypatch.setattr(loader, "load", lambda *a, **k: pytest.fail("loaded before the file was checked"))
    for bad, needle in [('{"prompt": "hi"}\nnot json', "line 2 is not JSON"),
                        ('{"prompt": "hi"}\n' + "[" * 100_000 + "]" * 100_000, "line 2 is not JSON"),  # too deep
                        ('{"text": "hi"}', '"prompt" (text) or "messages"'),
                        ('{"prompt": "hi", "messages": []}', "one of them"),
                        ('{"prompt": 5}', '"prompt" must be a non-empty string'),
                        ('{"messages": {"role": "user"}}', "'messages' must be a list"),
                        ('{"messages": []}', "must end with the user's turn"),
                        ('{"messages": [{"role": "user"}]}', "message 0 has no text 'content'"),
                        ('{"messages": [{"role": "tool", "content": "x"}]}', "message 0 has role 'tool'"),
                        ('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}',
                         "end with the user's turn")]:
        f.write_text(bad + "\n", encoding="utf-8")
        expect_error(capsys, ["generate", "tiny", "--prompts", str(f), *GEN], str(f), needle)
    f.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    expect_error(capsys, ["generate", "tiny", "--prompts", str(f), "--raw", *GEN], "line 1", "--raw")


# ---------------------------------------------------------------------------------------------- 2. thinking apart


@needs_tiny
def test_json_keeps_the_thinking_apart_from_the_answer(capsys):
    """"text" is the answer alone, "reasoning" the thinking; token_ids stay every generated id (the decoded ids
    hold both, tags included)."""
    obj = generate_json(capsys, "-p", "hi")
    assert {"text", "reasoning", "token_ids", "stats", "stopped"} <= set(obj) and obj["stopped"] is False
    full = tiny_tokenizer().decode(obj["token_ids"])
    assert "<think>" in full and "</think>" in full  # the tiny model thinks before a greeting
    assert obj["reasoning"] and obj["text"]
    for tag in ("<think>", "</think>"):
        assert tag not in obj["text"] and tag not in obj["reasoning"]
    assert obj["reasoning"] == full.split("<think>", 1)[1].split("</think>", 1)[0].strip("\n")
    assert obj["text"] == full.split("</think>", 1)[1].lstrip("\n")

    quiet = generate_json(capsys, "-p", "hi", "--no-think")
    assert quiet["reasoning"] == "" and "<think>" not in quiet["text"] and quiet["text"]


@needs_tiny
def test_stdout_carries_only_the_answer_and_stderr_the_thinking(capsys):
    obj = generate_json(capsys, "-p", "hi")
    assert run_cli(["generate", "tiny", "-p", "hi", *GEN]) == 0
    out, err = capsys.readouterr()
    assert out == obj["text"] + "\n"
    assert obj["reasoning"] in err and "\033[" not in err  # plain on a pipe: no colour codes
    assert "<think>" not in out and "<think>" not in err

    # no thinking: nothing but the stats line on stderr
    empty = generate_json(capsys, "-p", "reverse a b c d")
    assert empty["reasoning"] == "" and "<think>" in tiny_tokenizer().decode(empty["token_ids"])
    assert run_cli(["generate", "tiny", "-p", "reverse a b c d", *GEN]) == 0
    out, err = capsys.readouterr()
    assert out == empty["text"] + "\n"
    assert len(err.strip().splitlines()) == 1 and "passes" in err


@needs_tiny
def test_raw_output_is_left_as_it_is(capsys):
    """--raw has no chat template, so nothing is split off: the text is the decoded ids, tags and all."""
    obj = generate_json(capsys, "-p", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "--raw",
                        "--max-new-tokens", "12")
    assert obj["reasoning"] == ""
    assert obj["text"] == tiny_tokenizer().decode(obj["token_ids"])


def test_thinking_is_dimmed_only_on_a_terminal():
    from clover_local.commands.generate import DIM, Stream

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for err, dimmed in ((Tty(), True), (io.StringIO(), False)):
        out = io.StringIO()
        stream = Stream(out, err)
        stream.write("let me think", "")
        stream.write("", "the answer")
        stream.end()
        assert out.getvalue() == "the answer\n"
        assert (DIM in err.getvalue()) == dimmed
        assert err.getvalue().replace(DIM, "").replace("\033[0m", "") == "let me think\n"


# ---------------------------------------------------------------------------------------------- 3. empty message


@pytest.mark.parametrize("content", ["", "\n\n", "  \t\n "])
def test_an_empty_message_is_refused(tmp_path, capsys, monkeypatch, content):
    f = tmp_path / "q.txt"
    f.write_text(content, encoding="utf-8")
    expect_error(capsys, ["generate", "tiny", "-p", content, *GEN], "empty", "--prompt")
    expect_error(capsys, ["generate", "tiny", "-f", str(f), *GEN], "empty", str(f))
    monkeypatch.setattr("sys.stdin", io.StringIO(content))
    expect_error(capsys, ["generate", "tiny", "-f", "-", *GEN], "empty", "standard input")
    monkeypatch.setattr("sys.stdin", io.StringIO(content))  # piped in without -f
    expect_error(capsys, ["generate", "tiny", *GEN], "empty", "standard input")
    expect_error(capsys, ["demo", "--prompt", content, "--cache-dir", str(tmp_path)], "empty", "--prompt")
    assert not any(tmp_path.glob("tiny-int4*"))  # refused before quantizing anything


# ---------------------------------------------------------------------------------------------- 4. Ctrl-C


@pytest.fixture
def ctrl_c_after_first_commit(monkeypatch):
    """Ctrl-C as the decoder works on the block after the first committed one (whatever front end runs it)."""
    from clover_local.generate import block_diffusion
    from clover_local.generate.events import BlockCommitted

    real = block_diffusion.BlockDiffusionDecoder.generate
    committed: list[list[int]] = []

    def generate(self, *args, **kwargs):
        for event in real(self, *args, **kwargs):
            yield event
            if isinstance(event, BlockCommitted):
                committed.append(event.token_ids)
                raise KeyboardInterrupt

    monkeypatch.setattr(block_diffusion.BlockDiffusionDecoder, "generate", generate)
    return committed


@needs_tiny
def test_ctrl_c_json_prints_what_was_made_and_exits_130(capsys, ctrl_c_after_first_commit):
    assert run_cli(["generate", "tiny", "-p", "hi", "--json", *GEN]) == 130
    out, err = capsys.readouterr()
    assert err == "interrupted\n"
    obj = json.loads(out)
    assert obj["stopped"] is True
    assert obj["token_ids"] == ctrl_c_after_first_commit[0] and obj["token_ids"]
    assert obj["stats"]["tokens"] == len(obj["token_ids"]) and obj["stats"]["passes"] >= 1
    full = tiny_tokenizer().decode(obj["token_ids"])
    assert "<think>" not in obj["text"] + obj["reasoning"]
    assert obj["reasoning"] in full and obj["text"] in full


@needs_tiny
def test_ctrl_c_keeps_the_streamed_text_and_ends_its_line(capsys, ctrl_c_after_first_commit):
    assert run_cli(["generate", "tiny", "-p", "good morning", "--raw", *GEN]) == 130
    out, err = capsys.readouterr()
    assert out == tiny_tokenizer().decode(ctrl_c_after_first_commit[0]) + "\n"
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err


@needs_tiny
def test_ctrl_c_in_score_and_demo_is_one_line(capsys, monkeypatch, tmp_path, ctrl_c_after_first_commit):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr("clover_local.generate.scoring.score_ids", interrupted)
        assert run_cli(["score", "tiny", "--text", "good morning to you", *GEN]) == 130
        assert capsys.readouterr() == ("", "interrupted\n")

    assert run_cli(["demo", "--cache-dir", str(tmp_path)]) == 130  # Ctrl-C in the middle of its chat turn
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert "you ›" in out and "Next, try" not in out

    with monkeypatch.context() as m:  # ... and while it quantizes
        m.setattr("clover_local.commands.demo.ensure_pack", interrupted)
        assert run_cli(["demo", "--cache-dir", str(tmp_path / "other")]) == 130
        assert capsys.readouterr().err.splitlines()[-1] == "interrupted"


_SLOW_AFTER_FIRST_COMMIT = """
import json, os, signal, sys, time
# Ctrl-C as a terminal delivers it, whatever this test runs under: a runner started in the background (`nohup …
# &`) passes SIGINT on ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)
from clover_local.generate import block_diffusion
from clover_local.generate.events import BlockCommitted

real = block_diffusion.BlockDiffusionDecoder.generate

def generate(self, *args, **kwargs):
    for event in real(self, *args, **kwargs):
        yield event
        if isinstance(event, BlockCommitted):
            with open(os.environ["READY"] + ".tmp", "w") as f:  # the block was shown: now the user presses Ctrl-C
                json.dump(event.token_ids, f)
            os.replace(os.environ["READY"] + ".tmp", os.environ["READY"])
            time.sleep(120)

block_diffusion.BlockDiffusionDecoder.generate = generate
from clover_local.cli import main
main(sys.argv[1:])
"""


@needs_tiny
@pytest.mark.parametrize("as_json", [True, False])
def test_a_real_sigint_ends_with_one_line_and_130(tmp_path, as_json):
    """A real SIGINT through typer (whose standalone mode turned it into a silent exit 130): sent once the first
    block was written, so no timing guesses."""
    ready = tmp_path / "ready"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "READY": str(ready)}
    args = ["generate", "tiny", "-p", "good morning", "--raw", *GEN] + (["--json"] if as_json else [])
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_AFTER_FIRST_COMMIT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err
    shown = json.loads(ready.read_text())
    if as_json:
        obj = json.loads(out)
        assert obj["stopped"] is True and obj["token_ids"] == shown and shown
    else:  # what was streamed stays, its line ended
        assert out == tiny_tokenizer().decode(shown) + "\n"


# ---------------------------------------------------------------------------------------------- 5. help text


def _help(capsys, monkeypatch, command: str) -> str:
    monkeypatch.setenv("COLUMNS", "300")
    assert run_cli([command, "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["generate", "score", "demo"])
def test_help_shows_square_brackets(capsys, monkeypatch, command):
    """Rich reads `[i+1]` as markup and drops it: every bracketed word of a command's help must show."""
    import typer.main

    from clover_local.cli import _register, app

    _register()
    cmd = typer.main.get_command(app).commands[command]
    texts = [cmd.help or ""] + [p.help or "" for p in cmd.params if getattr(p, "help", None)]
    shown = _help(capsys, monkeypatch, command)
    words = [w.replace("\\[", "[") for t in texts for w in re.findall(r"\S*\\?\[[^\]\s]*\]\S*", t)]
    for word in words:
        assert word.rstrip(".,)") in shown, word
    if command == "score":
        assert "token_ids[i+1]" in shown and "token_ids[..i]" in shown
        assert "Pack or checkpoint folder" in shown  # score takes packs too


def test_dtype_help_lists_what_is_accepted(capsys, monkeypatch):
    import torch

    from clover_local.loader import DTYPE_NAMES, pick_dtype

    for command in ("generate", "score"):
        line = next(l for l in _help(capsys, monkeypatch, command).splitlines() if "--dtype" in l)
        listed = re.findall(r"\b(?:b?float\d+|int\d+)\b", line)
        assert sorted(listed) == sorted(DTYPE_NAMES), line
        for name in listed:
            pick_dtype(name, torch.device("cpu"))
    expect_error(capsys, ["generate", "tiny", "-p", "hi", "--dtype", "int8", "--device", "cpu"], "int8", *DTYPE_NAMES)


def test_vram_budget_help_says_a_bare_number_is_gib(capsys, monkeypatch):
    from clover_local.runtime.sizes import GIB, parse_size

    assert parse_size("16", "--vram-budget") == 16 * GIB
    shown = " ".join(_help(capsys, monkeypatch, "generate").split())
    assert re.search(r"bare number is GiB", shown), shown


# ---------------------------------------------------------------------------------------------- 6, 8. limits, flags


@needs_tiny
def test_a_limit_set_by_context_is_named_as_such(capsys):
    from clover_local.config import load_config

    model = f"{load_config(TINY).max_context:,}"
    line = expect_error(capsys, ["generate", "tiny", "-p", "hi", "--context", "5", *GEN], "--context 5", model)
    assert "model's context of 5" not in line
    expect_error(capsys, ["score", "tiny", "--text", "good morning to you all", "--context", "3", *GEN],
                 "--context 3", model)


@needs_tiny
def test_pack_only_flags_on_a_bf16_checkpoint_warn_once(capsys):
    assert run_cli(["generate", "tiny", "-p", "hi", "--vram-budget", "1KB", "--max-new-tokens", "2", "--json",
                    *GEN]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "--vram-budget" in lines[0], err
    assert "packs" in lines[0]

    assert run_cli(["generate", "tiny", "-p", "hi", "--max-new-tokens", "2", "--json", *GEN]) == 0
    assert capsys.readouterr().err == ""

    assert run_cli(["score", "tiny", "--text", "good morning", "--vram-budget", "16", *GEN]) == 0
    assert capsys.readouterr().err.startswith("warning: --vram-budget")


def test_pack_only_flags_on_a_pack_say_nothing(tmp_path, capsys):
    from clover_local.loader import warn_pack_only

    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"bits": 4}}))
    warn_pack_only(tmp_path, "pack", "1KB", True, 64)
    assert capsys.readouterr().err == ""
    (tmp_path / "config.json").write_text(json.dumps({}))
    warn_pack_only(tmp_path, "bf16", "1KB", True, 64)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(f in err for f in ("--vram-budget", "--resident-routing", "--prefill-chunk"))


@needs_tiny
def test_top_k_and_min_p_flags_reach_the_decoder(capsys):
    """--top-k and --min-p cut the seeded draw of `generate` as the decoder cuts it; out of range, one line."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished
    from clover_local.loader import load

    args = ["generate", "tiny", "-p", "add 12+30", "--no-think", "--max-new-tokens", "16", "--json",
            "--temperature", "1", "--seed", "3", *GEN]
    assert run_cli(args) == 0
    plain = json.loads(capsys.readouterr().out)["token_ids"]
    assert run_cli(args + ["--top-k", "3", "--min-p", "0.2"]) == 0
    cut = json.loads(capsys.readouterr().out)["token_ids"]
    assert cut != plain, "the cuts changed nothing here: pick others"
    loaded = load("tiny", "cpu", "float32")
    tok = loaded.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "add 12+30"}], enable_thinking=False))
    settings = DecodeSettings(max_new_tokens=16, threshold=loaded.config.diffusion.threshold, temperature=1.0,
                              seed=3, top_k=3, min_p=0.2, stop_token_ids=loaded.stop_token_ids)
    events = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id).generate(ids, settings)
    assert next(e for e in events if isinstance(e, Finished)).token_ids == cut
    expect_error(capsys, ["generate", "tiny", "-p", "hi", "--top-k", "-1", *GEN], "--top-k")
    expect_error(capsys, ["generate", "tiny", "-p", "hi", "--min-p", "1.5", *GEN], "--min-p")


@needs_tiny
def test_the_reveal_factor_flag_reaches_the_decoder(capsys):
    """--reveal-factor decodes by the factor rule (the decoder's own answer with that factor, in fewer passes than
    the model's threshold here); out of range, one line."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished
    from clover_local.loader import load

    args = ["generate", "tiny", "-p", "reverse a b c d e f", "--no-think", "--max-new-tokens", "32", "--json", *GEN]
    assert run_cli(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert run_cli(args + ["--reveal-factor", "4"]) == 0
    factor = json.loads(capsys.readouterr().out)
    assert factor["stats"]["passes"] < plain["stats"]["passes"], "no fewer passes here: pick another prompt"
    loaded = load("tiny", "cpu", "float32")
    tok = loaded.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "reverse a b c d e f"}],
                                             enable_thinking=False))
    settings = DecodeSettings(max_new_tokens=32, threshold=loaded.config.diffusion.threshold, factor=4.0,
                              stop_token_ids=loaded.stop_token_ids)
    events = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id).generate(ids, settings)
    assert next(e for e in events if isinstance(e, Finished)).token_ids == factor["token_ids"]
    expect_error(capsys, ["generate", "tiny", "-p", "hi", "--reveal-factor", "-1", *GEN], "--reveal-factor")
    expect_error(capsys, ["generate", "tiny", "-p", "hi", "--reveal-factor", "1", "--threshold", "0.8", *GEN],
                 "give one")


def test_penalty_flags_reach_the_decoder_in_generate_and_chat(capsys, tmp_path):
    """--repetition-penalty (and its siblings) change the greedy answer of `generate` and of a piped `chat`, and
    both give what the decoder gives with those penalties (the flags are not just checked and dropped)."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished
    from clover_local.generate.ranges import Penalties
    from clover_local.loader import load

    args = ["generate", "tiny", "-p", "add 12+30", "--no-think", "--max-new-tokens", "12", "--json", *GEN]
    assert run_cli(args) == 0
    plain = json.loads(capsys.readouterr().out)["token_ids"]
    flags = ["--repetition-penalty", "1.3", "--presence-penalty", "0.5", "--frequency-penalty", "0.25"]
    assert run_cli(args + flags) == 0
    penalized = json.loads(capsys.readouterr().out)["token_ids"]
    assert penalized != plain, "the penalties changed nothing here: pick others"
    loaded = load("tiny", "cpu", "float32")
    tok = loaded.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "add 12+30"}], enable_thinking=False))
    settings = DecodeSettings(max_new_tokens=12, threshold=loaded.config.diffusion.threshold,
                              stop_token_ids=loaded.stop_token_ids, penalties=Penalties(0.5, 0.25, 1.3))
    events = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id).generate(ids, settings)
    assert next(e for e in events if isinstance(e, Finished)).token_ids == penalized

    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOVER_LOCAL_")}
    answers = [subprocess.run([sys.executable, "-m", "clover_local", "chat", "tiny", "--no-think", "--max-tokens",
                               "12", *GEN, *extra], input="add 12+30\n", capture_output=True, text=True,
                              timeout=120, env={**env, "HOME": str(tmp_path)}).stdout for extra in ([], flags)]
    assert answers[0].strip() == tok.decode(plain).strip() and answers[1].strip() == tok.decode(penalized).strip()


def test_chat_template_flag_renders_with_the_given_template(capsys, tmp_path):
    """--chat-template FILE: the prompt is rendered by that template (the loader hands it to the tokenizer); a file
    that is missing or not a valid template is one line, before any model loads."""
    from clover_local.loader import load

    own = tmp_path / "plain.jinja"
    own.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                   "<|im_start|>assistant\nAnswer briefly. ")
    loaded = load("tiny", "cpu", "float32", chat_template=own.read_text())
    prompt = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\nAnswer briefly. ") and "<think>" not in prompt
    args = ["generate", "tiny", "-p", "add 12+30", "--max-new-tokens", "8", "--json", *GEN]
    assert run_cli(args) == 0
    default = json.loads(capsys.readouterr().out)["token_ids"]
    assert run_cli(args + ["--chat-template", str(own)]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] != default  # (the other prompt: another answer)
    expect_error(capsys, args + ["--chat-template", str(tmp_path / "missing.jinja")], "missing.jinja")
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    expect_error(capsys, args + ["--chat-template", str(broken)], "broken.jinja", "invalid")
    for command in ("chat", "serve"):  # the same flag, checked the same way before loading
        expect_error(capsys, [command, "tiny", "--chat-template", str(broken), *GEN], "broken.jinja", "invalid")
