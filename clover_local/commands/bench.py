"""`clover-local bench`: pass latency, tokens/s, cache hit rate and bytes moved against the roofline."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import prefill_chunk_option, prefill_chunk_rows


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
    tokens/s, hit rate, PCIe GB/s, bytes read per pass vs the roofline floor, per-component times, and the
    projected RTX 5070 Ti figure.

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
    folder, label = pack_or_synthetic(model, synthetic, "bench", progress)
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
    from rich.table import Table

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
                f"{pf['chunks']} chunks" + ("" if pf["warmup_ms"] is None else
                                             f"; a {pf['warmup_tokens']}-token warm-up first: {pf['warmup_ms']:.0f} ms")
                + f"); experts copied {pf['cache']['copied']} waited for, {pf['cache']['prefetched']} prefetched "
                f"({fmt_bytes(pf['cache']['bytes_h2d'])}); largest parts (ms): {top}")
    c.print(f"ms per pass: {r['ms_per_pass']:.2f} steady ({r['ms_per_call']:.2f} with its LM head), "
            f"{r['ms_per_pass_first']:.2f} first; "
            f"{r['tokens_per_s']:.1f} tok/s at {r['tokens_per_pass']} tokens/pass ({r['tokens_per_pass_source']})")
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
            f"{r['device_bandwidth_gbps']} GB/s ({r['bandwidth_source']}); measured/floor = {r['roofline_ratio']}")
    graph = r["projection_5070ti_graph_components"] is not None
    t = Table(title="profiled pass, by component" + (" (graph ms: GPU time in a graph replay)" if graph else ""),
              title_justify="left")
    cols = ["component", "calls", "eager ms"] + (["graph ms"] if graph else []) + [
        "bytes", "floor ms", "5070 Ti floor", "5070 Ti projected"]
    for col in cols:
        t.add_column(col, justify="left" if col == "component" else "right")
    for row in r["components"]:
        proj = row["projected_ms_5070ti_graph"] if graph else row["projected_ms_5070ti"]
        t.add_row(row["component"], str(row["calls"]), f"{row['ms']:.3f}",
                  *([f"{row['graph_ms']:.3f}"] if graph else []), fmt_bytes(row["bytes"]),
                  f"{row['floor_ms']:.3f}", f"{row['floor_ms_5070ti']:.3f}", f"{proj:.3f}")
    c.print(t)
    if graph:
        pg = r["projection_5070ti_graph_components"]
        c.print(f"RTX 5070 Ti projection from graph times: {pg['ms_per_pass']:.2f} ms per pass, "
                f"{pg['tokens_per_s']:.1f} tok/s ({pg['rule']})")
    pr = r["projection_5070ti"]
    c.print(f"RTX 5070 Ti projection: {pr['ms_per_pass']:.2f} ms per pass, {pr['tokens_per_s']:.1f} tok/s "
            f"({pr['rule']})")
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
