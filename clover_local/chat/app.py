"""The chat loop: read a message or a slash command, answer it with the live display (or plain streamed text
without a terminal), keep the conversation.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from clover_local.chat import completion
from clover_local.chat.conversation import (SETTABLE, ChatSettings, Conversation, describe_settings,
                                           for_template, restore_settings, set_value)
from clover_local.chat.display import Part, TurnView, code_blocks, fit_parts, plural, think_lines
from clover_local.chat.stats import (format_gib, format_hit_rate, gpu_memory, key_stats, runtime_stats,
                                     scalar_stats)
from clover_local.chat.turn import (TURN_FAILURES, DecodeThread, TurnStats, TurnText, decode_events,
                                    history_tokens, is_out_of_memory, prompt_opens_thinking, release_memory)
from clover_local.chat.window import fit
from clover_local.errors import CloverError, what_ran_out
from clover_local.generate.ranges import DECODE_RANGES, PENALTY_RANGES
from clover_local.generate.thinking import ThinkBudget
from clover_local.paths import cache_root
from clover_local.text_files import read_text_file
from clover_local.generate.block_diffusion import whole_blocks
from clover_local.generate.events import BlockCommitted, Finished, PassDone, PrefillProgress

HELP_INTRO = (
    "[bold]Type a message[/] and press Enter. Multi-line: end a line with [bold]\\\\[/] to continue on the next, "
    "or start with [bold]\"\"\"[/] and end with [bold]\"\"\"[/]; pasted lines stay one message (Enter sends "
    "it). Up/Down recall earlier input; [bold]Tab[/] "
    "completes a command, a /set name or a file name. [bold]Ctrl-C[/] "
    "stops an answer (the conversation is kept); [bold]Ctrl-D[/] or [bold]/exit[/] quits."
)
_D, _P = DECODE_RANGES, PENALTY_RANGES  # (the ranges /set checks)
HELP_COMMANDS: list[tuple[str, str]] = [
    ("/help", "this help"),
    ("/think on|off", "let the model think first (the chat template's enable_thinking)"),
    ("/think show|hide", "thinking shown dimmed, or one summary line (show: expands the last)"),
    ("/system [TEXT|off]", "show, set or remove the system message (the conversation is kept)"),
    ("/set NAME VALUE", f"threshold {_D['threshold']}, reveal_factor {_D['reveal_factor']} or off (the factor "
                        f"rule instead of the threshold), temperature {_D['temperature']}, top_p {_D['top_p']}, "
                        f"top_k ≥0 (0: all), min_p {_D['min_p']}, max_tokens ≥1, think_budget ≥1 or off (the "
                        f"thinking's most tokens), presence_penalty and frequency_penalty "
                        f"{_P['presence_penalty']}, repetition_penalty {_P['repetition_penalty']}"),
    ("/set", "show the settings"),
    ("/retry", "answer your last message again (after /set, /think or /system; with temperature > 0, anew)"),
    ("/undo", "take back your last message and its answer"),
    ("/reset", "forget the conversation (settings stay)"),
    ("/save FILE", "save the conversation as JSON"),
    ("/load FILE", "continue a conversation saved with /save (or {\"messages\": [...]})"),
    ("/file PATH [ASK]", "send a text file as your message, with ASK after it (a document to ask about)"),
    ("/copy [code]", "put the last answer, or its last code block, on the clipboard (where the terminal takes OSC 52)"),
    ("/stats [all]", "speed, tokens per pass, prompt reuse, expert cache and memory (all: every runtime counter)"),
    ("/exit", "quit (also /quit, Ctrl-D)"),
]
COMMAND_NAMES = list(dict.fromkeys(c.split()[0] for c, _ in HELP_COMMANDS)) + ["/quit"]  # (Tab completes them)
HELP_OUTRO = (
    "The block being denoised is drawn as cells: ░ still masked, coloured once revealed from red (unsure) to "
    "green (confident), underlined if the last pass revealed it. Each pass reveals every position at least "
    "`threshold`-confident, so a lower threshold gives more tokens per pass (and more mistakes); `reveal_factor` "
    "(the factor rule: the more positions at once, the surer each must be) trades them better on the tiny model."
)


def help_text() -> Group:
    """/help: the commands as a two-column table, so a description that wraps stays in its column (printed as
    one string, it wrapped to column 0 at 80 columns)."""
    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for command, what in HELP_COMMANDS:
        table.add_row(Text(command), Text(what))
    return Group(Text.from_markup(HELP_INTRO), Text(), Padding(table, (0, 0, 0, 2)), Text(),
                 Text.from_markup(HELP_OUTRO))


PROMPT = "\001\x1b[1;36m\002you ›\001\x1b[0m\002 "
CONTINUE = "\001\x1b[2m\002  … \001\x1b[0m\002"
PLAIN_PROMPT = "you › "


_ESCAPES = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|O.|.)?")  # arrow keys, function keys, Alt-…


def typed_lines(data: bytes) -> list[str]:
    """What keystrokes typed, as the lines a person meant: escape sequences (arrows) and control characters
    dropped, backspaces applied, blank lines left out."""
    text = _ESCAPES.sub("", data.decode("utf-8", "replace"))
    lines = []
    for raw in re.split(r"[\r\n]", text):
        kept: list[str] = []
        for ch in raw:
            if ch in "\x7f\b":
                if kept:
                    kept.pop()
            elif ch.isprintable():
                kept.append(ch)
        line = "".join(kept).strip()
        if line:
            lines.append(line)
    return lines


class HeldKeys:
    """While an answer is drawn, keystrokes are not echoed, and are read back (then dropped) at its end.

    Why: the terminal echoes what is typed where the cursor is, inside the live region; Rich then moves the
    cursor back up over the lines it drew, not over the echo (nor the line an Enter added), so typed text ended
    up inside the answer and frozen lines of the live region (`reading the prompt …`, `block 0 · pass 0`) were
    left in the transcript. Input typed during an answer is not sent: the chat names it in a note instead (an
    Enter pressed while an answer runs is rarely meant for the next one). Ctrl-C still stops the answer (ISIG is
    left on). A no-op when stdin is not a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self.lines: list[str] = []  # what was typed, once the context is left
        self._fd: int | None = None
        self._saved: list | None = None

    def __enter__(self) -> HeldKeys:
        try:
            import termios

            fd = self.stream.fileno()
            if not os.isatty(fd):
                return self
            self._saved = termios.tcgetattr(fd)
            quiet = termios.tcgetattr(fd)
            quiet[3] &= ~(termios.ECHO | termios.ICANON)  # not echoed; readable as typed (no line editing)
            quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 0, 0  # a read returns at once
            termios.tcsetattr(fd, termios.TCSANOW, quiet)
            self._fd = fd
        except (ImportError, OSError, ValueError, AttributeError):  # no termios (Windows), no real stdin
            self._fd = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        import termios

        data = b""
        try:
            while chunk := os.read(self._fd, 4096):
                data += chunk
        except OSError:
            pass
        finally:
            termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)
            self._fd = None
        self.lines = typed_lines(data)


