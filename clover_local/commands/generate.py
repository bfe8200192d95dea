"""`clover-local generate`: one answer on stdout, streamed as blocks commit; `--json` for scripts.

With the chat template, the thinking goes to stderr (dimmed on a terminal) and only the answer to stdout, so
`clover-local generate … > answer.txt` keeps the answer alone; `--json` has them apart (`reasoning`, `text`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO

import typer

from clover_local.cli import app
from clover_local.commands._model_options import (chat_template_option, context_flag_limit, context_option,
                                                  dtype_option, load_options, load_shown, offload_option,
                                                  prefill_chunk_option, resident_routing_option, revision_option,
                                                  stderr_console, vram_budget_option)
from clover_local.commands._paths import path_of
from clover_local.commands._sampling_options import (check_decoding, check_think_budget, frequency_penalty_option,
                                                     min_p_option, penalties, presence_penalty_option,
                                                     repetition_penalty_option, reveal_factor_option,
                                                     think_budget_option, top_k_option)
from clover_local.errors import CloverError, out_of_memory_as, what_ran_out
from clover_local.text_files import parse_json, read_text_file, source_name, text_from, unreadable

if TYPE_CHECKING:
    from clover_local.generate.json_schema import Schema

DIM, RESET = "\033[2m", "\033[0m"


def message_from(prompt: Optional[str], file: Optional[Path]) -> str:
    """The user message from --prompt, --file or standard input; with both, the file's text and then --prompt
    after a blank line: a document, then the question about it (`-f report.md -p "Summarize it"`). A file's
    trailing line breaks (and spaces) are the editor's or `echo`'s, not part of the question: dropped, so `-f q.txt`
    asks exactly what `-p` with its words asks (the inside is kept as is). An empty message or document is refused:
    the model would answer something anyway."""
    named = source_name(file)  # where a text not given as --prompt came from
    if prompt is not None and file is not None:
        document = read_text_file(file).rstrip()
        if not document.strip():
            raise CloverError(f"{named} is empty: nothing for --prompt to ask about")
        if not prompt.strip():
            raise CloverError("the question is empty (--prompt): ask something about the file, or leave --prompt out")
        return f"{document}\n\n{prompt}"
    text = text_from(prompt, file, "--prompt")
    if prompt is None:
        text = text.rstrip()
    if not text.strip():
        raise CloverError(f"the message is empty ({'--prompt' if prompt is not None else named}): give something to "
                          "answer")
    return text


class Answer:
    """The answer so far, from the committed token ids. With the chat template, split into thinking and answer
    by chat's and serve's `TurnText` (so the three split alike); `--raw` text is left as it is."""

    def __init__(self, tokenizer: Any, prompt_text: str, split: bool) -> None:
        from clover_local.chat.turn import TurnText

        self.tok = tokenizer
        self.turn = TurnText(tokenizer, prompt_text) if split else None
        self._ids: list[int] = []
        self._text = ""  # --raw: the text handed out so far

    @property
    def ids(self) -> list[int]:
        return self.turn.ids if self.turn is not None else self._ids

    def add(self, token_ids: list[int], final: bool = False) -> tuple[str, str]:
        """(new thinking, new answer text) settled since the last call."""
        if self.turn is not None:
            return self.turn.add(token_ids, final)
        self._ids.extend(token_ids)
        text = self.tok.decode(self._ids)
        if not final:
            text = text.rstrip("\ufffd")  # wait for the rest of a multi-byte character
        new = text[len(self._text):] if text.startswith(self._text) else ""
        self._text += new
        return "", new

    @property
    def reasoning(self) -> str:
        return self.turn.reasoning if self.turn is not None else ""

    @property
    def text(self) -> str:
        return self.turn.content if self.turn is not None else self._text


class Stream:
    """Writes an answer as it settles: thinking on stderr (dimmed on a terminal), the answer on stdout."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.dim = err.isatty()
        self.thinking_open = False  # a thinking line on stderr not ended yet
        self.answer_open = False  # answer text on stdout not ended by a newline yet

    def write(self, reasoning: str, content: str) -> None:
        if reasoning:
            self.err.write(f"{DIM}{reasoning}{RESET}" if self.dim else reasoning)
            self.err.flush()
            self.thinking_open = True
        if content:
            self.end_thinking()
            self.out.write(content)
            self.out.flush()
            self.answer_open = not content.endswith("\n")

    def end_thinking(self) -> None:
        if self.thinking_open:
            self.err.write("\n")
            self.err.flush()
            self.thinking_open = False

    def end(self) -> None:
        """End both lines (the answer's always gets its newline, as it always has)."""
        self.end_thinking()
        self.out.write("\n")
        self.out.flush()
        self.answer_open = False


