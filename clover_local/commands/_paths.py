"""The type of every file and folder option: a path, where an empty one (a script's unset variable, `--out "$OUT"`)
is refused by the flag's name. Click reads "" as the path ".", so `quantize --out ""` wrote into the working folder
and `generate --file ""` said "cannot read .: Is a directory". (The leading underscore keeps this module out of
the command registry: it defines no command.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from clover_local.errors import CloverError


class _NamedPath(click.ParamType):
    name = "path"

    def __init__(self, flag: str, what: str) -> None:
        self.flag, self.what = flag, what  # (typer's click hands convert no parameter to name it by)

    def convert(self, value: Any, param: Any, ctx: Any) -> Path:
        if isinstance(value, Path):
            return value
        if not str(value).strip():
            raise CloverError(f"{self.flag} is empty: give it a {self.what} name")
        return Path(value)


def path_of(flag: str, what: str = "file") -> click.ParamType:
    """`click_type=` for a Path option or argument named `flag` (`--file`, `PACK`) that names a `what`."""
    return _NamedPath(flag, what)