MAX_PACE = 10.0  # seconds a pass may be shown (--pace): past it a display is stopped, not slowed


def check_pace(pace: float) -> None:
    """--pace (chat, demo) checked: a number of seconds from 0 to MAX_PACE (nan and inf were taken and ended in
    time.sleep's traceback at the first pass)."""
    if not 0 <= pace <= MAX_PACE:
        raise CloverError(f"--pace must be between 0 and {MAX_PACE:g} seconds, got {pace}")


class ChatApp:
    """A chat with a model loaded here. What it does not need the model for (the loop, the commands, the
    conversation, the display's pieces) a chat with a running server shares (`chat/remote.py`), through the hooks
    marked below."""

    def __init__(self, loaded: Any, label: str, settings: ChatSettings, *, interactive: bool,
                 system: str | None = None, console: Console | None = None, out: TextIO | None = None,
                 keep_at: Path | None = None) -> None:
        from clover_local.generate.block_diffusion import BlockDiffusionDecoder
        from clover_local.generate.prompt_cache import PromptCache

        self._start(label, settings, interactive, system, console, out, keep_at)
        self.loaded = loaded
        self.tok = loaded.tokenizer
        self.decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
        self.prompt_cache = PromptCache()  # the last turn's prefill, resumed by the next (token ids compared)
        self.context = loaded.config.max_context
        self.block_size = self.decoder.block_size

    def _start(self, label: str, settings: ChatSettings, interactive: bool, system: str | None,
               console: Console | None, out: TextIO | None, keep_at: Path | None) -> None:
        """What every chat holds, whatever answers it."""
        self.label = label
        self.settings = settings
        self.interactive = interactive
        self.conv = Conversation(system)
        self.console = console or Console(highlight=False)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.out = out or sys.stdout
        self.last: TurnStats | None = None
        self._rt: tuple[float, dict] = (0.0, {})
        self.pace = 0.0  # seconds to linger on each pass so the display can be watched (demo); not in the stats
        self.last_reasoning = ""
        self.totals = {"turns": 0, "tokens": 0, "passes": 0, "seconds": 0.0, "stopped": 0}
        # where the conversation is written after each input once it has a message of yours (`chat --continue`
        # reads it); None: not kept
        self.keep_at = keep_at

    # ------------------------------------------------------------------ messages to the user
    def note(self, message: str, style: str = "grey62") -> None:
        if self.interactive:
            self.console.print(Text(message, style=style))
        else:
            self.err.print(Text(message))

    def error(self, message: str) -> None:
        if self.interactive:
            self.console.print(Text(f"error: {message}", style="bold red"))
        else:
            print(f"error: {message}", file=sys.stderr, flush=True)

    def banner(self) -> None:
        cfg = self.loaded.config
        think = "on" if self.settings.think else "off"
        line = (f"[bold]clover-local chat[/] · {escape(self.label)} · blocks of {cfg.diffusion.block_size} · "
                f"{self.settings.reveal_rule()} · thinking {think} · [bold]/help[/] for commands")
        if self.interactive:
            self.console.print(line)
            if self.loaded.model.runtime is not None:  # a pack: how much of it the card holds
                self.console.print(f"[dim]{escape(self.loaded.placement())}[/]")
        else:
            self.err.print(line)

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        self.banner()
        if self.interactive:
            self._setup_readline()
            completion.install(COMMAND_NAMES)
            while True:
                try:
                    line = self._read_message()
                except KeyboardInterrupt:
                    self.console.print()  # ^C at the prompt: drop what was typed
                    continue
                except EOFError:
                    self.console.print()
                    self.note("bye")
                    return 0
                try:
                    going = self.handle(line)
                except KeyboardInterrupt:  # a Ctrl-C that landed between the answer and the prompt
                    self.console.print(Text("⏹ stopped", style="yellow"))
                    continue
                if not going:
                    self.note("bye")
                    return 0
        for raw in sys.stdin:
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            if not self.handle(line):
                break
        return 0

    def handle(self, line: str) -> bool:
        """One input; False when the chat should end."""
        text = line.strip()
        if not text:
            return True
        try:
            if text.startswith("/") and "\n" not in text:
                try:
                    return self.command(text)
                except CloverError as exc:
                    self.error(str(exc))
                    return True
            self.ask(line)
            return True
        finally:  # (an answer stopped by Ctrl-C included)
            self._keep()

    def _keep(self) -> None:
        """The conversation written to `keep_at` (whole: a kill mid-write leaves the last one), once it holds a
        message of yours — a chat opened and left, or /reset, keeps the one before. A failure is one warning line:
        the chat goes on."""
        if self.keep_at is None or not self.conv.turns:
            return
        try:
            self.keep_at.parent.mkdir(parents=True, exist_ok=True)
            self.conv.save(self.keep_at, self.settings, self.label, over_any=True)
        except (OSError, CloverError) as exc:
            self.keep_at = None
            self.error(f"cannot keep the conversation for `chat --continue` ({exc}); it goes on, unkept")

    def _read_message(self) -> str:
        start = _history_length()
        text, lines_read = self._read_lines()
        if lines_read > 1:
            _one_history_entry(start, text)
        return text

    def _read_lines(self) -> tuple[str, int]:
        """One message from the prompt: a line, `\\`-continued lines, or a `\"\"\"`-quoted block; and how many
        lines it took."""
        line = input(PROMPT).replace("\r\n", "\n").rstrip("\n")  # (a paste's lines: `_setup_readline`)
        if line.strip().startswith('"""'):
            lines = [line.strip()[3:]]
            closed = lines[0].endswith('"""') and len(line.strip()) >= 6
            while not closed:
                nxt = input(CONTINUE)
                closed = nxt.rstrip().endswith('"""')
                lines.append(nxt.rstrip()[:-3] if closed else nxt)
            if lines[0].endswith('"""'):
                lines[0] = lines[0][:-3]
            return "\n".join(lines).strip("\n"), len(lines)
        lines = [line]
        while lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1]
            lines.append(input(CONTINUE))
        return "\n".join(lines), len(lines)

    def _setup_readline(self) -> None:
        """The prompt's line editing: pasted lines kept together, and the input history kept across chats."""
        try:
            import atexit
            import readline
        except ImportError:  # Windows without pyreadline: plain input()
            return
        if "libedit" not in (readline.__doc__ or ""):
            # pasted lines arrive as one input, sent by Enter, not as one message each (GNU readline has bracketed
            # paste since 8.1, but Python turns it off); libedit, macOS's, has no such mode
            readline.parse_and_bind("set enable-bracketed-paste on")
        path = cache_root() / "chat_history"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                readline.read_history_file(str(path))
        except OSError:
            return
        readline.set_history_length(1000)

        def save() -> None:
            try:
                readline.write_history_file(str(path))
            except OSError:
                pass

        atexit.register(save)

    # ------------------------------------------------------------------ slash commands
    def command(self, text: str) -> bool:
        name, _, rest = text.partition(" ")
        name, rest = name.lower(), rest.strip()
        if name in ("/exit", "/quit", "/q"):
            return False
        if name in ("/help", "/?"):
            (self.console if self.interactive else self.err).print(help_text())
        elif name == "/think":
            self._think(rest)
        elif name == "/system":
            self._system(rest)
        elif name == "/set":
            self._set(rest)
        elif name in ("/retry", "/undo"):
            self._take_back(again=name == "/retry")
        elif name == "/reset":
            self.conv.reset()
            self.last_reasoning = ""
            self.note("conversation cleared")
        elif name == "/save":
            if not rest:
                raise CloverError("/save needs a file name, e.g. /save chat.json")
            self.conv.save(Path(rest), self.settings, self.label)
            self.note(f"saved {plural(len(self.conv.messages), 'message')} to {rest}")
        elif name == "/load":
            if not rest:
                raise CloverError("/load needs a file name, e.g. /load chat.json")
            self.load_conversation(Path(rest))
        elif name == "/stats":
            self._stats(rest.lower())
        elif name == "/file":
            self._send_file(rest)
        elif name == "/copy":
            self._copy(rest.lower())
        else:
            raise CloverError(f"unknown command {name}; /help lists the commands")
        return True

    def load_conversation(self, path: Path, keep: set[str] = frozenset(), last: bool = False) -> None:
        """A saved conversation's messages, and the settings it was saved with except those in `keep` (set on
        the command line): the next message continues it as it was. `last`: the one `keep_at` kept."""
        n = self.conv.load(path)
        changed = restore_settings(self.settings, self.conv.saved_settings, keep)
        restored = f" (its settings: {describe_settings(self.settings, changed)})" if changed else ""
        turns = self.conv.turns
        where = (f"your last conversation{f' (with {self.conv.saved_model})' if self.conv.saved_model else ''}"
                 if last else str(path))
        self.note(f"loaded {plural(n, 'message')} ({plural(turns, 'turn')}) from {where}{restored}; "
                  "the next message continues that conversation")

    def _take_back(self, again: bool) -> None:
        """/undo: the last exchange goes; /retry: and its question is asked again, under today's settings (a
        retry that fails puts the exchange back as it was)."""
        removed = self.conv.pop_exchange()
        if not removed:
            raise CloverError(f"nothing to {'answer again' if again else 'take back'}: no message of yours yet")
        self.last_reasoning = ""
        if not again:
            self.note(f"took back your last message and its answer ({plural(self.conv.turns, 'turn')} left)")
            return
        text = removed[0]["content"]
        if self.settings.temperature == 0 or self.settings.seed is not None:
            why = "temperature 0" if self.settings.temperature == 0 else f"seed {self.settings.seed}"
            self.note(f"({why}: unchanged settings give the same answer; /set temperature 0.7 for another)")
        self.note(f"asking again: {_first_line(text)}")
        if self.ask(text) is None:
            self.conv.messages.extend(removed)

    def _copy(self, what: str) -> None:
        """/copy [code]: the last answer (its text, not the thinking), or the inside of its last fenced code block,
        to the clipboard by OSC 52 — the terminal's own clipboard escape, which reaches the machine the terminal
        runs on (over ssh too; under tmux with its `set-clipboard on`), where the terminal allows it; nothing to
        install."""
        if what not in ("", "code"):
            raise CloverError(f"/copy takes nothing or `code`, got {what!r}")
        if not self.interactive:
            raise CloverError("/copy needs a terminal: it asks the terminal to set the clipboard (OSC 52)")
        answer = next((m["content"] for m in reversed(self.conv.messages) if m["role"] == "assistant"), None)
        if not answer:
            raise CloverError("nothing to copy yet: no answer in this conversation")
        text, which = answer, "the last answer"
        if what == "code":
            blocks = code_blocks(answer)
            if not blocks:
                raise CloverError("the last answer has no code block: /copy alone copies all of it")
            text, which = blocks[-1], "its last code block"
        payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
        self.console.file.write(f"\x1b]52;c;{payload}\x07")
        self.console.file.flush()
        self.note(f"copied {which} ({plural(len(text), 'character')}) to the clipboard, where the terminal allows "
                  "it (OSC 52)")

    def _send_file(self, rest: str) -> None:
        """/file PATH [ASK]: the file's text (then ASK after a blank line) as the next user message. PATH may be
        quoted ("my notes.txt"); ASK is taken as typed."""
        if rest[:1] in ('"', "'"):
            end = rest.find(rest[0], 1)
            if end < 0:
                raise CloverError(f"/file: no closing {rest[0]} after the file name")
            name, ask = rest[1:end], rest[end + 1 :].strip()
        else:
            name, _, ask = rest.partition(" ")
            ask = ask.strip()
        if not name:
            raise CloverError("/file needs a file name, e.g. /file report.txt What are its conclusions?")
        path = Path(name).expanduser()
        text = read_text_file(path)
        if not text.strip():
            raise CloverError(f"{path} is empty: nothing to send")
        self.note(f"sending {path.name} ({len(text):,} characters){' and your question' if ask else ''}")
        self.ask(f"{text.rstrip()}\n\n{ask}" if ask else text.rstrip())

    def _system(self, rest: str) -> None:
        """/system: show the system message; /system TEXT: set it; /system off: remove it. It applies from the
        next answer on, the conversation kept (its prompt is read again: the system message comes first)."""
        if not rest:
            current = self.conv.system
            self.note(f"system message: {current}" if current else "no system message; /system TEXT sets one")
        elif rest.lower() == "off":
            self.conv.set_system(None)
            self.note("system message removed")
        else:
            self.conv.set_system(rest)
            self.note("system message set; it applies from the next answer on")

    def _think(self, arg: str) -> None:
        arg = arg.lower()
        if arg in ("on", "off"):
            self.settings.think = arg == "on"
            self.note(f"thinking {arg}")
        elif arg in ("show", "hide"):
            self.settings.show_thinking = arg == "show"
            self.note(f"thinking will be {'shown' if arg == 'show' else 'collapsed to one line'}")
            if arg == "show" and self.last_reasoning and self.interactive:
                self.console.print(Text("thinking (last answer)", style="grey50 bold"))
                self.console.print(think_lines(self.last_reasoning))
        elif not arg:
            self.note(f"thinking {'on' if self.settings.think else 'off'}, "
                      f"{'shown' if self.settings.show_thinking else 'hidden'}; /think on|off|show|hide")
        else:
            raise CloverError(f"/think takes on, off, show or hide; not {arg!r}")

    def _set(self, rest: str) -> None:
        parts = rest.split()
        if not parts:
            s = self.settings
            penalties = [f"{name} {getattr(s, name):g}" for name, r in PENALTY_RANGES.items()
                         if getattr(s, name) != r.off]  # shown once set: most chats never touch them
            budget = [] if s.think_budget is None else [f"think_budget {s.think_budget}"]
            cuts = ([f"top_k {s.top_k}"] if s.top_k else []) + ([f"min_p {s.min_p:g}"] if s.min_p else [])  # once set
            self.note(" · ".join([s.reveal_rule(), f"temperature {s.temperature:g}", f"top_p {s.top_p:g}",
                                  *cuts, f"max_tokens {s.max_tokens}", f"thinking {'on' if s.think else 'off'}",
                                  *budget, *penalties]))
            return
        if len(parts) != 2:
            raise CloverError(f"/set takes a name and a value, e.g. /set threshold 0.8 (names: {', '.join(SETTABLE)})")
        value = set_value(self.settings, parts[0], parts[1])
        key = parts[0].replace("-", "_").lower()
        if key == "think_budget":
            if value is not None:
                try:
                    self._check_think_budget(value)
                except CloverError:
                    self.settings.think_budget = None
                    raise
            self.note(f"think_budget = {value} (the thinking's most tokens; where it runs out, the thinking is ended "
                      "for the model and the answer follows)" if value is not None
                      else "think_budget = off (the model thinks until it ends the thinking itself)")
            return
        if key in ("threshold", "reveal_factor"):  # two rules, one in use: say which
            factor, threshold = self.settings.reveal_factor, self.settings.threshold
            if key == "reveal_factor":
                why = "the factor rule decides the reveals" if factor else f"threshold {threshold:g} decides"
            else:
                why = (f"reveal_factor {factor:g} decides the reveals; /set reveal_factor off to reveal by the "
                       "threshold") if factor else ""
            shown = "off" if key == "reveal_factor" and not value else f"{value:g}"
            self.note(f"{key} = {shown}" + (f" ({why})" if why else ""))
            return
        ctx = self.context
        if key == "max_tokens" and value > ctx:
            self.settings.max_tokens = ctx
            self.note(f"max_tokens = {ctx} (the model's context)")
            return
        self.note(f"{key} = {value:g}" if isinstance(value, float) else f"{key} = {value}")

    def _stats(self, arg: str = "") -> None:
        """/stats: this session's figures and the runtime's few that a user acts on; `/stats all` adds every
        runtime counter (the ~30 kept for `bench`)."""
        if arg not in ("", "all"):
            raise CloverError(f"/stats takes nothing or 'all'; not {arg!r}")
        t = self.totals
        rows: list[tuple[str, str]] = [
            ("turns this session", f"{t['turns']:,}"),
            ("tokens", f"{t['tokens']:,}"),
            ("passes", f"{t['passes']:,}"),
            ("tokens/pass", f"{t['tokens'] / t['passes']:.2f}" if t["passes"] else "—"),
            ("tokens/s", f"{t['tokens'] / t['seconds']:.1f}" if t["seconds"] else "—"),
            ("answers stopped", f"{t['stopped']:,}"),
        ]
        if self.last is not None:
            ls = self.last
            rows += [("last answer", f"{plural(ls.tokens, 'token')}, {plural(ls.passes, 'pass', 'passes')}, "
                                     f"{ls.tokens_per_pass:.2f} tokens/pass, {ls.tokens_per_second:.1f} tokens/s, "
                                     f"{ls.stop_reason}"),
                     *self._prompt_rows(ls),
                     ("context used", f"{ls.prompt_tokens + ls.tokens:,} of {self.context:,}"
                      + (f" (the first {plural(self.conv.left_out, 'message')} left out)" if self.conv.left_out
                         else ""))]
        rows += self._engine_rows(arg == "all")
        if self.interactive:
            table = Table(show_header=False, box=None, pad_edge=False)
            table.add_column(style="grey62")
            table.add_column()
            for k, v in rows:
                table.add_row(Text(k), Text(v))
            self.console.print(table)
        else:
            for k, v in rows:
                print(f"{k}: {v}" if k else v, file=sys.stderr)

    def _engine_rows(self, every: bool) -> list[tuple[str, str]]:
        """(hook) /stats' rows of what answers: the prompt cache, the runtime's counters (`every`: all of
        them), the GPU's memory."""
        pc = self.prompt_cache.stats
        return [prompt_cache_row(pc.hits, pc.lookups, pc.reused_tokens),
                *runtime_rows(runtime_stats(self.loaded.model), every), gpu_row(gpu_memory(self.loaded.model))]

    def _check_think_budget(self, budget: int) -> None:
        """(hook) /set think_budget: this model's tokenizer must have the tokens the budget counts by."""
        ThinkBudget.for_tokenizer(self.tok, budget, opened=False)

    def _prompt_rows(self, ls: TurnStats) -> list[tuple[str, str]]:
        """The last prompt's tokens, in parts that add up: resumed from the turn before + read (prefilled) now
        + the tail that opens the answer's first block (a prompt is prefilled in whole blocks; what is left of
        it goes through the answer's passes with the first generated tokens)."""
        bs = self.block_size
        total, reused = ls.prompt_tokens, ls.reused_tokens
        read = whole_blocks(total, bs) - reused
        tail = total - reused - read
        took = f" in {ls.prefill_seconds:.1f} s" if ls.prefilled else ""
        after = f" (+ {tail:,} in the answer's first block)" if tail else ""
        return [("prompt reused", f"{reused:,} of {plural(total, 'token')} (from the last turn)"),
                ("prompt read", f"{plural(read, 'token')}{took}{after}")]

    # ------------------------------------------------------------------ one answer
    def ask(self, text: str) -> TurnStats | None:
        from clover_local.generate.block_diffusion import DecodeSettings

        self.conv.add_user(text)
        budget = self.settings.think_budget if self.settings.think else None
        ctx = self.context
        max_new = self.settings.max_tokens

        def render(messages: list[dict]) -> tuple[str, list[int]]:
            prompt = self.tok.apply_chat_template(for_template(messages), add_generation_prompt=True,
                                                  enable_thinking=self.settings.think)
            return prompt, self.tok.encode(prompt)

        try:
            # outgrown the context (the answer would get less than max_tokens, or a quarter of the context): the
            # oldest exchanges are left out, in steps, so the next turns keep the cut and resume the prefill
            start, prompt, ids = fit(self.conv.messages, render, lambda t: len(self.tok.encode(t)), ctx,
                                     min(max_new, ctx // 4))
            if budget is not None:  # (a tokenizer without <think> tokens: one line, as a template error is)
                budget = ThinkBudget.for_tokenizer(self.tok, budget, prompt_opens_thinking(prompt))
        except CloverError as exc:
            self.conv.messages.pop()
            self.error(str(exc))
            return None
        if len(ids) >= ctx:  # (what is left to leave out: nothing but this message, or a message before it)
            self.conv.messages.pop()
            self.error(f"the prompt ({len(ids):,} tokens with this message) fills the model's context of {ctx:,} "
                       "tokens; shorten the message (/file: a smaller part of the document), or /reset")
            return None
        self._read_from(start)
        max_new = min(max_new, ctx - len(ids))
        self._answer_limit(max_new, len(ids))
        settings = DecodeSettings(max_new_tokens=max_new, threshold=self.settings.threshold,
                                  factor=self.settings.reveal_factor,
                                  temperature=self.settings.temperature, top_p=self.settings.top_p,
                                  top_k=self.settings.top_k, min_p=self.settings.min_p,
                                  seed=self.settings.seed, stop_token_ids=self.loaded.stop_token_ids,
                                  penalties=self.settings.penalties(), think_budget=budget)
        turn = TurnText(self.tok, prompt)
        stats = TurnStats(prompt_tokens=len(ids))
        history = history_tokens(self.tok, self.conv.template_messages(), enable_thinking=self.settings.think)
        stopped = False
        failure = None
        try:
            if self.interactive:
                stopped = self._answer_live(lambda: self._draw_answer(ids, settings, turn, stats, history))
            else:
                stopped = self._answer_plain(ids, settings, turn, stats, history)
        except TURN_FAILURES as exc:
            failure = failed_turn_message(exc)
        except BaseException:
            self.prompt_cache.clear()  # a bug or an interrupt mid-turn: do not resume from this turn's cache
            raise
        stats.reused_tokens = self.prompt_cache.stats.last_reused
        if failure is not None:  # outside the handler: the traceback's tensors are gone before memory is released
            self.prompt_cache.clear()  # nothing half-updated is resumed; and its memory goes back with the rest
            release_memory()
            self.conv.messages.pop()
            self.error(failure)
            return None
        self._record(turn.content, turn.reasoning, stats, stopped)
        return stats

    def _read_from(self, start: int) -> None:
        """The model reads the conversation from message `start` on (0: all of it); said when that leaves more out."""
        before = self.conv.left_out
        self.conv.read_from(start)
        if self.conv.left_out > before:
            self.note(f"(the conversation outgrew the context of {self.context:,} tokens: the model reads it from "
                      f"message {start + 1} on, its first {plural(self.conv.left_out, 'message')} left out; /save "
                      "keeps them all)")

    def _answer_limit(self, allowed: int, prompt_tokens: int) -> None:
        """Said where an answer may take fewer tokens than max_tokens: what the context leaves after the prompt, or
        (a server's) its --max-tokens."""
        if allowed < self.settings.max_tokens:
            why = (f"the context is {self.context}" if prompt_tokens + self.settings.max_tokens > self.context
                   else "the server's --max-tokens")
            self.note(f"(the answer is limited to {allowed} tokens: {why})")

    def _record(self, content: str, reasoning: str, stats: TurnStats, stopped: bool) -> None:
        """An answer (or what a Ctrl-C left of it) into the conversation and the session's figures."""
        self.conv.add_assistant(content, reasoning, interrupted=stopped)
        self.last_reasoning = reasoning
        self.last = stats
        self.totals["turns"] += 1
        self.totals["tokens"] += stats.tokens
        self.totals["passes"] += stats.passes
        self.totals["seconds"] += stats.decode_seconds  # (tokens/s: a long prompt's reading shown apart)
        self.totals["stopped"] += int(stopped)

    def _status(self, stats: TurnStats, view: TurnView | None = None, width: int = 200) -> Text:
        """The live status line, fitted to `width` (one line: a wrapped one left `stops` alone at 80 columns):
        the counts, the expert cache and the GPU shortened, then dropped, the Ctrl-C hint last. While a long
        prompt is read: how far it is, not an answer's zero rates."""
        parts: dict[str, Part] = {"dot": Part(("● ",), "green", sep="")} if view is not None else {}
        reading = view.prefill if view is not None else None
        if reading is not None and not stats.passes:
            bs = self.block_size
            resumed = whole_blocks(stats.prompt_tokens, bs) - reading.total
            pct = 100 * reading.done // reading.total if reading.total else 100
            parts["rate"] = Part((f"reading the prompt: {pct}%", f"reading {pct}%"), "bold", sep="")
            if resumed > 0:
                parts["counts"] = Part((f"{plural(resumed, 'token')} resumed from the last turn",
                                        f"{resumed:,} resumed", ""), "grey70")
        else:
            live_tokens = stats.tokens + (view.cells.revealed if view is not None else 0)
            secs = stats.decode_seconds
            parts["rate"] = Part((f"{live_tokens / secs if secs > 0 else 0:.1f} tok/s",), "bold", sep="")
            parts["per_pass"] = Part((f"{live_tokens / stats.passes if stats.passes else 0:.2f} tok/pass",), "bold")
            parts["counts"] = Part((f"{plural(live_tokens, 'token')}, {plural(stats.passes, 'pass', 'passes')}",
                                    plural(live_tokens, "token"), ""), "grey70")
        rate = format_hit_rate(self._runtime_stats())
        parts["cache"] = Part((f"expert cache {rate}", f"cache {rate}", ""), "grey70")
        mem = self._gpu_memory()
        if mem is not None:
            parts["gpu"] = Part((f"GPU {format_gib(mem[0])}/{format_gib(mem[1])} GiB", f"GPU {format_gib(mem[0])}",
                                 ""), "grey70")
        if view is not None:
            parts["hint"] = Part(("Ctrl-C stops", "^C stops", ""), "grey42", sep="   ")
        names = list(parts)
        order = ["counts", "cache", "gpu", "counts", "gpu", "hint", "cache", "hint"]
        return fit_parts(list(parts.values()), [names.index(k) for k in order if k in parts], width)

    def _runtime_stats(self) -> dict:
        """The runtime's counters, read at most twice a second (the status line redraws far more often)."""
        now = time.perf_counter()
        if now - self._rt[0] > 0.5:
            # read while the decoding thread books passes: host counters only, no CUDA call (a graph may be
            # capturing there); a read that fails gives {} for half a second (`runtime_stats`)
            self._rt = (now, self._runtime_now())
        return self._rt[1]

    def _runtime_now(self) -> dict:
        """(hook) The runtime's counters as they stand."""
        return runtime_stats(self.loaded.model)

    def _gpu_memory(self) -> tuple[int, int] | None:
        """(hook) (bytes allocated, total) of the GPU that answers, where known."""
        return gpu_memory(self.loaded.model)

    def _events(self, ids: list[int], settings, history: int | None, should_stop=None):
        return decode_events(self.decoder, ids, settings, should_stop, reuse=self.prompt_cache, snapshot_at=history)

    def _answer_live(self, draw: Callable[[], bool]) -> bool:
        """The answer drawn live (`draw`: whether it was stopped); what is typed meanwhile is held back unechoed
        (`HeldKeys`) and named after it."""
        with HeldKeys() as held:
            stopped = draw()
        if held.lines:
            shown = ", ".join(f'"{line if len(line) <= 40 else line[:39] + "…"}"' for line in held.lines[:3])
            more = f" and {len(held.lines) - 3} more" if len(held.lines) > 3 else ""
            self.note(f"not sent (typed while the answer was drawn): {shown}{more}; type it again at the prompt",
                      style="yellow")
        return stopped

    def _answer_header(self) -> None:
        """The line an answer is drawn under, the local chat's and the remote one's."""
        self.console.print(Text("clover", style="bold magenta"))

    def _draw_answer(self, ids: list[int], settings, turn: TurnText, stats: TurnStats, history: int | None) -> bool:
        view = TurnView(lambda i: self.tok.decode([i]), self.block_size, self.settings.show_thinking,
                        status=lambda width: self._status(stats, view, width), width=self.console.width)
        stopped = False
        self._answer_header()
        live = Live(view, console=self.console, auto_refresh=False, transient=True)
        last_draw = 0.0
        # the decoder on its own thread: drawing here overlaps its waits for the GPU instead of delaying them
        events = DecodeThread(lambda stop: self._events(ids, settings, history, stop), lockstep=self.pace > 0)
        with live, closing(events):
            try:
                for ev in events:
                    stats.on_event(ev)
                    if isinstance(ev, PrefillProgress):
                        view.on_prefill(ev)
                    elif isinstance(ev, PassDone):
                        view.on_pass(ev)
                        if self.pace:
                            live.refresh()
                            time.sleep(self.pace)
                            stats.paused += self.pace
                    elif isinstance(ev, BlockCommitted):
                        dr, dc = turn.add(ev.token_ids)
                        view.on_commit(ev.block)
                        for r in view.on_text(dr, dc, turn.thinking, turn.reasoning_tokens):
                            live.console.print(r)
                    now = time.perf_counter()
                    if isinstance(ev, BlockCommitted) or now - last_draw > 1 / 30:
                        live.refresh()
                        last_draw = now
                    if isinstance(ev, Finished):
                        break
            except KeyboardInterrupt:
                stopped = True
                events.interrupt()  # into the decoder, wherever it is (a prefill too), as before it had a thread
        if stopped:
            stats.end("cancelled")
        dr, dc = turn.finish()
        return self._close_answer(view.on_text(dr, dc, False, turn.reasoning_tokens) + view.finish(), stopped, stats)

    def _close_answer(self, rest: list, stopped: bool, stats: TurnStats) -> bool:
        """An answer's end on screen: what was still unsettled (`rest`), the line a Ctrl-C leaves, the summary."""
        for r in rest:
            self.console.print(r)
        if stopped:
            self.console.print(Text(f"⏹ stopped (Ctrl-C); kept {plural(stats.tokens, 'token')} of this answer",
                                    style="yellow"))
        self.console.print(self._summary(stats))
        return stopped

    def _summary(self, stats: TurnStats) -> Text:
        t = Text(style="grey50")
        t.append(f"{plural(stats.tokens, 'token')} · {plural(stats.passes, 'pass', 'passes')} · "
                 f"{stats.tokens_per_pass:.2f} tok/pass · "
                 f"{stats.tokens_per_second:.1f} tok/s · {stats.seconds:.1f} s · "
                 f"expert cache {format_hit_rate(self._runtime_now())}")
        if stats.prefilled:
            t.append(f" · read {stats.prefilled:,} prompt tokens in {stats.prefill_seconds:.1f} s")
        if stats.stop_reason == "length":
            t.append(" · reached max_tokens")
        return t

    def _answer_plain(self, ids: list[int], settings, turn: TurnText, stats: TurnStats, history: int | None) -> bool:
        stopped = False
        events = self._events(ids, settings, history)
        try:
            for ev in events:
                stats.on_event(ev)
                if isinstance(ev, BlockCommitted):
                    _, dc = turn.add(ev.token_ids)
                    if dc:
                        self.out.write(dc)
                        self.out.flush()
        except KeyboardInterrupt:
            stopped = True
            stats.end("cancelled")
        except BaseException:
            if turn.content:  # end the half-written answer's line before the error is shown
                self.out.write("\n")
                self.out.flush()
            raise
        finally:
            events.close()
        _, dc = turn.finish()
        self.out.write(dc + "\n")
        self.out.flush()
        return stopped


def prompt_cache_row(hits: int, lookups: int, reused: int, whose: str = "") -> tuple[str, str]:
    """/stats' row of the prompt cache: answers that resumed a prompt of the ones asked, the tokens reused."""
    return "prompt cache", f"{whose}{hits} of {plural(lookups, 'answer')} resumed, {plural(reused, 'token')} reused"


def gpu_row(mem: tuple[int, int] | None) -> tuple[str, str]:
    """/stats' row of the GPU's memory: torch's bytes allocated of the card's, where the model is on CUDA."""
    return "GPU memory", f"{format_gib(mem[0])} / {format_gib(mem[1])} GiB" if mem else "— (not on CUDA)"


def runtime_rows(rt: dict, every: bool) -> list[tuple[str, str]]:
    """/stats' rows of the offloading runtime's counters: the few a user acts on, or (`every`) all of them."""
    rows = key_stats(rt)
    if every:
        rows.append(("runtime counters", "" if rt else "— (no offloading runtime)"))
        rows += [(f"  {k}", "—" if v is None else str(v)) for k, v in scalar_stats(rt).items()]
    elif rt:
        rows.append(("", "(/stats all: every runtime counter)"))
    return rows


def _first_line(text: str, width: int = 60) -> str:
    """A message's beginning, for a one-line note."""
    lines = text.strip().splitlines() or [""]
    more = len(lines) > 1 or len(lines[0]) > width
    return lines[0][: width - 1].rstrip() + "…" if more else lines[0]


def failed_turn_message(exc: BaseException) -> str:
    """The one line a failed answer gets: what went wrong and what to change; the chat goes on without it."""
    kept = "the conversation is as it was before this message"
    if is_out_of_memory(exc):
        return (f"ran out of {what_ran_out(exc)} during this answer; {kept}. Shorten the conversation (/reset) or "
                "the answer (/set max_tokens N), or restart with a lower --vram-budget or --context")
    return f"{exc} ({kept})"


def _history_length() -> int:
    try:
        import readline
    except ImportError:
        return 0
    return readline.get_current_history_length()


def _one_history_entry(start: int, text: str) -> None:
    """A multi-line message as ONE history entry (readline kept each line apart, so up-arrow recalled only the
    last line): the lines input() added since `start` are replaced by the message; recalled, it shows on its lines
    and Enter sends it whole."""
    try:
        import readline
    except ImportError:
        return
    for index in reversed(range(start, readline.get_current_history_length())):
        readline.remove_history_item(index)
    if text.strip():
        readline.add_history(text)
