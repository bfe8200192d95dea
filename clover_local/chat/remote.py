"""`clover-local chat URL`: the terminal chat with the model a running `serve` holds, so a 35B pack is loaded once
and the chat, the browser page and agents share it. The loop, the commands, the conversation and the display are
the local chat's (`ChatApp`); the answers come from the server's chat completions stream, whose block being
denoised (`stream_options.include_blocks`, generate/block_view.py) is drawn as the local chat draws it."""

from __future__ import annotations

import http.client
import json
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import SplitResult, urlsplit

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape

from clover_local.chat.app import ChatApp, gpu_row, prompt_cache_row, runtime_rows
from clover_local.chat.conversation import ChatSettings, for_template
from clover_local.chat.display import TurnView, plural
from clover_local.chat.turn import TurnStats
from clover_local.errors import CloverError
from clover_local.generate.events import PrefillProgress
from clover_local.serve.origins import loopback_address


class Refused(CloverError):
    """The server answered with an error status (its reason in the message)."""


CONNECT_TIMEOUT = 10.0  # seconds to reach the server; an answer may then wait in its queue for as long as it takes


@dataclass
class Server:
    """A running `clover-local serve`: where it is, its key, and the model it serves as its /v1/models says."""

    url: str  # scheme://host:port[/path], without /v1 (a path: a server behind a reverse proxy at a prefix)
    key: str | None = None
    model: str = ""
    context: int = 0
    about: dict[str, Any] = field(default_factory=dict)  # its model object's "clover" part (serve/http.py `_about`)

    @classmethod
    def connect(cls, url: str, key: str | None = None) -> Server:
        server = cls(url.rstrip("/").removesuffix("/v1"), key)
        parts = server._parts()
        if key and parts.scheme == "http" and not loopback_address(parts.hostname or ""):
            print(f"note: the API key goes to {parts.hostname} unencrypted (http, another machine)", file=sys.stderr)
        try:
            listed = server.get("/v1/models")
        except Refused:
            listed = None
        entries = listed.get("data") if isinstance(listed, dict) else None
        entry = entries[0] if isinstance(entries, list) and entries and isinstance(entries[0], dict) else {}
        if not (isinstance(entry.get("clover"), dict) and isinstance(entry.get("id"), str)
                and isinstance(entry.get("max_model_len"), int)):
            raise CloverError(f"{server.url} answers, but not as clover-local serve (no block-diffusion model in its "
                              "/v1/models); start one with `clover-local serve MODEL`")
        server.model, server.context, server.about = entry["id"], int(entry["max_model_len"]), entry["clover"]
        return server

    def _parts(self) -> SplitResult:
        """The address split, checked: a scheme we speak, a host, a port in range ([::1 and :99999 raised)."""
        try:
            parts = urlsplit(self.url)
            parts.port  # (read: the range check is its)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise CloverError(f"{self.url} is not a server address; give one as http://HOST:PORT")
        return parts

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        parts = self._parts()
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT)
        try:
            conn.connect()
        except OSError as exc:
            raise CloverError(f"cannot reach {self.url} ({_why(exc)}); start the server with "
                              "`clover-local serve MODEL`, or check the address") from None
        conn.sock.settimeout(timeout)
        return conn

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    def _open(self, method: str, path: str, body: dict | None, timeout: float | None) -> http.client.HTTPResponse:
        """The server's response, its status checked: a refusal is one line with the server's reason."""
        conn = self._connection(timeout)
        try:
            conn.request(method, urlsplit(self.url).path + path, None if body is None else json.dumps(body).encode(),
                         self._headers())
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise CloverError(f"{self.url} went away ({_why(exc)})") from None
        except BaseException:  # (a Ctrl-C while the server has not answered yet: hang up)
            conn.close()
            raise
        if response.status == 200:
            return response
        try:
            message = json.loads(response.read())["error"]["message"]
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
            message = f"{response.status} {response.reason}"  # (not ours, or not JSON)
        finally:
            conn.close()
        if response.status == 401:
            raise CloverError(f"{self.url} needs its API key: give it with --api-key KEY (or CLOVER_LOCAL_API_KEY)")
        raise Refused(f"the server refused: {message}")

    def get(self, path: str) -> Any:
        response = self._open("GET", path, None, CONNECT_TIMEOUT)
        try:
            return json.loads(response.read())
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise CloverError(f"{self.url}{path} did not answer in JSON ({_why(exc)})") from None
        finally:
            response.close()

    def stream(self, body: dict) -> Generator[dict, None, None]:
        """A streamed chat completion's chunks, parsed, to its [DONE]; closing the iterator early hangs up, which
        stops the answer on the server."""
        response = self._open("POST", "/v1/chat/completions", body, None)
        try:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    return
                try:
                    chunk = json.loads(line[6:])
                except ValueError:
                    raise CloverError(f"{self.url} sent a chunk that is not JSON: {line[:80]!r}") from None
                if "error" in chunk:
                    raise CloverError(f"the server's answer failed: {chunk['error'].get('message', chunk['error'])}")
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise CloverError(f"{self.url} went away mid-answer ({_why(exc)})") from None
        finally:
            response.close()
        raise CloverError(f"{self.url} ended the answer without finishing it")


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


