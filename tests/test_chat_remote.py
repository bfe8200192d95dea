"""`clover-local chat URL`: the chat answered by a running server. The same conversation gets the same answers as
the chat with the model loaded here; the block being denoised comes over the wire and is drawn as the local
chat draws it; Ctrl-C hangs up and the server stops the answer; a server that is not there, wants a key, is
something else, or refuses a message is one line, and the chat goes on."""

from __future__ import annotations

import http.server
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from clover_local.chat.app import ChatApp
from clover_local.chat.conversation import ChatSettings
from clover_local.chat.display import TurnView
from clover_local.chat.remote import RemoteChatApp, RemoteTurn, Server
from clover_local.chat.turn import TurnStats
from clover_local.errors import CloverError
from tests.inprocess_server import running_server

REPO = Path(__file__).resolve().parents[1]
ASKED = ["add 12+30", "reverse a b c d", "and 5+5?"]


def _plain(app, asked: list[str]) -> tuple[list[str], list[str]]:
    """(the answers, the notes) of a chat in plain mode."""
    out, err = io.StringIO(), io.StringIO()
    app.out = out
    app.err = Console(file=err, width=400)
    for text in asked:
        app.handle(text)
    return out.getvalue().splitlines(), err.getvalue().splitlines()


@pytest.mark.parametrize("think, context", [(False, 4096), (True, 4096), (True, 256)])
def test_a_conversation_gets_the_answers_the_local_chat_gives(tiny, think, context):
    """Greedy, message after message (the history sent back each time, thinking included where on): the server's
    answers are the local chat's, word for word, and /stats counts the same tokens and passes; so where the
    conversation outgrows a small context (256: its oldest exchanges left out, the answer cut to the room left,
    by the server as by the local chat, and each said in the same note)."""
    asked = ASKED + (["count the words: " + "one two three " * 30, "add 1+1"] if context < 4096 else [])
    local = ChatApp(tiny, "tiny", ChatSettings(think=think, max_tokens=64), interactive=False)
    local.context = context
    want, notes = _plain(local, asked)
    with running_server(tiny, "tiny", max_tokens=64, context=context) as (_, url):
        remote = RemoteChatApp(Server.connect(url), "tiny", ChatSettings(think=think, max_tokens=64),
                               interactive=False)
        got, told = _plain(remote, asked)
    assert told == notes  # the same notes: where the model reads from, an answer cut to the context's room
    assert any(n.startswith("(the answer is limited to ") for n in notes) == (context < 4096)
    assert (local.conv.left_out > 0) == (context < 4096)  # (the small context: outgrown)
    assert remote.conv.left_out == local.conv.left_out  # the server says where it read from
    assert got == want and len(got) == len(asked) and all(got)
    assert [m["content"] for m in remote.conv.messages] == [m["content"] for m in local.conv.messages]
    assert remote.totals["tokens"] == local.totals["tokens"] and remote.totals["passes"] == local.totals["passes"]
    assert remote.last.prompt_tokens == local.last.prompt_tokens
    assert remote.last.reused_tokens == local.last.reused_tokens  # (resumed from the turn before: /stats says it)
    assert (remote.last.reused_tokens > 0) == (context == 4096)  # (at 256 the last prompt is read from its start)