@dataclass
class Asked:
    """One thing --prompts asks: a message, or (a `.jsonl` line's "messages") a conversation to answer the last
    turn of; `echo` is what its output line starts with (its "id" when it has one, then "prompt" or "messages")."""
    echo: dict
    message: str = ""
    conversation: Optional[list[dict]] = None


def asked_from(prompts: Path, raw: bool) -> list[Asked]:
    """--prompts' questions: each non-blank line of the file ('-': standard input), its trailing spaces dropped;
    of a `.jsonl` file, each line's JSON object — {"prompt": TEXT} (a message with line breaks in it) or
    {"messages": [{"role", "content"}, …]} (a conversation ending in the user's turn), with an optional "id"
    echoed first — every line checked before the model loads."""
    text = read_text_file(prompts)
    if prompts.suffix != ".jsonl":
        asked = [Asked({"prompt": line.rstrip()}, line.rstrip()) for line in text.splitlines() if line.strip()]
    else:
        asked = [_jsonl_asked(line, f"{prompts} line {n}", raw)
                 for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not asked:
        raise CloverError(f"no prompts in {source_name(prompts)}: give one a line")
    return asked


def _jsonl_asked(line: str, where: str, raw: bool) -> Asked:
    from clover_local.chat.conversation import check_messages, for_template

    try:
        item = parse_json(line)
    except json.JSONDecodeError:
        raise CloverError(f"{where} is not JSON (a .jsonl file holds one object a line: "
                          '{"prompt": "…"} or {"messages": […]})') from None
    if not isinstance(item, dict) or ("prompt" in item) == ("messages" in item):
        raise CloverError(f'{where}: give an object with "prompt" (text) or "messages" (a conversation), one of them')
    echo = {"id": item["id"]} if "id" in item else {}
    if "prompt" in item:
        if not isinstance(item["prompt"], str) or not item["prompt"].strip():
            raise CloverError(f'{where}: "prompt" must be a non-empty string')
        return Asked(echo | {"prompt": item["prompt"]}, item["prompt"])
    if raw:
        raise CloverError(f'{where} holds "messages": --raw takes text ("prompt") only, with no chat template')
    conversation = for_template(check_messages(item["messages"], where))  # (as chat's /load reads them)
    if not conversation or conversation[-1]["role"] != "user":
        raise CloverError(f"{where}: the conversation must end with the user's turn (the one answered)")
    return Asked(echo | {"messages": item["messages"]}, conversation=conversation)


def result(answer: Answer, token_ids: list[int], stats: dict, stopped: bool, echo: dict | None = None) -> str:
    """--json's object (with --prompts, one a line, what was asked first)."""
    return json.dumps((echo or {}) | {
        "text": answer.text, "reasoning": answer.reasoning, "token_ids": token_ids, "stats": stats,
        "stopped": stopped}, ensure_ascii=False)


def read_schema(path: Path) -> Schema:
    """--json-schema's file, compiled (json_schema.compile_schema); CloverError for a missing or bad file."""
    from clover_local.generate.json_schema import compile_schema

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CloverError(f"--json-schema: cannot read {path}: {unreadable(exc)}") from None
    try:
        schema = parse_json(text)
    except json.JSONDecodeError as exc:
        raise CloverError(f"--json-schema: {path} is not JSON: {exc}") from None
    try:
        return compile_schema(schema)
    except CloverError as exc:
        raise CloverError(f"--json-schema {path}: {exc}") from None


@app.command()
def generate(
    model: str = typer.Argument(..., help="Pack or checkpoint folder, Hub repo id, or 'tiny' (the shipped model)."),
    said: Optional[list[str]] = typer.Argument(None, metavar="[PROMPT]...", show_default=False,
                                               help="The user message, as --prompt gives it; words after MODEL are "
                                               "joined by spaces, as `ollama run` joins them (`generate tiny why is "
                                               "the sky blue`)."),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="The user message (without it or --file: "
                                         "the message piped in on standard input)."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Read the user message from a UTF-8 file "
                                        "('-': standard input); its trailing line breaks are dropped. With "
                                        "--prompt too, the file comes first and the prompt after it: a document "
                                        "and the question about it.", click_type=path_of("--file")),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Answer each line of this UTF-8 file ('-': "
                                           "standard input) as its own message, with one load of the model, and "
                                           "print one --json object a line as each answer is done, its \"prompt\" "
                                           "first (JSON Lines); a line that cannot be answered (longer than "
                                           "--context) gets {\"prompt\", \"error\"} and the rest go on. A .jsonl "
                                           "file holds an object a line: {\"prompt\": TEXT} (line breaks and all) "
                                           "or {\"messages\": [{\"role\", \"content\"}, …]} (a conversation, its "
                                           "last turn the user's, answered), either with an \"id\", echoed first.",
                                           click_type=path_of("--prompts")),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", "--max-tokens",
                                       help="Stop after this many new tokens (--max-tokens as in chat and serve)."),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", help="Reveal every position at least this confident per pass (default: model's)."
    ),
    reveal_factor: float = reveal_factor_option(),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy; above 0 samples."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass when sampling."),
    top_k: int = top_k_option(),
    min_p: float = min_p_option(),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for sampling (same seed, same answer)."),
    presence_penalty: float = presence_penalty_option(),
    frequency_penalty: float = frequency_penalty_option(),
    repetition_penalty: float = repetition_penalty_option(),
    think: Optional[bool] = typer.Option(None, "--think/--no-think", help="Let the model think before answering "
                                         "(the thinking is shown on stderr, the answer alone on stdout). Default: "
                                         "on, off with --format json and --json-schema."),
    think_budget: Optional[int] = think_budget_option(),
    answer_format: str = typer.Option("text", "--format", help="json: the answer is one JSON object, held to JSON "
                                      "token by token (JSON mode; ask for the fields in the prompt), written "
                                      "without thinking. text: anything."),
    json_schema: Optional[Path] = typer.Option(None, "--json-schema", help="A JSON schema file (pydantic's "
                                               "model_json_schema(), OpenAI structured outputs): the answer is one "
                                               "value it allows, held to it token by token like --format json (type, "
                                               "properties, required, additionalProperties, items, min/maxItems, "
                                               "enum, const, anyOf, $ref, min/maxLength; other keywords refused).",
                                               click_type=path_of("--json-schema")),
    system: Optional[str] = typer.Option(None, "--system", help="Optional system message."),
    raw: bool = typer.Option(False, "--raw", help="Use the prompt as is, without the chat template (the "
                             "output as is too: no thinking split off)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = dtype_option(),
    chat_template: Optional[Path] = chat_template_option(),
    as_json: bool = typer.Option(
        False, "--json", help='Print one object instead of streaming: {"text": the answer, "reasoning": the '
        'thinking ("" if none), "token_ids": every generated token, "stats", "stopped": true when Ctrl-C cut '
        'it short}.'
    ),
    offload: bool = offload_option(),
    vram_budget: Optional[str] = vram_budget_option(),
    context: Optional[int] = context_option(),
    resident_routing: bool = resident_routing_option(),
    prefill_chunk: Optional[int] = prefill_chunk_option(),
    revision: Optional[str] = revision_option(),
) -> None:
    """Generate one answer by block diffusion: each block of masks is denoised in a few parallel passes.

    The answer alone goes to standard output, streamed as blocks commit, and the thinking to standard error,
    so `> answer.txt` keeps just the answer; --json prints both apart with the token ids and figures. --prompts
    answers each line of a file in turn with one load of the model (a 35B pack takes seconds to load), one JSON
    object a line.

    Examples:

      clover-local generate tiny --prompt "reverse a b c d"

      clover-local generate tiny "reverse a b c d"

      clover-local generate ./my-checkpoint -p "Hello" --no-think --json

      clover-local generate ./clover-int4 -p "Hello" --vram-budget 14GB --context 4096

      clover-local generate ./clover-int4 -p "Prove that √2 is irrational" --think-budget 2048

      clover-local generate ./clover-int4 -f report.md -p "Summarize the risks it names" --context 16384

      echo "Why is the sky blue?" | clover-local generate ./clover-int4

      clover-local generate ./clover-int4 -p "Name and age of: Ada, 36. Keys: name, age" --format json

      clover-local generate ./clover-int4 -p "Name and age of: Ada, 36" --json-schema person.schema.json

      clover-local generate ./clover-int4 --prompts questions.txt --no-think > answers.jsonl

      clover-local generate ./clover-int4 --prompts conversations.jsonl > answers.jsonl
    """
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.chat.turn import prompt_opens_thinking
    from clover_local.generate.json_schema import answer_constraint
    from clover_local.generate.thinking import ThinkBudget

    if said:
        if prompt is not None:
            raise CloverError(f"give the message once: after MODEL ({' '.join(said)!r}) or as --prompt ({prompt!r})")
        prompt = " ".join(said)
    if prompts is not None and (prompt is not None or file is not None):
        raise CloverError("--prompts gives the messages: leave --prompt and --file out")
    asked = asked_from(prompts, raw) if prompts is not None else [Asked({}, message_from(prompt, file))]
    as_json = as_json or prompts is not None
    check_decoding(temperature, top_p, top_k, min_p, threshold, reveal_factor)
    if max_new_tokens < 1:
        raise CloverError("--max-new-tokens must be at least 1")
    penalized = penalties(presence_penalty, frequency_penalty, repetition_penalty)
    if answer_format not in ("text", "json"):
        raise CloverError(f"--format must be text or json, got {answer_format!r}")
    if json_schema is not None and answer_format != "text":
        raise CloverError("--json-schema already holds the answer to JSON: leave --format out")
    schema = read_schema(json_schema) if json_schema is not None else None
    json_mode = answer_format == "json" or schema is not None
    flag = "--json-schema" if schema is not None else "--format json"
    if json_mode and think:
        raise CloverError(f"{flag} answers without thinking (the whole answer is the JSON): drop --think")
    think = not json_mode if think is None else think
    check_think_budget(think_budget)
    if think_budget is not None and not think:
        raise CloverError(f"--think-budget limits the thinking, and {'--no-think' if not json_mode else flag} "
                          "answers without it: drop one")
    options = load_options(offload, vram_budget, context, resident_routing, prefill_chunk, chat_template, revision)
    loaded = load_shown(model, device, dtype, stderr_console(not as_json), **options)
    tok = loaded.tokenizer
    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    over = context_flag_limit(loaded, context)

    def answer(item: Asked) -> None:
        """One message (or conversation): rendered, held to the context, answered."""
        if raw:
            text = item.message
        else:
            turns = item.conversation or [{"role": "user", "content": item.message}]
            if system and turns[0]["role"] != "system":  # (a conversation's own system message wins)
                turns = [{"role": "system", "content": system}, *turns]
            text = tok.apply_chat_template(turns, add_generation_prompt=True, enable_thinking=think)
            if json_mode and prompt_opens_thinking(text):
                raise CloverError("this model's chat template opens a thinking section even with --no-think, and "
                                  f"{flag} answers with the JSON alone; use --raw with your own prompt")
        prompt_ids = tok.encode(text)
        if over is not None and len(prompt_ids) + max_new_tokens > loaded.config.max_context:
            raise CloverError(f"prompt ({len(prompt_ids)} tokens) plus --max-new-tokens ({max_new_tokens}) exceeds "
                              f"{over}, shorten the prompt or lower --max-new-tokens")
        settings = DecodeSettings(
            max_new_tokens=max_new_tokens,
            threshold=loaded.config.diffusion.threshold if threshold is None else threshold,
            factor=reveal_factor,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            seed=seed,
            stop_token_ids=loaded.stop_token_ids,
            penalties=penalized,
            constraint=answer_constraint(tok, loaded.stop_token_ids, json_mode, schema),
            think_budget=(None if think_budget is None
                          else ThinkBudget.for_tokenizer(tok, think_budget, prompt_opens_thinking(text))),
        )
        runtime = ", or a lower --vram-budget or --context" if loaded.model.runtime is not None else ""
        with out_of_memory_as(lambda exc: f"ran out of {what_ran_out(exc)} answering this prompt "
                              f"({len(prompt_ids):,} tokens); a shorter prompt or a lower --max-new-tokens{runtime}"):
            answer_one(decoder, prompt_ids, settings, Answer(tok, text, split=not raw), as_json,
                       item.echo)  # (--prompts: the next, shorter prompt may fit)

    unanswered = 0
    with prompts_progress(len(asked) if prompts is not None else 0) as answered:
        for item in asked:
            try:
                answer(item)
            except CloverError as exc:  # --prompts: this line's answer is its error, and the next lines go on
                if prompts is None:
                    raise
                print(json.dumps(item.echo | {"error": str(exc)}, ensure_ascii=False), flush=True)
                unanswered += 1
            answered()
    if unanswered:
        raise CloverError(f"{unanswered} of {len(asked)} prompts not answered: their lines carry \"error\"")


