"""`clover-local bench`: pass latency, tokens/s, cache hit rate and bytes moved against the roofline."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import prefill_chunk_option, prefill_chunk_rows, revision_option

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@app.command(short_help=(
    "Measure preview passes at a device budget: ms per pass, tokens/s, hit rate, "
    "PCIe traffic, roofline ratio, projected RTX 5070 Ti figure."
))
def bench(
    model: Optional[str] = typer.Argument(None, help="Pack folder or Hub repo id (or use --synthetic)."),
    synthetic: Optional[str] = typer.Option(None, "--synthetic", help="full: a random INT4 pack with the real "
                                            "shapes (≈20 GB, written once to ~/.cache/clover-local); small: CI-sized; full3 / small3: "
                                            "the same with 3-bit experts (`quantize --bits 3`)."),
    vram_budget: Optional[str] = typer.Option(None, "--vram-budget", help="Device memory the runtime may use, e.g. "
                                              "16GB (binary units). Default: free memory minus a margin."),
    prefix: int = typer.Option(4096, "--prefix", help="Tokens of context before the block."),
    passes: int = typer.Option(8, "--passes", help="Preview passes over the block (the first one loads its experts)."),
    prefill_chunk: Optional[int] = prefill_chunk_option(None),
    revision: Optional[str] = revision_option(None),
    cpu_experts: str = typer.Option("off", "--cpu-experts", help="off | auto | misses: run missed experts on the CPU."),
    prefetch: bool = typer.Option(True, "--prefetch/--no-prefetch", help="Prefetch the next layer's experts."),
    optimistic: bool = typer.Option(True, "--optimistic/--no-optimistic",
                                    help="Run a block's later passes without a host sync per layer (rerun through "
                                         "the syncing path if an expert was missing); --no-optimistic to compare."),
    cuda_graphs: bool = typer.Option(True, "--cuda-graphs/--no-cuda-graphs",
                                     help="Replay a block's optimistic passes as one CUDA graph (GPU only); "
                                          "--no-cuda-graphs to compare with eager launches."),
    host_reads: Optional[bool] = typer.Option(None, "--host-reads/--no-host-reads",
                                              help="Let optimistic passes read a missing expert in place from "
                                                   "pinned host memory instead of rerunning (default: on a GPU, "
                                                   "if the load-time check passes); --no-host-reads to compare."),
    read_through: bool = typer.Option(True, "--read-through/--no-read-through",
                                      help="With host reads, copy each expert read from the host into a slot as "
                                           "it is read (one PCIe transfer instead of two: read, then copied "
                                           "after the pass); --no-read-through to compare."),
    resident_routing: bool = typer.Option(False, "--resident-routing",
                                          help="A block's later passes choose among the experts on the device "
                                               "only (an approximation: no copy waited for after its first pass; "
                                               "`chat --help` says more); compare with and without."),
    routing: str = typer.Option("model", "--routing", help="model | uniform | uniform-reveal: uniform sends "
                                "each block row to random experts (synthetic packs route to a few experts only; "
                                "uniform gives a real block's expert load); uniform-reveal also reroutes the 3 "
                                "rows revealed after each pass, as a real decode does."),
    device: str = typer.Option("auto", "--device", help="cpu or cuda (auto: GPU if present)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run preview passes over one 32-row block after a prefix, at a device budget, and report ms per pass,
    tokens/s, hit rate, PCIe GB/s, bytes read per pass vs the roofline floor and per-component times.

    On a CUDA GPU it also projects an RTX 5070 Ti's figure from those times (each kernel at the larger of its
    time and its bytes at 896 GB/s, plus PCIe at 50 GB/s); times taken on a CPU say nothing about a GPU, so
    none is projected from them. Synthetic packs are written once, with the real shapes, and cached.

    Examples:

      clover-local bench --synthetic small --prefix 256 --json

      clover-local bench --synthetic full --vram-budget 16GB --prefix 4096

      clover-local bench ./clover-int4 --vram-budget 14GB
    """
    from clover_local.commands._model_options import pack_or_synthetic
    from clover_local.loader import pick_device, pick_dtype
    from clover_local.runtime.bench import run_bench
    from clover_local.runtime.sizes import parse_size

    dev = pick_device(device)
    dtype = pick_dtype(None, dev)
    budget = parse_size(vram_budget, "--vram-budget") if vram_budget is not None else None
    progress = (lambda msg: None) if as_json else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    folder, label = pack_or_synthetic(model, synthetic, "bench", progress, revision)
    result = run_bench(folder, label=label, synthetic=synthetic is not None, vram_budget=budget, prefix=prefix,
                       passes=passes, device=dev, dtype=dtype, cpu_experts=cpu_experts, prefetch=prefetch,
                       optimistic=optimistic, cuda_graphs=cuda_graphs, routing=routing, host_reads=host_reads,
                       resident_routing=resident_routing, read_through=read_through,
                       prefill_chunk=prefill_chunk_rows(prefill_chunk), on_step=progress)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


