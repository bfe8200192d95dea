"""serve's chat page: a browser asking for / gets it (clients that ask for anything else still get the plain-text
probe), kept to itself by its headers; and its script, run in Node against a live server (tests/page_harness.js,
a DOM stand-in), streams an answer into the page, the same one the API gives, keeps the conversation for the next
message, and asks for the key of a server that has one."""

from __future__ import annotations

import base64
import hashlib
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


def run_page(url: str, tmp_path: Path, *messages: str, think: bool = False, kept: list | None = None) -> dict:
    _, _, page = get(url + "/", "text/html")
    script = re.search(rb"<script>(.*)</script>", page, re.S).group(1)
    (tmp_path / "page.js").write_bytes(script)
    env = {**os.environ, "THINK": "1" if think else "0", **({"CHAT": json.dumps(kept)} if kept is not None else {})}
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
        for tag in (b"script", b"style"):  # the page's own script and style run, by their hashes, and nothing else
            (inline,) = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), body, re.S)
            assert f"{tag.decode()}-src 'sha256-{base64.b64encode(hashlib.sha256(inline).digest()).decode()}';" in csp
        assert "unsafe-inline" not in csp
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
    assert answer[2] == {"tag": "div", "className": "block", "hidden": True, "text": ""}  # (shown while it ran)
    assert answer[3]["className"] == "stats"
    assert re.fullmatch(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ tokens/pass.*", answer[3]["text"])
    assert shown["asked"][0]["stream_options"] == {"include_usage": True, "include_blocks": True}
    assert shown["messages"][:3] == [*first, {"role": "assistant", "content": want},
                                     {"role": "user", "content": "and 5+5?"}]  # the second message's history
    assert shown["messages"][3]["role"] == "assistant" and len(shown["messages"]) == 4


@needs_node
@pytest.mark.parametrize("system", ["", "Be brief."])
def test_a_conversation_that_outgrows_the_context_goes_on_with_a_note(loaded, tmp_path, system):
    """The page asks the server to fit the conversation to its context (fit_context): one that outgrows it loses
    its oldest exchanges from what the model reads, not from the page, and the answer says so under it, counting
    the page's messages (a system prompt, sent first and always kept, is not one); no message is refused."""
    long = "count the words: " + "one two three " * 8  # (≈ 120 tokens: two do not fit 256 with an answer)
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, *([f"--set system={system}"] if system else []), long, long, long)
    assert all(body["fit_context"] is True for body in shown["asked"])
    assert [t["className"] for t in shown["turns"]] == ["turn user", "turn assistant"] * 3
    assert not any(p["className"] == "error" for t in shown["turns"] for p in t["parts"])
    assert len(shown["messages"]) == 6 and len(shown["asked"][-1]["messages"]) == 5 + bool(system)  # all of them
    notes = [p["text"] for p in shown["turns"][-1]["parts"] if p["className"] == "note"]
    assert notes and re.fullmatch(r"the conversation outgrew the context: the model read it from message ([35]) on "
                                  r"\(the ones before stay on this page\)", notes[0])
    assert not any(p["className"] == "note" for p in shown["turns"][1]["parts"])  # (the first answer read it all)


@needs_node
def test_the_settings_go_with_every_request_and_stay_across_a_reload(loaded, tmp_path):
    """What the settings panel holds (a system prompt, a temperature, a cap on an answer's tokens) is sent with each
    request — the system prompt before the conversation, never kept in it — and kept across a reload; fields left
    empty send nothing, so the server's defaults hold."""
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "add 12+30", "--set system=Answer in one word.", "--set temperature=0.7",
                         "--set max-tokens=5", "and 5+5?", "--reload", "reverse a b c d")
    first, second, third = shown["asked"]
    assert first["messages"] == [{"role": "user", "content": "add 12+30"}]
    assert "temperature" not in first and "max_tokens" not in first
    assert second["messages"] == [{"role": "system", "content": "Answer in one word."}, *shown["messages"][:3]]
    assert second["temperature"] == 0.7 and second["max_tokens"] == 5
    assert third["messages"][0]["role"] == "system" and (third["temperature"], third["max_tokens"]) == (0.7, 5)
    assert shown["settings"] == ["Answer in one word.", "0.7", "5"]  # (the fields, drawn again after the reload)
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"] * 3
    stats = [p["text"] for t in shown["turns"] for p in t["parts"] if p["className"] == "stats"]
    assert len(stats) == 3 and all(int(line.split()[0]) <= 5 for line in stats[1:])  # the server held the cap


