"""`clover-local plan`: where a pack's parts would go on a machine, before loading anything."""

from __future__ import annotations

import json
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import prefill_chunk_option, prefill_chunk_rows, revision_option
from clover_local.errors import CloverError


def _pack_index(model: str, bits: int | None, profile: str | None, group: int | None,
                revision: str | None = None):
    """The pack's index (a Hub repo's at `revision`); for a Hub repo read without downloading it, what was read
    (else None); and for a BF16 checkpoint, which is planned as the pack `quantize --bits BITS --profile PROFILE
    --group-size GROUP` makes of it (from its config alone), those settings (else None)."""
    from clover_local.runtime.pack_index import read_pack_index

    if model.startswith("synthetic:"):
        _pack_only(model, bits, profile, group)
        if revision:
            raise CloverError("--revision applies to Hub repo ids, not to synthetic packs")
        from clover_local.runtime.synthetic_pack import synthetic_index

        return synthetic_index(model.split(":", 1)[1]), None, None
    from clover_local.loader import is_hub_id, resolve_model_path
    from clover_local.pack.reader import is_pack

    if is_hub_id(model):  # the headers alone, from the Hub: the plan before a 19 GB download, not after it
        from clover_local.hub.remote_index import remote_pack_index

        settings = _settings(bits, profile, group)
        remote = remote_pack_index(model, revision, bits=settings["bits"], profile=settings["profile"],
                                   group=settings["group_size"])
        if remote is not None:
            if not remote.checkpoint:
                _pack_only(model, bits, profile, group)
            return remote.index, remote, settings if remote.checkpoint else None
    path = resolve_model_path(model, revision)  # a folder, or offline / unreachable: the pack in the local Hub cache
    if not is_pack(path):  # a checkpoint (no config.json, or a broken one: the config's own error, not "quantize")
        from clover_local.runtime.synthetic_pack import checkpoint_index

        settings = _settings(bits, profile, group)
        index = checkpoint_index(path, settings["bits"], settings["profile"], settings["group_size"], model)
        return index, None, settings
    _pack_only(model, bits, profile, group)
    return read_pack_index(path), None, None  # checks each shard's size against its header (a truncated download)


def _settings(bits: int | None, profile: str | None, group: int | None) -> dict:
    """quantize's settings that shape a pack, its defaults where not given."""
    return {"bits": bits or 4, "profile": profile or "balanced", "group_size": group or 128}


def _pack_only(model: str, bits: int | None, profile: str | None, group: int | None) -> None:
    """--bits / --profile / --group-size choose the pack a checkpoint would make; a pack already has them."""
    given = [flag for flag, value in (("--bits", bits), ("--profile", profile), ("--group-size", group))
             if value is not None]
    if given:
        flags = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
        raise CloverError(f"{model} is a pack: {flags} appl{'y' if len(given) > 1 else 'ies'} to a BF16 checkpoint "
                          "(planned as the pack quantize would make of it)")


