"""The HTTP side, on the standard library (`http.server`): no web framework needed for a handful of routes.

A thread per connection (ThreadingHTTPServer) reads and checks the request, renders the conversation with
the chat template (or, for /v1/completions, takes the prompt as it is) and tokenizes it, then hands a Job to the
Engine and relays its output: one JSON body, or Server-Sent Events over chunked transfer encoding. While it
waits it watches its socket; a client that hung up cancels its job (the worker stops between passes).
/tokenize, /detokenize and /tokenizer_info (vLLM's) answer in the handler's thread, without the queue.
/v1/responses (OpenAI's Responses API) runs as the chat request it reads as (serve/responses.py); Ollama's /api/chat
and /api/generate as the chat or completion request they read as (serve/ollama.py), streamed as newline-delimited JSON.
"""

from __future__ import annotations

import functools
import hmac
import json
import queue
import re
import select
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from clover_local.chat.turn import history_tokens, prompt_opens_thinking
from clover_local.chat.window import fit
from clover_local.errors import CloverError
from clover_local.generate.json_schema import answer_constraint
from clover_local.generate.thinking import ThinkBudget, answer_room_budget
from clover_local.serve import anthropic, ollama
from clover_local.serve.tools import ToolCallStream, auto_calls, json_or_calls, split_tool_calls
from clover_local.serve.engine import Engine, Job
from clover_local.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE, prometheus_text
from clover_local.serve.origins import OriginPolicy, loopback_address
from clover_local.serve.responses import ResponseAnswer, parse_responses_request, responses_error
from clover_local.serve.protocol import (AnswerShape, ApiError, ChatAnswer, ChatRequest, CompletionRequest, Sampling,
                                         answer_usage, chat_logprobs, check_ids, completion_id, late_system_as_user,
                                         legacy_logprobs, parse_chat_request, parse_completion_request,
                                         parse_detokenize_request, parse_tokenize_request, text_choice, text_chunk,
                                         text_completion)


_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")  # a chunk's size (Python's int(x, 16) also takes "0x1f" and "1_f")
_CHUNK_LINE = 8 * 1024  # a chunk-size line or trailer past this is not HTTP a client sends
_TRAILERS = 64


def _too_large(size: int, limit: int, at_least: str = "") -> ApiError:
    return ApiError(413, f"the request body is {at_least}{size} bytes; the limit is {limit}", code="request_too_large")


@dataclass
class Limits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_tokens: int = 4096  # the most one answer may ask for (and the default)
    context: int = 131072  # prompt + answer
    think_budget: int | None = None  # the most tokens any answer's thinking may take (a request may ask for less)
    answer_room: bool = True  # and at most what leaves the answer room (thinking.answer_room_budget)
    free_tool_calls: bool = False  # tool_choice auto: no grammar from the model's <tool_call> on (tools.auto_calls)
    reveal_factor: float = 0.0  # the factor rule for requests that send neither threshold nor reveal_factor
    drop_oldest: bool = False  # every chat route leaves a long conversation's oldest exchanges out (chat/window.py)
    think: bool = True  # a request that says nothing of thinking thinks first (serve --no-think: it answers at once)
    read_timeout: float = 30.0


ALLOWED_METHODS = "GET, HEAD, POST, OPTIONS"


class ClientGone(Exception):
    pass


class CloverHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, address, engine: Engine, model_name: str, limits: Limits, api_key: str | None = None,
                 quiet: bool = False, allow_origins: tuple[str, ...] = ()) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.model_name = model_name
        self.limits = limits
        self.api_key = api_key
        self.quiet = quiet
        self.origins = OriginPolicy(allow_origins, loopback=loopback_address(str(address[0])))
        self._handlers: dict[threading.Thread, socket.socket] = {}  # the connections' threads, for `close`
        self._handlers_lock = threading.Lock()

    def process_request_thread(self, request, client_address) -> None:
        """A connection's thread, tracked while it runs so that `close` can end it and wait for it."""
        me = threading.current_thread()
        with self._handlers_lock:
            self._handlers[me] = request
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._handlers_lock:
                self._handlers.pop(me, None)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop listening, end the connections still open and wait up to `timeout` seconds for their threads.
        Call it after `Engine.stop`, which answered every job: a handler still relaying its answer writes it out
        (only reading is shut), an idle keep-alive connection ends at once instead of holding its thread (and,
        through the server, the model) past the process's exit. True when every thread ended."""
        self.server_close()
        with self._handlers_lock:
            handlers = dict(self._handlers)
        start = time.monotonic()
        # reading first; then, for a client too slow to take its answer, both ways
        for how, until in ((socket.SHUT_RD, start + timeout / 2), (socket.SHUT_RDWR, start + timeout)):
            for thread, conn in handlers.items():
                if thread.is_alive():
                    try:
                        conn.shutdown(how)
                    except OSError:  # already closed
                        pass
            for thread in handlers:
                thread.join(max(0.0, until - time.monotonic()))
        return not any(t.is_alive() for t in handlers)

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-request is routine (it also cancels its generation); anything else gets
        one line on stderr instead of socketserver's traceback."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        print(f"serve: error handling a request from {client_address[0]}: {exc!r}", file=sys.stderr)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "clover-local"
    timeout = 120  # an idle keep-alive connection is closed after this many seconds
    server: CloverHTTPServer
    # how an error reads on the route being answered (OpenAI's shape unless a route sets its own)
    error_body: Callable[[ApiError], dict] = staticmethod(ApiError.body)
    ndjson = False  # the stream being written is newline-delimited JSON (Ollama's), not server-sent events
    cors_origin: str | None = None  # the request's Origin, where it may read the answer (serve/origins.py)

    # ------------------------------------------------------------------ plumbing
    def parse_request(self) -> bool:
        self.cors_origin = None  # (a keep-alive connection's handler answers request after request)
        return super().parse_request()

    def end_headers(self) -> None:
        if self.cors_origin is not None:  # every answer to an allowed page, streams included
            self.send_header("Access-Control-Allow-Origin", self.cors_origin)
            self.send_header("Vary", "Origin")
        super().end_headers()

    def _log_refusal(self, why: str) -> None:
        """Even with --quiet: a front end refused here fails in the browser with only "CORS error" to show."""
        sys.stderr.write(f"{self.address_string()} refused {self.command} {self.path}: {why}\n")

    def _admitted(self) -> bool:
        """The request's Host and Origin pass the server's policy (serve/origins.py); else it is answered 403 and
        the log says why (a front end that fails in a browser shows only "CORS error")."""
        policy, host, origin = self.server.origins, self.headers.get("Host"), self.headers.get("Origin")
        if not policy.allows_host(host):
            self._log_refusal(f"Host {host!r} does not name this machine (a guard against DNS rebinding)")
            self._refuse(ApiError(403, f"Host {host!r} does not name this machine: a server on a loopback address "
                                  "answers requests for localhost, an IP address or this machine's name (a guard "
                                  "against DNS rebinding); behind a reverse proxy, have it send Host: 127.0.0.1",
                                  type="permission_error", code="forbidden_host"))
            return False
        if origin is None:  # not a browser page: curl, the SDKs, agents
            return True
        self.cors_origin = origin.strip()  # (a refused page may read why, too)
        if policy.allows_origin(origin, host):
            return True
        self._log_refusal(f"a page from {origin}: start serve with --allow-origin {origin} to let it in")
        self._refuse(ApiError(403, f"pages from {origin} may not call this server (pages from this machine and "
                              f"desktop apps may): start it with `--allow-origin {origin}` to let them in",
                              type="permission_error", code="forbidden_origin"))
        return False

    def _refuse(self, err: ApiError) -> None:
        """A refused request's answer, and the connection closed (a POST's body is left unread); a HEAD's without
        a body, as HEAD answers are."""
        if self.command != "HEAD":
            self._error(err, close=True)
            return
        self.send_response(err.status)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        if not self.server.quiet:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None, close: bool = False) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _root(self) -> None:
        """GET /: the chat page for a browser (it asks for HTML), else the plain text Ollama's clients expect of a
        reachability probe."""
        if "text/html" in self.headers.get("Accept", ""):
            self._send_page()
            return
        data = b"clover-local is running"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_page(self) -> None:
        """serve/ui.html, the chat page a browser gets at /: static, no key needed (its requests carry one), and
        kept to itself: nothing loaded from elsewhere, no framing by other sites, only its own script and style."""
        data, policy = chat_page()
        if not self.server.limits.think:  # serve --no-think: the page's switch starts off too
            data = data.replace(b'id="think" checked', b'id="think"', 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", policy)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, err: ApiError, close: bool = False) -> None:
        self._send_json(err.status, self.error_body(err), err.headers, close=close)

    def _has_key(self) -> bool:
        """No --api-key, or the request carries it: `Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key`
        (Anthropic's)."""
        key = self.server.api_key
        if not key:
            return True
        bearer = self.headers.get("Authorization", "")
        sent = self.headers.get("x-api-key") or (bearer[len("Bearer "):] if bearer.startswith("Bearer ") else "")
        return hmac.compare_digest(sent.encode("utf-8"), key.encode("utf-8"))

    def _authorized(self) -> bool:
        if self._has_key():
            return True
        self._error(ApiError(401, "missing or wrong API key (Authorization: Bearer … or x-api-key)",
                             type="authentication_error", code="invalid_api_key"))
        return False

    def _client_gone(self) -> bool:
        """True once the peer closed its side (readable with nothing to read)."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _read_body(self) -> bytes | None:
        """The request's body, whole, or None once the refusal is sent (the connection then closes: what is left of
        a refused body is not read). A body that ends before its length is a 400, never a request read from part of
        it."""
        limits = self.server.limits
        self.connection.settimeout(limits.read_timeout)
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._read_chunked(limits.max_body_bytes)
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise ApiError(411, "a Content-Length header (or Transfer-Encoding: chunked) is required") from None
            if length < 0:
                raise ApiError(400, "bad Content-Length")
            if length > limits.max_body_bytes:
                raise _too_large(length, limits.max_body_bytes)
            body = self.rfile.read(length)
            if len(body) < length:
                raise ApiError(400, f"the body ended after {len(body)} of its Content-Length's {length} bytes")
            return body
        except ApiError as refusal:
            self._error(refusal, close=True)
        except (OSError, socket.timeout):
            self.close_connection = True
        return None

    def _read_chunked(self, limit: int) -> bytes:
        """A body sent in chunks (curl's `-T -`, a client streaming its upload): each chunk's size in hex, the
        chunk, and a size of 0 to end, then trailers, which are read past."""
        body = bytearray()
        while True:
            line = self.rfile.readline(_CHUNK_LINE)
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not _HEX.fullmatch(size_text):
                raise ApiError(400, "a chunk of the body does not start with its size in hex" if line else
                               "the chunked body ended before its last chunk")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > limit:
                raise _too_large(len(body) + size, limit, "at least ")
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(_CHUNK_LINE) not in (b"\r\n", b"\n"):
                raise ApiError(400, "a chunk of the body is not the size its line gave")
            body += chunk
        for _ in range(_TRAILERS):  # trailers, each a line, up to a blank one (or the connection's end)
            if self.rfile.readline(_CHUNK_LINE) in (b"\r\n", b"\n", b""):
                return bytes(body)
        raise ApiError(400, f"more than {_TRAILERS} trailer lines after a chunked body")

    # ------------------------------------------------------------------ routes
    def _error_shape(self, path: str) -> None:
        """How errors read on `path`: Anthropic's and Ollama's routes have their own shapes (a keep-alive
        connection's handler answers request after request, so it is set each time)."""
        self.error_body = (anthropic.error_body if path.startswith("/v1/messages") else
                           ollama.error_body if path.startswith("/api/") else ApiError.body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        self._error_shape(path)
        if not self._admitted():
            return
        if path == "":  # key or not: a browser's chat page, or a reachability probe
            self._root()
            return
        if path in ("/health", "/v1/health"):
            if not self._has_key():
                self._send_json(200, {"status": "ok"})  # liveness for anyone; the server's figures need the key
                return
            self._send_json(200, {**self.server.engine.health(), "model": self.server.model_name})
            return
        if not self._authorized():
            return
        if path == "/metrics":  # (the key is checked: the figures are /health's)
            data = prometheus_text(self.server.engine.health(), self.server.model_name).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", METRICS_CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        name, started = self.server.model_name, self.server.engine.started
        # OpenAI's model object and Anthropic's in one (each client reads its own fields)
        model = {"id": name, "object": "model", "created": int(started), "owned_by": "clover-local",
                 "max_model_len": self.server.limits.context, "type": "model", "display_name": name,
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "clover": self._about()}
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [model], "has_more": False, "first_id": name,
                                  "last_id": name})
        elif path == f"/v1/models/{name}":
            self._send_json(200, model)
        elif path == "/tokenizer_info":
            self._send_json(200, self._tokenizer_info())
        elif path == "/api/tags":
            self._send_json(200, {"models": [ollama.model_entry(self.server.engine.loaded, name)]})
        elif path == "/api/ps":
            self._send_json(200, {"models": [ollama.running_entry(self.server.engine.loaded, name,
                                                                  self.server.limits.context)]})
        elif path == "/api/version":
            from clover_local import __version__

            self._send_json(200, {"version": __version__})
        else:
            self._error(ApiError(404, f"no route GET {path}", code="not_found"))

    def _about(self) -> dict:
        """Ours, in the model object: what `chat URL` shows and starts from (the decoding's defaults here, where
        the model sits)."""
        loaded, limits = self.server.engine.loaded, self.server.limits
        return {"block_size": loaded.config.diffusion.block_size, "threshold": loaded.config.diffusion.threshold,
                "reveal_factor": limits.reveal_factor, "think": limits.think, "max_tokens": limits.max_tokens,
                "placement": loaded.placement()}

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        routes = {"/v1/chat/completions": self._chat, "/v1/completions": self._completions,
                  "/v1/messages": self._messages, "/v1/messages/count_tokens": self._count_tokens,
                  "/v1/responses": self._responses, "/tokenize": self._tokenize,
                  "/detokenize": self._detokenize, "/api/chat": self._ollama_chat,
                  "/api/generate": self._ollama_generate, "/api/show": self._ollama_show}
        self._error_shape(path)
        if not self._admitted():  # (before the body is read: the connection closes)
            return
        if path not in routes:
            self._error(ApiError(404, f"no route POST {path}; this server has {', '.join(routes)}",
                                 code="not_found"), close=True)
            return
        raw = self._read_body()
        if raw is None or not self._authorized():
            return
        try:
            routes[path](raw)
        except (ClientGone, BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True  # its job was cancelled on the way out (`_relaying`)

    def do_HEAD(self) -> None:  # noqa: N802
        """A reachability check (Claude Code sends `HEAD /` before its first request): no body, no key needed."""
        path = self.path.split("?", 1)[0].rstrip("/")
        if not self._admitted():
            return
        self.send_response(200 if path in ("", "/health", "/v1/health") else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_OPTIONS(self) -> None:  # noqa: N802
        """A browser's CORS preflight: what an allowed page may send (no key: a browser sends none with it). Chrome
        asks a page on the internet to be let in to a local server too (Private Network Access)."""
        if not self._admitted():
            return
        self.send_response(204)
        self.send_header("Allow", ALLOWED_METHODS)
        if self.cors_origin is not None:
            self.send_header("Access-Control-Allow-Methods", ALLOWED_METHODS)
            self.send_header("Access-Control-Allow-Headers",
                             self.headers.get("Access-Control-Request-Headers") or "Authorization, Content-Type")
            if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
                self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_PUT(self) -> None:  # noqa: N802
        self._error(ApiError(405, "method not allowed"), close=True)

    do_DELETE = do_PATCH = do_PUT

    # ------------------------------------------------------------------ chat completions
    def _chat(self, raw: bytes) -> None:
        try:
            req = parse_chat_request(raw)
            job = self._job(req)
            self.server.engine.submit(job)
        except ApiError as err:
            self._error(err)
            return
        tok = self.server.engine.tokenizer
        logprobs = (lambda info: None) if job.score_top is None else (
            lambda info: chat_logprobs(tok, info["answer_ids"], info["content_from"], info["scores"]))
        self._answer(job, ChatAnswer(self.server.model_name, req.include_usage, logprobs), req)

    def _settings(self, req: Sampling, prompt_tokens: int, what: str):
        """DecodeSettings for one answer to a prompt of `prompt_tokens` tokens (400 when it cannot fit)."""
        from clover_local.generate.block_diffusion import DecodeSettings

        engine = self.server.engine
        max_new = completion_budget(prompt_tokens, req.max_tokens, self.server.limits, what, req.max_tokens_ceiling)
        threshold = req.threshold if req.threshold is not None else engine.loaded.config.diffusion.threshold
        factor = req.reveal_factor if req.reveal_factor is not None else (
            0.0 if req.threshold is not None else self.server.limits.reveal_factor)  # (a threshold asks for its rule)
        stops = engine.loaded.stop_token_ids
        forced = req.forced if isinstance(req, ChatRequest) else None
        vocab = forced.vocab(engine.tokenizer) if forced is not None else engine.tokenizer
        constraint = answer_constraint(vocab, stops, req.json_object, req.answer_grammar)
        size = engine.loaded.config.vocab_size
        outside = next((i for i in req.logit_bias if i >= size), None)
        if outside is not None:
            raise ApiError(400, f"'logit_bias' names token {outside}, outside this model's vocabulary (ids 0 to "
                           f"{size - 1})", param="logit_bias")
        return DecodeSettings(max_new_tokens=max_new, threshold=threshold, factor=factor,
                              temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
                              seed=req.seed, stop_token_ids=stops, penalties=req.penalties,
                              logit_bias=req.logit_bias, constraint=constraint)

    def _prompt(self, req: ChatRequest) -> str:
        """The conversation rendered by the chat template, as the model will read it (400s for what cannot be);
        with thinking off where the request says nothing of it and the server's default is off (--no-think)."""
        if not req.thinking_asked and not self.server.limits.think:
            req.enable_thinking = False
        tok = self.server.engine.tokenizer
        if req.tools and "tools" not in (tok.chat_template or ""):
            raise ApiError(400, "this model's chat template does not read 'tools', so the model would never see "
                           "them; describe the tools in the messages instead", param="tools")

        def render(messages: list[dict]) -> str:
            return tok.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=req.enable_thinking,
                                           **req.template_kwargs)

        try:
            text = render(req.messages)
        except CloverError as exc:
            moved = late_system_as_user(req.messages)  # a template that takes a system message only first
            try:
                text = render(moved) if moved else None
            except CloverError:
                text = None
            if text is None:
                raise ApiError(400, str(exc), param="messages") from None
            req.messages = moved  # (the prompt cache's history is rendered from the same messages)
        if (req.json_mode or req.forced) and prompt_opens_thinking(text):
            what, param = (("a JSON-mode answer is the object alone: send response_format text", "response_format")
                           if req.json_mode else ("a forced call is the call alone: send tool_choice auto",
                                                  "tool_choice"))
            raise ApiError(400, "this model's chat template opens a thinking section even with enable_thinking "
                           f"false, and {what}", param=param)
        return text

    def _job(self, req: ChatRequest) -> Job:
        tok = self.server.engine.tokenizer
        read_from = 0
        if req.drop_oldest or self.server.limits.drop_oldest:
            read_from, text, ids = self._fit(req)
        else:
            text = self._prompt(req)
            ids = tok.encode(text)
        history = history_tokens(tok, req.messages, enable_thinking=req.enable_thinking, **req.template_kwargs)
        if req.forced is not None:  # the form the template teaches (serve/tools.py)
            req.forced.for_template(tok.chat_template or "")
        settings = self._settings(req, len(ids), "messages")
        opens_thinking = prompt_opens_thinking(text)
        if req.tools and req.forced is None:
            self._hold_calls(req, settings, opens_thinking)
        asked = [b for b in (req.think_budget, self.server.limits.think_budget) if b is not None]
        room = answer_room_budget(settings.max_new_tokens) if self.server.limits.answer_room else None
        caps = asked + ([room] if room is not None else [])
        if req.enable_thinking and caps:
            try:
                settings.think_budget = ThinkBudget.for_tokenizer(tok, min(caps), opens_thinking)
            except CloverError as exc:  # (no <think> tokens: only a budget asked for is refused)
                if asked:
                    raise ApiError(400, str(exc), param="thinking_token_budget") from None
        return Job(ids, text, settings, stop=req.stop, history_tokens=history, score_top=req.logprobs,
                   blocks=req.stream and req.include_blocks, read_from=read_from)

    def _fit(self, req: ChatRequest) -> tuple[int, str, list[int]]:
        """Ollama's route (every chat route with --drop-oldest, or a request's fit_context): where the kept messages
        start (0: all kept), the prompt and its tokens, of a conversation that loses its oldest exchanges where it
        would leave its answer less than it asks for (chat/window.py: in steps, so the cut stays put while the
        conversation grows and the next turns resume the prefill): an OpenAI max_tokens whole (it is a promise
        there: `completion_budget` refuses less), else at most a quarter of the context. Where even the last
        question alone does not fit, `_settings` refuses it as before."""
        tok, limits = self.server.engine.tokenizer, self.server.limits
        if req.max_tokens and not req.max_tokens_ceiling:
            room = req.max_tokens
        else:
            room = min(req.max_tokens or limits.max_tokens, limits.max_tokens, limits.context // 4)

        def render(kept: list[dict]) -> tuple[str, list[int]]:
            req.messages = kept
            prompt = self._prompt(req)
            return prompt, tok.encode(prompt)

        return fit(req.messages, render, lambda t: len(tok.encode(t)), limits.context, room)

    def _hold_calls(self, req: ChatRequest, settings: Any, opens_thinking: bool) -> None:
        """Unforced tools (serve/tools.py): beside a JSON answer format, the answer is that JSON or a call; else a
        call the model starts is held to the tools' grammar from its `<tool_call>` on (not with --free-tool-calls)."""
        tok, stops = self.server.engine.tokenizer, settings.stop_token_ids
        if req.json_mode:
            settings.constraint = json_or_calls(req.tools, req.parallel_calls, tok, stops, req.json_schema)
            if settings.constraint is None:
                raise ApiError(400, "this model's chat template teaches no tool-call form, so beside a JSON answer "
                               "format no call could be written: send the format or the tools", param="tools")
        elif not self.server.limits.free_tool_calls:
            settings.trigger = auto_calls(req.tools, req.parallel_calls, tok, stops, opens_thinking)

    @contextmanager
    def _relaying(self, job: Job) -> Iterator[None]:
        """A client gone while its job is relayed cancels the job (the worker stops at its next pass)."""
        try:
            yield
        except (ClientGone, BrokenPipeError, ConnectionResetError, socket.timeout):
            job.cancel.set()
            raise

    def _next(self, job: Job) -> tuple:
        """The job's next output; watches the connection while waiting."""
        while True:
            try:
                return job.out.get(timeout=0.05)
            except queue.Empty:
                if self._client_gone():
                    raise ClientGone from None

    def _result(self, job: Job) -> dict | None:
        """The job's final figures and text (its deltas skipped); None once its error was answered."""
        while True:
            item = self._next(job)
            if item[0] == "done":
                return item[1]
            if item[0] == "error":
                self._error(item[1])
                return None
            if item[0] == "cancelled":
                raise ClientGone

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj: Any, name: str | None = None) -> None:
        """One server-sent event; `name` is its `event:` line (Anthropic's and the Responses API's streams). In an
        NDJSON stream (Ollama's), one line of JSON."""
        payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        if self.ndjson:
            self._write_chunk(f"{payload}\n".encode("utf-8"))
            return
        head = f"event: {name}\n" if name else ""
        self._write_chunk(f"{head}data: {payload}\n\n".encode("utf-8"))

    def _send_events(self, events: list) -> None:
        """Events as the shapes give them: each a payload, or (event name, payload)."""
        for event in events:
            name, payload = event if isinstance(event, tuple) else (None, event)
            self._event(payload, name)

    def _start_events(self, ndjson: bool = False) -> None:
        """A streamed answer's headers: server-sent events, or (`ndjson`) newline-delimited JSON."""
        self.ndjson = ndjson
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson" if ndjson else "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()

    def _relay(self, job: Job, on_delta: Callable[[str, str], list], on_done: Callable[[dict], list],
               on_error: Callable[[ApiError], list] | None = None, last: str | None = "[DONE]",
               on_view: Callable[[dict], list] | None = None) -> None:
        """A job's output as server-sent events, whichever endpoint shapes them: each delta's (and, where the
        shape has them, the work in view: a long prompt's reading, the block being denoised), then the end's (or
        the error's: by default the route's error body), then `last` (OpenAI's [DONE]; None for streams that end
        with an event of their own). An event is a payload, or (event name, payload)."""

        send = self._send_events
        while True:
            item = self._next(job)
            kind = item[0]
            if kind == "delta":
                send(on_delta(item[1], item[2]))
            elif kind == "view":
                if on_view is not None:
                    send(on_view(item[1]))
            elif kind == "done":
                send(on_done(item[1]))
                break
            elif kind == "error":
                send(on_error(item[1]) if on_error else [self.error_body(item[1])])
                break
            elif kind == "cancelled":
                raise ClientGone
        if last is not None:
            self._event(last)
        self._write_chunk(b"")

    def _answer(self, job: Job, shape: AnswerShape, req: Sampling) -> None:
        """A submitted job's answer to `req` in one wire format's shape (protocol.ChatAnswer,
        anthropic.MessageAnswer, responses.ResponseAnswer, ollama.Answer): one body, or a stream whose tool calls
        are held back to its end (serve/tools.py) — the same for every route."""
        tools, forced = (req.tools, req.forced) if isinstance(req, ChatRequest) else (None, None)
        leading = bool(tools and forced is None and req.json_mode)  # the format's JSON or calls (json_or_calls)
        with self._relaying(job):
            if not req.stream:
                info = self._result(job)
                if info is not None:
                    self._send_json(200, shape.whole(info, *split_tool_calls(info["content"], tools, forced,
                                                                              leading)))
                return
            held = ToolCallStream(tools, forced, leading)
            self._start_events(shape.ndjson)
            self._send_events(shape.start())
            self._relay(job, lambda dr, dc: shape.delta(dr, held.feed(dc)),
                        lambda info: shape.end(info, *held.finish()), shape.error, shape.last,
                        shape.view if isinstance(shape, ChatAnswer) else None)

    # ------------------------------------------------------------------ Anthropic's messages
    def _messages(self, raw: bytes) -> None:
        """/v1/messages: the chat route's work, in Anthropic's wire format (serve/anthropic.py)."""
        try:
            req = anthropic.parse_messages_request(raw)
            job = self._job(req)
            self.server.engine.submit(job)
        except ApiError as err:
            self._error(err)
            return
        shape = anthropic.MessageAnswer(self.server.model_name, len(job.prompt_ids))
        self._answer(job, shape, req)

    def _count_tokens(self, raw: bytes) -> None:
        """/v1/messages/count_tokens: the prompt's tokens as the model would read it (Claude Code sizes its
        context with it)."""
        try:
            text = self._prompt(anthropic.parse_messages_request(raw, count_only=True))
        except ApiError as err:
            self._error(err)
            return
        self._send_json(200, {"input_tokens": len(self.server.engine.tokenizer.encode(text))})

    # ------------------------------------------------------------------ the Responses API
    def _responses(self, raw: bytes) -> None:
        """/v1/responses: run as the chat request it reads as (serve/responses.py), answered in its own shape."""
        try:
            req = parse_responses_request(raw)
            job = self._job(req.chat)
            self.server.engine.submit(job)
        except ApiError as err:
            self._error(responses_error(err))
            return
        self._answer(job, ResponseAnswer(req, self.server.model_name), req.chat)

    # ------------------------------------------------------------------ Ollama's API
    def _ollama_chat(self, raw: bytes) -> None:
        self._ollama(raw, ollama.parse_chat, chat=True)

    def _ollama_generate(self, raw: bytes) -> None:
        self._ollama(raw, ollama.parse_generate, chat=False)

    def _ollama(self, raw: bytes, parse: Callable[[bytes], ChatRequest | CompletionRequest | None], chat: bool
                ) -> None:
        """/api/chat and /api/generate: the chat (or, raw, the completion) job they read as (serve/ollama.py),
        answered as one object or as NDJSON."""
        started = time.perf_counter()
        try:
            req = parse(raw)
            if req is None:  # nothing to answer: Ollama's "load the model", and it is loaded
                name = ollama.requested_model(raw) or ollama.tag(self.server.model_name)
                self._send_json(200, ollama.Answer(chat, name, started).loaded())
                return
            is_chat = isinstance(req, ChatRequest)
            job = self._job(req) if is_chat else self._completion_job(req, 0, req.prompts[0])
            self.server.engine.submit(job)
        except ApiError as err:
            self._error(err)
            return
        answer = ollama.Answer(chat, req.model or ollama.tag(self.server.model_name), started)
        self._answer(job, answer, req)

    def _ollama_show(self, raw: bytes) -> None:
        """/api/show: the served model, whatever name was asked for (one model is served, as on the other routes)."""
        loaded = self.server.engine.loaded
        self._send_json(200, ollama.show(loaded, self.server.model_name, self.server.limits.context))

    # ------------------------------------------------------------------ text completions
    def _completions(self, raw: bytes) -> None:
        """/v1/completions: each prompt (a batch runs one after another, each queued as its own job) continued
        as raw text; with `logprobs`, a causal scoring pass over prompt and answer after the answer."""
        try:
            req = parse_completion_request(raw)
            jobs = [self._completion_job(req, i, p) for i, p in enumerate(req.prompts)]  # all checked first
        except ApiError as err:
            self._error(err)
            return
        infos = []
        for job in jobs:
            try:
                self.server.engine.submit(job)
            except ApiError as err:
                self._error(err)
                return
            with self._relaying(job):
                if req.stream:
                    return self._stream_text(req, job)
                info = self._result(job)
            if info is None:
                return
            infos.append(info)
        choices = [text_choice(i, (job.prompt_text if req.echo else "") + info["content"], info["finish_reason"],
                               self._logprobs(req, job, info)) for i, (job, info) in enumerate(zip(jobs, infos))]
        self._send_json(200, text_completion(completion_id("cmpl"), self.server.model_name, choices,
                                             answer_usage(*infos)))

    def _completion_job(self, req: CompletionRequest, i: int, prompt: str | list[int]) -> Job:
        engine = self.server.engine
        if isinstance(prompt, str):
            ids, text = engine.tokenizer.encode(prompt), prompt
        else:
            check_ids(prompt, engine.loaded.config.vocab_size, f"prompt[{i}]", "prompt")
            ids, text = list(prompt), engine.tokenizer.decode(prompt)
        return Job(ids, text, self._settings(req, len(ids), "prompt"), stop=req.stop, raw=True,
                   score_top=req.logprobs)

    def _logprobs(self, req: CompletionRequest, job: Job, info: dict) -> dict | None:
        if req.logprobs is None:
            return None
        first = 0 if req.echo else len(job.prompt_ids)
        return legacy_logprobs(self.server.engine.tokenizer, info["scored_ids"], info["scores"], first)

    def _stream_text(self, req: CompletionRequest, job: Job) -> None:
        name, cid, created = self.server.model_name, completion_id("cmpl"), int(time.time())
        self._start_events()
        if req.echo:
            self._event(text_chunk(cid, name, created, text_choice(0, job.prompt_text, None)))

        def delta(_: str, dc: str) -> list:
            return [text_chunk(cid, name, created, text_choice(0, dc, None))] if dc else []

        def done(info: dict) -> list:
            return [text_chunk(cid, name, created, text_choice(0, "", info["finish_reason"]))] + (
                [text_chunk(cid, name, created, None, use=answer_usage(info))] if req.include_usage else [])

        self._relay(job, delta, done)

    # ------------------------------------------------------------------ the tokenizer (vLLM's routes)
    def _tokenizer_info(self) -> dict:
        """What a client needs to tokenize as the server does (lm-evaluation-harness reads it to use /tokenize
        instead of loading a tokenizer of its own)."""
        tok = self.server.engine.tokenizer
        return {**tok.special_tokens_map(), "chat_template": tok.chat_template,
                "model_max_length": self.server.limits.context,
                "vocab_size": self.server.engine.loaded.config.vocab_size, "tokenizer_class": "PreTrainedTokenizerFast"}

    def _tokenize(self, raw: bytes) -> None:
        tok = self.server.engine.tokenizer
        try:
            req = parse_tokenize_request(raw)
            if req.prompt is not None:
                text = req.prompt
            else:
                try:
                    text = tok.apply_chat_template(req.messages, add_generation_prompt=req.add_generation_prompt,
                                                   enable_thinking=req.enable_thinking, **req.template_kwargs)
                except CloverError as exc:
                    raise ApiError(400, str(exc), param="messages") from None
        except ApiError as err:
            self._error(err)
            return
        ids = tok.encode(text)
        self._send_json(200, {"tokens": ids, "count": len(ids), "max_model_len": self.server.limits.context})

    def _detokenize(self, raw: bytes) -> None:
        try:
            ids = parse_detokenize_request(raw)
            check_ids(ids, self.server.engine.loaded.config.vocab_size, "'tokens'", "tokens")
        except ApiError as err:
            self._error(err)
            return
        self._send_json(200, {"prompt": self.server.engine.tokenizer.decode(ids)})


def completion_budget(prompt_tokens: int, max_tokens: int | None, limits: Limits, what: str = "messages",
                      ceiling: bool = False) -> int:
    """The tokens the answer may take: `max_tokens`, or without it what the context leaves (at most the server's
    --max-tokens). Raises a 400 when that does not fit; messages that fill the context alone are told so, since
    no max_tokens would help (OpenAI's wording would count a negative completion there). With `ceiling`
    (Anthropic's required max_tokens, which clients set far above what a local server allows) a larger max_tokens
    is cut to what is allowed, and messages that fill the context are refused in Anthropic's words ("prompt is too
    long", which Claude Code reads as its cue to compact the conversation)."""
    if ceiling:
        if prompt_tokens >= limits.context:
            raise ApiError(400, f"prompt is too long: {prompt_tokens} tokens > {limits.context - 1} maximum (this "
                           "server's --context, less one token for the answer)", param=what,
                           code="context_length_exceeded")
        return min(max_tokens or limits.max_tokens, limits.max_tokens, limits.context - prompt_tokens)
    if max_tokens is not None and max_tokens > limits.max_tokens:
        raise ApiError(400, f"max_tokens is {max_tokens}; this server allows at most {limits.max_tokens}",
                       param="max_tokens", code="max_tokens_too_large")
    if prompt_tokens >= limits.context:
        room = ", which leaves no room for an answer" if prompt_tokens == limits.context else ""
        raise ApiError(400, f"the {what} {'is' if what == 'prompt' else 'are'} {prompt_tokens} tokens; this "
                       f"server's maximum context length is {limits.context} tokens (--context){room}: shorten "
                       f"{'it' if what == 'prompt' else 'them'}", param=what, code="context_length_exceeded")
    if max_tokens is None:
        return min(limits.max_tokens, limits.context - prompt_tokens)
    if prompt_tokens + max_tokens > limits.context:
        raise ApiError(400, f"This model's maximum context length is {limits.context} tokens. However, you "
                       f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {what}, "
                       f"{max_tokens} in the completion). Please reduce the length of the {what} or completion.",
                       param=what, code="context_length_exceeded")
    return max_tokens


@functools.cache
def chat_page() -> tuple[bytes, str]:
    """The chat page's bytes, read from the package once, and its Content-Security-Policy: the page's own script
    and style allowed by their sha256 (an inline script that is not the page's does not run), requests to this
    server only, no framing."""
    import base64
    import hashlib
    import re
    from importlib import resources

    data = resources.files("clover_local.serve").joinpath("ui.html").read_bytes()

    def digest(tag: bytes) -> str:
        (inline,) = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), data, re.S)
        return "'sha256-%s'" % base64.b64encode(hashlib.sha256(inline).digest()).decode()

    return data, (f"default-src 'none'; script-src {digest(b'script')}; style-src {digest(b'style')}; "
                  "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def make_server(engine: Engine, host: str, port: int, model_name: str, limits: Limits,
                api_key: str | None = None, quiet: bool = False, allow_origins: tuple[str, ...] = ()
                ) -> CloverHTTPServer:
    cls = CloverHTTPServer
    if ":" in host:  # an IPv6 address such as ::1
        cls = type("CloverHTTPServer6", (CloverHTTPServer,), {"address_family": socket.AF_INET6})
    try:
        return cls((host, port), engine, model_name, limits, api_key, quiet, allow_origins)
    except OSError as exc:
        raise CloverError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