@needs_node
def test_the_page_keeps_the_conversation_across_a_reload_and_retries_the_last_answer(loaded, tmp_path):
    """A reload in the same tab draws the conversation again from sessionStorage (each answer's text, thinking and
    line under it) and goes on with it; retry asks again for the last answer to the same conversation, in place of
    the one it replaces; only the last answer offers retry."""
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "add 12+30", "--reload", "and 5+5?", "--retry")
    (first,) = shown["unloaded"]  # what the page showed before the reload
    assert shown["turns"][:2] == [first[0], {**first[1], "parts": first[1]["parts"][:4]}]  # drawn again, less retry
    assert first[1]["parts"][1]["text"] and first[1]["parts"][3]["className"] == "stats"
    assert [t["className"] for t in shown["turns"]] == ["turn user", "turn assistant"] * 2
    assert len(shown["asked"]) == 3 and shown["asked"][1]["messages"] == shown["asked"][2]["messages"]
    assert shown["asked"][1]["messages"] == [{"role": "user", "content": "add 12+30"},
                                             {"role": "assistant", "content": first[1]["parts"][1]["text"]},
                                             {"role": "user", "content": "and 5+5?"}]
    assert shown["messages"] == [*shown["asked"][2]["messages"], shown["messages"][-1]]  # the retried answer, once
    actions = [p for t in shown["turns"] for p in t["parts"] if p["className"] == "actions"]
    assert actions == [shown["turns"][-1]["parts"][-1]] and actions[0]["text"] == "retrycopy"

    # reloaded while a message waited for its answer: the message goes back into the box, not into the conversation
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        kept = [*shown["messages"][:2], {"role": "user", "content": "unanswered"}]
        reloaded = run_page(url, tmp_path, kept=kept)
    assert reloaded["input"] == "unanswered" and reloaded["messages"] == kept[:2] and len(reloaded["turns"]) == 2

    # the "think first" box as the user left it, over the server's default (THINK: the markup's), across a reload
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        assert run_page(url, tmp_path, "--toggle-think", "--reload", think=True)["think"] is False
        assert run_page(url, tmp_path, "--reload", think=True)["think"] is True  # (not clicked: the default)


