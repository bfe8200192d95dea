"""The command line's surface as a person meets it: `--version`, `-h`, and help that reads right."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


def test_version_prints_the_package_version(capsys) -> None:
    from clover_local import __version__

    for flag in ("--version", "-V"):
        assert run_cli([flag]) == 0
        out, err = capsys.readouterr()
        assert out.strip() == f"clover-local {__version__}", (out, err)


@pytest.mark.parametrize("command", [[], ["generate"], ["plan"], ["serve"], ["quantize"]])
def test_short_help_is_the_long_help(capsys, command: list[str]) -> None:
    assert run_cli([*command, "--help"]) == 0
    long_help = capsys.readouterr().out
    assert run_cli([*command, "-h"]) == 0
    assert capsys.readouterr().out == long_help
    assert "Usage:" in long_help


@pytest.mark.parametrize("command", ["generate", "chat", "bench", "download"])
def test_help_shows_flags_as_flags(capsys, command: str) -> None:
    """A flag takes no value: typer 0.27+ printed `--json <bool>` (and `{model}` in the usage line), which sends
    people to type `--json true` (pyproject pins typer below 0.27)."""
    assert run_cli([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "<bool>" not in out and "{" not in out.splitlines()[1], out
    assert "--help" in out
