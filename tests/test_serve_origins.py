"""Which web pages may call `serve` (serve/origins.py): a page from another site is refused before its request runs
(it could spend the GPU with a plain form post, or read answers by DNS rebinding); pages from this machine and
desktop apps get CORS headers, so a browser front end can read the answer; `--allow-origin` lets a site in; a
client that is not a browser page sends no Origin and is untouched. Checked on the wire with http.client, which
sends the headers as given."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
import torch

from clover_local.serve.origins import OriginPolicy, loopback_address, parse_allowed
from conftest import run_cli
from tests.inprocess_server import running_server

BODY = json.dumps({"messages": [{"role": "user", "content": "add 12+30"}], "max_tokens": 2})


def test_the_default_policy_lets_in_this_machines_pages_and_desktop_apps_only():
    policy = OriginPolicy()
    for origin in ("http://localhost:3000", "https://127.0.0.1", "http://[::1]:5173", "http://0.0.0.0:8080",
                   "http://ui.localhost:3000", "app://obsidian.md", "tauri://localhost", "vscode-webview://abc",
                   "file://", "HTTP://LOCALHOST:3000", "http://localhost.:3000"):
        assert policy.allows_origin(origin), origin
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.evil.example",
                   "http://192.168.1.5:3000", "http://mybox.local:3000", "null", "chrome-extension://abcdef", "",
                   "http://[::1", "http://[nonsense]:80"):
        assert not policy.allows_origin(origin), origin


def test_a_page_this_server_served_may_call_it_at_whatever_address_it_was_opened():
    """serve --host 0.0.0.0, its chat page opened from another machine at http://192.168.1.5:8000: the page's
    requests name the server's own address as their origin (same-origin), which is not another site."""
    policy = OriginPolicy(loopback=False)
    assert policy.allows_origin("http://192.168.1.5:8000", host="192.168.1.5:8000")
    assert policy.allows_origin("https://llm.example.com", host="llm.example.com")  # behind a TLS proxy
    assert not policy.allows_origin("http://192.168.1.5:3000", host="192.168.1.5:8000")  # another port: a site
    assert not policy.allows_origin("http://192.168.1.5:8000", host=None)
    assert not policy.allows_origin("http://evil.example:8000", host="192.168.1.5:8000")


def test_allow_origin_takes_origins_globs_and_a_star():
    policy = OriginPolicy(parse_allowed(["https://Chat.Example.com/", "chrome-extension://*"]))
    assert policy.allows_origin("https://chat.example.com")
    assert policy.allows_origin("HTTPS://Chat.Example.COM")  # an origin is compared without its case
    assert policy.allows_origin("chrome-extension://jfedfbgedapdagkghmgibemcoggfppbb")
    assert not policy.allows_origin("https://chat.example.com.evil.example")
    assert not policy.allows_origin("http://chat.example.com")  # the scheme is part of the origin
    assert OriginPolicy(parse_allowed(["*"])).allows_origin("https://anything.example")
    assert OriginPolicy(parse_allowed(["null"])).allows_origin("null")
    with pytest.raises(ValueError, match="chat.example.com"):
        parse_allowed(["chat.example.com"])


def test_on_loopback_the_host_must_name_this_machine():
    import socket

    policy = OriginPolicy(loopback=True)
    for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "10.1.2.3", "host.docker.internal:8000",
                 "mybox.local", "app.localhost:8000", f"{socket.gethostname()}:8000", None, "",
                 "93.184.216.34:8000", "[2606:4700::1111]:8000", "localhost.:8000"):  # any IP address; a name's dot
        assert policy.allows_host(host), host
    for host in ("evil.example:8000", "evil.example", "localhost.evil.example:8000"):
        assert not policy.allows_host(host), host
    assert OriginPolicy(loopback=False).allows_host("my-server.example.com:8000")  # --host 0.0.0.0: any name
    assert loopback_address("127.0.0.1") and loopback_address("::1") and loopback_address("[::1]")
    assert loopback_address("localhost") and loopback_address("127.0.0.2")
    assert not loopback_address("0.0.0.0") and not loopback_address("192.168.1.5")