@needs_node
def test_the_page_shows_the_thinking_apart_from_the_answer(loaded, tmp_path):
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        shown = run_page(url, tmp_path, "add 12+30", think=True)
        body = json.dumps({"messages": [{"role": "user", "content": "add 12+30"}], "enable_thinking": True}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            got = json.loads(r.read())
    want = got["choices"][0]["message"]
    thought, answer = shown["turns"][1]["parts"][:2]
    assert want["reasoning_content"]  # (a random model thinks through all of its 16 tokens)
    tokens = got["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert tokens > 0 and not thought["hidden"]  # its summary with the thought's tokens, then the thought
    assert thought["text"] == f"thought for {tokens} tokens" + want["reasoning_content"]
    assert answer["text"] == (want["content"] or "")
    assert shown["messages"][1] == {"role": "assistant", "content": want["content"] or ""}  # not its thinking


STREAMED = ("# Plan\n\nFirst a paragraph\nover two lines, then a list:\n\n1. one\n2. two\n\n"
            "   still two, after a blank\n3. three\n   - nested *a*\n   - nested b\n\n- another kind\n\n\n"
            "> quoted\n> on\nlazy\n\nName | n\n|:--|--:|\n| x | 2 |\n\n```py\nx = 1\n\n\ny = [i for i in x]\n```\n\n"
            "---\nThe end, with `code` and **bold**.\n"
            "1) one\n\n\n\n2) two\n## Done ##\n~~~\nopen fence")


@needs_node
@pytest.mark.parametrize("step", [1, 5])
def test_a_streamed_answer_is_drawn_as_a_whole_render_draws_it(loaded, tmp_path, step):
    """As an answer streams (every character, or 5 at a time) the page draws again only its last two blocks and
    keeps the rest as drawn: after every delta what it shows is what a render of the whole text so far shows —
    lists that go on after a blank line, a paragraph that turns into a table, fences with blank lines included."""
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        streamed = run_page(url, tmp_path, "--stream", STREAMED, str(step))
        whole = render(url, tmp_path, STREAMED)
    assert streamed["differ"] == [] and streamed["html"] == whole
    assert streamed["kept"] >= 8  # (the blocks kept as drawn at the end: all but the last two)
    assert whole.count("<ol>") == 2 and "<ul><li><p>another kind" in whole and "<table>" in whole
    assert "<pre><code>x = 1\n\n\ny" in whole


def render(url: str, tmp_path: Path, answer: str) -> str:
    """What the page makes of an answer's text, written as HTML by the harness (text escaped)."""
    return run_page(url, tmp_path, "--render", answer)


@needs_node
def test_the_page_renders_an_answers_markdown_from_text_nodes_only(loaded, tmp_path):
    """An answer's Markdown becomes the page's elements: fenced code (the fence lines gone, the code as written, a
    fence still open while the answer streams code to its end) with a copy button, headings, nested lists, quotes,
    rules, tables, inline marks and links; what the model writes inside them stays text, markup included, and a
    link to a scheme other than http(s) or mailto stays the text it was written as."""
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        code = render(url, tmp_path, "Here:\n```python\nprint('<b>hi</b>')\n```\nThen run it.\n```sh\npython x.py")
        prose = render(url, tmp_path, "# Plan\nUse **bold**, *it*, `a*b*c`, ~~old~~ and snake_case.\n\n"
                                      "- one with [docs](https://example.org/a?b=1)\n  - nested\n- two\n"
                                      "continued\n\n3. three\n4. four\n\n> quoted <script>x</script>\n\n---\n"
                                      "| name | n |\n|:--|--:|\n| a \\| b | 2 |\nafter")
        hostile = render(url, tmp_path, "[click](javascript:alert(1)) <img src=x onerror=y> see https://ok.org/x.")
    copy = "<button>copy</button>"
    assert code == (f"<p>Here:</p><pre><code>print('&lt;b&gt;hi&lt;/b&gt;')</code>{copy}</pre>"
                    f"<p>Then run it.</p><pre><code>python x.py</code>{copy}</pre>")
    link = '<a href="https://example.org/a?b=1" target="_blank" rel="noopener noreferrer">docs</a>'
    assert prose == (
        "<h1>Plan</h1><p>Use <strong>bold</strong>, <em>it</em>, <code>a*b*c</code>, <del>old</del> and "
        f"snake_case.</p><ul><li><p>one with {link}</p><ul><li><p>nested</p></li></ul></li>"
        "<li><p>two\ncontinued</p></li></ul>"
        '<ol start="3"><li><p>three</p></li><li><p>four</p></li></ol>'
        "<blockquote><p>quoted &lt;script&gt;x&lt;/script&gt;</p></blockquote><hr></hr>"
        '<table><tr><th style-textAlign="left">name</th><th style-textAlign="right">n</th></tr>'
        '<tr><td style-textAlign="left">a | b</td><td style-textAlign="right">2</td></tr></table><p>after</p>')
    assert hostile == ("<p>[click](javascript:alert(1)) &lt;img src=x onerror=y&gt; see "
                       '<a href="https://ok.org/x" target="_blank" rel="noopener noreferrer">https://ok.org/x</a>.</p>')


@needs_node
def test_the_page_draws_the_block_being_denoised_as_chat_does(loaded, tmp_path):
    """A stream's block view becomes a row of cells under a header: masked ones dim, revealed ones in the colour of
    their confidence on chat's scale (red 0, amber 0.5, green 1), this pass's in bold; labels stay text. A long
    prompt's reading, before it, is a line and a bar."""
    view = {"block": 2, "pass": 3, "cells": [None, {"text": "<b>", "confidence": 0.0, "new": False},
                                             {"text": "↵", "confidence": 0.5, "new": True},
                                             {"text": "ok", "confidence": 1.0, "new": False}]}
    with running_server(loaded, "page-model", max_tokens=16, context=256) as (_, url):
        drawn = run_page(url, tmp_path, "--block", json.dumps(view))
        read = run_page(url, tmp_path, "--block", json.dumps({"done": 1536, "total": 4096}))
    from clover_local.chat.display import confidence_color

    rgb = ["rgb(%d, %d, %d)" % tuple(bytes.fromhex(confidence_color(c)[1:])) for c in (0.0, 0.5, 1.0)]
    assert drawn == ('<div class="head">block 2 · pass 3 · 3/4 revealed</div><div>'
                     '<span class="cell masked">░░</span>'
                     f'<span class="cell" style-background="{rgb[0]}">&lt;b&gt;</span>'
                     f'<span class="cell new" style-background="{rgb[1]}">↵</span>'
                     f'<span class="cell" style-background="{rgb[2]}">ok</span></div>')
    assert read == ('<div class="head">reading the prompt · 1,536/4,096 tokens</div>'
                    '<progress value="1536" max="4096"></progress>')


@needs_node
def test_the_page_asks_for_the_key_of_a_server_that_has_one(loaded, tmp_path):
    with running_server(loaded, "keyed", max_tokens=8, context=256, api_key="s3cret") as (_, url):
        shown = run_page(url, tmp_path)
    assert shown["keyShown"] == "inline" and "needs its API key" in shown["model"]