def test_the_block_being_denoised_comes_over_the_wire_as_the_local_chat_draws_it(tiny, monkeypatch):
    """Each pass's block arrives with its labels and confidences and fills the same cells the local chat fills;
    the answer is printed as it commits and the summary line ends it, on a terminal."""
    from clover_local.serve.engine import VIEW_INTERVAL

    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", str(VIEW_INTERVAL + 0.01))  # (every pass sent)
    with running_server(tiny, "tiny", max_tokens=64, context=4096) as (_, url):
        server = Server.connect(url)
        assert server.about["block_size"] == tiny.config.diffusion.block_size and server.context == 4096
        slow = ChatSettings(think=False, max_tokens=32, threshold=0.9999)  # (fewer reveals a pass: several passes)
        app = RemoteChatApp(server, "tiny", slow, interactive=True)
        view = TurnView(lambda i: "", app.block_size, True, status=lambda width: "")
        told: list[tuple] = []  # (what the prompt leaves the answer, the block views seen by then)
        stats, seen = TurnStats(), []
        turn = RemoteTurn(think=False, on_prompt=lambda *prompt: told.append((prompt, len(seen))))
        app.conv.add_user("reverse a b c d")
        for chunk in server.stream(app.request()):
            turn.take(chunk, stats, view)
            if "clover_block" in chunk:
                seen.append((view.cells.block, view.cells.revealed, dict(view.cells.labels)))
        screen = io.StringIO()
        shown = RemoteChatApp(server, "tiny", ChatSettings(think=False, max_tokens=32), interactive=True,
                              console=Console(file=screen, width=100, force_terminal=True, color_system=None))
        shown.handle("reverse a b c d")
    assert turn.content == "d c b a" and stats.stop_reason == "stop" and stats.passes == len(seen) >= 2
    assert told == [((stats.prompt_tokens, 32, 0), 0)]  # told once, before the first pass's block
    assert all(b == 0 for b, _, _ in seen) and [n for _, n, _ in seen] == sorted(n for _, n, _ in seen)
    assert set(seen[-1][2].values()) >= {"d", "c", "b", "a"}  # the tokens' labels, as the cells show them
    text = screen.getvalue()
    assert "clover\n" in text and "d c b a" in text and "tok/pass" in text and "tok/s" in text


def test_hidden_thinking_is_counted_as_the_local_chat_counts_it(tiny):
    """Thinking hidden, on a terminal: the line that sums a thought up when the answer starts, and the count the
    display holds as each piece of the answer arrives, are the local chat's (tokens up to and including
    `</think>`), from the stream's `clover_commit`. They were a block behind: the summary said the tokens committed
    before the block in which the answer started (here "thought for 0 tokens" against 15)."""
    from clover_local.chat import display

    def counts(app) -> tuple[list[int], list[str]]:
        seen: list[int] = []  # the count given with each piece of the answer's text, and at its end
        on_text = display.TurnView.on_text

        def spy(view, dr, dc, thinking_open, tokens):
            if dc or not thinking_open:
                seen.append(tokens)
            return on_text(view, dr, dc, thinking_open, tokens)

        screen = io.StringIO()
        app.console = Console(file=screen, width=200, force_terminal=True, color_system=None)
        display.TurnView.on_text = spy
        try:
            for text in ASKED[:2]:
                app.handle(text)
        finally:
            display.TurnView.on_text = on_text
        return seen, re.findall(r"thought for \d+ tokens", screen.getvalue())

    settings = ChatSettings(think=True, max_tokens=64, show_thinking=False)
    want = counts(ChatApp(tiny, "tiny", settings, interactive=True))
    with running_server(tiny, "tiny", max_tokens=64, context=4096) as (_, url):
        got = counts(RemoteChatApp(Server.connect(url), "tiny", settings, interactive=True))
    assert want[1] and want[0][0] > 1  # (the first answer thought past its first block, and said so)
    assert got == want


def test_on_a_terminal_the_notes_come_before_the_answer(tiny):
    """A conversation that outgrows the server's context: the chat says, before the answer is drawn (the stream's
    clover_prompt) and before its "clover" header, as the local chat does, that the model reads it from a later
    message and that the answer is cut to the room left."""
    asked = ASKED + ["count the words: " + "one two three " * 30]
    with running_server(tiny, "tiny", max_tokens=64, context=256) as (_, url):
        screen = io.StringIO()
        app = RemoteChatApp(Server.connect(url), "tiny", ChatSettings(think=False, max_tokens=64), interactive=True,
                            console=Console(file=screen, width=300, force_terminal=True, color_system=None))
        for text in asked:
            app.handle(text)
    text = screen.getvalue()
    outgrew, limited = text.find("(the conversation outgrew the context of 256"), text.find("(the answer is limi")
    assert app.conv.left_out > 0 and 0 <= outgrew < limited  # the last answer's notes, then its header (as the
    assert limited < text.find("clover\n", limited) < text.find(" · pass 1 · ", outgrew)  # local chat), then its
    assert "error" not in text  # first pass