def _print(r: dict) -> None:
    from rich.console import Console

    from clover_local.runtime.sizes import fmt_bytes

    c = Console(highlight=False)
    c.print(f"[b]{r['model']}[/b] on {r['device']} ({r['device_name']}), {r['dtype']}, budget "
            f"{fmt_bytes(r['vram_budget'] or 0)}: {r['slots']} of {r['experts_total']} expert slots; "
            f"prefix {r['prefix']}, {r['rows']}-row block, {r['passes']} passes ({r['date']})")
    kt = r.get("kernel_tuning")
    if kt is not None:
        c.print(f"kernel tiles: tuned for this GPU ({kt['entries']} calls, {kt['table']})" if kt["entries"] else
                "kernel tiles: the defaults" + ("" if not kt["enabled"] else
                                                " (`clover-local tune` picks them for this GPU, once)"))
    pf = r.get("prefill")
    if pf is not None:
        top = ", ".join(f"{x['component']} {x['ms']:.0f}" for x in pf["components"][:3])
        c.print(f"prefill: {r['prefix']} tokens in {r['prefill_ms']:.0f} ms ({pf['tokens_per_s']:.0f} tok/s, "
                f"{pf['chunks']} chunk{'s' * (pf['chunks'] != 1)}" + ("" if pf["warmup_ms"] is None else
                                             f"; a {pf['warmup_tokens']}-token warm-up first: {pf['warmup_ms']:.0f} ms")
                + f"); experts copied: {pf['cache']['copied']} waited for, {pf['cache']['prefetched']} prefetched "
                f"({fmt_bytes(pf['cache']['bytes_h2d'])}); largest parts (ms): {top}")
    c.print(f"ms per pass: {r['ms_per_pass']:.2f} steady ({r['ms_per_call']:.2f} with its LM head), "
            f"{r['ms_per_pass_first']:.2f} first; "
            f"{r['tokens_per_s']:.1f} tok/s at {r['tokens_per_pass']} tokens/pass, {r['tokens_per_pass_source']}"
            + ("" if r["tokens_per_pass_factor_rule"] is None else
               f" ({r['tokens_per_pass_factor_rule']} by the factor rule, --reveal-factor 1)"))
    c.print(f"hit rate {r['hit_rate']} (first pass {r['hit_rate_first_pass']}, {r['misses_first_pass']} misses); "
            f"PCIe {fmt_bytes(r['pcie_bytes'])} at {r['pcie_gbps']} GB/s")
    hr = r["host_reads"]
    c.print(f"host reads: {'on' if hr['on'] else 'off'}" + (f" ({hr['error']})" if hr["error"] else "")
            + (f"; {r['host_reads_per_steady_pass']} misses read in place per steady pass, {hr['first_pass']} in "
               "the first" if hr["on"] else f"; {r['repairs_per_steady_pass']} repair replays per steady pass")
            + (f"; read through into slots: {hr['read_through_per_steady_pass']} per steady pass, "
               f"{hr['read_through_first_pass']} in the first" if hr.get("read_through_on") else ""))
    cx = r.get("cpu_experts")
    if cx is not None and cx["runs"]:
        c.print(f"CPU experts: {cx['runs']} runs ({cx['rows']} rows) in {1e3 * cx['seconds']:.1f} ms, "
                f"{cx['conversions']} converted, {cx['kept']} kept ({fmt_bytes(cx['kept_bytes'])})"
                + ("" if cx["kernel"] else "; the dequantizing reference (shapes torch's int4 kernel cannot take)"))
    if r["resident_routing"]:
        c.print(f"resident routing: {r['substituted_per_steady_pass']} routing choices substituted per steady pass")
    c.print(f"device memory read per pass {fmt_bytes(r['device_bytes_per_pass'])}: floor {r['roofline_ms']:.3f} ms at "
            f"{r['device_bandwidth_gbps']} GB/s, {r['bandwidth_source']}; the steady pass takes {r['roofline_ratio']}× "
            "that floor")
    c.print(_component_table(r, c))
    pr = r["projection_5070ti"]
    if _gpu_timed(r):
        pg = r["projection_5070ti_graph_components"]
        if pg is not None:
            c.print(f"RTX 5070 Ti projection from graph times: {pg['ms_per_pass']:.2f} ms per pass, "
                    f"{pg['tokens_per_s']:.1f} tok/s ({pg['rule']})")
        c.print(f"RTX 5070 Ti projection: {pr['ms_per_pass']:.2f} ms per pass, {pr['tokens_per_s']:.1f} tok/s "
                f"({pr['rule']})")
    else:
        # the rule takes the larger of the measured time and the bytes at 896 GB/s: from CPU times that is the
        # CPU's time, not a GPU's, so no figure is printed (--json keeps it, beside "device")
        c.print(f"RTX 5070 Ti projection: needs GPU timings (this run timed the {r['device'].upper()})")
    g, pg = r["graphs"], r["projection_5070ti_graphed"]
    if g["steady_passes_graphed"]:
        c.print(f"CUDA graphs: {g['steady_passes_graphed']} steady passes replayed, {g['ms_per_pass_graphed']:.2f} ms "
                f"each; RTX 5070 Ti projection {pg['ms_per_pass']:.2f} ms, {pg['tokens_per_s']:.1f} tok/s "
                f"({pg['rule']})")
    elif g["error"]:
        c.print(f"CUDA graphs: off after a capture error: {g['error']}")
    nb = r["next_block"]
    c.print(f"next block: first pass {nb['first_ms']:.1f} ms ({nb['misses_first_pass']} misses), "
            f"{nb['captured']} graph captures, steady {nb['steady_ms']:.2f} ms, commit {nb['commit_ms']:.1f} ms: "
            f"{nb['block_ms']:.0f} ms per {r['rows']}-token block at {r['tokens_per_pass']} tokens/pass, "
            f"{nb['tokens_per_s']:.1f} tok/s")
    mg = r["merged"]
    c.print(f"merged commit + first preview: {mg['ms']:.1f} ms{' (replayed)' if mg['replayed'] else ''} vs "
            f"{mg['separate_ms']:.1f} ms apart: {mg['block_ms']:.0f} ms per block, {mg['tokens_per_s']:.1f} tok/s")
    m = r["memory"]
    c.print(f"memory: placed {fmt_bytes(m['placed']['total'])} vs plan {fmt_bytes(m['plan_predicted'])} "
            f"({100 * m['plan_error']:+.2f}%)" + (f"; peak allocated {fmt_bytes(m['peak_allocated'])} vs plan peak "
                                                  f"{fmt_bytes(m['plan_peak'])}" if m["peak_allocated"] else ""))