@app.command(short_help=(
    "Show the placement plan (device / host, expert cache slots, KV budget, PCIe per "
    "pass) from the pack's headers alone."
))
def plan(
    model: str = typer.Argument(..., help="Pack or BF16 checkpoint: a folder, a Hub repo id (read from the Hub "
                                 "without downloading it), or synthetic:full / synthetic:small (synthetic:full3 / "
                                 "small3: 3-bit experts)."),
    vram: Optional[str] = typer.Option(None, "--vram", help="Device memory the runtime may use, e.g. 16GB "
                                       "(sizes are binary: 16GB = 16 GiB). Default: this GPU's free memory."),
    ram: Optional[str] = typer.Option(None, "--ram", help="Host RAM to plan for, e.g. 32GB. Default: what this "
                                      "machine has available."),
    context: int = typer.Option(32768, "--context", help="Tokens of context the KV cache is sized for."),
    prefill_chunk: Optional[int] = prefill_chunk_option(None),
    bits: Optional[int] = typer.Option(None, "--bits", help="For a BF16 checkpoint: plan the pack `quantize "
                                       "--bits N` makes of it (4, the default, 3 or 8)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="For a BF16 checkpoint: the quantize profile "
                                          "to plan for (default balanced)."),
    group_size: Optional[int] = typer.Option(None, "--group-size", help="For a BF16 checkpoint: the quantize "
                                             "group size to plan for (default 128; -1 per-channel)."),
    park_prompts: str = typer.Option("0", "--park-prompts", metavar="SIZE",
                                     help="Host RAM to count for serve's parked conversations (serve's default: "
                                          "2GB); 0, as chat and generate need: none."),
    revision: Optional[str] = revision_option(None),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as one JSON object."),
) -> None:
    """Show what sits where (device / host), how many experts the device cache holds, the KV budget and the
    expected PCIe traffic per 32-row pass — from the pack's config and headers alone, no weights loaded. A Hub
    repo id is planned before it is downloaded: its config, index and each shard's header are read from the Hub
    (≈ 20 MiB for the 35B pack; offline, the copy in the local Hub cache). A BF16 checkpoint is planned as the
    pack `clover-local quantize` would make of it (`--bits`, `--profile`, `--group-size` as there), from its
    config.json alone: whether the 35B release will run on a card, before its 69 GB download and hours of
    quantizing.

    Refuses, with the setting to change, when the budget cannot hold the non-expert weights or the host
    cannot hold the experts.

    Examples:

      clover-local plan ./clover-int4 --vram 16GB --ram 32GB

      clover-local plan someone/clover-35b-int4 --vram 16GB   # a pack on the Hub, before downloading it

      clover-local plan Diffuspace/Clover-35B-A3B-Preview --vram 16GB --bits 3   # the pack quantize would make

      clover-local plan synthetic:full --vram 12GB --context 8192 --json

      clover-local plan synthetic:full --vram 16GB --prefill-chunk 2048   # what a longer prefill chunk costs

      clover-local plan synthetic:full3 --vram 16GB   # a pack made with `quantize --bits 3`: every expert resident

      clover-local plan ./clover-int4 --vram 16GB --ram 24GB --park-prompts 2GB   # for serve, with its default
    """
    import torch

    from clover_local.runtime.load import env_prefill_span
    from clover_local.runtime.placement import PCIE_BPS, TARGET_BPS, make_plan
    from clover_local.runtime.sizes import default_budget, fmt_bytes, host_available_bytes, parse_size

    if bits is not None and bits not in (3, 4, 8):  # quantize's choices (its SUPPORTED_BITS)
        raise CloverError(f"--bits must be 3, 4 or 8, got {bits}")
    if profile is not None:
        from quantize.profiles import get_profile

        get_profile(profile)  # an unknown name: one line listing the profiles
    if group_size is not None and group_size != -1 and (group_size < 8 or group_size % 8):
        raise CloverError(f"--group-size must be a multiple of 8 (or -1 for per-channel), got {group_size}")
    pack, remote, quantized = _pack_index(model, bits, profile, group_size, revision)
    if vram is not None:
        vram_bytes = parse_size(vram, "--vram")
    elif torch.cuda.is_available():
        vram_bytes = default_budget(torch.device("cuda"))
    else:
        raise CloverError("no GPU here: give --vram, the memory of the card to plan for (e.g. --vram 16GB)")
    ram_bytes = parse_size(ram, "--ram") if ram is not None else host_available_bytes()
    p = make_plan(pack, vram_bytes, ram_bytes, context, prefill_chunk=prefill_chunk_rows(prefill_chunk),
                  prefill_span=env_prefill_span(), parked=parse_size(park_prompts, "--park-prompts", allow_zero=True))
    extra = {}
    if remote:
        extra["hub"] = remote.to_dict()
    if quantized:
        extra["planned_as_pack"] = _planned_as_pack(model, pack, quantized)
    if as_json:
        print(json.dumps({"model": model, **extra, **p.to_dict()}, indent=2))
    else:
        from rich.console import Console

        console = Console(highlight=False)
        if quantized:
            console.print(_checkpoint_line(model, extra["planned_as_pack"], remote, fmt_bytes))
        _print_plan(model, p, pack, fmt_bytes, PCIE_BPS, TARGET_BPS)
        if remote:
            read = ("its config.json" if remote.checkpoint else
                    f"the config, the index and the {remote.shards} shards' headers ({fmt_bytes(remote.header_bytes)})")
            what = "checkpoint" if remote.checkpoint else "pack"
            console.print(
                f"Read from the Hub at {remote.revision[:8]}: {read}; nothing else was downloaded. The {what} is "
                f"{remote.download_files} files, {fmt_bytes(remote.download_bytes)}: clover-local download {model}")
    if p.refusal:
        raise CloverError(p.refusal)


def _planned_as_pack(model: str, index, settings: dict) -> dict:
    """A BF16 checkpoint's pack as `plan --json` reports it: quantize's settings that shape it, its tensors'
    bytes, the command that makes it and what that takes on disk."""
    command = " ".join(["clover-local quantize", model, "--out PACK"]
                       + ([f"--bits {settings['bits']}"] if settings["bits"] != 4 else [])
                       + ([f"--profile {settings['profile']}"] if settings["profile"] != "balanced" else [])
                       + ([f"--group-size {settings['group_size']}"] if settings["group_size"] != 128 else []))
    return {**settings, "pack_bytes": sum(t.nbytes for t in index.tensors.values()), "command": command,
            **_quantize_disk(index, settings)}


