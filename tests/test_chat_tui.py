"""`clover-local chat` in a real terminal: tmux runs it in a 120×40 pane, the test types into it (send-keys) and
reads the screen (capture-pane). A question, `/think off`, a second question, Ctrl-C during a long answer,
`/save`, bad input, `/exit`. The model is a tiny random checkpoint (gibberish answers, same machinery), slowed
down between passes by CLOVER_LOCAL_PASS_DELAY so the live display can be caught mid-block.

Also: the pieces the display is made of (thinking/answer split, Markdown settling), and the piped mode.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clover_local.chat.display import MarkdownSettler
from clover_local.chat.turn import ReasoningSplitter, prompt_opens_thinking
from clover_local.errors import CloverError

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"[\d,]+ tokens? · [\d,]+ pass(?:es)? · [\d.]+ tok/pass")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOVER_LOCAL_", "TMUX"))}
    if "UTF-8" not in (env.get("LC_ALL") or env.get("LANG") or "").upper().replace("UTF8", "UTF-8"):
        env["LANG"] = "C.UTF-8"  # tmux draws non-ASCII as _ otherwise
        env.pop("LC_ALL", None)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HOME=str(tmp_path / "home"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    env.update(extra)
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


class Pane:
    """One tmux session on its own server socket, so nothing touches the user's tmux."""

    def __init__(self, command: str, env: dict[str, str], width: int = 120, height: int = 40) -> None:
        self.socket = f"clover-test-{uuid.uuid4().hex[:8]}"
        self.path = ""
        self.env = env
        self._tmux("new-session", "-d", "-x", str(width), "-y", str(height), command)
        self.path = self._tmux("display-message", "-p", "#{socket_path}").strip()

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-u", "-L", self.socket, *args], env=self.env, check=True, capture_output=True,
                              text=True, timeout=20).stdout

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "0", *keys)

    def write(self, text: str) -> None:
        """Keys typed as they are, with no Enter after them."""
        self._tmux("send-keys", "-t", "0", "-l", text)

    def type(self, text: str) -> None:
        self.write(text)
        self._tmux("send-keys", "-t", "0", "Enter")

    def paste(self, text: str) -> None:
        """Text pasted as a terminal pastes it: in bracketed-paste markers, where the program asked for them."""
        self._tmux("set-buffer", "--", text)
        self._tmux("paste-buffer", "-p", "-t", "0")

    def screen(self, history: bool = True) -> str:
        args = ["capture-pane", "-p", "-J", "-t", "0"] + (["-S", "-3000"] if history else [])
        return self._tmux(*args)

    def wait(self, pred, what: str, timeout: float = 60.0, history: bool = True) -> str:
        end = time.monotonic() + timeout
        while True:
            text = self.screen(history)
            if pred(text):
                return text
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; the screen shows:\n{text}")
            time.sleep(0.1)

    def wait_text(self, needle: str, timeout: float = 60.0, count: int = 1) -> str:
        return self.wait(lambda s: s.count(needle) >= count, repr(needle), timeout)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=20)
        if self.path:
            Path(self.path).unlink(missing_ok=True)  # tmux leaves its socket file behind


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI: apt-get install -y tmux)")
def test_chat_in_a_real_terminal(make_checkpoint, tmp_path):
    ckpt = make_checkpoint(seed=5)
    saved = tmp_path / "conversation.json"
    env = _env(tmp_path, CLOVER_LOCAL_PASS_DELAY="0.03")
    cmd = (f"{shlex.quote(sys.executable)} -m clover_local chat {shlex.quote(str(ckpt))} --device cpu "
           f"--dtype float32 --max-tokens 20; echo CHAT-EXITED $?; sleep 600")
    pane = Pane(cmd, env)
    try:
        screen = pane.wait_text("/help for commands", timeout=90)
        assert "clover-local chat" in screen and "blocks of 8" in screen
        pane.wait_text("you ›")

        # 1. a question: answered with the live display, then a summary line
        pane.type("hello there")
        screen = pane.wait(lambda s: len(SUMMARY.findall(s)) >= 1, "the first answer's summary", 60)
        assert "you › hello there" in screen
        assert "clover" in screen

        # 2. /think off (typed with Tab: the command, then its word), a second question
        pane.write("/th")
        pane.send("Tab")
        pane.write("of")
        pane.send("Tab")
        pane.send("Enter")
        assert "you › /think off" in pane.wait_text("thinking off")
        pane.type("second question")
        screen = pane.wait(lambda s: len(SUMMARY.findall(s)) >= 2, "the second answer's summary", 60)
        assert screen.index("thinking off") < screen.index("you › second question")

        # 3. a long answer, stopped with Ctrl-C mid-block; the chat goes on
        pane.type("/set max_tokens 4000")
        pane.wait_text("max_tokens = 4000")
        pane.type("tell me a very long story")
        mid = pane.wait(lambda s: re.search(r"block [1-9]\d* · pass \d+ · \d+/8 revealed", s) is not None,
                        "a block being denoised", 30, history=False)
        assert "░" in mid  # masked cells still to fill
        status = [line for line in mid.splitlines() if "Ctrl-C stops" in line]
        assert status and "tok/s" in status[0] and "tok/pass" in status[0] and "expert cache —" in status[0]
        pane.send("C-c")
        screen = pane.wait_text("stopped (Ctrl-C)", 30)
        screen = pane.wait(lambda s: len(SUMMARY.findall(s)) >= 3 and s.rstrip().endswith("you ›"),
                           "the prompt after Ctrl-C", 30)
        kept = int(re.search(r"kept ([\d,]+) tokens?", screen).group(1).replace(",", ""))
        assert 0 < kept < 4000

        # 4. bad input to a slash command: one line, the chat goes on
        pane.type("/set temperature hot")
        pane.wait_text("error: /set temperature needs a number")

        # 5. /save, and the file holds the whole conversation
        pane.type(f"/save {saved}")
        pane.wait_text("saved 6 messages")
        data = json.loads(saved.read_text(encoding="utf-8"))
        assert data["format"] == "clover-local-chat"
        roles = [m["role"] for m in data["messages"]]
        assert roles == ["user", "assistant"] * 3
        assert [m["content"] for m in data["messages"][0::2]] == [
            "hello there", "second question", "tell me a very long story"]
        assert data["messages"][5].get("interrupted") is True
        assert "interrupted" not in data["messages"][1]
        assert data["settings"]["think"] is False and data["settings"]["max_tokens"] == 4000

        # 6. /exit ends the chat cleanly
        pane.type("/exit")
        screen = pane.wait_text("CHAT-EXITED 0", 30)
        assert "Traceback" not in screen
    finally:
        pane.close()

    # 7. the conversation was kept as it went: `--continue` goes on with it (here piped: read, not kept again)
    kept = tmp_path / "cache" / "clover-local" / "last_chat.json"
    assert json.loads(kept.read_text(encoding="utf-8"))["messages"] == data["messages"]
    proc = subprocess.run([sys.executable, "-m", "clover_local", "chat", str(ckpt), "--device", "cpu", "-c",
                           "--max-tokens", "3"], input="one more\n", capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (f"loaded 6 messages (3 turns) from your last conversation (with {ckpt}) (its settings: thinking off"
            in proc.stderr), proc.stderr
    assert json.loads(kept.read_text(encoding="utf-8"))["messages"] == data["messages"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI: apt-get install -y tmux)")
def test_chat_ctrl_d_and_multiline(make_checkpoint, tmp_path):
    ckpt = make_checkpoint(seed=6)
    env = _env(tmp_path)
    saved = tmp_path / "multi.json"
    cmd = (f"{shlex.quote(sys.executable)} -m clover_local chat {shlex.quote(str(ckpt))} --device cpu "
           f"--max-tokens 8 --no-think; echo CHAT-EXITED $?; sleep 600")
    pane = Pane(cmd, env)
    try:
        pane.wait_text("/help for commands", timeout=90)
        pane.type("first line \\")
        pane.type("second line")
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 1, "an answer", 60)
        pane.send("Up")  # the continued message is one history entry: recalled and sent whole (was its last line)
        pane.send("Enter")
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 2, "an answer to the recalled message", 60)
        pane.type('"""')
        pane.type("inside a block")
        pane.type('"""')
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 3, "a third answer", 60)
        pane.wait_text("you ›", count=4)
        pane.paste("pasted one\npasted two\n")  # one message, sent by the Enter after it (was one per line)
        time.sleep(0.5)
        pane.send("Enter")
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 4, "an answer to the paste", 60)
        pane.type(f"/save {saved}")
        pane.wait_text("saved 8 messages")
        users = [m["content"] for m in json.loads(saved.read_text())["messages"] if m["role"] == "user"]
        assert users == ["first line \nsecond line", "first line \nsecond line", "inside a block",
                         "pasted one\npasted two"]
        # Ctrl-D at the next prompt, as a person presses it: once the prompt is drawn (sent while the chat was
        # still between the /save and the prompt, the key was lost in the terminal's mode switch: a CI flake)
        pane.wait_text("you ›", count=6)
        time.sleep(0.5)
        pane.send("C-d")
        screen = pane.wait_text("CHAT-EXITED 0", 30)
        assert "bye" in screen and "Traceback" not in screen
    finally:
        pane.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI: apt-get install -y tmux)")