def test_ctrl_c_hangs_up_and_the_server_stops_the_answer(tiny, monkeypatch):
    """A Ctrl-C mid-answer closes the connection: the server counts the request cancelled, the chat keeps what
    came (marked interrupted) and goes on to the next message."""
    real = RemoteTurn.take
    state = {"chunks": 0}

    def ctrl_c(self, chunk, stats, view):
        state["chunks"] += 1
        if state["chunks"] == 3:
            raise KeyboardInterrupt
        return real(self, chunk, stats, view)

    monkeypatch.setenv("CLOVER_LOCAL_PASS_DELAY", "0.05")
    with running_server(tiny, "tiny", max_tokens=200, context=4096) as (engine, url):
        screen = io.StringIO()
        app = RemoteChatApp(Server.connect(url), "tiny", ChatSettings(think=True, max_tokens=200), interactive=True,
                            console=Console(file=screen, width=100, force_terminal=True, color_system=None))
        monkeypatch.setattr(RemoteTurn, "take", ctrl_c)
        stats = app.ask("count the words: " + "one two three " * 8)
        monkeypatch.setattr(RemoteTurn, "take", real)
        for _ in range(100):
            if engine.health()["requests"].get("cancelled"):
                break
            threading.Event().wait(0.05)
        assert engine.health()["requests"].get("cancelled") == 1
        assert stats.stop_reason == "cancelled" and "stopped (Ctrl-C)" in screen.getvalue()
        assert app.conv.messages[-1].get("interrupted") and app.totals["stopped"] == 1
        assert app.ask("reverse a b c d") is not None and app.conv.messages[-1]["content"] == "d c b a"


