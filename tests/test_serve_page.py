"""serve's chat page: a browser asking for / gets it (clients that ask for anything else still get the plain-text
probe), kept to itself by its headers; and its script, run in Node against a live server (tests/page_harness.js,
a DOM stand-in), streams an answer into the page, the same one the API gives, keeps the conversation for the next
message, and asks for the key of a server that has one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import torch

from tests.conftest import checkpoint_with_tokenizer
from tests.inprocess_server import running_server

HARNESS = Path(__file__).with_name("page_harness.js")
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs the page's script "
                                "(apt-get install nodejs)")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, tokenizer_dir):
    from clover_local.loader import load

    torch.set_num_threads(1)
    ckpt = checkpoint_with_tokenizer(tmp_path_factory.mktemp("page") / "ckpt", tokenizer_dir, seed=7)
    template = ckpt / "chat_template.jinja"  # thinking on opens the thought, as Qwen3.5's template does: a random
    closed = "{{- '<think>\\n\\n</think>\\n\\n' }}\n"  # model's answer is then all thinking
    assert closed in template.read_text()
    template.write_text(template.read_text().replace(closed, closed + "    {%- else %}{{- '<think>\\n' }}\n", 1))
    return load(str(ckpt), "cpu", "float32")


def get(url: str, accept: str) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()


def run_page(url: str, tmp_path: Path, *messages: str, think: bool = False) -> dict:
    _, _, page = get(url + "/", "text/html")
    script = re.search(rb"<script>(.*)</script>", page, re.S).group(1)
    (tmp_path / "page.js").write_bytes(script)
    env = {**os.environ, "THINK": "1" if think else "0"}
    out = subprocess.run(["node", str(HARNESS), url, str(tmp_path / "page.js"), *messages], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_browser_gets_the_page_and_a_client_the_probe(loaded):
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        status, headers, body = get(url + "/", "text/html,application/xhtml+xml,*/*;q=0.8")
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert b"<title>clover-local</title>" in body and b"/v1/chat/completions" in body
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert not re.search(rb"(src|href)=\"(https?:)?//", body)  # nothing loaded from elsewhere
        assert b"innerHTML" not in body  # the model's text is set as text, never parsed as HTML
        assert get(url + "/", "*/*")[2] == b"clover-local is running"  # Ollama's clients, curl
        assert b'<input type="checkbox" id="think" checked>' in body  # "think first", as the server's default
    with running_server(loaded, "page-model", max_tokens=16, context=256, think=False) as (_, url):
        assert b'<input type="checkbox" id="think">' in get(url + "/", "text/html")[2]  # serve --no-think


@needs_node
def test_the_page_streams_the_answer_the_api_gives_and_keeps_the_conversation(loaded, tmp_path):
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "add 12+30", "and 5+5?")
        first = [{"role": "user", "content": "add 12+30"}]
        body = json.dumps({"messages": first, "enable_thinking": False}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            want = json.loads(r.read())["choices"][0]["message"]["content"]
    assert shown["model"] == "page-model" and shown["title"] == "page-model · clover-local"
    users = [t for t in shown["turns"] if t["className"] == "turn user"]
    answers = [t for t in shown["turns"] if t["className"] == "turn assistant"]
    assert [t["text"] for t in users] == ["add 12+30", "and 5+5?"] and len(answers) == 2
    answer = answers[0]["parts"]
    assert answer[0]["tag"] == "details" and answer[0]["hidden"]  # no thinking asked for: none shown
    assert answer[1]["text"] == want
    assert answer[2]["className"] == "stats"
    assert re.fullmatch(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ tokens/pass.*", answer[2]["text"])
    assert shown["messages"][:3] == [*first, {"role": "assistant", "content": want},
                                     {"role": "user", "content": "and 5+5?"}]  # the second message's history
    assert shown["messages"][3]["role"] == "assistant" and len(shown["messages"]) == 4


@needs_node
def test_the_page_shows_the_thinking_apart_from_the_answer(loaded, tmp_path):
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "add 12+30", think=True)
        body = json.dumps({"messages": [{"role": "user", "content": "add 12+30"}], "enable_thinking": True}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            want = json.loads(r.read())["choices"][0]["message"]
    thought, answer = shown["turns"][1]["parts"][:2]
    assert want["reasoning_content"]  # (a random model thinks through all of its 16 tokens)
    assert not thought["hidden"] and thought["text"] == "thinking" + want["reasoning_content"]  # summary, then it
    assert answer["text"] == (want["content"] or "")
    assert shown["messages"][1] == {"role": "assistant", "content": want["content"] or ""}  # not its thinking


@needs_node
def test_the_page_shows_fenced_code_as_code_blocks_with_a_copy_button(loaded, tmp_path):
    """An answer's ``` blocks become code blocks (the fence lines gone, the code as written), the prose around them
    stays text, and a fence still open while the answer streams is code to its end; all of it as text nodes."""
    answer = "Here:\n```python\nprint('<b>hi</b>')\n```\nThen run it.\n```sh\npython x.py"
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "--render", answer)
    assert shown == [
        {"tag": "#text", "text": "Here:", "children": []},
        {"tag": "pre", "text": "print('<b>hi</b>')copy", "children": ["code", "button"]},
        {"tag": "#text", "text": "Then run it.", "children": []},
        {"tag": "pre", "text": "python x.pycopy", "children": ["code", "button"]},
    ]


@needs_node
def test_the_page_asks_for_the_key_of_a_server_that_has_one(loaded, tmp_path):
    with running_server(loaded, "keyed", max_tokens=8, context=256, api_key="s3cret") as (_, url):
        shown = run_page(url, tmp_path)
    assert shown["keyShown"] == "inline" and "needs its API key" in shown["model"]
