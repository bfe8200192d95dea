"""`clover-local chat`: talk to a model in the terminal and watch block diffusion fill each block."""

from __future__ import annotations

import shlex
import sys
from dataclasses import fields
from pathlib import Path
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import (chat_template_option, context_option, dtype_option, load_options,
                                                  load_shown, offload_option, prefill_chunk_option,
                                                  resident_routing_option, revision_option, vram_budget_option)
from clover_local.commands._paths import path_of
from clover_local.commands._sampling_options import (check_decoding, check_think_budget, frequency_penalty_option,
                                                     min_p_option, penalties, presence_penalty_option,
                                                     repetition_penalty_option, reveal_factor_option,
                                                     think_budget_option, top_k_option)
from clover_local.errors import CloverError


@app.command(context_settings={"allow_extra_args": True})  # (words after MODEL: pointed to generate)
def chat(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="Pack or checkpoint folder, Hub repo id, 'tiny' (the shipped model), or "
                                "the address of a running `clover-local serve` (http://127.0.0.1:8000), whose "
                                "loaded model answers."),
    think: bool = typer.Option(True, "--think/--no-think", help="Let the model think before answering."),
    show_thinking: bool = typer.Option(True, "--show-thinking/--hide-thinking",
                                       help="Show the thinking dimmed, or one summary line per answer."),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", help="Reveal every position at least this confident per pass (default: model's)."),
    reveal_factor: float = reveal_factor_option(),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy; above 0 samples."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass when sampling."),
    top_k: int = top_k_option(),
    min_p: float = min_p_option(),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="Longest answer, in tokens."),
    think_budget: Optional[int] = think_budget_option(),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for sampling."),
    presence_penalty: float = presence_penalty_option(),
    frequency_penalty: float = frequency_penalty_option(),
    repetition_penalty: float = repetition_penalty_option(),
    system: Optional[str] = typer.Option(None, "--system", help="A system message that starts the conversation."),
    resume: Optional[Path] = typer.Option(None, "--load", help="Continue a conversation saved with /save.",
                                          click_type=path_of("--load")),
    last: bool = typer.Option(False, "--continue", "-c", help="Continue the last conversation: chat keeps it as "
                              "you talk (on a terminal, in the cache folder), with the settings it had."),
    plain: bool = typer.Option(False, "--plain", help="Plain streamed text even on a terminal."),
    pace: float = typer.Option(0.0, "--pace", help="Seconds to show each pass (to watch or record the display; "
                                                   "not counted in tokens/s)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = dtype_option(),
    chat_template: Optional[Path] = chat_template_option(),
    offload: bool = offload_option(),
    vram_budget: Optional[str] = vram_budget_option(),
    context: Optional[int] = context_option(),
    resident_routing: bool = resident_routing_option(),
    prefill_chunk: Optional[int] = prefill_chunk_option(),
    revision: Optional[str] = revision_option(),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="CLOVER_LOCAL_API_KEY",
                                          help="The key of a server (MODEL an address) started with --api-key."),
) -> None:
    """Chat in the terminal: answers stream as blocks commit, and the block being denoised is drawn live.

    Type /help in the chat for its commands (/think, /set, /save, /load, /stats, …). Without a terminal
    (piped input or output) it reads one message per line and prints the answers as plain text.

    Examples:

      clover-local chat tiny

      echo "reverse a b c d" | clover-local chat tiny --no-think

      clover-local chat ./clover-int4 --vram-budget 14GB --context 8192

      clover-local chat ./clover-int4 --continue   # where the last conversation left off

      clover-local chat http://127.0.0.1:8000   # the model `clover-local serve` has loaded
    """
    from rich.console import Console

    from clover_local.chat.app import ChatApp, check_pace
    from clover_local.chat.conversation import ChatSettings
    from clover_local.paths import LAST_CHAT, cache_root

    if ctx.args:  # (`ollama run MODEL TEXT` answers once)
        raise CloverError(f"chat takes its messages once it starts, not after MODEL; for one answer: clover-local "
                          f"generate {shlex.join([model, *ctx.args])}")
    check_decoding(temperature, top_p, top_k, min_p, threshold, reveal_factor)
    if max_tokens < 1:
        raise CloverError("--max-tokens must be at least 1")
    check_think_budget(think_budget)
    penalties(presence_penalty, frequency_penalty, repetition_penalty)
    check_pace(pace)
    kept = cache_root() / LAST_CHAT
    if last and resume is not None:
        raise CloverError("--continue and --load each pick the conversation to go on with: give one")
    if last and not kept.is_file():
        raise CloverError(f"no conversation to continue yet: chat keeps the last one as you talk on a terminal "
                          f"(in {kept}); start one with `clover-local chat {model}`")
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not plain
    given = {p.name: _as_typed(p, ctx.params[p.name]) for p in ctx.command.params
             if ctx.get_parameter_source(p.name).name == "COMMANDLINE"}  # name -> the flag as typed
    settings = ChatSettings(
        threshold=threshold or 0.0, reveal_factor=reveal_factor, temperature=temperature, top_p=top_p, top_k=top_k,
        min_p=min_p, max_tokens=max_tokens, think=think, show_thinking=show_thinking, seed=seed,
        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
        repetition_penalty=repetition_penalty, think_budget=think_budget,
    )
    keep_at = kept if interactive else None
    if model.startswith(("http://", "https://")):  # a running server's address
        session = _remote(model, api_key, settings, given, interactive=interactive, system=system, keep_at=keep_at)
    else:
        if "api_key" in given:
            raise CloverError("--api-key is a server's key: give it with MODEL a server's address "
                              "(http://HOST:PORT)")
        options = load_options(offload, vram_budget, context, resident_routing, prefill_chunk, chat_template,
                               revision)
        loaded = load_shown(model, device, dtype, Console(highlight=False) if interactive else None, **options)
        _model_defaults(loaded, settings, given)
        label = model if revision is None else f"{model}@{revision}"  # the header, and what /save records
        session = ChatApp(loaded, label, settings, interactive=interactive, system=system, keep_at=keep_at)
    session.pace = pace
    if resume is not None or last:  # its saved settings too, but not over what this command line set
        from_line = {f.name for f in fields(ChatSettings) if f.name in given}  # (each setting is a flag by its name)
        session.load_conversation(kept if last else resume, keep=from_line, last=last)
    raise typer.Exit(session.run())


