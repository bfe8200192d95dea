"""`clover-local quantize` and `clover-local eval`: make a GPTQ INT4 pack and measure what it cost."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from clover_local.cli import app
from clover_local.commands._model_options import blank_is_main
from clover_local.commands._paths import path_of
from clover_local.errors import CloverError, Interrupted, out_of_memory_as
from clover_local.pack.manifest import Manifest

if TYPE_CHECKING:
    from clover_local.hub.remote_shards import RemoteShards
    from clover_local.hub.resume import Reserve
    from quantize.pipeline import QuantizeSettings
    from quantize.quality import QualityCheck


@contextmanager
def _progress(console: Console):
    bar = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[step]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    )
    with bar:
        try:
            yield bar
        except BaseException:
            # on failure leave only the one-line error: no half-drawn bar, no blank line after it
            bar.live.transient = True
            bar.live.stop()
            bar.disable = True
            raise


@app.command()
def quantize(
    src: str = typer.Argument(..., help="BF16 checkpoint folder, Hub repo id, or 'tiny'."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the pack (created; must be empty or ours).",
                             click_type=path_of("--out", "folder")),
    bits: int = typer.Option(4, "--bits", help="Bits of the routed experts: 4, 3 (≈ 12.7 GB of experts instead of "
                             "16.7: the 35B model fits one 16 GB card almost whole, at some quality cost: measure it "
                             "with `eval`) or 8."),
    sym: bool = typer.Option(True, "--sym/--asym", help="Symmetric scales (zero at mid-range) or a zero per group "
                             "(asymmetric: lower KL for 3-bit experts on the tiny model)."),
    clip: bool = typer.Option(True, "--clip/--no-clip", help="Search each group's range for the least "
                              "activation-weighted error instead of taking min/max (tiny model: KL about a third "
                              "lower at 3 and at 4 bits; same pack size and format)."),
    act_order: bool = typer.Option(True, "--act-order/--no-act-order", help="GPTQ quantizes each matrix's most-"
                                   "activated inputs first, each keeping its own group's scale (static groups: "
                                   "layout and kernels unchanged; tiny model: 3-bit KL about a fifth lower)."),
    group_size: int = typer.Option(128, "--group-size", help="Input columns per scale (-1: per channel)."),
    method: str = typer.Option("gptq", "--method", help="gptq (calibrated) or rtn (round-to-nearest)."),
    profile: str = typer.Option("balanced", "--profile",
                                help="balanced (8-bit attention/GDN/shared/head), compact, experts-only."),
    calib: Optional[str] = typer.Option(None, "--calib", help="Calibration JSONL (messages or text) or .txt."),
    samples: int = typer.Option(128, "--samples", help="Calibration sequences."),
    seq_len: int = typer.Option(2048, "--seq-len", help="Tokens per calibration sequence."),
    calib_mode: str = typer.Option("diffusion", "--calib-mode",
                                   help="diffusion (causal + masked-block previews) or causal only."),
    expert_stats: str = typer.Option("routed", "--expert-stats",
                                     help="routed (rows routed to each expert) or all (every row, every expert)."),
    min_expert_rows: int = typer.Option(16, "--min-expert-rows", help="Fewer routed rows than this: round-to-nearest."),
    device: str = typer.Option("auto", "--device", help="Where layers are computed: cuda, cpu … (auto: GPU if any)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace what --out holds."),
    stream: bool = typer.Option(False, "--stream", help="Read a Hub checkpoint's weights layer by layer over the "
                                "network instead of downloading it first: the disk holds the pack and, while it "
                                "runs, the inputs --resume starts from (35B on a GPU: ≈ 20 + 4.6 GB; without "
                                "--stream, the 69 GB release too) and the download overlaps the work (the next "
                                "layer is fetched while this one is quantized: ≈ 1.7 GB more memory at 35B); an "
                                "interrupted run resumes with --resume (the layer in flight is read again)."),
    revision: Optional[str] = typer.Option(None, "--revision", callback=blank_is_main,
                                           help="Branch, tag or commit of a Hub SRC (default: main; --resume "
                                           "reads the commit the run started from, wherever main has moved since)."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Measure KL against the source on held-out "
                                  "text as the layers go (each source layer is read once)."),
    seed: int = typer.Option(0, "--seed", help="Seed for calibration sampling and masking."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of tables."),
) -> None:
    """Quantize a BF16 Clover checkpoint into a GPTQ-format pack, one decoder layer at a time.

    Memory stays bounded by one layer plus the calibration activations. Interrupted? Run the same command
    with --resume: finished layers are kept and the result is identical. Before a run of hours, `clover-local plan
    SRC --vram 16GB` says whether the pack will run on your card and what making it takes on disk.

    Examples:

      clover-local quantize tiny --out tiny-int4 --samples 32 --seq-len 256

      clover-local plan Diffuspace/Clover-35B-A3B-Preview --vram 16GB   # first: the pack's plan, the disk it takes

      clover-local quantize Diffuspace/Clover-35B-A3B-Preview --out clover-int4 --device cuda

      clover-local quantize Diffuspace/Clover-35B-A3B-Preview --out clover-int4 --stream   # ≈ 25 GB of disk, not 94
    """
    from clover_local.loader import pick_device
    from clover_local.runtime.sizes import fmt_bytes
    from quantize.pipeline import QuantizeSettings, quantize_checkpoint, refuse_resume_overwrite
    from quantize.quality import QualityCheck

    refuse_resume_overwrite(resume, overwrite)
    settings = QuantizeSettings(bits=bits, sym=sym, clip=clip, act_order=act_order, group_size=group_size,
                                method=method, profile=profile, samples=samples, seq_len=seq_len, calib=calib,
                                calib_mode=calib_mode, expert_stats=expert_stats, min_expert_rows=min_expert_rows,
                                seed=seed)
    settings.validate()
    dev = pick_device(device)
    console = Console(stderr=True, quiet=as_json)
    check = QualityCheck.during_quantize(seq_len, calib) if evaluate else None
    src_path, remote, label = _open_source(src, stream, revision, out if resume else None, console,
                                           lambda rev: _room_after_download(src, rev, out, settings, dev, check))
    where = ["the calibration inputs"]  # the step a run out of memory names
    with _progress(console) as bar:
        task = bar.add_task("quantizing", total=None, step="")

        def on_layer(i: int, n: int, step: str) -> None:
            text = where[0] = f"layer {min(i, n - 1)}: {step}" if i < n else step
            if remote is not None:  # the network's share: a run that waits on "reading" is waiting for the line
                text += f" · fetched {fmt_bytes(remote.fetched_bytes)} (checkpoint {fmt_bytes(remote.total_bytes)})"
            bar.update(task, total=n, completed=i, step=text)

        try:
            with out_of_memory_as(lambda exc: out_of_memory_message(out, dev, where[0], settings)):
                result = quantize_checkpoint(src_path, out, settings, dev, resume=resume, overwrite=overwrite,
                                             source_label=label, on_layer=on_layer, remote=remote, measure=check)
        except KeyboardInterrupt:
            raise Interrupted(interrupted_message(out)) from None
    quality = result.quality
    if check is not None and quality is None and remote is None:  # resumed from a run started with --no-eval
        short = " (with --device cpu where the GPU is short)" if dev.type == "cuda" else ""
        quality = _measure(out, src_path, console, check, dev, f"the pack in {out} is finished: measure it by "
                           f"clover-local eval {out} --reference {src} --save{short}")
    if quality is not None:
        _record_quality(out, quality)
    calibration = Manifest.load(out).calibration
    summary = {
        "out": str(out), "source": label, "seconds": round(result.seconds, 2), "source_bytes": result.source_bytes,
        "pack_bytes": result.pack_bytes, "resumed_from_layer": result.resumed_from,
        "fetched_bytes": result.fetched_bytes,
        "layers": [{"layer": r.index, "kind": r.kind, "rel_error": round(r.rel_error, 6),
                    "experts": r.expert_paths, "seconds": r.seconds} for r in result.layers],
        "quality": quality,
        "settings": settings.recorded(),
        "calibration": calibration,
        **_peak_memory(dev),
    }
    if as_json:
        print(json.dumps(summary))
        return
    table = Table(title=f"quantized {src} → {out}", caption=_settings_line(summary["settings"]) + "\n" + EXPERT_PATHS,
                  caption_justify="left")
    for col in ("layer", "kind", "rel. output error", "experts (path: count)", "seconds"):
        table.add_column(col)
    for r in result.layers:
        table.add_row(str(r.index), r.kind, f"{r.rel_error:.4f}",
                      ", ".join(f"{k}: {v}" for k, v in r.expert_paths.items()), f"{r.seconds:.1f}")
    out_console = Console()
    out_console.print(table)
    out_console.print(f"source {fmt_bytes(result.source_bytes)} → pack {fmt_bytes(result.pack_bytes)} "
                      f"in {result.seconds:.1f}s{_peaks_text(summary)}")
    if remote is not None:
        out_console.print(f"streamed {fmt_bytes(remote.fetched_bytes)} from the Hub in {remote.requests:,} ranged "
                          "requests (the checkpoint's weights were never written to disk)")
    if calibration:
        out_console.print(_calibration_line(calibration, settings.samples))
    if check is not None and not quality:
        out_console.print(f"quality not measured (the run was started with --no-eval): clover-local eval {out} "
                          f"--reference {src} --stream --save")
    if quality:
        out_console.print(f"KL causal {quality['kl_causal_mean']:.5f} (p99 {quality['kl_causal_p99']:.5f}), "
                          f"preview {quality['kl_preview_mean']:.5f}; top-1 agreement causal "
                          f"{quality['top1_causal']:.3f}, preview {quality['top1_preview']:.3f} (a quick check on "
                          f"{check.samples} × {check.seq_len} held-out tokens; lower KL is better: `clover-local eval` "
                          "measures on more)")
    out_console.print(f"next: clover-local generate {out} --prompt \"…\"   or   clover-local upload {out} --repo-id …")


def _peak_memory(device) -> dict:
    """The run's peaks, for sizing the next one (at 35B: which machine can take the default calibration): the
    process's resident memory (None where `resource` is missing: Windows), and on a GPU what torch allocated."""
    import torch

    try:
        import resource
    except ImportError:
        host = None
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        host = rss if sys.platform == "darwin" else rss * 1024
    return {"peak_host_bytes": host,
            "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None}


def _peaks_text(summary: dict) -> str:
    """The summary line's ` · peak 9.7 GiB of RAM, 7.1 GiB of GPU memory`, from `_peak_memory`'s figures."""
    from clover_local.runtime.sizes import fmt_bytes

    peaks = [f"{fmt_bytes(summary[key])} of {what}"
             for key, what in (("peak_host_bytes", "RAM"), ("peak_device_bytes", "GPU memory")) if summary[key]]
    return f" · peak {', '.join(peaks)}" if peaks else ""


def _open_source(src: str, stream: bool, revision: str | None, resumed: Path | None, console: Console,
                 room: Callable[[str | None], Reserve | None]) -> tuple[Path, RemoteShards | None, dict]:
    """SRC opened (`checkpoint_source`; a Hub SRC resumed in `resumed` at the commit that run started from) and
    the source label the pack's manifest records (a Hub SRC with the commit it was read at). A Hub SRC to download
    has `room(revision)` checked first (`_room_after_download`)."""
    from clover_local.hub.transfer import snapshot_commit
    from clover_local.loader import is_hub_id, refuse_pack

    on_hub = is_hub_id(src)
    if on_hub and resumed is not None:
        revision = _resumed_commit(resumed, src, revision, console)
    reserve = room(revision) if on_hub and not stream else None
    src_path, remote = checkpoint_source(src, stream, "the same command with --resume", revision, reserve)
    refuse_pack(src_path, src, "quantize takes the BF16 checkpoint it was made from")
    if not on_hub:
        return src_path, remote, {"path": src_path.name}
    commit = remote.commit if remote is not None else snapshot_commit(src_path)
    return src_path, remote, {"repo_id": src, **({"revision": commit} if commit else {})}


def _room_after_download(src: str, revision: str | None, out: Path, settings: QuantizeSettings, dev,
                         check: QualityCheck | None) -> Reserve | None:
    """What a run on a Hub SRC it downloads writes in --out after the download (the pack, the inputs --resume starts
    from), from the repo's config.json: --out's disk is checked for it now, and the download's room check counts it
    where the two share a disk — a disk with room for the 69 GB release but not for the pack after it is refused
    before the download, not hours into it. None where the Hub cannot be read now (offline: the cached copy's run
    is checked before its first layer) or SRC is no checkpoint (refused once read)."""
    from clover_local.hub.remote_index import remote_pack_index
    from clover_local.hub.resume import Reserve
    from quantize.footprint import check_room, compute_dtype, run_bytes
    from quantize.pipeline import PROGRESS

    remote = remote_pack_index(src, revision, bits=settings.bits, profile=settings.profile, group=settings.group_size)
    if remote is None or not remote.checkpoint:
        return None
    pack, progress = run_bytes(remote.index, 0, settings, compute_dtype(dev), check)
    return Reserve(out, check_room(out, out / PROGRESS, pack, progress),
                   f"the pack quantize makes in {out} and its --resume inputs")


def _resumed_commit(out: Path, src: str, revision: str | None, console: Console) -> str | None:
    """The revision a resumed run reads: the commit of SRC the run in --out started from (`run_source_commit`); a
    --revision naming another commit is refused before anything is read."""
    from clover_local.hub.transfer import commit_of
    from quantize.pipeline import run_source_commit

    saved = run_source_commit(out, src)
    if saved is None:
        return revision
    if revision is None:
        console.print(f"[dim]resuming {src} at {saved[:12]}, the commit this run started from[/dim]")
        return saved
    now = saved if saved.startswith(revision) else commit_of(src, revision)
    if now != saved:
        raise CloverError(f"{out} holds a run that read {src} at {saved[:12]}, and --revision {revision} is "
                          f"{now[:12]}: drop --revision to resume at {saved[:12]}, or start over with --overwrite")
    return revision


def checkpoint_source(src: str, stream: bool, retry: str, revision: str | None = None, reserve: Reserve | None = None
                      ) -> tuple[Path, RemoteShards | None]:
    """SRC as a folder, and with --stream the Hub repo's shards to read by byte range (its small files are in the
    folder); `retry` is what a read that gave up tells the person to run; `revision` pins a Hub SRC; `reserve`:
    what the caller writes after a download, for its room check."""
    from clover_local.loader import SHORT_NAMES, resolve_model_path

    if not stream:
        return resolve_model_path(src, revision, reserve), None
    from clover_local.hub.remote_shards import open_remote_checkpoint
    from clover_local.hub.transfer import is_repo_id

    if src in SHORT_NAMES or Path(src).expanduser().exists() or not is_repo_id(src):
        raise CloverError(f"--stream reads a checkpoint from the Hub by its repo id (owner/name); {src} is not "
                          "one: drop --stream to read it from disk")
    folder, remote = open_remote_checkpoint(src, revision)
    remote.retry = retry
    return folder, remote


EXPERT_PATHS = ("experts: gptq-routed = GPTQ on the calibration rows routed to the expert; rtn-few-rows = fewer "
                "routed rows than --min-expert-rows, round-to-nearest; gptq-all = GPTQ on every row (--expert-stats "
                "all)")


def _calibration_line(calibration: dict, samples: int) -> str:
    """What the run calibrated on, and why it is less than asked when the file ran out of text."""
    seqs, seq_len = calibration.get("sequences"), calibration.get("seq_len")
    line = (f"calibration: {seqs} sequence{'s' * (seqs != 1)} × {seq_len} tokens from {calibration.get('file')}")
    if isinstance(seqs, int) and seqs < samples:
        line += f" (--samples asked for {samples}: the file holds fewer tokens; a larger --calib gives more)"
    left = calibration.get("conversations_left_out")
    if left:
        line += f"; {left} conversations the chat template cannot render were left out"
    return line


def interrupted_message(out: Path) -> str:
    """What a Ctrl-C kept: the layers finished so far (then --resume continues after them), or none (then
    --resume would only say there is nothing to resume)."""
    from quantize.pipeline import finished_layers

    done = finished_layers(out)
    if not done:
        return f"interrupted before the first layer was finished; nothing in {out} to resume: run it again as it was"
    return (f"interrupted; {done} finished layer{'s' * (done != 1)} saved in {out}: run the same command with "
            "--resume to go on from there")


def ran_out_of_memory(device, where: str) -> str:
    """`the GPU ran out of memory (layer 3: experts 40/256; 9.1 GiB held at the peak of the card's 15.6 GiB)`:
    the step, and on a GPU how much of the card the command itself held (far less than the card: other programs
    hold the rest)."""
    if device.type != "cuda":
        return f"the machine ran out of memory ({where})"
    import torch

    from clover_local.runtime.sizes import fmt_bytes

    peak = _peak_memory(device)["peak_device_bytes"]  # the figure a finished run's summary prints
    total = torch.cuda.get_device_properties(device).total_memory
    return f"the GPU ran out of memory ({where}; {fmt_bytes(peak)} held at the peak of the card's {fmt_bytes(total)})"


def out_of_memory_message(out: Path, device, where: str, settings: QuantizeSettings) -> str:
    """A run out of memory: where, what was kept, and what to change — room on the card, or in a layer fewer
    calibration tokens (a layer's work on the device grows with them; the LM head's is bounded by its slices)."""
    from quantize.pipeline import finished_layers

    make_room = "close other programs using the GPU and " if device.type == "cuda" else ""
    done = finished_layers(out)
    again = (f"{done} finished layer{'s' * (done != 1)} kept in {out}: {make_room}run the same command with --resume"
             if done else f"no layer was finished yet: {make_room}run it again")
    smaller = (f", or {'start over with --overwrite and' if done else 'with'} fewer --samples or a shorter "
               f"--seq-len (now {settings.samples} × {settings.seq_len}: a layer's work grows with them)"
               if where.startswith("layer") else "")
    return f"{ran_out_of_memory(device, where)}; {again}{smaller}"


def _settings_line(recorded: dict) -> str:
    """What made the pack (`QuantizeSettings.recorded()`), in the words of the flags that change it."""
    parts = [f"{recorded['bits']}-bit experts", "per-channel" if recorded["group_size"] == -1
             else f"group {recorded['group_size']}", recorded["profile"], recorded["method"].upper(),
             "symmetric" if recorded["sym"] else "asymmetric",
             "range search" if recorded["clip"] else "min/max ranges"]
    if recorded["method"] == "gptq":
        parts.append("activation order" if recorded["act_order"] else "column order")
    return " · ".join(parts)


def _measure(pack: Path, ref: Path, console: Console, check: QualityCheck, device, if_oom: str, **kwargs) -> dict:
    """`compare` with a bar of the layers both models stream through (kwargs: compare's); out of memory, one
    line that ends in `if_oom`, what to change."""
    from clover_local.config import load_config
    from quantize.quality import compare

    # both models stream every decoder layer once: the bar's total is known from the config alone
    total = 2 * load_config(ref).num_hidden_layers
    with _progress(console) as bar:
        task = bar.add_task("measuring KL", total=total, step="")
        n = {"layers": 0, "step": "the held-out text"}

        def on_layer(which: str, i: int) -> None:
            n["layers"] += 1
            n["step"] = f"{which} layer {i}"
            bar.update(task, completed=n["layers"], step=n["step"])

        with out_of_memory_as(lambda exc: f"{ran_out_of_memory(device, 'measuring KL: ' + n['step'])}; {if_oom}"):
            return compare(pack, ref, check=check, on_layer=on_layer, device=device, **kwargs).to_dict()


def _record_quality(pack: Path, quality: dict) -> None:
    """Store measured quality in the manifest (the card is regenerated from it; neither changes a weight)."""
    from clover_local.pack.card import write_card

    manifest = Manifest.load(pack)
    manifest.quality.update(quality)
    try:
        manifest.write(pack)
        write_card(pack, manifest=manifest)
    except OSError as exc:  # a read-only pack (a shared copy, a mounted disk): the figures were printed already
        raise CloverError(f"cannot record the quality in {pack}: {exc.strerror or exc}") from None


@app.command("eval", short_help=(
    "Quality of a pack against its BF16 source: KL divergence and top-1 agreement, "
    "causal and preview passes."
))
def eval_command(
    pack: str = typer.Argument(..., help="A pack folder (or Hub repo id)."),
    reference: str = typer.Option(..., "--reference", help="The BF16 checkpoint the pack was made from."),
    samples: int = typer.Option(8, "--samples", help="Held-out sequences."),
    seq_len: int = typer.Option(512, "--seq-len", help="Tokens per sequence."),
    calib: Optional[str] = typer.Option(None, "--calib", help="Text source (its held-out split is used)."),
    device: str = typer.Option("auto", "--device", help="cuda, cpu … (auto: GPU if any)."),
    save: bool = typer.Option(False, "--save", help="Record the result in the pack's manifest and card."),
    stream: bool = typer.Option(False, "--stream", help="Read a Hub reference's weights layer by layer over the "
                                "network instead of downloading it (as `quantize --stream`)."),
    revision: Optional[str] = typer.Option(None, "--revision", callback=blank_is_main,
                                           help="Branch, tag or commit of a Hub reference (default: the commit "
                                           "the pack records it was made from, else main)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Quality of a pack against its BF16 source: KL divergence (mean, p99) and top-1 agreement, for the
    causal pass and for preview passes over masked blocks. Both models are streamed layer by layer.

    Example: clover-local eval tiny-int4 --reference tiny --json
    """
    from clover_local.loader import pick_device, refuse_pack, resolve_model_path
    from quantize.calibration import check_calib_file
    from quantize.quality import QualityCheck

    t0 = time.perf_counter()
    pack_path = resolve_model_path(pack)
    console = Console(stderr=True, quiet=as_json)
    recorded = None if revision else _recorded_revision(pack_path, reference)
    if recorded:
        console.print(f"[dim]reference {reference} at {recorded[:12]}, the commit the pack was made from[/dim]")
    try:
        ref_path, remote = checkpoint_source(reference, stream, "the same command again", revision or recorded)
    except CloverError as exc:
        if not recorded:
            raise
        raise CloverError(f"{exc} (the commit {pack} records as its source; --revision main compares with the "
                          "repo's main)") from None
    refuse_pack(ref_path, f"--reference {reference}", "eval compares a pack with the BF16 checkpoint it was made from")
    if calib:
        check_calib_file(calib)
    dev = pick_device(device)
    on_card = "close other programs using the GPU, " if dev.type == "cuda" else ""
    quality = _measure(pack_path, ref_path, console, QualityCheck(samples=samples, seq_len=seq_len, calib=calib), dev,
                       f"{on_card}use a shorter --seq-len (now {seq_len}: {QualityCheck.batch} sequences are on the "
                       f"device at once){', or --device cpu' if on_card else ''}", remote=remote)
    if as_json:
        print(json.dumps(quality))
    else:
        _print_quality(quality, f"{pack} vs {reference}", time.perf_counter() - t0)
        got = quality["tokens_causal"] // (seq_len - 1)  # each sequence's last token predicts nothing
        if got < samples:
            console.print(f"[dim](--samples asked for {samples}; the text's held-out split holds {got} sequence"
                          f"{'s' * (got != 1)} of {seq_len} tokens: a larger --calib gives more)[/dim]")
    if save:  # after the figures are out: a pack that cannot be written to does not lose the measurement
        _record_quality(pack_path, quality)


def _recorded_revision(pack: Path, reference: str) -> str | None:
    """The commit of `reference` the pack's manifest says it was made from (None: made from something else, or
    from a folder): eval compares with the weights the pack came from, not with where main points now."""
    try:
        source = Manifest.load(pack).source
    except (CloverError, OSError, ValueError):
        return None  # not a pack: compare() says so in its own words
    if isinstance(source, dict) and source.get("repo_id") == reference and isinstance(source.get("revision"), str):
        return source["revision"]
    return None


def _print_quality(quality: dict, title: str, seconds: float) -> None:
    """`eval`'s figures as a table, with the held-out text they were measured on."""
    table = Table(title=title)
    table.add_column("pass")
    for col in ("KL mean", "KL p99", "top-1 agreement", "tokens"):
        table.add_column(col, justify="right")
    for name, key in (("causal", "causal"), ("preview", "preview")):
        table.add_row(name, f"{quality[f'kl_{key}_mean']:.5f}", f"{quality[f'kl_{key}_p99']:.5f}",
                      f"{quality[f'top1_{key}']:.3f}", str(quality[f"tokens_{key}"]))
    Console().print(table)
    Console().print(f"[dim]{quality['eval_text']}, {seconds:.1f}s[/dim]")
