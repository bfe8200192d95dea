"""`clover-local doctor`: the command, and its report printed one line per check; the checks themselves are in
`clover_local.diagnostics`."""

from __future__ import annotations

import json
import sys

import typer

from clover_local.cli import app
from clover_local.diagnostics import FAIL, OK, WARN, Check, counts, report, run_checks, scrub, secrets_to_scrub

SYMBOLS = {OK: "✓", WARN: "!", FAIL: "✗"}
COLORS = {OK: "green", WARN: "yellow", FAIL: "red"}
SECTIONS = {"software": "Software", "device": "Device", "host": "Host", "kernels": "Kernels",
            "disk": "Disk and Hub"}


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, max(width, 30), break_on_hyphens=False, break_long_words=False) or [""]


def _print(checks: list[Check]) -> None:
    """One line per check (its detail wrapped under itself), sections in order, then the tally. Wrapped here rather
    than by a rich table, which pads every line to the width with spaces."""
    from rich.console import Console
    from rich.markup import escape

    out = Console(highlight=False, soft_wrap=True)
    width = out.width if sys.stdout.isatty() else 120
    name_w = max(len(c.name) for c in checks)
    indent = " " * (4 + name_w + 1)
    out.print("[b]clover-local doctor[/b]: what this machine has, and whether clover-local works on it")
    for key, title in SECTIONS.items():
        rows = [c for c in checks if c.section == key]
        if rows:
            out.print(f"\n[b]{title}[/b]")
        for c in rows:
            color = COLORS[c.status]
            lines = _wrapped(c.detail, width - len(indent))
            out.print(f"  [{color}]{SYMBOLS[c.status]}[/{color}] {escape(c.name.ljust(name_w))} {escape(lines[0])}")
            for line in lines[1:]:
                out.print(indent + escape(line))
            if c.fix:
                fix = _wrapped(c.fix, width - len(indent) - 2)
                out.print(f"{indent}[cyan]→[/cyan] {escape(fix[0])}")
                for line in fix[1:]:
                    out.print(f"{indent}  {escape(line)}")
    n = counts(checks)
    verdict = (f"[red]{n[FAIL]} failed[/red]: fix the ✗ lines first (exit status 1)" if n[FAIL] else
               "nothing failed" + (" (the ! lines are worth a look)" if n[WARN] else ""))
    out.print(f"\n{n[OK]} ✓, {n[WARN]} !, {n[FAIL]} ✗: {verdict}")


@app.command(short_help="Check this machine for clover-local: versions, GPU, memory, kernels, disk, and what to fix.")
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: every check (name, section, status "
                                 "ok/warn/fail, detail, fix) and the raw facts."),
) -> None:
    """Check this machine for clover-local and say what to fix: one line per check, ✓ fine, ! worth a look, ✗
    broken, each with a short reason and, where something is wrong, what to do.

    Run it when something goes wrong, and paste its output (or --json) into a bug report. It reads only this
    machine: no network, no model loaded, a few seconds (on a GPU the first run also compiles two Triton kernels,
    up to a minute). A Hub token is only ever said to be set or not, never shown.

    What it checks:

      Software  clover-local, its tiny model, Python, torch, triton, packages
      Device    the CUDA GPU, its memory and driver; the --vram-budget default
      Host      CPU cores, RAM; a 256 MiB pinned host-to-GPU copy, in GB/s
      Kernels   the INT4 dense and MoE kernels vs the reference; tuning table
      Disk      free space for both caches; Hub token (never shown); offline

    Without a CUDA GPU or without triton the INT4 kernels fall back to the PyTorch reference (dequantize, then
    matmul: correct, far slower); the kernel check then runs that reference against the weights it was packed
    from. flash-linear-attention on a machine without CUDA is flagged (transformers picks its GPU kernels there
    and crashes). Free space is compared with the 35B pack (18.6 GiB) and the BF16 release (64.6 GiB).

    The exit status is 1 when a check fails (✗), else 0 (warnings included), so a script can test it.

    Examples:

      clover-local doctor

      clover-local doctor --json > doctor.json   # attach to a bug report

      clover-local doctor --json | jq '.checks[] | select(.status != "ok")'
    """
    say = (lambda msg: None) if as_json else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    checks = run_checks(say)
    if as_json:
        print(scrub(json.dumps(report(checks), indent=2, allow_nan=False), secrets_to_scrub()))
    else:
        _print(checks)
    if any(c.status == FAIL for c in checks):
        raise typer.Exit(1)