class _NotOurs(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


class _AlmostOurs(_NotOurs):
    """A /v1/models entry with a "clover" part but no id or context (another tool imitating ours, an old server)."""

    def do_GET(self):  # noqa: N802
        body = json.dumps({"data": [{"object": "model", "clover": {}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://[::1", "http://", "https://:8000"])
def test_an_address_that_is_not_one_is_one_line(url):
    """A port out of range and a broken IPv6 host were ValueError tracebacks from urllib."""
    with pytest.raises(CloverError, match=r"is not a server address; give one as http://HOST:PORT"):
        Server.connect(url)


def _refused_as_not_ours(handler: type[http.server.BaseHTTPRequestHandler]) -> None:
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with pytest.raises(CloverError, match="answers, but not as clover-local serve"):
            Server.connect(f"http://127.0.0.1:{other.server_address[1]}")
    finally:
        other.shutdown()


def test_a_models_list_without_our_fields_is_not_ours():
    """An entry with a "clover" part but no "id" or "max_model_len" was a KeyError traceback."""
    _refused_as_not_ours(_AlmostOurs)


def test_what_cannot_answer_is_one_line(tiny):
    """No server there, one that wants a key, a server that is not ours: one line that says what to do. A message
    the server refuses (over its context) is one error line; the chat drops it and goes on."""
    with pytest.raises(CloverError, match=r"cannot reach http://127\.0\.0\.1:9 .*clover-local serve MODEL"):
        Server.connect("http://127.0.0.1:9")
    _refused_as_not_ours(_NotOurs)
    with running_server(tiny, "tiny", max_tokens=16, context=64, api_key="s3cret") as (_, url):
        with pytest.raises(CloverError, match="needs its API key: give it with --api-key"):
            Server.connect(url)
        app = RemoteChatApp(Server.connect(url + "/v1", "s3cret"), "tiny", ChatSettings(think=False, max_tokens=16),
                            interactive=False, out=io.StringIO())
        app.err = Console(file=io.StringIO())
        assert app.ask("word " * 80) is None and app.conv.messages == []
        assert app.ask("reverse a b c d") is not None and app.conv.messages[-1]["content"] == "d c b a"


def _chat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clover_local", "chat", *args], capture_output=True, text=True,
                          input="", timeout=120, cwd=REPO)


def test_the_command_says_what_does_not_apply_to_a_server():
    """Flags that say how to load a model are refused with a server's address (it has loaded its own), and a
    server's --api-key without one; no server at the address is one line; all before anything loads."""
    out = _chat("http://127.0.0.1:9", "--vram-budget", "8GB", "--no-offload")
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: --no-offload, --vram-budget say how to load a model, but http://127.0.0.1:9 has loaded its own: set "
        "them on its `clover-local serve`"]
    out = _chat("tiny", "--api-key", "k")
    assert out.returncode == 2 and "--api-key is a server's key" in out.stderr and "Traceback" not in out.stderr
    out = _chat("http://127.0.0.1:9")
    assert out.returncode == 2 and out.stderr.startswith("error: cannot reach http://127.0.0.1:9 (")
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI: apt-get install -y tmux)")
def test_chat_with_a_server_in_a_real_terminal(make_checkpoint, tmp_path):
    """As a person would: `serve` in one process, `chat URL` in a tmux pane. The banner names the server and its
    model's placement; an answer is drawn block by block (cells, the status line) and ends with its summary;
    Ctrl-C mid-answer stops it on the server too (its log says the client went away); /exit ends the chat."""
    from tests.test_chat_tui import SUMMARY, Pane, _env

    env = _env(tmp_path, CLOVER_LOCAL_PASS_DELAY="0.03")
    serve = subprocess.Popen([sys.executable, "-m", "clover_local", "serve", str(make_checkpoint(seed=5)), "--port",
                              "0", "--device", "cpu", "--dtype", "float32", "--max-tokens", "4000"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    pane = None
    try:
        url = None
        for line in serve.stdout:
            m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
            if m:
                url = m.group(1)
                break
        assert url, "the server did not start"
        pane = Pane(f"{shlex.quote(sys.executable)} -m clover_local chat {url} --max-tokens 20; echo CHAT-EXITED $?; "
                    "sleep 600", env)
        screen = pane.wait_text("/help for commands", timeout=60)
        assert f"on {url} · blocks of 8" in screen and "the server's model: loaded whole on cpu" in screen
        pane.type("hello there")
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 1, "the first answer's summary", 60)
        pane.type("/set max_tokens 4000")
        pane.wait_text("max_tokens = 4000")
        pane.type("tell me a very long story")
        mid = pane.wait(lambda s: re.search(r"block [1-9]\d* · pass \d+ · \d+/8 revealed", s) is not None,
                        "a block being denoised", 30, history=False)
        assert "░" in mid and any("tok/s" in line and "Ctrl-C stops" in line for line in mid.splitlines())
        pane.send("C-c")
        pane.wait_text("stopped (Ctrl-C)", 30)
        pane.wait(lambda s: len(SUMMARY.findall(s)) >= 2 and s.rstrip().endswith("you ›"), "the prompt again", 30)
        pane.type("/exit")
        assert "Traceback" not in pane.wait_text("CHAT-EXITED 0", 30)
    finally:
        if pane is not None:
            pane.close()
        serve.terminate()
        log = serve.communicate(timeout=30)[0]
    assert "the client went away" in log and "Traceback" not in log


def test_a_key_sent_in_the_clear_to_another_machine_is_said(monkeypatch, capsys):
    """A key over plain http to another machine gets a note (never the key itself); to this machine, or over
    https, none."""
    entry = {"id": "m", "max_model_len": 4096, "clover": {"block_size": 32}}
    monkeypatch.setattr(Server, "get", lambda self, path: {"data": [entry]})
    Server.connect("http://192.168.1.20:8000", "s3cret")
    note = capsys.readouterr().err
    assert "the API key goes to 192.168.1.20 unencrypted" in note and "s3cret" not in note
    for url, key in (("http://127.0.0.1:8000", "s3cret"), ("http://localhost:8000", "s3cret"),
                     ("https://192.168.1.20", "s3cret"), ("http://192.168.1.20:8000", None)):
        assert Server.connect(url, key).model == "m" and capsys.readouterr().err == ""


def test_stats_show_the_servers_figures(monkeypatch, capsys):
    """/stats with a server: its queue, its prompt cache, its runtime's counters and its GPU's memory, as /health
    gives them; a server without a runtime shows none (as a model loaded whole does here)."""
    health = {"tokens": 1234, "queue": {"waiting": 2}, "prompt_cache": {"hits": 3, "lookups": 5, "reused_tokens": 640},
              "runtime": {"expert_cache_hit_rate": 0.875, "expert_uses": 800, "misses": 100},
              "gpu_memory": {"allocated_bytes": 13 << 30, "total_bytes": 16 << 30}}
    entry = {"id": "m", "max_model_len": 4096, "clover": {"block_size": 32}}
    monkeypatch.setattr(Server, "get", lambda self, path: {"data": [entry]} if path == "/v1/models" else health)
    app = RemoteChatApp(Server.connect("http://127.0.0.1:8000"), "m", ChatSettings(), interactive=False)
    app.handle("/stats")
    rows = capsys.readouterr().err.splitlines()
    assert "server: http://127.0.0.1:8000, 1,234 tokens written for all its clients, 2 waiting" in rows
    assert "prompt cache: the server's: 3 of 5 answers resumed, 640 tokens reused" in rows
    assert "expert cache hit rate: 88%" in rows and "expert cache misses: 100 of 800 expert uses" in rows
    assert rows[-1] == "GPU memory: 13.0 / 16.0 GiB"
    health["runtime"], health["gpu_memory"] = {"expert_cache_hit_rate": None}, None
    app.handle("/stats")
    rows = capsys.readouterr().err.splitlines()
    assert "expert cache hit rate: —" in rows and not any("/stats all" in r for r in rows)
    assert rows[-1] == "GPU memory: — (not on CUDA)"

    def gone(self, path):
        raise CloverError("http://127.0.0.1:8000 went away (Connection refused)")

    monkeypatch.setattr(Server, "get", gone)  # the server went away since: /stats still answers, without its figures
    app.handle("/stats")
    rows = capsys.readouterr().err.splitlines()
    assert rows[-1] == "server: http://127.0.0.1:8000: no figures (/health did not answer)"


def test_a_block_read_from_the_wire_is_drawn_as_the_local_chat_draws_it():
    """The server folds a block's passes (generate/block_view.py) and sends it as `to_dict`: its generated
    positions only (the prompt's tail left out), each token's label, the confidence it was revealed with and
    whether the last pass revealed it (a token the decoder placed itself, not revealed: full confidence); the
    chat's cells, shown that, draw what the local chat's cells draw from the passes themselves. A new block starts
    afresh: its own number, passes and labels."""
    from rich.console import Console

    from clover_local.chat.display import BlockCells
    from clover_local.generate.block_view import BlockView
    from clover_local.generate.events import PassDone, Reveal

    words = {1: "the", 2: " prompt", 10: "Hello", 11: " world", 12: "\n", 13: "<|im_end|>", 14: "<think>", 15: " ",
             16: "", 17: "<|tool_call|>"}
    served, local, remote = BlockView(words.get, 6), BlockCells(words.get, 6), BlockCells(lambda i: "", 6)

    def draw(cells: BlockCells) -> str:
        console = Console(width=80, record=True, color_system="truecolor", force_terminal=True)
        console.print(cells)
        return console.export_html(inline_styles=True)

    def sent(ev: PassDone) -> dict:
        served.update(ev)
        local.update(ev)
        view = json.loads(json.dumps(served.to_dict()))
        remote.show(view)
        assert draw(remote) == draw(local)
        assert (remote.block, remote.passes, remote.revealed, remote.size) == (
            local.block, local.passes, local.revealed, local.size)
        return view

    sent(PassDone(3, 0, [Reveal(2, 10, 0.97), Reveal(5, 13, 0.3)], [1, 2, 10, None, None, 13], 2))
    view = sent(PassDone(3, 1, [Reveal(3, 11, 0.6)], [1, 2, 10, 11, None, 13], 2))
    assert view == {"block": 3, "pass": 2, "cells": [
        {"text": "Hello", "new": False, "confidence": 0.97}, {"text": "world", "new": True, "confidence": 0.6},
        None, {"text": "EOS", "new": False, "confidence": 0.3}]}
    assert (local.revealed, local.size) == (3, 4)  # of the generated positions, not the prompt's
    # the next block: position 4 placed by the decoder itself (a thinking budget's closing text: not revealed)
    view = sent(PassDone(4, 0, [Reveal(p, t, 0.5) for p, t in enumerate((14, 15, 16, 17))],
                         [14, 15, 16, 17, 12, None], 0))
    assert view["block"] == 4 and view["pass"] == 1 and (local.revealed, local.size) == (5, 6)
    assert [c and c["text"] for c in view["cells"]] == ["think", "␣", "∅", "tool_call", "↵", None]
    assert [c and (c["new"], c["confidence"]) for c in view["cells"]] == [(True, 0.5)] * 4 + [(False, 1.0), None]
    # a position masked again (a grammar took back what it did not hold): the confidence it is revealed with next
    sent(PassDone(4, 1, [Reveal(5, 10, 0.9)], [14, 15, 16, None, 12, 10], 0))
    view = sent(PassDone(4, 2, [Reveal(3, 17, 0.25)], [14, 15, 16, 17, 12, 10], 0))
    assert view["cells"][3] == {"text": "tool_call", "new": True, "confidence": 0.25}
    # ... and revealed as another token than before: its own label, not the one shown for the first
    sent(PassDone(4, 3, [], [14, 15, 16, None, 12, 10], 0))
    view = sent(PassDone(4, 4, [Reveal(3, 11, 0.4)], [14, 15, 16, 11, 12, 10], 0))
    assert view["cells"][3] == {"text": "world", "new": True, "confidence": 0.4}


class _Canned(http.server.BaseHTTPRequestHandler):
    """A server that lists a model as `serve` does and answers a chat completion with `lines` (after `wait`
    seconds: an answer that waits in the server's queue); the bodies it was sent kept in `asked`, the paths asked
    for in `paths`."""

    lines: list[str] = []
    wait = 0.0
    asked: list[dict] = []
    paths: list[str] = []

    def do_GET(self):  # noqa: N802
        self.paths.append(self.path)
        body = json.dumps({"data": [{"id": "m", "max_model_len": 4096, "clover": {"block_size": 8}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        self.paths.append(self.path)
        self.asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        threading.Event().wait(self.wait)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for line in self.lines:
                self.wfile.write(f"{line}\n\n".encode())
        except OSError:  # (the chat hung up)
            pass
        self.close_connection = True

    def log_message(self, *args):
        pass


def _said(text: str, finish: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


@pytest.fixture
def canned():
    """(the handler class, to set its lines, the server's URL)"""
    handler = type("Handler", (_Canned,), {"lines": [], "wait": 0.0, "asked": [], "paths": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield handler, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_answer_the_server_breaks_off_is_one_error_line(canned, capsys):
    """A stream that reports an error, stops before its [DONE] or sends what is not JSON: one error line, the
    message dropped from the conversation, the chat goes on; lines that are not data (an SSE comment) are
    passed over."""
    handler, url = canned
    app = RemoteChatApp(Server.connect(url), "m", ChatSettings(think=False), interactive=False, out=io.StringIO())
    app.err = Console(file=io.StringIO())
    for lines, said in (([_said("Hel"), 'data: {"error": {"message": "the GPU ran out of memory"}}'],
                         "error: the server's answer failed: the GPU ran out of memory"),
                        ([_said("Hel")], f"error: {url} ended the answer without finishing it"),
                        ([_said("Hel"), "data: {oops"], f"error: {url} sent a chunk that is not JSON")):
        handler.lines = lines
        assert app.ask("hello") is None and app.conv.messages == []
        assert capsys.readouterr().err.startswith(said)
    handler.lines = [": keep-alive", _said("Hel"), _said("lo", "stop"), "data: [DONE]"]
    stats = app.ask("hello")
    assert stats.stop_reason == "stop" and app.conv.messages[-1]["content"] == "Hello"
    assert app.out.getvalue().endswith("Hello\n")


@pytest.mark.parametrize("given", ["/clover", "/clover/", "/clover/v1"])
def test_a_server_behind_a_proxy_at_a_path_is_asked_there(canned, given):
    """An address with a path (a reverse proxy that serves the server under a prefix): every request goes under
    it, whether the address names its /v1 or not."""
    handler, url = canned
    handler.lines = [_said("Hi", "stop"), "data: [DONE]"]
    app = RemoteChatApp(Server.connect(url + given), "m", ChatSettings(think=False), interactive=False,
                        out=io.StringIO())
    assert app.ask("hello") is not None and app.server.url == url + "/clover"
    assert handler.paths == ["/clover/v1/models", "/clover/v1/chat/completions"]


def test_an_answer_may_wait_in_the_servers_queue_longer_than_reaching_it_may_take(canned, monkeypatch):
    """CONNECT_TIMEOUT bounds reaching the server, not the answer: one queued behind other clients' for longer
    still comes."""
    from clover_local.chat import remote

    handler, url = canned
    monkeypatch.setattr(remote, "CONNECT_TIMEOUT", 0.05)
    handler.lines, handler.wait = [_said("Hello", "stop"), "data: [DONE]"], 0.3
    app = RemoteChatApp(Server.connect(url), "m", ChatSettings(think=False), interactive=False, out=io.StringIO())
    assert app.ask("hello") is not None and app.conv.messages[-1]["content"] == "Hello"


def test_ctrl_c_in_plain_mode_keeps_what_came_and_counts_the_answer_stopped(canned, monkeypatch):
    """Piped, a Ctrl-C mid-answer: what was written stays (its line ended), the answer is kept marked interrupted,
    and its figures say cancelled (not still running)."""
    handler, url = canned
    handler.lines = [_said("Hel"), _said("lo"), _said(" there", "stop"), "data: [DONE]"]
    real = RemoteTurn.take

    def ctrl_c(self, chunk, stats, view):
        if self.content:
            raise KeyboardInterrupt
        return real(self, chunk, stats, view)

    monkeypatch.setattr(RemoteTurn, "take", ctrl_c)
    app = RemoteChatApp(Server.connect(url), "m", ChatSettings(think=False), interactive=False, out=io.StringIO())
    stats = app.ask("hello")
    assert stats.stop_reason == "cancelled" and app.out.getvalue() == "Hel\n"
    assert app.conv.messages[-1]["content"] == "Hel" and app.conv.messages[-1].get("interrupted")
    assert app.totals["stopped"] == 1


def test_the_chats_settings_go_to_the_server(canned):
    """What /set changes reaches the server with the next message: sampling, the reveal rule (the factor where
    one is set, else the threshold), the seed and the thinking budget."""
    handler, url = canned
    handler.lines = [_said("Hi", "stop"), "data: [DONE]"]
    settings = ChatSettings(think=True, max_tokens=77, temperature=0.7, top_p=0.8, top_k=20, min_p=0.05, seed=7,
                            reveal_factor=0.5, think_budget=100, repetition_penalty=1.1)
    app = RemoteChatApp(Server.connect(url), "m", settings, interactive=False, out=io.StringIO())
    app.ask("hello")
    asked = handler.asked[-1]
    assert {k: asked[k] for k in ("model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
                                  "reveal_factor", "thinking_token_budget", "repetition_penalty",
                                  "enable_thinking")} == {
        "model": "m", "max_tokens": 77, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "seed": 7,
        "reveal_factor": 0.5, "thinking_token_budget": 100, "repetition_penalty": 1.1, "enable_thinking": True}
    assert "threshold" not in asked and asked["stream_options"] == {"include_usage": True, "include_blocks": False}
    app.settings = ChatSettings(think=False, threshold=0.8)
    app.ask("again")
    asked = handler.asked[-1]
    assert asked["threshold"] == 0.8 and "reveal_factor" not in asked and "seed" not in asked
    assert [m["content"] for m in asked["messages"]] == ["hello", "Hi", "again"]


def test_the_thinking_and_a_long_prompts_reading_come_over_the_wire_as_the_local_chat_shows_them():
    """A prompt's reading is drawn until the first pass's block replaces it; the thinking is printed as it
    commits (or, hidden, said to go on and summed up in one line, its tokens counted, when the answer
    starts); once the answer has started, nothing is drawn as thinking."""
    from rich.text import Text

    cell = {"text": "I", "new": True, "confidence": 0.9}
    chunks = [{"choices": [], "clover_prefill": {"done": 16, "total": 32}},
              {"choices": [], "clover_block": {"block": 0, "pass": 1, "cells": [cell] + [None] * 7, "passes": 1,
                                               "tokens": 0}},
              {"choices": [{"index": 0, "delta": {"reasoning_content": "I should add.\n"}, "finish_reason": None}]},
              {"choices": [], "clover_block": {"block": 1, "pass": 1, "cells": [cell] + [None] * 7, "passes": 2,
                                               "tokens": 8}},
              {"choices": [{"index": 0, "delta": {"content": "42\n\n"}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}]}]
    for show in (True, False):
        view = TurnView(lambda i: "", 8, show, status=lambda width: Text("STATUS"), width=80)
        turn, stats, printed, drawn = RemoteTurn(think=True), TurnStats(), [], []
        for chunk in chunks:
            printed.append([getattr(r, "plain", None) or getattr(r, "markup", None) for r in
                            turn.take(chunk, stats, view)])
            console = Console(width=80, record=True)
            console.print(view)
            drawn.append(console.export_text())
        assert "reading the prompt" in drawn[0] and "block" not in drawn[0]
        assert "reading the prompt" not in drawn[1] and "block 0 · pass 1 · 1/8 revealed" in drawn[1]
        assert printed[2] == (["thinking", "┊ I should add."] if show else [])
        assert ("thinking… " in drawn[3]) == (not show)
        assert printed[4] == ([] if show else ["▸ thought for 8 tokens (/think show to expand)"]) + ["42"]
        assert printed[5] == [] and "Done." in drawn[5] and not any("thinking" in d for d in drawn[4:])
        assert turn.reasoning == "I should add.\n" and turn.content == "42\n\nDone." and stats.stop_reason == "stop"


def test_pace_lingers_on_each_pass_the_server_sends(canned):
    """--pace (a demo) holds each block the server sends on screen a while, and that time is left out of the
    answer's speed, as in the local chat."""
    handler, url = canned
    cell = {"text": "Hi", "new": True, "confidence": 0.9}
    handler.lines = ["data: " + json.dumps({"choices": [], "clover_block": {
        "block": 0, "pass": p, "cells": [cell] + [None] * 7, "passes": p, "tokens": 0}}) for p in (1, 2)]
    handler.lines += [_said("Hi", "stop"), "data: [DONE]"]
    app = RemoteChatApp(Server.connect(url), "m", ChatSettings(think=False), interactive=True,
                        console=Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None))
    app.pace = 0.01
    stats = app.ask("hello")
    assert stats.passes == 2 and stats.paused == pytest.approx(0.02) and app.conv.messages[-1]["content"] == "Hi"
