"""`clover-local chat URL`: the chat answered by a running server. The same conversation gets the same answers as
the chat with the model loaded here; the block being denoised comes over the wire and is drawn as the local
chat draws it; Ctrl-C hangs up and the server stops the answer; a server that is not there, wants a key, is
something else, or refuses a message is one line, and the chat goes on."""

from __future__ import annotations

import http.server
import io
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


def test_on_a_terminal_the_notes_come_before_the_answer(tiny):
    """A conversation that outgrows the server's context: the chat says, before the answer is drawn (the stream's
    clover_prompt), that the model reads it from a later message and that the answer is cut to the room left."""
    asked = ASKED + ["count the words: " + "one two three " * 30]
    with running_server(tiny, "tiny", max_tokens=64, context=256) as (_, url):
        screen = io.StringIO()
        app = RemoteChatApp(Server.connect(url), "tiny", ChatSettings(think=False, max_tokens=64), interactive=True,
                            console=Console(file=screen, width=300, force_terminal=True, color_system=None))
        for text in asked:
            app.handle(text)
    text = screen.getvalue()
    outgrew, limited = text.find("(the conversation outgrew the context of 256"), text.find("(the answer is limi")
    assert app.conv.left_out > 0 and 0 <= text.rfind("clover\n") < outgrew < limited  # the last answer's notes,
    assert limited < text.find(" · pass 1 · ", outgrew) and "error" not in text  # before its first pass is drawn


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


def test_what_cannot_answer_is_one_line(tiny):
    """No server there, one that wants a key, a server that is not ours: one line that says what to do. A message
    the server refuses (over its context) is one error line; the chat drops it and goes on."""
    with pytest.raises(CloverError, match=r"cannot reach http://127\.0\.0\.1:9 .*clover-local serve MODEL"):
        Server.connect("http://127.0.0.1:9")
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotOurs)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with pytest.raises(CloverError, match="answers, but not as clover-local serve"):
            Server.connect(f"http://127.0.0.1:{other.server_address[1]}")
    finally:
        other.shutdown()
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