def test_chat_at_80_columns_holds_back_what_is_typed_during_an_answer(make_checkpoint, tmp_path):
    """At 80 columns: /help's descriptions wrap inside their column; the live status line fits on one line;
    what is typed while an answer is drawn is not echoed into it (the echo used to land inside the live region,
    which then left frozen `block … · pass …` lines behind) nor sent: a note names it, and the chat goes on."""
    ckpt = make_checkpoint(seed=5)
    env = _env(tmp_path, CLOVER_LOCAL_PASS_DELAY="0.04")
    cmd = (f"{shlex.quote(sys.executable)} -m clover_local chat {shlex.quote(str(ckpt))} --device cpu "
           f"--dtype float32 --max-tokens 64; echo CHAT-EXITED $?; sleep 600")
    pane = Pane(cmd, env, width=80, height=30)
    try:
        pane.wait_text("you ›", timeout=90)
        pane.type("/help")
        screen = pane.wait_text("  /exit ")  # the table's last row (the text above it names /exit too)
        table = screen[screen.index("  /help "):screen.index("  /exit ")].splitlines()
        assert len(table) > 11 and all(line.startswith("  ") for line in table), table  # wrapped in its column

        pane.type("tell me a story")
        live = pane.wait(lambda s: re.search(r"block \d+ · pass \d+", s) is not None, "a block being denoised",
                         30, history=False)
        status = [line for line in live.splitlines() if "tok/pass" in line]
        assert len(status) == 1 and status[0].rstrip().endswith("Ctrl-C stops"), live  # one line, not wrapped
        pane.type("clear")
        pane.type("/think off")
        screen = pane.wait(lambda s: len(SUMMARY.findall(s)) >= 1 and s.rstrip().endswith("you ›"), "the answer", 60)
        answer = screen[screen.index("you › tell me a story"):]
        assert 'not sent (typed while the answer was drawn): "clear", "/think off"' in answer.replace("\n", " ")
        before_note = answer[:answer.index("not sent")]
        assert "clear" not in before_note and "/think" not in before_note  # not echoed into the answer
        assert not re.search(r"block \d+ · pass|revealed|Ctrl-C stops", answer)  # nothing of the live region left
        assert not any(line.strip() == "stops" for line in screen.splitlines())
        pane.type("/think")
        pane.wait_text("thinking on, shown")  # the `/think off` typed during the answer was not run
        pane.type("/exit")
        assert "Traceback" not in pane.wait_text("CHAT-EXITED 0", 30)
    finally:
        pane.close()


