"""`clover-local serve`: an OpenAI-, Anthropic- and Ollama-compatible server on loopback."""

from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import (chat_template_option, context_option, dtype_option, load_options,
                                                  load_shown, offload_option, prefill_chunk_option,
                                                  resident_routing_option, revision_option, stderr_console,
                                                  vram_budget_option)
from clover_local.commands._sampling_options import check_range, reveal_factor_option, serve_think_budget
from clover_local.errors import CloverError
from clover_local.generate.ranges import DECODE_RANGES
from clover_local.runtime.sizes import parse_size
from clover_local.serve.origins import loopback_address, parse_allowed

if TYPE_CHECKING:
    from clover_local.serve.engine import Engine
    from clover_local.serve.http import CloverHTTPServer


def model_label(model: str) -> str:
    """The id clients see in /v1/models: a short name or Hub repo id as given, a folder's name."""
    path = Path(model).expanduser()
    return path.resolve().name if path.is_dir() else model


@app.command()
def serve(
    model: str = typer.Argument(..., help="Pack or checkpoint folder, Hub repo id, or 'tiny' (the shipped model)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on (0: any free port, printed at start)."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="The model id clients see (default: "
                                                                        "the folder's name)."),
    max_queue: int = typer.Option(32, "--max-queue", help="Requests that may wait while one generates; more "
                                                          "get HTTP 429."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Most tokens one answer may ask for (also the default)."),
    max_request_mb: float = typer.Option(4.0, "--max-request-mb", help="Largest request body, in MB."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="CLOVER_LOCAL_API_KEY",
                                          help="Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (advised "
                                               "off loopback)."),
    park_prompts: str = typer.Option(
        "2GB", "--park-prompts", metavar="SIZE",  # (serve.engine.DEFAULT_PARK_BYTES; not imported: start-up)
        help="Host RAM for conversations set aside while another's request runs: the next request of one resumes "
             "its prompt's prefill instead of reading it again (an agent's sub-agents and side questions come "
             "between its turns). At 35B a 20K-token prompt takes about 0.5 GB. 0 turns it off."),
    think_budget: Optional[str] = typer.Option(
        None, "--think-budget", metavar="TOKENS|off",
        help="The most tokens any answer's thinking may take (a request may ask for less: 'thinking_token_budget', "
             "Anthropic's thinking.budget_tokens): where it runs out the server ends the thinking itself and the "
             "answer follows, so an agent gets its answer within max_tokens. Default: whatever leaves the answer a "
             "quarter of its tokens (at most 1,024; answers of 256 tokens or more), so a long thought cannot use "
             "up max_tokens with no answer; 'off': no limit at all."),
    think: bool = typer.Option(
        True, "--think/--no-think",
        help="Whether a request that says nothing of thinking has the model think before it answers (the model's "
             "default: on). --no-think answers such requests at once, for front ends that cannot turn thinking off "
             "(the model can think for thousands of tokens); a request that asks (enable_thinking, "
             "reasoning_effort, Anthropic's thinking, Ollama's think) still gets what it asks for."),
    free_tool_calls: bool = typer.Option(
        False, "--free-tool-calls",
        help="With tool_choice auto, leave the model's tool calls as it writes them: no grammar from its <tool_call> "
             "on (by default a call it starts is held to the tools' names and parameters, so it comes back as a "
             "call; a malformed one would stay in the content as text)."),
    reveal_factor: float = reveal_factor_option(serve=True),
    drop_oldest: bool = typer.Option(
        False, "--drop-oldest",
        help="Answer a conversation longer than --context from its latest messages on every route, as /api/chat "
             "always does (Ollama's behaviour): its oldest exchanges left out, the system message kept, in steps "
             "so the next turns resume the prompt. Default: a 400, as OpenAI's and Anthropic's APIs answer (Claude "
             "Code compacts its conversation on that 400: leave this off for it)."),
    allow_origin: Optional[list[str]] = typer.Option(
        None, "--allow-origin", metavar="ORIGIN",
        help="Let pages from this web origin call the server from a browser (repeatable): "
             "'https://chat.example.com', a glob such as 'chrome-extension://*' for browser extensions, or '*' for "
             "any site. Pages served from this machine (localhost, 127.0.0.1) and desktop apps (app://, file://, "
             "tauri://, VS Code's webviews) always may; other pages get a 403, so a site you visit cannot spend "
             "your GPU. Clients that are not browser pages (curl, the SDKs, agents) send no origin and are not "
             "affected."),
    quiet: bool = typer.Option(False, "--quiet", help="Do not log each request on stderr (its line, and what it read, "
                                                      "wrote and how fast)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = dtype_option(),
    chat_template: Optional[Path] = chat_template_option(),
    offload: bool = offload_option(),
    vram_budget: Optional[str] = vram_budget_option(),
    context: Optional[int] = context_option(),
    resident_routing: bool = resident_routing_option(),
    prefill_chunk: Optional[int] = prefill_chunk_option(),
    revision: Optional[str] = revision_option(),
) -> None:
    """Serve a model over OpenAI's, Anthropic's and Ollama's APIs, for chat front ends and agents.

    OpenAI's /v1/chat/completions, /v1/completions and /v1/responses (Codex CLI), /v1/models, /health (/metrics:
    Prometheus);
    Anthropic's /v1/messages (Claude Code, the anthropic SDK); Ollama's /api/chat, /api/generate, /api/tags (the
    ollama libraries, Open WebUI).

    A browser at the server's address gets a chat page. Web pages from other sites are refused (--allow-origin
    lets one in), so a site you visit cannot use the model.

    One request generates at a time; others wait in a queue. Thinking comes back as `reasoning_content`;
    turn it off per request with "chat_template_kwargs": {"enable_thinking": false} (or "enable_thinking": false).
    /v1/completions continues raw text (no chat template); with "logprobs" and "echo" it scores the prompt
    causally, as lm-evaluation-harness's local-completions model asks (it tokenizes through /tokenize).
    "response_format": {"type": "json_object"} holds an answer to one JSON object (JSON mode); "tools" go to the
    chat template and the model's calls come back as "tool_calls". On /v1/messages, Anthropic's required
    "max_tokens" is a ceiling (cut to --max-tokens), thinking comes back as thinking blocks, tool calls as tool_use.

    Examples:

      clover-local serve tiny --port 8000

      clover-local serve ./clover-int4 --vram-budget 14GB --context 16384

      clover-local serve ./clover-int4 --no-think   # answers at once unless a request asks to think

      curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"model": "tiny", "messages": [{"role": "user", "content": "add 12+30"}]}'

      lm_eval --model local-completions --tasks hellaswag \\
        --model_args base_url=http://127.0.0.1:8000/v1/completions,model=tiny

      curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}'

      ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_AUTH_TOKEN=local ANTHROPIC_MODEL=tiny claude

      curl http://127.0.0.1:8000/api/chat -d '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}'
    """
    from clover_local.generate.thinking import ThinkBudget
    from clover_local.loader import check_model_arg
    from clover_local.serve.engine import Engine
    from clover_local.serve.http import Limits, make_server

    if not host.strip():  # (the socket's "" is every interface: a script's unset variable must not open it up)
        raise CloverError("--host is empty: give the address to listen on (127.0.0.1, the default, for this machine "
                          "only; 0.0.0.0 for every interface)")
    if api_key is not None and not api_key.strip():  # (it asked for no key: the server was open to every client)
        raise CloverError("--api-key (or CLOVER_LOCAL_API_KEY) is empty: give the key clients must send, or leave it "
                          "out for none")
    if api_key is not None and not (api_key.isascii() and api_key.isprintable() and api_key == api_key.strip()):
        # (a header's value is read as Latin-1 with its ends' spaces cut: curl's UTF-8 'clé' did not match)
        raise CloverError("--api-key must be printable ASCII with no spaces at its ends: clients send it in an HTTP "
                          "header")
    check_model_arg(model)  # (before the log's "loading MODEL …" line)
    if model_name is not None and not model_name.strip():
        raise CloverError("--model-name is empty: give the id clients should see, or leave it out (the folder's "
                          "name)")
    if not 0 <= port <= 65535:
        raise CloverError(f"--port must be between 0 and 65535, got {port}")
    if max_queue < 1:
        raise CloverError("--max-queue must be at least 1")
    if max_tokens < 1:
        raise CloverError("--max-tokens must be at least 1")
    if not 0 < max_request_mb < math.inf:  # (nan too)
        raise CloverError(f"--max-request-mb must be a number of MB above 0, got {max_request_mb:g}")
    park_bytes = parse_size(park_prompts, "--park-prompts", allow_zero=True)
    think_cap, answer_room = serve_think_budget(think_budget)
    check_range("reveal_factor", reveal_factor, DECODE_RANGES["reveal_factor"])
    try:
        origins = parse_allowed(allow_origin or [])
    except ValueError as exc:
        raise CloverError(f"--allow-origin {exc} is not a web origin: write it as the browser sends it, with its "
                          "scheme (https://chat.example.com, chrome-extension://*), or '*' for any") from None
    options = load_options(offload, vram_budget, context, resident_routing, prefill_chunk, chat_template,
                           revision)
    console = stderr_console()
    if console is None:  # a log: one line (a terminal gets the progress bar)
        print(f"loading {model} …", file=sys.stderr, flush=True)
    loaded = load_shown(model, device, dtype, console, **options)
    print(loaded.placement(), file=sys.stderr, flush=True)
    ctx = loaded.config.max_context  # --context already applied by the loader
    if think_cap is not None:  # (a tokenizer without <think> tokens: refused here, not in every request)
        ThinkBudget.for_tokenizer(loaded.tokenizer, think_cap, opened=False)
    limits = Limits(max_body_bytes=int(max_request_mb * 1e6), max_tokens=min(max_tokens, ctx), context=ctx,
                    think_budget=think_cap, answer_room=answer_room, free_tool_calls=free_tool_calls,
                    reveal_factor=reveal_factor, drop_oldest=drop_oldest, think=think)
    engine = Engine(loaded, max_queue=max_queue, park_bytes=park_bytes,
                    log=None if quiet else (lambda line: print(f"  {line}", file=sys.stderr, flush=True)))
    name = model_name or model_label(model)
    try:
        server = make_server(engine, host, port, name, limits, api_key=api_key, quiet=quiet, allow_origins=origins)
    except CloverError:
        engine.stop()  # its worker ends before the model is dropped (see `shut_down`)
        raise
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # from here on, Ctrl-C or SIGTERM (say, right after "serving …") stops in order
        signal.signal(signal.SIGTERM, _interrupt)
        bound_host, bound_port = server.server_address[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        print(f"serving {name} on http://{shown}:{bound_port}/v1 (OpenAI, Anthropic and Ollama APIs; Ctrl-C stops)",
              flush=True)
        if not quiet:
            print("\n".join(client_hints(f"http://{shown}:{bound_port}", name, api_key is not None)),
                  file=sys.stderr, flush=True)
        if not loopback_address(host):
            note = "" if api_key else "; consider --api-key"
            print(f"warning: listening on {host}: reachable from other machines{note}", file=sys.stderr, flush=True)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        shut_down(engine, server)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def client_hints(base: str, name: str, keyed: bool) -> list[str]:
    """How the common clients reach this server (printed at start, unless --quiet): a browser (the chat page), our
    terminal chat, the OpenAI SDKs and front ends, Claude Code, Codex CLI, Ollama's clients."""
    token = "KEY" if keyed else "local"
    return [f"  A browser:      {base} (a chat page)",
            f"  A terminal:     clover-local chat {base}{' --api-key KEY' if keyed else ''}",
            f"  OpenAI clients: base URL {base}/v1, model {name}, API key {'KEY' if keyed else 'any'}",
            f"  Claude Code:    ANTHROPIC_BASE_URL={base} ANTHROPIC_AUTH_TOKEN={token} ANTHROPIC_MODEL={name} claude",
            f"  Codex CLI:      a provider with base_url = \"{base}/v1\" and wire_api = \"responses\" in "
            "~/.codex/config.toml",
            f"  Ollama clients: OLLAMA_HOST={base}"]


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM (service managers, `kill`): stop like Ctrl-C does."""
    raise KeyboardInterrupt


def _force_exit(signum: int, frame: Any) -> None:
    """A second Ctrl-C or SIGTERM while stopping: do not wait any longer."""
    print("stopping now, without waiting for the answers in progress", file=sys.stderr, flush=True)
    os._exit(1)


def shut_down(engine: Engine, server: CloverHTTPServer, timeout: float = 10.0) -> None:
    """Stop in order: the engine answers every job and its worker ends, then the connections close. Only then
    may this thread drop the model and the interpreter finalize: a thread still holding the model's last
    reference would free its tensors during finalization, and torch aborts the process there
    ('terminate called without an active exception'). A worker stuck in a pass past `timeout` leaves the
    process no clean way out: it exits at once (code 1) rather than abort."""
    signal.signal(signal.SIGINT, _force_exit)
    signal.signal(signal.SIGTERM, _force_exit)
    stopped = engine.stop(timeout)
    server.close(timeout=5.0)
    if not stopped:
        print(f"the answer in progress did not stop within {timeout:g} s; exiting without waiting for it",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
