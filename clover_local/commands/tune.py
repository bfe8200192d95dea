"""`clover-local tune`: pick the W4A16 kernels' tiles on this GPU, for the calls a pack's preview pass makes."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import revision_option


@app.command(short_help="Time the INT4 kernels' tiles on this GPU and keep the fastest (run once per GPU).")
def tune(
    model: Optional[str] = typer.Argument(None, help="Pack folder or Hub repo id (or use --synthetic)."),
    synthetic: Optional[str] = typer.Option(None, "--synthetic", help="full: the random INT4 pack with the real "
                                            "shapes (≈20 GB, written once to ~/.cache/clover-local); small: "
                                            "CI-sized; full3 / small3: with 3-bit experts."),
    vram_budget: Optional[str] = typer.Option(None, "--vram-budget", help="Device memory the runtime may use while "
                                              "tuning, e.g. 14GB. Default: free memory minus a margin."),
    quick: bool = typer.Option(False, "--quick", help="About half the candidate tiles per call (≈ half the time)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Time and report, but leave the table as it is."),
    revision: Optional[str] = revision_option(None),
    device: str = typer.Option("auto", "--device", help="cuda or cuda:N (auto: the GPU if present)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Time the candidate tiles of every INT4/INT8 kernel call a preview pass makes (dense projections, LM
    head, both routed-expert passes) on this GPU, check each candidate's output against the default tiles',
    and write the fastest per call to this GPU's tuning table.

    chat, generate, serve and bench then use it
    on this GPU model with this Triton version (CLOVER_TUNING=off ignores it, to compare). Compiling the
    candidates takes a few minutes the first time; running tune again re-times and replaces the entries.
    A synthetic pack's block is routed to random experts (its own router would pick ~15 a layer, a real
    model's ~160: the routed experts' best tiles depend on that load).

    Examples:

      clover-local tune ./clover-int4 --vram-budget 14GB

      clover-local tune --synthetic full --quick --json
    """
    from clover_local.commands._model_options import pack_or_synthetic
    from clover_local.loader import pick_device, pick_dtype
    from clover_local.runtime.sizes import parse_size
    from clover_local.runtime.tune import check_device

    dev = pick_device(device)
    check_device(dev)  # before a synthetic pack is written or a pack downloaded
    dtype = pick_dtype(None, dev)
    budget = parse_size(vram_budget, "--vram-budget") if vram_budget is not None else None
    say = (lambda msg: None) if as_json else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    folder, label = pack_or_synthetic(model, synthetic, "tune", say, revision)
    report = _run_with_progress(folder, label, dev, dtype, budget, quick, not dry_run, as_json, say)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)


def _run_with_progress(folder, label, dev, dtype, budget, quick, write, as_json, say):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from clover_local.runtime.tune import run_tune

    args = dict(label=label, device=dev, dtype=dtype, vram_budget=budget, quick=quick, write=write,
                uniform=label.startswith("synthetic:"))
    if as_json:
        return run_tune(folder, **args)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[key]}"), TimeElapsedColumn(), console=Console(stderr=True),
                   transient=True)
    task = None

    def on_trial(i: int, n_calls: int, j: int, n: int, key: str) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task("tiles", total=n, key=key)
        bar.update(task, description=f"call {i + 1}/{n_calls}", completed=j, total=n, key=key)

    try:
        return run_tune(folder, **args, on_step=say, on_trial=on_trial)
    finally:
        bar.stop()


def _print(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console(highlight=False)
    t = Table(title=f"{r['model']} on {r['device']} (sm {r['capability']}, triton {r['triton']}): one preview pass",
              title_justify="left")
    for col in ("call", "per pass", "default µs", "tuned µs", "gain", "tiles changed"):
        t.add_column(col, justify="left" if col in ("call", "tiles changed") else "right")
    for row in r["calls"]:
        d, b = row["default_us"], row["tuned_us"]
        gain = f"{100 * (d - b) / d:.0f} %" if d and b is not None else "—"
        changed = ", ".join(f"{k}={v}" for k, v in row["changed"].items()) or (row["note"] or "kept")
        t.add_row(f"{row['kind']} {row['k']}→{row['n']} int{row['bits']}", str(row["calls_per_pass"]),
                  "—" if d is None else f"{d:.1f}",
                  "—" if b is None else f"{b:.1f}", gain, changed)
    c.print(t)
    c.print(f"kernel time per preview pass: {r['kernel_us_per_pass_default'] / 1e3:.3f} ms with the default tiles, "
            f"{r['kernel_us_per_pass_tuned'] / 1e3:.3f} ms tuned (saves {r['saved_us_per_pass'] / 1e3:.3f} ms)")
    if r["written"]:
        c.print(f"written: {r['table']} (chat, generate, serve and bench use it on this GPU; CLOVER_TUNING=off "
                "to compare)")
    else:
        c.print(f"--dry-run: {r['table']} left as it was")