# the flags that say how to load a model: a server has loaded its own
_LOADING = ("device", "dtype", "chat_template", "offload", "vram_budget", "context", "resident_routing",
            "prefill_chunk", "revision")


def _model_defaults(loaded, settings, given: dict[str, str]) -> None:
    """The settings this command line leaves to the model loaded here: its threshold, its context's cap; a think
    budget checked against its tokenizer now, not at the first answer."""
    if settings.think_budget is not None:  # (a tokenizer without <think> tokens: refused)
        from clover_local.generate.thinking import ThinkBudget

        ThinkBudget.for_tokenizer(loaded.tokenizer, settings.think_budget, opened=False)
    if "threshold" not in given:
        settings.threshold = loaded.config.diffusion.threshold
    settings.max_tokens = min(settings.max_tokens, loaded.config.max_context)


def _as_typed(param, value) -> str:
    """A flag as the command line gave it: --no-offload for --offload/--no-offload set off."""
    if value is False and getattr(param, "secondary_opts", None):
        return param.secondary_opts[0]
    return param.opts[0] if param.opts else param.name


def _remote(url: str, api_key: Optional[str], settings, given: dict[str, str], *, interactive: bool,
            system: Optional[str], keep_at: Optional[Path]):
    """The chat with a running server's model: its decoding defaults where this command line sets none."""
    from clover_local.chat.remote import RemoteChatApp, Server

    loading = [given[name] for name in _LOADING if name in given]
    if loading:
        raise CloverError(f"{', '.join(loading)} {'says' if len(loading) == 1 else 'say'} how to load a model, but "
                          f"{url} has loaded its own: set {'it' if len(loading) == 1 else 'them'} on its "
                          "`clover-local serve`")
    server = Server.connect(url, api_key)
    about = server.about
    if "threshold" not in given:
        settings.threshold = about.get("threshold", settings.threshold)
    if "reveal_factor" not in given and "threshold" not in given:
        settings.reveal_factor = about.get("reveal_factor", settings.reveal_factor)
    if "think" not in given:
        settings.think = about.get("think", settings.think)
    settings.max_tokens = min(settings.max_tokens, about.get("max_tokens", server.context), server.context)
    return RemoteChatApp(server, server.model, settings, interactive=interactive, system=system, keep_at=keep_at)
