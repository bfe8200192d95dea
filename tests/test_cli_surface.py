"""The command line's surface as a person meets it: `--version`, `-h`, and help that reads right."""

from __future__ import annotations

import re

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


def test_every_command_ends_on_ctrl_c_with_one_line(capsys) -> None:
    """typer turns a KeyboardInterrupt into a silent exit 130; every registered command is wrapped so that Ctrl-C
    it does not handle itself says `interrupted` (and its parameters still parse: typer reads them through)."""
    import typer

    from clover_local import cli

    cli._register()
    names = [c.name or c.callback.__name__ for c in cli.app.registered_commands]
    assert {"generate", "plan", "bench", "quantize", "chat", "serve"} <= set(names)
    assert all(hasattr(c.callback, "__wrapped__") for c in cli.app.registered_commands), names

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as exit_info:
        cli.interrupt_exits(interrupted)()
    assert exit_info.value.exit_code == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert run_cli(["plan", "--help"]) == 0 and "--vram" in capsys.readouterr().out


def test_generate_takes_max_tokens_as_chat_and_serve_spell_it(capsys) -> None:
    code = run_cli(["generate", "tiny", "-p", "reverse a b c", "--no-think", "--max-tokens", "2", "--json",
                    "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    import json

    assert json.loads(out)["stats"]["tokens"] <= 2


def test_help_prose_is_wrapped_by_the_terminal_not_the_docstring(capsys) -> None:
    """typer's rich help kept a docstring's line breaks, so sentences broke mid-line ("Without a terminal" then a
    short line); prose paragraphs are joined, indented example lines kept as written."""
    from clover_local.cli import reflowed

    doc = """Summary line.

    First sentence runs on
    into a second line.

    Examples:

      clover-local plan x \\
        --vram 16GB
    """
    assert reflowed(doc) == ("Summary line.\n\nFirst sentence runs on into a second line.\n\nExamples:\n\n"
                              "  clover-local plan x \\\n    --vram 16GB")
    assert run_cli(["chat", "--help"]) == 0
    out = capsys.readouterr().out
    lines = [line.strip(" │") for line in out.splitlines()]
    assert any("Without a terminal" in line for line in lines)
    assert not any(line.endswith("Without a terminal") for line in lines), out  # the docstring's break


def test_a_context_above_the_models_limit_is_refused_everywhere(capsys) -> None:
    """plan used to size a KV cache for 200,000 tokens of a 131,072-token model, and loading cut it silently."""
    above = "--context 200,000 is above this model's context of 131,072 tokens"
    for args, needle in ((["plan", "synthetic:full", "--vram", "16GB", "--context", "200000"], above),
                         (["generate", "tiny", "-p", "hi", "--context", "200000", "--device", "cpu"], above),
                         (["plan", "synthetic:full", "--vram", "16GB", "--context", "1"], "at least 2")):
        assert run_cli(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --context") and needle in err[0], (args, err)
    # (--ram: the plan must not depend on what this machine has free; the brief's is 32 GB)
    assert run_cli(["plan", "synthetic:full", "--vram", "16GB", "--ram", "32GB", "--context", "131072",
                    "--json"]) == 0
    capsys.readouterr()


def test_plans_advice_only_names_settings_that_can_work(capsys) -> None:
    """`plan` said "raise --vram so more experts live on the device" to a host short of RAM (the host holds every
    expert until all of them fit on the device) and "or lower --context" for a 9 GiB shortfall a 640 MiB KV cache
    cannot make up."""
    import json

    assert run_cli(["plan", "synthetic:full", "--vram", "16GB", "--ram", "8GB"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "use a machine with at least 18 GiB" in line and "helps only once every expert fits" in line, line
    assert line.endswith("or a pack with 3-bit experts (`quantize --bits 3`): at this budget every one of them fits "
                         "on the device, with no host copy"), line
    all_in = re.search(r"fits on the device: (\S+ \S+)\)", line).group(1)
    assert run_cli(["plan", "synthetic:full", "--vram", all_in, "--ram", "8GB", "--json"]) == 0  # and it does
    assert json.loads(capsys.readouterr().out)["fits"]
    assert run_cli(["plan", "synthetic:full", "--vram", "4GB", "--ram", "32GB"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "give --vram 9.12 GiB more" in out and "lower --context" not in out, out
    assert run_cli(["plan", "synthetic:full", "--vram", "3GB", "--ram", "32GB", "--context", "131072"]) == 2
    assert capsys.readouterr().err.strip().endswith("or lower --context")
    # 640 MiB of KV cannot make up 1.56 GiB
    assert run_cli(["plan", "synthetic:full", "--vram", "2GB", "--ram", "32GB"]) == 2
    assert "lower --context" not in capsys.readouterr().err


def test_every_commands_examples_stay_indented(capsys) -> None:
    """typer dedents the help after its first paragraph as one block, so a command whose `Examples:` came right
    after the summary printed its example lines flush left, like prose (generate, bench, tune did)."""
    from clover_local.cli import _register, app

    _register()
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert {"generate", "bench", "tune", "plan"} <= set(names)
    for name in names:
        assert run_cli([name, "--help"]) == 0
        lines = [line.strip("│").rstrip() for line in capsys.readouterr().out.splitlines()]
        heads = [i for i, line in enumerate(lines) if line.strip() == "Examples:"]
        examples = [line for i in heads for line in lines[i + 1:i + 4] if "clover-local" in line]
        assert examples or name not in {"generate", "bench", "tune", "plan"}, (name, lines)
        assert all(line.startswith("   clover-local") for line in examples), (name, examples)


def test_the_gpu_extra_installs_on_windows_too():
    """`pip install clover-local[gpu]` on Windows: PyPI has no `triton` wheel there (the install would fail), the
    triton-windows build stands in; on Linux, triton itself. Windows also gets psutil: no /proc/meminfo there."""
    import tomllib
    from pathlib import Path

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    gpu = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["gpu"]]
    base = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    windows = {**default_environment(), "sys_platform": "win32"}
    assert any(r.name == "psutil" and r.marker.evaluate(windows) for r in base)  # host memory without /proc
    for platform, wanted, unwanted in (("win32", "triton-windows", "triton"), ("linux", "triton", "triton-windows")):
        env = {**default_environment(), "sys_platform": platform}
        names = {r.name for r in gpu if r.marker is None or r.marker.evaluate(env)}
        assert wanted in names and unwanted not in names, (platform, names)


def _last_line(code: str) -> str:
    """The last line a fresh interpreter prints running `code` from the repository's root (it must exit 0)."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_the_command_line_starts_without_torch():
    """`--help`, `--version`, `cache` and `download` load no model: registering every command imports no torch
    (`clover-local --version` 1.46 → 0.24 s on the 2-core machine, BENCHMARKS.md "Starting up"), and `cache list`
    runs without it; the commands that load a model import it where they do."""
    assert _last_line("import sys\n"
                      "from clover_local import cli\n"
                      "sys.argv = ['clover-local', 'cache', 'list', '--json']\n"
                      "try:\n"
                      "    cli.main()\n"
                      "except SystemExit:\n"
                      "    pass\n"
                      "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n") == "[]"


def test_a_cpu_load_does_not_import_dynamo():
    """Building the model on the meta device to fill it leaves the embedding table uninitialised: nn.Embedding's own
    init imports torch._dynamo there (≈ 1.2 s of every CPU command that loads a model); CUDA runs import it anyway."""
    assert _last_line("import sys\n"
                      "from clover_local.loader import load\n"
                      "loaded = load('tiny', 'cpu', 'float32')\n"
                      "assert loaded.model.embed_tokens.weight.abs().sum() > 0\n"
                      "print('torch._dynamo' in sys.modules)\n") == "False"
