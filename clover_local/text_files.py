"""Text a person hands over in a file: generate's and score's `--file`, chat's `/file`. One reader, so each takes
UTF-8 the same way and fails with the same one line (`-` is standard input where a flag takes a file)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from clover_local.errors import CloverError


def read_text_file(path: Path) -> str:
    """A UTF-8 file's text; `-`: standard input."""
    if str(path) == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise CloverError(f"cannot read standard input: {unreadable(exc)}") from None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CloverError(f"cannot read {path}: {unreadable(exc)}") from None


def source_name(path: Path | None) -> str:
    """Where a text came from, for a message: a file's path, or `standard input` (`-`, or no file: piped in)."""
    return "standard input" if path is None or str(path) == "-" else str(path)


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why a text file could not be read, in a phrase: the OS's reason alone ("No such file or directory", not
    Python's repr with the path again), or where the text stops being UTF-8."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
    return exc.strerror or str(exc)


def text_from(text: str | None, file: Path | None, text_flag: str) -> str:
    """One of `text` (given as `text_flag`) and `--file`; with neither, text piped in on standard input
    (`cat page.txt | clover-local score MODEL`), as `--file -` reads it. Only where no flag gives the text: a
    script's stdin left open would otherwise hold a command that has its text already."""
    if text is not None and file is not None:
        raise CloverError(f"give one of {text_flag} or --file, not both")
    if text is not None:
        return text
    if file is None and (sys.stdin is None or sys.stdin.isatty()):
        raise CloverError(f"give {text_flag} TEXT or --file F, or pipe the text in on standard input")
    return read_text_file(file if file is not None else Path("-"))


def parse_json(text: str | bytes) -> Any:
    """`json.loads` of text a person or a client hands over, where nesting deeper than Python's parser goes (a
    thousand levels: its RecursionError) is a JSONDecodeError like any other malformed JSON, so every reader's
    one-line refusal covers it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