@contextmanager
def prompts_progress(total: int, console: Any = None) -> Iterator[Callable[[], None]]:
    """--prompts' progress on a terminal's stderr (prompts answered of the file's, the time so far and left),
    so a long file's run shows where it is while its answers go to a file; the callable counts one answered. No
    bar for one prompt, where stderr is not a terminal (a log, a script), or where the answers come to the terminal
    too (each line shows the progress there; a bar would be drawn through them)."""
    from rich.console import Console

    console = console if console is not None else Console(stderr=True)
    if total < 2 or not console.is_terminal or sys.stdout.isatty():
        yield lambda: None
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with Progress(TextColumn("prompts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("left"),
                  TimeRemainingColumn(), console=console, transient=True, redirect_stdout=False,
                  redirect_stderr=False) as bar:  # (stdout is the answers' file: left alone)
        task = bar.add_task("prompts", total=total)
        yield lambda: bar.advance(task)


def answer_one(decoder: Any, prompt_ids: list[int], settings: Any, answer: Answer, as_json: bool,
               echo: dict) -> None:
    """One answer, streamed (the thinking on stderr, the answer on stdout, a figures line) or as one --json line
    (`echo`: what --prompts asked, written first). Ctrl-C keeps what was made, then goes on up."""
    from clover_local.generate.events import BlockCommitted, DecodeStats, Finished, PassDone, PrefillProgress

    stream = Stream(sys.stdout, sys.stderr)
    show_prefill = not as_json and sys.stderr.isatty()  # a long prompt's progress, on one line that goes away
    passes, t0 = 0, time.perf_counter()
    try:
        for event in decoder.generate(prompt_ids, settings):
            if isinstance(event, PrefillProgress) and show_prefill:
                done = event.done == event.total
                sys.stderr.write("\r\033[K" if done else f"\rreading the prompt: {event.done:,}/{event.total:,} tokens")
                sys.stderr.flush()
            elif isinstance(event, PassDone):
                passes += 1
            elif isinstance(event, BlockCommitted):
                dr, dc = answer.add(event.token_ids)
                if not as_json:
                    stream.write(dr, dc)
            elif isinstance(event, Finished):
                dr, dc = answer.add(event.token_ids[len(answer.ids):], final=True)
                if as_json:
                    print(result(answer, event.token_ids, event.stats.to_dict(), stopped=False, echo=echo),
                          flush=True)
                else:
                    stream.write(dr, dc)
                    stream.end()
                    s = event.stats
                    print(
                        f"[{s.tokens} tokens, {s.passes} passes, {s.tokens_per_pass:.2f} tokens/pass, "
                        f"{s.tokens_per_second:.1f} tok/s]",
                        file=sys.stderr,
                    )
    except KeyboardInterrupt:  # keep what was made: the streamed text ends its line, --json prints it
        if show_prefill:
            sys.stderr.write("\r\033[K")
        dr, dc = answer.add([], final=True)
        if as_json:
            stats = DecodeStats(tokens=len(answer.ids), passes=passes, seconds=time.perf_counter() - t0)
            print(result(answer, list(answer.ids), stats.to_dict(), stopped=True, echo=echo), flush=True)
        else:
            stream.write(dr, dc)
            stream.end_thinking()
            if stream.answer_open:
                stream.end()
        raise