def test_chat_piped_is_plain_text(make_checkpoint, tmp_path):
    ckpt = make_checkpoint(seed=7)
    lines = "hello\n/think off\n/set max_tokens 3\nagain\n/set top_p 7\n/load nowhere.json\n/stats\n"
    proc = subprocess.run([sys.executable, "-m", "clover_local", "chat", str(ckpt), "--device", "cpu",
                           "--max-tokens", "6"], input=lines, capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout  # no escape codes when not on a terminal
    assert len(proc.stdout.splitlines()) == 2  # one line per answer (random tokens rarely hold newlines)
    assert "error: /set top_p needs a number in [0, 1]" in proc.stderr
    assert "error: cannot load nowhere.json: no such file" in proc.stderr
    assert "tokens/pass" in proc.stderr and "Traceback" not in proc.stderr


def test_chat_load_continues_with_the_saved_settings_except_the_command_lines(make_checkpoint, tmp_path):
    """`chat --load F` says what it loaded and restores the settings F was saved with, except those given on the
    command line; a bad saved value is skipped (the file still loads); `/load` in the chat restores them too."""
    ckpt = make_checkpoint(seed=7)
    saved = {"format": "clover-local-chat", "version": 1, "model": "x",
             "settings": {"think": False, "temperature": 0.5, "max_tokens": 5, "top_p": 7, "threshold": 0.8},
             "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    (tmp_path / "saved.json").write_text(json.dumps(saved), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "clover_local", "chat", str(ckpt), "--device", "cpu",
                           "--load", "saved.json", "--max-tokens", "6", "--threshold", "0.7"],
                          input="/set\n/think on\n/load saved.json\n/set\n", capture_output=True, text=True,
                          timeout=120, env=_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "loaded 2 messages (1 turn) from saved.json (its settings: thinking off, temperature 0.5)" in err, err
    assert "threshold 0.7 · temperature 0.5 · top_p 1 · max_tokens 6 · thinking off" in err, err
    # in the chat nothing was set on a command line: everything valid in the file comes back
    assert "(its settings: thinking off, max_tokens 5, threshold 0.8)" in err, err
    assert "threshold 0.8 · temperature 0.5 · top_p 1 · max_tokens 5 · thinking off" in err, err
    assert "Traceback" not in err


def test_chat_file_sends_a_document_with_a_question(make_checkpoint, tmp_path):
    """`/file PATH ASK` sends the file's text then the question as one user message (kept as such by /save);
    a quoted path may hold spaces; a missing, empty or unnamed file is one error line and nothing is sent."""
    ckpt = make_checkpoint(seed=7)
    (tmp_path / "my notes.txt").write_text("alpha beta\ngamma\n\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text(" \n", encoding="utf-8")
    lines = ('/file "my notes.txt" what\'s in it?\n/file missing.txt hi\n/file empty.txt\n/file\n'
             "/save out.json\n")
    proc = subprocess.run([sys.executable, "-m", "clover_local", "chat", str(ckpt), "--device", "cpu",
                           "--max-tokens", "4"], input=lines, capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sending my notes.txt (18 characters) and your question" in proc.stderr
    assert "error: cannot read missing.txt" in proc.stderr
    assert "error: empty.txt is empty: nothing to send" in proc.stderr
    assert "error: /file needs a file name" in proc.stderr and "Traceback" not in proc.stderr
    messages = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "alpha beta\ngamma\n\nwhat's in it?"


# ---------------------------------------------------------------------------------------------- pieces

def _feed(splitter: ReasoningSplitter, text: str, step: int = 1) -> tuple[str, str]:
    r = c = ""
    for n in range(1, len(text) + 1, step):
        dr, dc = splitter.update(text[:n])
        r, c = r + dr, c + dc
    dr, dc = splitter.update(text, final=True)
    return r + dr, c + dc


@pytest.mark.parametrize("step", [1, 3, 7])
def test_thinking_is_split_from_the_answer_at_any_growth(step):
    text = "<think>\nI add 12 and 30.\n</think>\n\n42 is **the** answer"
    assert _feed(ReasoningSplitter(), text, step) == ("I add 12 and 30.", "42 is **the** answer")
    assert _feed(ReasoningSplitter(), "plain answer <think> kept", step) == ("", "plain answer <think> kept")
    # a template that opens the thinking itself
    assert _feed(ReasoningSplitter(True), "hmm\n</think>\n\nyes", step) == ("hmm", "yes")
    # cut off while thinking: all of it is reasoning
    assert _feed(ReasoningSplitter(), "<think>\nstill going", step) == ("still going", "")


def test_prompt_opens_thinking():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n")


def test_markdown_settles_by_paragraph_and_never_splits_a_fence():
    s = MarkdownSettler(max_tail=40)
    out = s.feed("Intro paragraph.\n\nSecond")
    assert out == [("Intro paragraph.", True)] and s.pending == "Second"
    out = s.feed(" one.\n\n```python\nx = 1\n\ny = 2\n")
    assert out == [("Second one.", True)]  # the blank line inside the fence is not a boundary
    out = s.feed("z = 3\n" * 8)  # a long code block: forced cut closes and reopens the fence
    assert out and out[-1][0].startswith("```python") and out[-1][0].endswith("```")
    assert s.pending.startswith("```python\n")
    rest = s.feed("```\n") + s.flush()
    assert rest[-1][0].startswith("```python") and rest[-1][0].endswith("```")


def test_live_view_draws_the_block_as_cells():
    """Mid-block: masked cells, revealed tokens coloured by confidence, thinking apart, status last."""
    from rich.console import Console
    from rich.text import Text

    from clover_local.chat.display import TurnView, confidence_color
    from clover_local.generate.events import PassDone, Reveal

    words = {1: "Hello", 2: " world", 3: "\n", 4: "<|im_end|>"}
    view = TurnView(lambda i: words[i], block_size=8, show_thinking=True, status=lambda width: Text("STATUS"), width=80)
    out = view.on_text("I should greet.\nThen", "", True, 6)
    assert [r.plain for r in out] == ["thinking", "┊ I should greet."]  # settled lines print for good
    view.on_pass(PassDone(2, 0, [Reveal(1, 1, 0.97), Reveal(4, 4, 0.3)], [None, 1, None, None, 4, None, None, None], 0))
    view.on_pass(PassDone(2, 1, [Reveal(2, 2, 0.6)], [None, 1, 2, None, 4, None, None, None], 0))
    console = Console(width=80, record=True, color_system="truecolor", force_terminal=True)
    console.print(view)
    lines = console.export_text(clear=False).splitlines()
    assert lines[0] == "┊ Then"  # the unsettled thinking, live
    assert lines[1].startswith("block 2 · pass 2 · 3/8 revealed")
    assert lines[2].split() == ["░░░░░░", "Hello", "world", "░░░░░░", "EOS", "░░░░░░", "░░░░░░", "░░░░░░"]
    assert lines[3] == "STATUS"
    html = console.export_html(inline_styles=True)
    assert confidence_color(0.97) in html and confidence_color(0.3) in html
    # the answer starts: the thinking is closed and printed, the content settles by paragraph
    out = view.on_text("", "Hi **there**.\n\nMore", False, 6)
    assert [getattr(r, "plain", None) for r in out][:1] == ["┊ Then"]
    assert view.content.pending == "More"
    view.on_commit(2)
    assert view.cells.revealed == 0 and view.cells.block == 3


def test_live_view_shows_a_long_prompt_being_read():
    """While a prompt takes more than one prefill pass the cells give way to a progress line; the first pass
    brings them back. The answer's tok/s leaves the prompt's reading out (shown apart in the summary)."""
    from rich.console import Console
    from rich.text import Text

    from clover_local.chat.display import TurnView
    from clover_local.chat.turn import TurnStats
    from clover_local.generate.events import BlockCommitted, PassDone, PrefillProgress

    view = TurnView(str, block_size=4, show_thinking=True, status=lambda width: Text("STATUS"), width=80)
    stats = TurnStats(prompt_tokens=3000)

    def draw() -> list[str]:
        console = Console(width=80, record=True, force_terminal=True)
        console.print(view)
        return console.export_text().splitlines()

    for ev in (PrefillProgress(0, 2048), PrefillProgress(512, 2048)):
        view.on_prefill(ev)
        stats.on_event(ev)
    lines = draw()
    assert lines[0].startswith("reading the prompt ") and "512/2,048 tokens" in lines[0]
    assert lines[0].count("━") == 20 and lines[1] == "STATUS"
    # the rate and what is left at that rate, once half a second has gone
    from clover_local.chat.display import prefill_line

    assert prefill_line(PrefillProgress(512, 2048), 0.4).plain.endswith("512/2,048 tokens")
    assert prefill_line(PrefillProgress(512, 2048), 2.0).plain.endswith("· 256 tok/s · 6 s left")
    assert prefill_line(PrefillProgress(100, 30_720), 1.0).plain.endswith("· 100 tok/s · 5 min 06 s left")
    assert prefill_line(PrefillProgress(10, 100_000), 1.0).plain.endswith("· 10 tok/s · 2 h 46 min left")
    assert prefill_line(PrefillProgress(2048, 2048), 2.0).plain.endswith("· 1,024 tok/s")
    time.sleep(0.05)
    view.on_prefill(PrefillProgress(2048, 2048))
    stats.on_event(PrefillProgress(2048, 2048))
    assert not any("reading" in line for line in draw())  # done: the block's cells again
    assert draw()[0].startswith("block 0 · pass 0")
    view.on_pass(PassDone(0, 0, [], [None, None, 1, None], 0))
    stats.on_event(BlockCommitted(0, [1, 2, 3, 4], 1))
    stats.end("stop")
    assert stats.prefilled == 2048 and 0.05 <= stats.prefill_seconds < stats.seconds
    assert stats.tokens_per_second == pytest.approx(4 / (stats.seconds - stats.prefill_seconds))


def test_decode_thread_hands_over_events_raises_failures_and_stops():
    """`DecodeThread`: the chat's decoder runs on a worker thread (so drawing overlaps its GPU waits); the
    consumer gets the events in order, an exception where it happened (same object), and `close()` stops the
    decoder at its next event and joins, so the model is never used by two threads."""
    import threading

    from clover_local.chat.turn import DecodeThread

    where: list[str] = []

    def events(stop, fail_at=None, n=50):
        for i in range(n):
            where.append(threading.current_thread().name)
            if i == fail_at:
                raise MemoryError("out of host RAM")
            yield i
            if stop():
                return

    t = DecodeThread(lambda stop: events(stop))
    assert list(t) == list(range(50)) and set(where) == {"clover-decode"}
    t.close()

    got, boom = [], None
    t = DecodeThread(lambda stop: events(stop, fail_at=7))
    try:
        for ev in t:
            got.append(ev)
    except MemoryError as exc:
        boom = exc
    finally:
        t.close()
    assert got == list(range(7)) and str(boom) == "out of host RAM"

    where.clear()
    t = DecodeThread(lambda stop: events(stop, n=10_000), lockstep=True)  # at most one event ahead
    it = iter(t)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    time.sleep(0.2)
    assert len(where) <= 5  # waited for the consumer
    t.close()
    assert not t._thread.is_alive() and len(where) <= 6  # stopped at its next event, not run to the end


def test_decode_thread_interrupt_stops_a_long_prefill_at_once():
    """Ctrl-C in the chat (`DecodeThread.interrupt`) raises KeyboardInterrupt inside the decoder wherever it is,
    as the signal did before the decoder had a thread: a prefill that would run 5 s more ends at once, and the
    decoder's own cleanup runs."""
    from clover_local.chat.turn import DecodeThread

    seen: list[str] = []

    def events(stop):
        try:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 5:  # a long prefill (Python between short C calls)
                time.sleep(0.001)
            yield 1
        except KeyboardInterrupt:
            seen.append("interrupted")
            raise
        finally:
            seen.append("cleaned up")

    t = DecodeThread(events)
    time.sleep(0.2)
    t0 = time.perf_counter()
    t.interrupt()
    t.close()
    assert time.perf_counter() - t0 < 1.0 and not t._thread.is_alive()
    assert seen == ["interrupted", "cleaned up"]
    t.interrupt()  # after the end: nothing to interrupt, no error


def _chat(make_checkpoint, interactive: bool, width: int = 80):
    from rich.console import Console

    from clover_local.chat.app import ChatApp
    from clover_local.chat.conversation import ChatSettings
    from clover_local.loader import load

    screen = io.StringIO()
    loaded = load(str(make_checkpoint(seed=7)), "cpu", "float32")
    app = ChatApp(loaded, "test", ChatSettings(), interactive=interactive,
                  console=Console(file=screen, width=width, force_terminal=True, color_system=None))
    return app, screen


def test_the_last_conversation_is_kept_once_it_has_a_message_of_yours(make_checkpoint, tmp_path):
    """`keep_at` (chat on a terminal) holds the conversation after each input once the user has said something —
    a chat only opened, or /reset, leaves the one before in place — written whole; `--continue` without one, or
    with --load, is one error line."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.keep_at = tmp_path / "kept" / "last_chat.json"
    app.settings.max_tokens = 3
    app.handle("/help")
    assert not app.keep_at.exists()
    app.handle("first")
    first = json.loads(app.keep_at.read_text(encoding="utf-8"))
    assert [m["content"] for m in first["messages"]][0] == "first" and first["model"] == "test"
    app.handle("/reset")
    assert json.loads(app.keep_at.read_text(encoding="utf-8")) == first
    app.handle("second")
    assert [m["content"] for m in json.loads(app.keep_at.read_text())["messages"]][0] == "second"
    assert not list(app.keep_at.parent.glob("*.part"))

    ckpt = make_checkpoint(seed=7)
    for flags, line in ((["-c"], "error: no conversation to continue yet"),
                        (["--continue", "--load", "x.json"], "error: --continue and --load each pick")):
        proc = subprocess.run([sys.executable, "-m", "clover_local", "chat", str(ckpt), *flags], input="",
                              capture_output=True, text=True, timeout=120, env=_env(tmp_path), cwd=tmp_path)
        assert proc.returncode != 0 and proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr


def test_save_writes_over_a_saved_chat_but_not_over_other_files(make_checkpoint, tmp_path, monkeypatch):
    """/save replaces a conversation saved before, or an empty file; a file holding anything else (notes, a bare
    message list another tool wrote, bytes that are not text) is refused in one line and left as it was. The
    file is written whole: a write that fails leaves the one before and no `.part` beside it."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.settings.max_tokens = 3
    app.handle("first")
    chat = tmp_path / "chat.json"
    (tmp_path / "empty.json").write_bytes(b"")
    for name in ("chat.json", "chat.json", "empty.json"):  # (a second /save over the first)
        app.command(f"/save {tmp_path / name}")
        assert json.loads((tmp_path / name).read_text())["messages"][0]["content"] == "first"
    deep = tmp_path / "deep.json"  # nested past Python's parser: one line, as any malformed file
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(CloverError, match="cannot load .*: not JSON \\(nested too deeply"):
        app.command(f"/load {deep}")
    foreign = {"deep.json": deep.read_bytes(), "notes.txt": "my notes\n".encode(),
               "list.json": b'[{"role": "user", "content": "x"}]',
               "noise.bin": bytes(range(200, 256))}
    for name, data in foreign.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CloverError, match="holds something other than a conversation saved by chat"):
            app.command(f"/save {tmp_path / name}")
        assert (tmp_path / name).read_bytes() == data
    for folder in (tmp_path, Path("/")):  # (`/` was a ValueError: no name to put `.part` after)
        with pytest.raises(CloverError, match=f"cannot save to {folder}: Is a directory"):
            app.command(f"/save {folder}")
    before = chat.read_bytes()
    app.handle("second")

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(CloverError, match="cannot save to .*: No space left on device"):
        app.command(f"/save {chat}")
    assert chat.read_bytes() == before and not list(tmp_path.glob("*.part"))


def test_status_line_fits_the_width_and_shows_a_prompt_being_read(make_checkpoint, monkeypatch):
    """The live status line is one line at any width (shortened, then parts dropped; at 80 columns the Ctrl-C
    hint stays whole: it wrapped, leaving `stops` alone); while a long prompt is read it shows how far, not an
    answer's zero rates; counts of one are singular."""
    from rich.console import Console

    import clover_local.chat.app as chat_app
    from clover_local.chat.display import TurnView
    from clover_local.chat.turn import TurnStats
    from clover_local.generate.events import BlockCommitted, PassDone, PrefillProgress, Reveal

    app, _ = _chat(make_checkpoint, interactive=True)
    monkeypatch.setattr(chat_app, "gpu_memory", lambda model: (3 * 2**30, 16 * 2**30))
    monkeypatch.setattr(app, "_runtime_stats", lambda: {"hit_rate": 0.97})
    bs = app.decoder.block_size
    stats = TurnStats(prompt_tokens=3000 * bs + 5, started=time.perf_counter() - 60)
    view = TurnView(str, bs, True, status=lambda width: app._status(stats, view, width), width=80)

    def region(width: int) -> list[str]:
        console = Console(width=width, record=True, force_terminal=True)
        console.print(view)
        return console.export_text().splitlines()

    for ev in (PrefillProgress(0, 3000 * bs), PrefillProgress(1380 * bs, 3000 * bs)):
        view.on_prefill(ev)
        stats.on_event(ev)
    line = app._status(stats, view, 200).plain
    assert line.startswith("● reading the prompt: 46% · expert cache 97% · GPU 3.0/16.0 GiB")
    assert "tok/s" not in line and "0 passes" not in line
    assert region(80)[-1] == line and all(len(row) <= 80 for row in region(80))
    # the same prompt after a turn that prefilled 16 tokens of it
    stats = TurnStats(prompt_tokens=3000 * bs + 5, started=time.perf_counter() - 60)
    view.on_prefill(PrefillProgress(1380 * bs, 3000 * bs - 16))
    assert "· 16 tokens resumed from the last turn ·" in app._status(stats, view, 200).plain

    view.on_pass(PassDone(0, 0, [Reveal(0, 7, 0.9)], [7] + [None] * (bs - 1), 0))
    stats.on_event(PassDone(0, 0, [], [], 0))
    full = app._status(stats, view, 200).plain
    assert full.startswith("● ") and "1 token, 1 pass ·" in full and full.endswith("   Ctrl-C stops")
    for ev in [BlockCommitted(0, list(range(bs)), 1)] * 150:
        stats.on_event(ev)
    stats.passes = 1234
    full = app._status(stats, view, 200).plain
    assert "1,201 tokens, 1,234 passes · expert cache 97% · GPU 3.0/16.0 GiB   Ctrl-C stops" in full
    assert len(full) > 80  # what wrapped at 80 columns
    at80 = app._status(stats, view, 80).plain
    assert len(at80) <= 80 and at80.endswith("Ctrl-C stops") and "tok/s" in at80 and "tok/pass" in at80
    for width in (60, 40, 20, 8):
        assert len(app._status(stats, view, width).plain) <= width
    rows = region(80)
    assert rows[-1] == at80 and all(len(row) <= 80 for row in rows)


def test_prompt_progress_keeps_what_is_left_at_80_columns():
    """The bar shrinks (then the rate goes) before the time left is cut (it read `3 …`)."""
    from clover_local.chat.display import prefill_line
    from clover_local.generate.events import PrefillProgress

    ev = PrefillProgress(11_264, 23_984)
    assert len(prefill_line(ev, 2.1).plain) > 80  # unfitted: longer than the terminal
    line = prefill_line(ev, 2.1, max_width=80).plain
    assert len(line) <= 80 and line.endswith("11,264/23,984 tokens · 5,364 tok/s · 2 s left")
    line = prefill_line(ev, 2.1, max_width=60).plain
    assert len(line) <= 60 and line.endswith("11,264/23,984 tokens · 2 s left")


def test_help_wraps_its_descriptions_in_their_column():
    from rich.console import Console

    from clover_local.chat.app import HELP_COMMANDS, help_text

    console = Console(width=80, record=True)
    console.print(help_text())
    lines = console.export_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  /help "))
    table = lines[first:next(i for i, line in enumerate(lines) if line.startswith("  /exit ")) + 1]
    assert len(table) > len(HELP_COMMANDS)  # some descriptions wrapped ...
    assert all(line.startswith("  /") or line.startswith(" " * 20) for line in table)  # ... under themselves
    assert all(len(line.rstrip()) <= 80 for line in lines)


def test_stats_shows_a_few_runtime_figures_and_all_of_them_on_request(make_checkpoint, monkeypatch, capsys):
    """/stats: the hit rate, copies and bytes over PCIe (not the runtime's ~30 counters: `/stats all`)."""
    import clover_local.chat.app as chat_app

    counters = {"device": "cuda:0", "slots": 120, "resident": 120, "experts_total": 256, "expert_uses": 4000,
                "hits": 3600, "misses": 400, "copied": 310, "bytes_h2d": 3 * 2**30 + 2**29, "hit_rate": 0.9,
                "pinned_evictions": 2, "read_through_error": "no host reads", "host_reads_on": False,
                "layers": [{"hits": 1}]}
    monkeypatch.setattr(chat_app, "runtime_stats", lambda model: dict(counters))
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/stats")
    err = capsys.readouterr().err
    assert "expert cache hit rate: 90%\n" in err and "expert cache misses: 400 of 4,000 expert uses" in err
    assert "experts resident: 120 of 256 (120 slots)" in err and "expert copies: 310 (3.5 GiB over PCIe)" in err
    assert "pinned_evictions" not in err and "read_through_error" not in err and "/stats all" in err
    app.command("/stats all")
    err = capsys.readouterr().err
    assert "  pinned_evictions: 2" in err and "  read_through_error: no host reads" in err
    assert "layers" not in err  # nested tables: bench's


def test_system_message_can_be_shown_set_and_removed_mid_conversation(make_checkpoint, capsys):
    """/system: chat had only --system at start; a person changes it as in other local chats, the conversation
    kept, the new message first (what the template and the next prompt read), kept by /reset and /save."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/system")
    assert "no system message" in capsys.readouterr().err
    app.ask("hello")
    app.command("/system Answer in one word.")
    assert [m["role"] for m in app.conv.messages] == ["system", "user", "assistant"]
    assert app.conv.messages[0]["content"] == "Answer in one word."
    app.command("/system Answer in French.")
    assert app.conv.system == "Answer in French." and len(app.conv.messages) == 3  # replaced, not added
    app.command("/system")
    assert "system message: Answer in French." in capsys.readouterr().err
    app.ask("again")
    prompt = app.tok.apply_chat_template(app.conv.template_messages(), add_generation_prompt=True)
    assert prompt.index("Answer in French.") < prompt.index("hello")
    app.command("/reset")
    assert app.conv.messages == [{"role": "system", "content": "Answer in French."}]
    app.command("/system off")
    assert app.conv.messages == [] and app.conv.system is None


def test_undo_and_retry_take_back_the_last_exchange(make_checkpoint, capsys, monkeypatch):
    """/undo drops your last message and its answer; /retry asks it again under the settings of now (greedy: the
    same answer, and it says so); both keep the system message, refuse when there is nothing of yours, and a retry
    that fails leaves the conversation as it was."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/system Be brief.")
    with pytest.raises(CloverError, match="nothing to take back"):
        app.command("/undo")
    app.ask("hello")
    first = app.conv.messages[-1]["content"]
    app.ask("and again")
    assert [m["role"] for m in app.conv.messages] == ["system", "user", "assistant", "user", "assistant"]
    capsys.readouterr()
    app.command("/undo")
    assert [m.get("content") for m in app.conv.messages[:2]] == ["Be brief.", "hello"] and len(app.conv.messages) == 3
    assert "took back your last message and its answer (1 turn left)" in capsys.readouterr().err
    app.command("/retry")
    err = capsys.readouterr().err
    assert "temperature 0: unchanged settings give the same answer" in err and "asking again: hello" in err
    assert [m["role"] for m in app.conv.messages] == ["system", "user", "assistant"]
    assert app.conv.messages[1]["content"] == "hello" and app.conv.messages[2]["content"] == first

    before = [dict(m) for m in app.conv.messages]

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(app, "_answer_plain", out_of_memory)
    app.command("/retry")
    assert app.conv.messages == before and "error:" in capsys.readouterr().err
    monkeypatch.undo()
    app.command("/undo")
    assert app.conv.messages == [{"role": "system", "content": "Be brief."}]
    with pytest.raises(CloverError, match="nothing to answer again"):
        app.command("/retry")


def test_typed_lines_are_what_a_person_meant():
    from clover_local.chat.app import typed_lines

    assert typed_lines(b"clear\r/think off\n") == ["clear", "/think off"]
    assert typed_lines(b"\x1b[A\x1b[Bab\x7fc\x04\n\n  \n") == ["ac"]  # arrows, a backspace, Ctrl-D, blank lines
    assert typed_lines("héllo".encode()) == ["héllo"]


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals")
def test_held_keys_are_not_echoed_and_are_read_back():
    """`HeldKeys` (around an answer): the terminal echoes nothing typed meanwhile, gives it back at the end, and
    is as it was afterwards (echo and line editing on, for the next prompt)."""
    import termios

    from clover_local.chat.app import HeldKeys

    master, slave = os.openpty()
    try:
        stream = os.fdopen(slave, "rb", buffering=0, closefd=False)
        before = termios.tcgetattr(slave)
        assert before[3] & termios.ECHO
        with HeldKeys(stream) as held:
            assert not termios.tcgetattr(slave)[3] & (termios.ECHO | termios.ICANON)
            os.write(master, b"clear\r/think off\r")
            time.sleep(0.2)
        assert held.lines == ["clear", "/think off"]
        assert termios.tcgetattr(slave) == before
        os.set_blocking(master, False)
        try:
            echoed = os.read(master, 1000)
        except BlockingIOError:
            echoed = b""
        assert b"clear" not in echoed
        with HeldKeys(io.StringIO()) as held:  # not a terminal: nothing to do
            pass
        assert held.lines == []
    finally:
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------------------------------------- mutation-found gaps

class _ByteTokenizer:
    """Token ids are bytes (a multi-byte character spans tokens); 1000 and 1001 are <think> and </think>."""

    think_end_id = 1001
    _tags = {1000: "<think>", 1001: "</think>"}

    def decode(self, ids: list[int]) -> str:
        out, run = [], []
        for i in ids:
            if i in self._tags:
                out.append(bytes(run).decode("utf-8", errors="replace"))
                out.append(self._tags[i])
                run = []
            else:
                run.append(i)
        out.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(out)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def test_turn_text_waits_for_the_rest_of_a_multibyte_character():
    from clover_local.chat.turn import TurnText

    turn = TurnText(_ByteTokenizer())
    e_acute = list("é".encode("utf-8"))
    assert turn.add(list(b"caf") + e_acute[:1]) == ("", "caf")  # half a character: not shown as U+FFFD
    assert turn.add(e_acute[1:]) == ("", "é")
    assert turn.finish() == ("", "") and turn.content == "café"


def test_reasoning_tokens_count_up_to_and_including_the_closing_tag():
    from clover_local.chat.turn import TurnText

    tok = _ByteTokenizer()
    turn = TurnText(tok)
    turn.add([1000, *b"hmm", 1001, *b"\n\nok"])
    turn.finish()
    assert (turn.reasoning, turn.content) == ("hmm", "ok")
    assert turn.reasoning_tokens == 5  # <think> h m m </think>
    still = TurnText(tok, "<|im_start|>assistant\n<think>\n")  # the template opened the thinking
    still.add(list(b"abc"))
    still.finish()
    assert (still.reasoning, still.content, still.reasoning_tokens) == ("abc", "", 3)
    plain = TurnText(tok)
    plain.add(list(b"just this"))
    plain.finish()
    assert (plain.content, plain.reasoning_tokens) == ("just this", 0)


def test_set_checks_each_setting_at_its_bounds():
    from clover_local.chat.conversation import ChatSettings, set_value
    from clover_local.generate.ranges import Penalties

    s = ChatSettings()
    for name, raw, want in (("threshold", "1", 1.0), ("top_p", "0", 0.0), ("top_p", "1", 1.0),
                            ("temperature", "0", 0.0), ("temperature", "10", 10.0), ("max_tokens", "1", 1),
                            ("max-tokens", "7", 7),
                            ("Top_P", "0.5", 0.5), ("presence_penalty", "-2", -2.0), ("frequency-penalty", "2", 2.0),
                            ("repetition_penalty", "10", 10.0)):
        assert set_value(s, name, raw) == want
    assert (s.threshold, s.top_p, s.temperature, s.max_tokens) == (1.0, 0.5, 10.0, 7)
    assert s.penalties() == Penalties(presence=-2.0, frequency=2.0, repetition=10.0)
    for name, raw in (("threshold", "0"), ("top_p", "-0.1"), ("temperature", "10.5"), ("temperature", "-1"),
                      ("max_tokens", "0"), ("max_tokens", "2.5"), ("think", "on"), ("presence_penalty", "2.1"),
                      ("frequency_penalty", "-2.5"), ("repetition_penalty", "0"), ("repetition_penalty", "11")):
        with pytest.raises(CloverError):
            set_value(s, name, raw)
    assert (s.threshold, s.top_p, s.temperature, s.max_tokens) == (1.0, 0.5, 10.0, 7)  # unchanged
    assert s.penalties() == Penalties(presence=-2.0, frequency=2.0, repetition=10.0)


def test_restore_settings_checks_each_saved_value_and_keeps_the_command_lines():
    from clover_local.chat.conversation import ChatSettings, restore_settings

    s = ChatSettings()
    saved = {"threshold": 1, "temperature": 0.5, "top_p": 1.5, "max_tokens": True, "think": "no",
             "show_thinking": False, "seed": 3, "unknown": 1}
    changed = restore_settings(s, saved, keep={"temperature"})
    assert changed == ["threshold", "show_thinking", "seed"]
    assert s.threshold == 1.0 and isinstance(s.threshold, float)
    assert (s.temperature, s.top_p, s.max_tokens, s.think, s.show_thinking, s.seed) == (0.0, 1.0, 1024, True,
                                                                                         False, 3)
    assert restore_settings(s, {"seed": True, "think": 0}) == []
    # a float where a whole number belongs (512.0, written by another tool): skipped, not a traceback that ends chat
    assert restore_settings(s, {"max_tokens": 512.0}) == [] and s.max_tokens == 1024


def test_save_and_load_keep_the_thinking_and_an_interrupted_answer(tmp_path):
    from clover_local.chat.conversation import ChatSettings, Conversation
    from clover_local.errors import CloverError

    conv = Conversation(system="be brief")
    conv.add_user("hi")
    conv.add_assistant("hel", "they greet me", interrupted=True)
    conv.add_user("again")
    conv.add_assistant("hello")
    conv.save(tmp_path / "c.json", ChatSettings(temperature=0.5), "m")
    back = Conversation()
    assert back.load(tmp_path / "c.json") == 5
    assert back.messages == conv.messages
    assert back.messages[2] == {"role": "assistant", "content": "hel", "reasoning_content": "they greet me",
                                "interrupted": True}
    assert back.saved_settings["temperature"] == 0.5
    assert all("interrupted" not in m for m in back.template_messages())
    (tmp_path / "late.json").write_text(json.dumps([{"role": "user", "content": "hi"},
                                                    {"role": "system", "content": "late"}]), encoding="utf-8")
    with pytest.raises(CloverError, match="system message may only come first"):
        back.load(tmp_path / "late.json")


@pytest.mark.parametrize("temperature, given, shown, hidden", [
    (0.0, {"presence_penalty": "-2", "frequency_penalty": "-2"}, ["presence_penalty -2", "frequency_penalty -2"],
     "repetition_penalty"),
    (1.0, {"top_k": "2", "min_p": "0.3"}, ["top_k 2", "min_p 0.3"], "top_k"),
    (0.0, {"reveal_factor": "5"}, ["reveal_factor 5"], "reveal_factor"),
], ids=["penalties", "cuts", "factor-rule"])
def test_sampling_settings_set_in_chat_reach_the_decoder_and_show_once_set(make_checkpoint, capsys, temperature,
                                                                           given, shown, hidden):
    """/set presence_penalty and frequency_penalty (greedy), top_k and min_p (a seeded draw), reveal_factor reach the
    decoder:
    /retry answers otherwise, and the same again once they are back at their off values; /set lists them only
    while they are set; a bad value is refused with what is allowed."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.settings.temperature, app.settings.seed = temperature, 5  # (chat's --temperature, --seed)
    app.command("/set")
    assert hidden not in capsys.readouterr().err
    app.ask("hello")
    plain = app.conv.messages[-1]
    for name, value in given.items():
        app.command(f"/set {name} {value}")
    capsys.readouterr()
    app.command("/set")
    listed = capsys.readouterr().err
    assert all(s in listed for s in shown) and (hidden not in listed or hidden in given)
    app.command("/retry")
    assert app.conv.messages[-1] != plain, "the settings changed nothing here: pick others"
    for name in given:
        app.command(f"/set {name} 0")
    app.command("/retry")
    assert app.conv.messages[-1] == plain
    with pytest.raises(CloverError, match="whole number" if "top_k" in given else "a number in"):
        app.command(f"/set {next(iter(given))} -3")


def test_set_lists_a_large_top_k_as_the_whole_number_it_is(make_checkpoint, capsys):
    """top_k is a count: /set lists 99999999999999999999 as typed (it showed `1e+20`), min_p still as a short
    float."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/set top_k 99999999999999999999")
    app.command("/set min_p 0.25")
    capsys.readouterr()
    app.command("/set")
    listed = capsys.readouterr().err
    assert "top_k 99999999999999999999 · min_p 0.25" in listed, listed


