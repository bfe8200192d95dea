"""Tab completion at chat's prompt: the slash commands, the words they take, /set's names and file paths.

`candidates` is the whole rule (plain strings in, plain strings out: tested without a terminal); `install` hands it
to readline, where there is one (not on Windows without pyreadline: there Tab stays a tab)."""

from __future__ import annotations

import os
from pathlib import Path

from clover_local.chat.conversation import SETTABLE

WORDS = {"/think": ("on", "off", "show", "hide"), "/system": ("off",), "/stats": ("all",), "/copy": ("code",)}
SET_WORDS = {"reveal_factor": ("off",), "think_budget": ("off",)}
PATH_COMMANDS = ("/file", "/load", "/save")


def candidates(line: str, commands: list[str], cwd: Path | None = None) -> list[str]:
    """What the last word of `line` (the prompt's text before the cursor) may become, each a whole word: one of
    `commands` with the space after it, a word a command takes, a /set name with its space, a folder with its `/`, a
    file with a space (a message that does not start with `/` completes nothing: Tab inside a message is the
    user's)."""
    if not line.startswith("/"):
        return []
    words = line.split(" ")
    if len(words) == 1:
        return [c + " " for c in commands if c.startswith(words[0].lower())]
    command, word = words[0].lower(), words[-1]
    if command in PATH_COMMANDS and len(words) == 2:
        return _paths(word, cwd or Path.cwd())
    if command == "/set":
        if len(words) == 2:
            return [name + " " for name in SETTABLE if name.startswith(word.lower())]
        if len(words) == 3:
            return [w for w in SET_WORDS.get(words[1].lower().replace("-", "_"), ()) if w.startswith(word.lower())]
    if command in WORDS and len(words) == 2:
        return [w for w in WORDS[command] if w.startswith(word.lower())]
    return []


def _paths(word: str, cwd: Path) -> list[str]:
    """Entries of the folder `word` names (`~` expanded) whose names start with its last part; hidden ones only
    when that part starts with a dot. At most 200, sorted: a folder of thousands does not stall the prompt."""
    head, _, tail = word.rpartition("/")
    folder = Path(os.path.expanduser(head or ".")) if head or not word.startswith("/") else Path("/")
    if not folder.is_absolute():
        folder = cwd / folder
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.startswith(tail)
                       and (tail.startswith(".") or not e.name.startswith(".")))[:200]
    except OSError:
        return []
    prefix = word[: len(word) - len(tail)]
    return [prefix + name + ("/" if (folder / name).is_dir() else " ") for name in names]


def install(commands: list[str]) -> None:
    """Tab completes by `candidates` at the prompt (GNU readline or macOS's libedit)."""
    try:
        import readline
    except ImportError:
        return
    matches: list[str] = []

    def complete(text: str, state: int) -> str | None:
        nonlocal matches
        if state == 0:  # readline asks for match 0, 1, ... of the word before the cursor
            try:
                matches = candidates(readline.get_line_buffer()[: readline.get_endidx()], commands)
            except Exception:  # (a completer's exception is swallowed by readline; never break the prompt)
                matches = []
        return matches[state] if state < len(matches) else None

    readline.set_completer_delims(" ")
    readline.set_completer(complete)
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