def _checkpoint_line(model: str, q: dict, remote, fmt_bytes) -> str:
    """What the table below a BF16 checkpoint's name plans, and what making that pack takes."""
    download = f", after the {fmt_bytes(remote.download_bytes)} download (none with `--stream`)" if remote else ""
    return (f"{model} is a BF16 checkpoint: below is the plan of the pack `{q['command']}` makes of it "
            f"({q['bits']}-bit routed experts, profile {q['profile']}; {fmt_bytes(q['pack_bytes'])}), worked out "
            f"from its config.json alone. Making it takes ≈ {fmt_bytes(q['disk_bytes'])} on --out's disk"
            f"{download}: the pack and, while quantize runs, the inputs --resume starts from "
            f"({fmt_bytes(2 * q['resume_input_bytes'])} at the default calibration on a GPU).")


def _quantize_disk(index, settings: dict) -> dict:
    """What `quantize` writes in --out at its defaults on a GPU: the pack with its headers, and the file of
    calibration inputs --resume starts from, two of them for a moment (`quantize.footprint`: the figures its own
    check before the first layer uses)."""
    import torch

    from quantize.footprint import compute_dtype, peak_written, run_bytes
    from quantize.pipeline import QuantizeSettings
    from quantize.quality import QualityCheck

    run = QuantizeSettings(**settings)
    on_gpu = compute_dtype(torch.device("cuda"))  # (a device object only: nothing is allocated on it)
    pack, inputs = run_bytes(index, 0, run, on_gpu, QualityCheck.during_quantize(run.seq_len))
    return {"disk_bytes": peak_written(pack, inputs), "resume_input_bytes": inputs}


def _print_plan(model, p, pack, fmt_bytes, pcie_bps, target_bps) -> None:
    from rich.console import Console
    from rich.table import Table

    cfg = pack.config
    console = Console(highlight=False)
    table = Table(title=f"{model}: --vram {fmt_bytes(p.vram_budget)}, --context {p.context}, {p.dtype} activations",
                  title_justify="left")
    table.add_column("part")
    table.add_column("where")
    table.add_column("size", justify="right")
    table.add_column("note")
    for line in p.lines:
        table.add_row(line.what, line.where, fmt_bytes(line.bytes), line.note)
    dev_total = p.device_peak
    table.add_row("[b]device total[/b]", "device", f"[b]{fmt_bytes(dev_total)}[/b]",
                  f"of {fmt_bytes(p.vram_budget)}")
    table.add_row("[b]host total[/b]", "host", f"[b]{fmt_bytes(p.host_bytes)}[/b]",
                  f"of {fmt_bytes(p.ram_budget)}" if p.ram_budget else "")
    console.print(table)
    rows, e, k = cfg.diffusion.block_size, cfg.num_experts, cfg.num_experts_per_tok
    console.print(
        f"Per {rows}-row pass: ≈{p.distinct_per_layer:.1f} of {e} experts per layer (uniform routing, top {k}), "
        f"≈{p.block_set:.0f} per pass; {fmt_bytes(p.device_read_per_pass)} read from device memory "
        f"(floor {1e3 * p.device_read_per_pass / target_bps:.1f} ms at 896 GB/s, RTX 5070 Ti).")
    console.print(
        f"PCIe: first pass of a block ≈{fmt_bytes(p.pcie_first_pass)} "
        f"({1e3 * p.pcie_first_pass / pcie_bps:.1f} ms at 50 GB/s); later passes of the block "
        f"≈{fmt_bytes(p.pcie_later_pass)} ({1e3 * p.pcie_later_pass / pcie_bps:.1f} ms) — the block's experts stay "
        "pinned until it commits; the ≈3 rows a pass reveals route anew, and those of their experts not on the "
        "device cross once.")
    if p.pcie_prefill_chunk:
        console.print(
            f"Prefill: a pass takes up to {p.prefill_span} prompt tokens, each layer over all of them "
            f"{p.prefill_chunk} rows at a time, and copies ≈{fmt_bytes(p.pcie_prefill_chunk)} "
            f"({1e3 * p.pcie_prefill_chunk / pcie_bps:.1f} ms at 50 GB/s, "
            f"≈{p.pcie_prefill_chunk / p.prefill_span / 1e6:.2f} MB a prompt token), prefetched while the layer "
            "before runs; chat, generate, serve and score take the same --prefill-chunk.")
    if p.slots_3bit is not None and p.slots_3bit > p.slots:
        console.print(
            f"With 3-bit experts (`quantize --bits 3`, at some quality cost) the same budget holds {p.slots_3bit} of "
            f"{p.experts_total} ({100 * p.slots_3bit / p.experts_total:.0f}%)"
            + (": no PCIe traffic in a block's passes." if p.slots_3bit >= p.experts_total else "."))
    for w in p.warnings:
        console.print(f"[yellow]note:[/yellow] {w}")
    if p.fits:
        console.print(f"[green]fits[/green]: {p.slots} expert slots ({100 * p.resident_fraction:.0f}% of experts "
                      "resident).")