def test_set_says_which_reveal_rule_decides(make_checkpoint, capsys):
    """The threshold and reveal_factor are two rules, one in use: /set of either says which decides the reveals
    (a threshold set while the factor rule is on changes nothing until /set reveal_factor off)."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/set reveal_factor 1")
    assert "the factor rule decides" in capsys.readouterr().err
    app.command("/set threshold 0.8")
    assert "reveal_factor 1 decides the reveals; /set reveal_factor off" in capsys.readouterr().err
    app.command("/set reveal_factor off")
    assert ("reveal_factor = off (threshold 0.8 decides)" in capsys.readouterr().err
            and app.settings.reveal_factor == 0.0)
    app.command("/set threshold 0.7")
    assert capsys.readouterr().err.strip().endswith("threshold = 0.7")


def test_set_think_budget_says_what_it_does_and_what_off_means(make_checkpoint, capsys):
    """/set think_budget N says what the budget does; off says the thinking is the model's own again (it used to
    explain the budget it had just turned off)."""
    app, _ = _chat(make_checkpoint, interactive=False)
    app.command("/set think_budget 64")
    err = capsys.readouterr().err
    assert "think_budget = 64 (the thinking's most tokens" in err and app.settings.think_budget == 64
    app.command("/set think_budget off")
    err = capsys.readouterr().err
    assert "think_budget = off (the model thinks until it ends the thinking itself)" in err, err
    assert "most tokens" not in err and app.settings.think_budget is None


def test_tab_completes_commands_their_words_set_names_and_paths(tmp_path):
    from clover_local.chat.app import COMMAND_NAMES, HELP_COMMANDS
    from clover_local.chat.completion import candidates

    assert {c.split()[0] for c, _ in HELP_COMMANDS} < set(COMMAND_NAMES)  # every command in /help completes

    def done(line: str) -> list[str]:
        return candidates(line, COMMAND_NAMES, tmp_path)

    assert done("/s") == ["/system ", "/set ", "/save ", "/stats "] and done("/RE") == ["/retry ", "/reset "]
    assert done("/set th") == ["threshold ", "think_budget "] and done("/set reveal-factor o") == ["off"]
    assert done("/set top_p ") == [] and done("/think s") == ["show"] and done("/stats ") == ["all"]
    assert done("/copy c") == ["code"]
    assert done("hello /s") == [] and done("/retry x") == [] and done("/file a b") == []
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "report.txt").write_text("x")
    (tmp_path / "notes" / ".hidden").write_text("x")
    (tmp_path / "chat.json").write_text("{}")
    assert done("/file no") == ["notes/"] and done("/file notes/") == ["notes/report.txt "]
    assert done("/file notes/.") == ["notes/.hidden "] and done("/load c") == ["chat.json "]
    assert done("/save missing/x") == []  # a folder that is not there: nothing, no error
    absolute = str(tmp_path / "no")
    assert done("/load " + absolute) == [absolute + "tes/"]


def test_copy_puts_the_last_answer_or_its_code_on_the_clipboard(make_checkpoint):
    """/copy writes the last answer (not its thinking) as OSC 52 — the terminal's clipboard escape — and /copy code
    the inside of its last fenced code block (``` or ~~~, a longer fence closing only with one as long, an unclosed
    one to the end); nothing to copy, no code block, a word it does not take, or no terminal: one error line."""
    import base64

    from clover_local.chat.display import code_blocks

    text = "intro\n```python\nprint(1)\n```\nmid\n~~~\na\n~~~\n````\nx\n```\ny\n````\nend\n```\nopen"
    assert code_blocks(text) == ["print(1)\n", "a\n", "x\n```\ny\n", "open\n"] and code_blocks("none") == []

    app, screen = _chat(make_checkpoint, interactive=True)
    errors: list[str] = []
    app.error = errors.append
    app.handle("/copy")
    assert errors[-1].startswith("nothing to copy yet")
    answer = "Here:\n```sh\nls -la\n```\nand then\n```py\nprint('é')\n```\ndone"
    app.conv.add_user("how?")
    app.conv.add_assistant(answer, reasoning="thinking that must not be copied")

    def copied() -> str:
        payload = screen.getvalue().rsplit("\x1b]52;c;", 1)[1].split("\x07", 1)[0]
        return base64.b64decode(payload).decode("utf-8")

    app.handle("/copy")
    assert copied() == answer and "copied the last answer" in screen.getvalue()
    app.handle("/copy code")
    assert copied() == "print('é')\n" and "its last code block" in screen.getvalue()
    app.handle("/copy all")
    assert errors[-1] == "/copy takes nothing or `code`, got 'all'"
    app.conv.add_user("again")
    app.conv.add_assistant("plain words")
    app.handle("/copy code")
    assert errors[-1].startswith("the last answer has no code block")
    piped, _ = _chat(make_checkpoint, interactive=False)
    piped.error = errors.append
    piped.handle("/copy")
    assert errors[-1].startswith("/copy needs a terminal")
