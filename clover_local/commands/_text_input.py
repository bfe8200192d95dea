"""Text given on the command line or in a file (`--prompt`/`--file` of generate, `--text`/`--file` of score): one
reader, so both commands take `-` for standard input and fail the same one-line way. (The leading underscore
keeps this module out of the command registry: it defines no command.)"""

from __future__ import annotations

import sys
from pathlib import Path

from clover_local.errors import CloverError


def text_from(text: str | None, file: Path | None, text_flag: str) -> str:
    """Exactly one of `text` (given as `text_flag`) and `file` (UTF-8; `-` reads standard input)."""
    if (text is None) == (file is None):
        raise CloverError(f"give exactly one of {text_flag} or --file")
    if text is not None:
        return text
    if str(file) == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise CloverError(f"cannot read standard input as UTF-8: {exc}") from None
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CloverError(f"cannot read {file}: {exc}") from None