@pytest.fixture(scope="module")
def served(tmp_path_factory, tokenizer_dir):
    from clover_local.loader import load
    from tests.conftest import checkpoint_with_tokenizer

    torch.set_num_threads(1)
    ckpt = checkpoint_with_tokenizer(tmp_path_factory.mktemp("origins") / "ckpt", tokenizer_dir, seed=5)
    with running_server(load(str(ckpt), "cpu", "float32"), "tiny-origins", max_tokens=8, context=256,
                        allow_origins=("https://chat.example.com",)) as (engine, url):
        yield engine, urlsplit(url).port


def request(port: int, method: str, path: str, headers: dict[str, str], body: str | None = None):
    """(status, headers, body) of one request on a fresh connection, with exactly `headers` (Host included)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{port}", **headers})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def answered(engine) -> int:
    return sum(engine.health()["requests"].values())


def test_a_page_from_another_site_is_refused_before_its_request_runs(served):
    engine, port = served
    before = answered(engine)
    # a "simple" request: no preflight in a browser, and the server reads its JSON whatever the Content-Type
    status, headers, body = request(port, "POST", "/v1/chat/completions",
                                    {"Origin": "https://evil.example", "Content-Type": "text/plain"}, BODY)
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden_origin"
    assert json.loads(body)["error"]["type"] == "permission_error"
    assert "--allow-origin https://evil.example" in json.loads(body)["error"]["message"]
    assert answered(engine) == before  # nothing was generated for it
    status, _, body = request(port, "POST", "/api/chat", {"Origin": "https://evil.example"}, BODY)
    assert status == 403 and "forbidden_origin" not in body and "allow-origin" in json.loads(body)["error"]
    status, _, _ = request(port, "OPTIONS", "/v1/chat/completions", {"Origin": "https://evil.example",
                                                                     "Access-Control-Request-Method": "POST"})
    assert status == 403


def test_an_allowed_page_gets_cors_headers_on_its_preflight_and_its_stream(served):
    engine, port = served
    status, headers, _ = request(port, "OPTIONS", "/v1/chat/completions", {
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os",
        "Access-Control-Request-Private-Network": "true"})
    assert status == 204
    assert headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "authorization,content-type,x-stainless-os"
    assert headers["access-control-allow-private-network"] == "true"
    stream = json.dumps({**json.loads(BODY), "stream": True})
    status, headers, body = request(port, "POST", "/v1/chat/completions",
                                    {"Origin": "https://chat.example.com", "Content-Type": "application/json"}, stream)
    assert status == 200 and headers["access-control-allow-origin"] == "https://chat.example.com"
    assert headers["vary"] == "Origin" and body.rstrip().endswith("data: [DONE]")
    status, headers, _ = request(port, "GET", "/v1/models", {"Origin": "app://obsidian.md"})
    assert status == 200 and headers["access-control-allow-origin"] == "app://obsidian.md"


def test_clients_that_are_not_pages_are_untouched_and_a_rebinding_host_is_refused(served):
    engine, port = served
    before = answered(engine)
    status, headers, body = request(port, "POST", "/v1/chat/completions", {"Content-Type": "application/json"}, BODY)
    assert status == 200 and "access-control-allow-origin" not in headers and json.loads(body)["choices"]
    assert answered(engine) == before + 1  # (what the refusals' checks count)
    status, _, _ = request(port, "GET", "/v1/models", {"Host": f"localhost:{port}"})
    assert status == 200
    before = answered(engine)
    status, _, body = request(port, "POST", "/v1/chat/completions",
                              {"Host": f"rebound.example:{port}", "Origin": f"http://rebound.example:{port}"}, BODY)
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden_host"
    assert answered(engine) == before
    status, _, _ = request(port, "GET", "/v1/models", {"Host": f"rebound.example:{port}"})  # a GET has no Origin
    assert status == 403
    status, headers, body = request(port, "HEAD", "/", {"Host": f"rebound.example:{port}"})
    assert status == 403 and headers["content-length"] == "0" and body == ""  # (a HEAD answer has no body)
    assert request(port, "HEAD", "/", {})[0] == 200


def test_an_allow_origin_without_a_scheme_is_one_error_line(capsys):
    assert run_cli(["serve", "tiny", "--allow-origin", "chat.example.com"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "error: --allow-origin chat.example.com is not a web origin: write it as the browser sends it, with its "
        "scheme (https://chat.example.com, chrome-extension://*), or '*' for any"], err