def _gpu_timed(r: dict) -> bool:
    """Whether the report's times come from a CUDA device: only those say anything about another GPU."""
    return r.get("device") == "cuda"


# columns the component table gives up first when the terminal is narrow, least telling first: this machine's
# floor (the roofline line above has the pass's), the bytes (the floors are made from them), the call count
_DROPPABLE = ("floor ms", "bytes", "calls")


def _component_table(r: dict, console: "Console") -> "Table":
    """The profiled pass by component, readable at 80 columns: names never wrap, headers are two short lines, and
    the least telling columns go (in `_DROPPABLE`'s order) while the table is wider than the console. The
    5070 Ti projection column needs GPU times (see `_gpu_timed`); the floors, from bytes alone, stay."""
    from rich.measure import Measurement
    from rich.table import Table

    from clover_local.runtime.sizes import fmt_bytes

    graph = r["projection_5070ti_graph_components"] is not None
    gpu = _gpu_timed(r)
    cols: dict[str, list[str]] = {
        "component": [row["component"] for row in r["components"]],
        "calls": [str(row["calls"]) for row in r["components"]],
        "ms": [f"{row['ms']:.3f}" for row in r["components"]],
    }
    if graph:
        cols["graph ms"] = [f"{row['graph_ms']:.3f}" for row in r["components"]]
    cols["bytes"] = [fmt_bytes(row["bytes"]) for row in r["components"]]
    cols["floor ms"] = [f"{row['floor_ms']:.3f}" for row in r["components"]]
    cols["5070 Ti floor"] = [f"{row['floor_ms_5070ti']:.3f}" for row in r["components"]]
    if gpu:
        key = "projected_ms_5070ti_graph" if graph else "projected_ms_5070ti"
        cols["5070 Ti proj."] = [f"{row[key]:.3f}" for row in r["components"]]
    headers = {"ms": "eager\nms" if graph else "ms", "graph ms": "graph\nms", "floor ms": "floor\nms",
               "5070 Ti floor": "5070 Ti\nfloor", "5070 Ti proj.": "5070 Ti\nproj."}
    caption = ("graph ms: GPU time in a graph replay\n" if graph else "") + \
        "floors: the bytes at this device's bandwidth and at 896 GB/s"

    def build(names: list[str]) -> "Table":
        t = Table(title="profiled pass, by component", title_justify="left", caption=caption,
                  caption_justify="left")
        for name in names:
            t.add_column(headers.get(name, name), justify="left" if name == "component" else "right",
                         no_wrap=name == "component")
        for i in range(len(r["components"])):
            t.add_row(*(cols[name][i] for name in names))
        return t

    unbounded = console.options.update_width(1 << 20)  # the width the table wants, not what the console allows
    names = list(cols)
    table = build(names)
    for drop in _DROPPABLE:
        if Measurement.get(console, unbounded, table).maximum <= console.width:
            break
        names.remove(drop)
        table = build(names)
    return table
