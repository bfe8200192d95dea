"""Which web pages may call the server: a browser's Origin and Host headers, checked before a request runs.

A server on 127.0.0.1 is reachable from every web page its user opens. A page may POST to it without asking (a
form, or a fetch with a text/plain body: no preflight, and this server reads a JSON body whatever its
Content-Type), which spends the GPU on someone else's prompt; and a page whose name an attacker points at
127.0.0.1 after it loaded (DNS rebinding) is "same-origin" with the server and may read its answers. So:

- A request with an Origin header (browsers send one with every POST and every cross-origin request) runs only
  when that origin is allowed: pages served from this machine (http(s) on localhost, 127.0.0.1, [::1]) or by this
  server itself (its chat page, at whatever address it was opened), desktop apps' own schemes (Obsidian's app://,
  Tauri's, VS Code's webviews, file://), and what `serve --allow-origin` adds (`https://chat.example.com`, globs
  such as `chrome-extension://*`, or `*`: any). An allowed origin gets CORS headers, so a browser front end can
  read the answer; a refused one a 403 that names the flag.
- On a loopback address, the Host header must name this machine (localhost, an IP address, this machine's name,
  `*.localhost`, `*.local`, `*.internal`): a rebinding page's Host is its own domain.
- A request without an Origin (curl, the SDKs, agents, server-side front ends such as Open WebUI) is untouched.

Ollama's server keeps the same defaults (OLLAMA_ORIGINS), so the desktop and browser clients that work with it
work here.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
APP_SCHEMES = ("app", "file", "tauri", "vscode-webview", "vscode-file")
LOCAL_SUFFIXES = (".local", ".internal")  # names public DNS cannot hand an attacker


@dataclass(frozen=True)
class OriginPolicy:
    """`allowed`: --allow-origin's patterns (lowercase; `*` any); `loopback`: the server listens on a loopback
    address, so a request's Host must name this machine."""

    allowed: tuple[str, ...] = ()
    loopback: bool = True

    def allows_origin(self, origin: str, host: str | None = None) -> bool:
        """May a page of `origin` call the server (the Origin header's value, as sent); `host`: the request's Host
        header, which a page this server served itself (the chat page, opened at the server's LAN address) names
        as its origin's host (where the Host is checked, on loopback, a rebinding page cannot pass as one)."""
        origin = origin.strip().lower()
        if any(fnmatch.fnmatchcase(origin, pattern) for pattern in self.allowed):
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:  # (`http://[x`: not an origin any browser sends)
            return False
        if parts.scheme in APP_SCHEMES:
            return True
        if parts.scheme not in ("http", "https"):
            return False
        return _names_this_machine(parts.hostname or "", names_only=True) or (
            host is not None and parts.netloc == host.strip().lower())

    def allows_host(self, host: str | None) -> bool:
        """Does the Host header name this machine (any host, off loopback; none sent: an HTTP/1.0 client)."""
        if not self.loopback or not host:
            return True
        return _names_this_machine(_host_name(host), names_only=False)


def _host_name(header: str) -> str:
    """A Host header's name without its port: `[::1]:8000` → `::1`, `localhost:8000` → `localhost`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header[1:]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _names_this_machine(name: str, names_only: bool) -> bool:
    """`name` is this machine. For a page's origin (`names_only`): a loopback name or `*.localhost` (a page from
    another address is another site). For a Host header also any IP address (no DNS answer stands behind one),
    this machine's host name, and `*.local` / `*.internal` names (mDNS, Docker's host.docker.internal)."""
    name = name.rstrip(".")
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return True
    if names_only:
        return False
    if name.endswith(LOCAL_SUFFIXES):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name == socket.gethostname().lower()


def loopback_address(host: str) -> bool:
    """`--host` is a loopback address: only this machine connects, so only its pages need stopping."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_allowed(patterns: list[str]) -> tuple[str, ...]:
    """--allow-origin's values as patterns: `*`, an origin (`https://chat.example.com`, its trailing slash
    dropped), or a glob of one. A bare host name gets no scheme guessed for it: it must be written as the browser
    sends it. Raises ValueError with the one that cannot be an origin."""
    out = []
    for raw in patterns:
        pattern = raw.strip().lower().rstrip("/")
        if pattern not in ("*", "null") and "://" not in pattern:
            raise ValueError(raw)
        out.append(pattern)
    return tuple(out)