@dataclass
class RemoteTurn:
    """One answer as its chunks arrive: the text so far, the figures, and what the display is to show."""

    think: bool
    content: str = ""
    reasoning: str = ""
    committed: int = 0  # tokens of the blocks committed so far
    thought: int | None = None  # of those, the thinking's (`clover_commit`; None from a server that does not say)
    block: int = 0  # the block in view
    # told (prompt tokens, tokens the answer may take, the first message read) once: from the stream's clover_prompt
    # before the first pass, or else from the usage at the end (a stream without include_blocks)
    on_prompt: Callable[[int, int, int], None] | None = None

    def take(self, chunk: dict, stats: TurnStats, view: TurnView | None) -> list[RenderableType]:
        """Fold one chunk into the turn, `stats` and `view`; what to print for good."""
        self._show(chunk, stats, view)
        if chunk.get("usage"):
            self._settle(chunk["usage"], stats)
        out: list[RenderableType] = []
        for choice in chunk.get("choices") or []:
            out += self._text(choice.get("delta") or {}, view)
            if choice.get("finish_reason"):
                stats.stop_reason = choice["finish_reason"]
        return out

    def _show(self, chunk: dict, stats: TurnStats, view: TurnView | None) -> None:
        """The work in view (`include_blocks`): what the prompt is and leaves the answer, a long prompt's reading,
        or the block being denoised with the answer's passes and tokens so far."""
        if "clover_prompt" in chunk:
            read = chunk["clover_prompt"]
            stats.prompt_tokens = read["tokens"]
            self._told(read["tokens"], read["max_tokens"], read["read_from"])
        if "clover_prefill" in chunk:
            read = PrefillProgress(**chunk["clover_prefill"])
            stats.on_event(read)
            if view is not None:
                view.on_prefill(read)
        if "clover_block" in chunk:
            shown = chunk["clover_block"]
            self.block, self.committed = shown["block"], shown["tokens"]
            stats.passes, stats.tokens = shown["passes"], shown["tokens"]
            if view is not None:
                view.prefill = None
                view.cells.show(shown)
        if "clover_commit" in chunk:  # before the block's text: the counts that text ends at
            done = chunk["clover_commit"]
            self.block, self.committed, self.thought = done["block"], done["tokens"], done["thought"]
            stats.tokens = done["tokens"]

    def _text(self, delta: dict, view: TurnView | None) -> list[RenderableType]:
        """A committed block's text (thinking, answer), into the turn and the display."""
        dr, dc = delta.get("reasoning_content") or "", delta.get("content") or ""
        self.reasoning += dr
        self.content += dc
        if view is None or not (dr or dc):
            return []
        view.on_commit(self.block)
        return view.on_text(dr, dc, self.think and not self.content, self.thought_tokens)

    @property
    def thought_tokens(self) -> int:
        """The thinking's tokens so far, as the local chat counts them (up to and including `</think>`); from a
        server that does not send `clover_commit`, the committed tokens (a block behind while the thought lasts)."""
        return self.thought if self.thought is not None else self.committed

    def _settle(self, use: dict, stats: TurnStats) -> None:
        """The answer's own figures, from its usage: what was read, resumed and written, in how many passes, and
        where the conversation was read from."""
        ours = use.get("clover") or {}
        stats.prompt_tokens = use.get("prompt_tokens", stats.prompt_tokens)
        stats.reused_tokens = (use.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        stats.tokens = use.get("completion_tokens", stats.tokens)
        stats.passes = ours.get("passes", stats.passes)
        stats.ended = time.perf_counter()
        if "max_tokens" in ours:
            self._told(stats.prompt_tokens, ours["max_tokens"], ours.get("read_from", 0))

    def _told(self, prompt_tokens: int, allowed: int, read_from: int) -> None:
        if self.on_prompt is not None:
            self.on_prompt(prompt_tokens, allowed, read_from)
            self.on_prompt = None


class RemoteChatApp(ChatApp):
    """The chat, answered by a running server (`Server`)."""

    def __init__(self, server: Server, label: str, settings: ChatSettings, *, interactive: bool,
                 system: str | None = None, console: Console | None = None, out: TextIO | None = None,
                 keep_at: Path | None = None) -> None:
        self._start(label, settings, interactive, system, console, out, keep_at)
        self.server = server
        self.health: dict[str, Any] = {}  # the server's /health, as last read
        self.context = server.context
        self.block_size = int(server.about.get("block_size", 32))

    def banner(self) -> None:
        think = "on" if self.settings.think else "off"
        line = (f"[bold]clover-local chat[/] · {escape(self.server.model)} on {escape(self.server.url)} · blocks of "
                f"{self.block_size} · {self.settings.reveal_rule()} · thinking {think} · [bold]/help[/] for commands")
        if self.interactive:
            self.console.print(line)
            if self.server.about.get("placement"):
                self.console.print(f"[dim]the server's model: {escape(self.server.about['placement'])}[/]")
        else:
            self.err.print(line)

    # ------------------------------------------------------------------ hooks: the server's figures
    def _health(self) -> dict:
        """The server's /health ({} where it does not answer), kept for the status line."""
        try:
            health = self.server.get("/health")
        except CloverError:
            health = {}
        self.health = health if isinstance(health, dict) else {}
        return self.health

    def _runtime_now(self) -> dict:
        self._health()
        return self._runtime_stats()

    def _runtime_stats(self) -> dict:
        runtime = self.health.get("runtime")  # (the status line redraws many times a second: the last read's)
        return {k: v for k, v in runtime.items() if v is not None} if isinstance(runtime, dict) else {}

    def _gpu_memory(self) -> tuple[int, int] | None:
        mem = self.health.get("gpu_memory")  # (the server's GPU: the last read's, where it has one)
        return (mem["allocated_bytes"], mem["total_bytes"]) if isinstance(mem, dict) else None

    def _engine_rows(self, every: bool) -> list[tuple[str, str]]:
        health = self._health()
        if not health:
            return [("server", f"{self.server.url}: no figures (/health did not answer)")]
        queue, pc = health.get("queue") or {}, health.get("prompt_cache") or {}
        rows = [("server", f"{self.server.url}, {plural(health.get('tokens', 0), 'token')} written for all its "
                           f"clients, {queue.get('waiting', 0)} waiting"),
                prompt_cache_row(pc.get("hits", 0), pc.get("lookups", 0), pc.get("reused_tokens", 0), "the server's: ")]
        return rows + runtime_rows(self._runtime_stats(), every) + [gpu_row(self._gpu_memory())]

    def _check_think_budget(self, budget: int) -> None:
        pass  # (the server checks it against its tokenizer when the next answer asks)

    # ------------------------------------------------------------------ one answer
    def request(self) -> dict:
        """The chat completion the next answer asks the server for: the conversation and this chat's settings."""
        s = self.settings
        body: dict[str, Any] = {
            # all of it: the server leaves out what the context cannot hold, as the local chat does (`fit_context`)
            "model": self.server.model, "messages": for_template(self.conv.messages), "stream": True,
            "stream_options": {"include_usage": True, "include_blocks": self.interactive},
            "fit_context": True, "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "top_k": s.top_k, "min_p": s.min_p, "enable_thinking": s.think, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "repetition_penalty": s.repetition_penalty,
        }
        body.update({"reveal_factor": s.reveal_factor} if s.reveal_factor else {"threshold": s.threshold})
        if s.seed is not None:
            body["seed"] = s.seed
        if s.think and s.think_budget is not None:
            body["thinking_token_budget"] = s.think_budget
        return body

    def ask(self, text: str) -> TurnStats | None:
        self.conv.add_user(text)
        stats = TurnStats()
        turn = RemoteTurn(self.settings.think, on_prompt=self._prompt_notes)
        try:
            chunks = self.server.stream(self.request())
            if self.interactive:
                stopped = self._answer_live(lambda: self._draw_remote(chunks, turn, stats))
            else:
                stopped = self._print_remote(chunks, turn, stats)
        except CloverError as exc:
            self.conv.messages.pop()
            self.error(str(exc))
            return None
        self._record(turn.content, turn.reasoning, stats, stopped)
        return stats

    def _prompt_notes(self, prompt_tokens: int, allowed: int, read_from: int) -> None:
        """What the local chat says before an answer: the conversation read from a later message, an answer cut
        short of max_tokens."""
        self._read_from(read_from)
        self._answer_limit(allowed, prompt_tokens)

    def _draw_remote(self, chunks: Generator[dict, None, None], turn: RemoteTurn, stats: TurnStats) -> bool:
        view = TurnView(lambda i: "", self.block_size, self.settings.show_thinking,
                        status=lambda width: self._status(stats, view, width), width=self.console.width)
        stopped, last_draw, headed = False, 0.0, False
        with Live(view, console=self.console, auto_refresh=False, transient=True) as live:
            try:
                for chunk in chunks:
                    printed = turn.take(chunk, stats, view)
                    if not headed and (printed or "clover_block" in chunk or "clover_prefill" in chunk):
                        # the answer's header after the notes that come first (clover_prompt), as the local chat
                        self._answer_header()
                        headed = True
                    for r in printed:
                        live.console.print(r)
                    if self.pace and "clover_block" in chunk:  # (--pace: each pass shown a while, as the local chat)
                        live.refresh()
                        time.sleep(self.pace)
                        stats.paused += self.pace
                    now = time.perf_counter()
                    if now - last_draw > 1 / 30:
                        live.refresh()
                        last_draw = now
            except KeyboardInterrupt:
                stopped = True
            finally:
                chunks.close()  # (hung up: the server stops the answer)
        stats.end("cancelled" if stopped else stats.stop_reason)
        if not headed:  # (an answer that showed nothing: still said to be one)
            self._answer_header()
        return self._close_answer(view.on_text("", "", False, turn.thought_tokens) + view.finish(), stopped, stats)

    def _print_remote(self, chunks: Generator[dict, None, None], turn: RemoteTurn, stats: TurnStats) -> bool:
        stopped = False
        try:
            for chunk in chunks:
                before = len(turn.content)
                turn.take(chunk, stats, None)
                if len(turn.content) > before:
                    self.out.write(turn.content[before:])
                    self.out.flush()
        except KeyboardInterrupt:
            stopped = True
        finally:
            chunks.close()
        stats.end("cancelled" if stopped else stats.stop_reason)
        self.out.write("\n")
        self.out.flush()
        return stopped
