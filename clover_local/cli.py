"""The `clover-local` command line.

Each subcommand lives in the module that owns its job; this file only registers them and turns
`CloverError` into one line on stderr with a non-zero exit.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import typer

from clover_local.errors import run_reporting

app = typer.Typer(
    name="clover-local",
    help="Quantize, run and share Clover-35B-A3B-Preview (a block-diffusion MoE) on one 16 GB GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every subcommand inherits -h
)


def _print_version(value: bool) -> None:
    if value:
        from clover_local import __version__

        print(f"clover-local {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Quantize, run and share Clover-35B-A3B-Preview (a block-diffusion MoE) on one 16 GB GPU."""


def _register() -> None:
    """Import every module in `clover_local.commands`; each registers its commands on `app`.

    A module is added to that package only when its commands work, so what `--help` lists is what exists.
    """
    import importlib
    import pkgutil

    import clover_local.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"clover_local.commands.{info.name}")
    for command in app.registered_commands:
        if command.callback is not None and not hasattr(command.callback, "__wrapped__"):
            if command.help is None and command.callback.__doc__:
                command.help = reflowed(command.callback.__doc__)
            command.callback = interrupt_exits(command.callback)


def reflowed(doc: str) -> str:
    """A command's docstring for --help: each prose paragraph on one line, so the terminal wraps it at its own
    width (typer's rich help keeps a docstring's line breaks: sentences broke mid-line at 80 columns); indented
    lines (examples, their continuations) are kept as written."""
    import inspect

    paragraphs = inspect.cleandoc(doc).split("\n\n")
    out = []
    for para in paragraphs:
        lines = para.splitlines()
        prose = all(line and not line[0].isspace() for line in lines)
        out.append(" ".join(line.strip() for line in lines) if prose else para)
    return "\n\n".join(out)


def interrupt_exits(callback: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C that a command does not handle itself ends it with one `interrupted` line and exit status 130.
    Around each command, not in `main`: typer's standalone mode turns a KeyboardInterrupt into a silent exit 130
    before `main` sees it. A command may catch the interrupt first to keep what it made (generate --json prints
    its partial answer; quantize says what --resume will reuse), then re-raise or raise CloverError."""
    @functools.wraps(callback)  # typer reads the parameters through __wrapped__
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr, flush=True)
            raise typer.Exit(130) from None
    return run


def main(argv: list[str] | None = None) -> None:
    _register()
    run_reporting(lambda: app(args=argv, standalone_mode=True))
