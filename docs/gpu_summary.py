"""The figures a GPU session's outputs hold, side by side, as plain text: what `docs/gpu_session.sh` wrote to $OUT.

    python docs/gpu_summary.py OUT_DIR

Why: device time is 15 minutes a session and its JSON is long; the before/after pairs that decide a default (the
MoE's folded vs unfolded form and its dots either way round, the dense kernels' row orders, fused vs unfused, each bench stage's steady pass)
are scattered over several files. Reads every `*gpu_check.json`, `*bench*.json`, `tune.json` and `moe_anatomy.json`
below OUT_DIR
(names as gpu_session.sh writes them, or with a prefix, as in docs/gpu-runs/); a key a file lacks is left out, not
guessed.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def kernels_lines(k: dict) -> list[str]:
    """The kernels stage: ok, the MoE forms' ms and errors, each dense linear's forms."""
    out = [f"  ok {k.get('ok')}"]
    moe = [(tag, k.get(f"moe{tag}_ms_32rows"), k.get(f"moe{tag}_rel_err"), k.get(f"moe{tag}_graph_us_32rows"))
           for tag in ("", "_unswapped", "_swapped", "_unfolded", "_unpacked", "_maxnreg128")]
    out += [f"  MoE 32 rows{tag or ' (default)'}: {_fmt(ms)} ms, rel err {_fmt(err)}"
            + (f", graph {_fmt(g)} µs" if g is not None else "") for tag, ms, err, g in moe if ms is not None]
    for name, v in (k.get("linear") or {}).items():
        forms = [(f, v.get(f"{f}_ms" if f else "ms"), v.get(f"{f}_rel_err" if f else "rel_err"),
                  v.get(f"{f}_graph_us" if f else "graph_us")) for f in ("", "repacked", "unpacked")]
        out.append(f"  {name}: " + ", ".join(f"{f or 'default'} {_fmt(ms)} ms" + (f" / graph {_fmt(g)} µs"
                                                                                  if g is not None else "")
                                              + f" (err {_fmt(e)})" for f, ms, e, g in forms if ms is not None))
    ds = k.get("dense_shapes")
    if isinstance(ds, dict):  # every dense shape of the model at the rows a pass has: correctness only
        shapes = ds.get("shapes") or {}
        bad = [f"{name} (err {_fmt(v.get('rel_err'))}, finite {v.get('finite')})" for name, v in shapes.items()
               if not (v.get("finite") and v.get("rel_err", 1.0) < 2e-2)]
        out.append(f"  dense shapes: ok {ds.get('ok')}, {len(shapes)} calls"
                   + (f", failing: {'; '.join(bad)}" if bad else "")
                   + (f", error {str(ds['error'])[-200:]!r}" if ds.get("error") else ""))
        timed = [f"{name} {_fmt(v['ms'])}" + (f" / {_fmt(v['graph_us'])} µs ({_fmt(v.get('gbps'))} GB/s)"
                                              if v.get("graph_us") is not None else "")
                 for name, v in shapes.items() if "ms" in v]
        if timed:
            out.append("    timed (ms eager / µs graph): " + "; ".join(timed))
    hr = k.get("host_reads")
    if isinstance(hr, dict):  # the MoE reading experts in place from pinned host memory
        out.append(f"  MoE host reads: ok {hr.get('ok')}, cold ms resident {_fmt(hr.get('resident_ms_cold'))} / 8 on "
                   f"host {_fmt(hr.get('8_on_host_ms_cold'))} / all on host {_fmt(hr.get('all_on_host_ms_cold'))} "
                   f"({_fmt(hr.get('all_on_host_gbps'))} GB/s; copies {_fmt(k.get('h2d_gbps_64_experts'))} GB/s), "
                   f"{_fmt(hr.get('ms_per_host_expert'))} ms per host expert; read through into slots: "
                   f"equal {hr.get('read_through_equal')}, slabs {hr.get('read_through_slabs_equal')}, cold "
                   f"{_fmt(hr.get('read_through_ms_cold'))} ms"
                   + (f", error {str(hr['error'])[-200:]!r}" if hr.get("error") else ""))
    m3 = k.get("moe3")
    if isinstance(m3, dict):  # 3-bit experts: the unpacking form on straddled runs, and the planes layout
        out.append(f"  MoE 3-bit 32 rows: ok {m3.get('ok')}, {_fmt(m3.get('ms_32rows'))} ms, {_fmt(m3.get('gbps'))} "
                   f"GB/s, rel err {_fmt(m3.get('rel_err'))}; planes layout {_fmt(m3.get('planes_ms_32rows'))} ms, "
                   f"{_fmt(m3.get('planes_gbps'))} GB/s, rel err {_fmt(m3.get('planes_rel_err'))}"
                   + (f", error {str(m3['error'])[-200:]!r}" if m3.get("error") else ""))
    for part in ("gdn_preview", "gdn_causal", "gdn_prefill", "gdn_preview_synthetic_decays",
                 "gdn_causal_synthetic_decays", "gdn_prefill_synthetic_decays", "preview_attention", "layer_ops"):
        if isinstance(k.get(part), dict):
            v = k[part]
            times = {kk: vv for kk, vv in v.items() if kk.endswith(("_us", "_ms")) and not isinstance(vv, dict)}
            rows = f" ({v['rows']} rows, against {v['torch_path']})" if "torch_path" in v else ""
            out.append(f"  {part}: ok {v.get('ok')}{rows}" + "".join(f", {kk} {_fmt(vv)}" for kk, vv in times.items()))
            if isinstance(v.get("slot_mapping"), dict):  # the read-through assignment over a pass, real counts
                out.append("    slot mapping: " + ", ".join(f"{kk} {vv}" for kk, vv in v["slot_mapping"].items()))
    return out


def model_lines(m: dict) -> list[str]:
    out = [f"  ok {m.get('ok')}"]
    for key in ("logit_rel_err", "top1_agreement"):
        if key in m:
            out.append(f"  {key} {m[key]}")
    for key, v in m.items():
        if isinstance(v, dict) and "ok" in v:
            out.append(f"  {key}: ok {v['ok']}" + (f", error {str(v['error'])[-200:]!r}" if v.get("error") else ""))
    mv = m.get("merged_vs_separate")
    if isinstance(mv, dict) and isinstance(mv.get("separate"), dict):  # a commit + first preview, apart vs merged
        modes = [k for k in ("separate", "merged_eager", "merged_graphed", "merged_again")
                 if isinstance(mv.get(k), dict)]
        errs = [v for k, v in mv.items() if k.endswith("_rel_err") and not k.endswith("_vs_eager_rel_err")]
        out.append("  merged vs separate: " + ", ".join(f"{k} {_fmt(mv[k].get('ms'))} ms" for k in modes)
                   + (f"; largest rel err vs separate {_fmt(max(errs))}" if errs else ""))
    return out


def component_lines(comps: list[dict], top: int = 14) -> list[str]:
    """The profiled pass's parts, largest first by GPU time where a graph-profiled pass gave it (else eager, mostly
    launch cost): the routed experts split by launch (align, gate/up, down, sum: `runtime/segments.py`)."""
    key = "graph_ms" if any("graph_ms" in c for c in comps) else "ms"
    rows = sorted(comps, key=lambda c: -(c.get(key) or 0))[:top]
    return [f"  {c.get('component')}: {_fmt(c.get(key))} ms{' (graph)' if key == 'graph_ms' else ''} over "
            f"{_fmt(c.get('calls'))} calls, eager {_fmt(c.get('ms'))} ms, {_fmt(c.get('bytes'))} B, floor "
            f"{_fmt(c.get('floor_ms'))} ms" for c in rows]


def bench_lines(b: dict) -> list[str]:
    """A bench run: steady pass (median of passes 3 on: the first loads the block, the second may capture),
    first pass, tok/s, graphs, memory, the largest components, the second block and commits where present."""
    each = b.get("ms_per_pass_each") or []
    steady = statistics.median(each[2:]) if len(each) > 2 else None
    out = [f"  routing {b.get('routing')}, steady pass {_fmt(round(steady, 3)) if steady else '?'} ms "
           f"(passes {', '.join(_fmt(round(x, 2)) for x in each)}; with LM head {_fmt(b.get('ms_per_call'))} mean), "
           f"first {_fmt(b.get('ms_per_pass_first'))} ms, "
           f"{_fmt(b.get('tokens_per_s'))} tok/s at {_fmt(b.get('tokens_per_pass'))} tokens/pass, misses/repairs "
           f"per steady pass {_fmt(b.get('misses_per_steady_pass'))}/{_fmt(b.get('repairs_per_steady_pass'))}"]
    hr = b.get("host_reads")
    if isinstance(hr, dict):
        out.append(f"  host reads {'on' if hr.get('on') else 'off'}" + (f" ({hr['error']})" if hr.get("error") else "")
                   + f", read in place per steady pass {_fmt(b.get('host_reads_per_steady_pass'))}, first pass "
                   f"{_fmt(hr.get('first_pass'))}; read through {'on' if hr.get('read_through_on') else 'off'}: "
                   f"{_fmt(hr.get('read_through_per_steady_pass'))} per steady pass, "
                   f"{_fmt(hr.get('read_through_first_pass'))} in the first; PCIe {_fmt(b.get('pcie_bytes'))} B")
    if b.get("resident_routing"):
        out.append(f"  resident routing: {_fmt(b.get('substituted_per_steady_pass'))} choices substituted per "
                   "steady pass")
    if isinstance(b.get("kernel_tuning"), dict):
        out.append(f"  kernel tuning: {b['kernel_tuning']}")
    if isinstance(b.get("kernel_forms"), dict):
        out.append(f"  kernel forms: {b['kernel_forms']}")
    g = b.get("graphs") or {}
    if g:
        out.append(f"  graphs: captures {g.get('captures')}, replays {g.get('replays')}, error {g.get('error')}")
    mem = b.get("memory") or {}
    if mem:
        out.append(f"  memory: peak {mem.get('peak_allocated')} B of budget {b.get('vram_budget')} B, "
                   f"plan error {mem.get('plan_error')}; host experts {mem.get('host_experts')} B, pinned "
                   f"{mem.get('host_pinned_bytes')} B predicted, {mem.get('host_pinned_measured')} B measured")
    out += component_lines(b.get("components") or [])
    for key in ("projection_5070ti_graphed", "projection_5070ti"):
        if isinstance(b.get(key), dict):
            out.append(f"  {key}: {_fmt(b[key].get('ms_per_pass'))} ms, {_fmt(b[key].get('tokens_per_s'))} tok/s")
            break
    nb = b.get("next_block")
    if isinstance(nb, dict):
        out.append("  next block: " + ", ".join(f"{k} {_fmt(v)}" for k, v in nb.items() if not isinstance(v, list)))
    commits = b.get("commits")
    if isinstance(commits, dict):
        out.append("  commits: " + json.dumps(commits)[:300])
    mg = b.get("merged")
    if isinstance(mg, dict):
        out.append("  merged: " + ", ".join(f"{k} {_fmt(v)}" for k, v in mg.items() if k not in ("each", "rule"))
                   + "; each " + json.dumps(mg.get("each"))[:300])
    pf = b.get("prefill")
    if isinstance(pf, dict):
        cache = pf.get("cache") or {}
        top = sorted(pf.get("components") or [], key=lambda c: -c.get("ms", 0))[:4]
        out.append(f"  prefill: {_fmt(b.get('prefill_ms'))} ms, {_fmt(pf.get('tokens_per_s'))} tok/s "
                   f"({_fmt(pf.get('passes'))} passes of up to {_fmt(pf.get('span'))} rows, {_fmt(pf.get('chunks'))} "
                   f"chunks), warm-up "
                   f"{_fmt(pf.get('warmup_ms'))} ms; copies waited {cache.get('copied')}, prefetched "
                   f"{cache.get('prefetched')}; " + ", ".join(f"{c.get('component')} {_fmt(c.get('ms'))} ms"
                                                            for c in top))
    return out


def tune_lines(t: dict) -> list[str]:
    """A `clover-local tune --json` report: kernel µs per preview pass with the default and the tuned tiles, and
    each call's change."""
    out = [f"  kernel µs per pass: default {_fmt(t.get('kernel_us_per_pass_default'))}, tuned "
           f"{_fmt(t.get('kernel_us_per_pass_tuned'))} (saves {_fmt(t.get('saved_us_per_pass'))}), routing "
           f"{t.get('routing')}, quick {t.get('quick')}"]
    for c in t.get("calls") or []:
        out.append(f"  {c.get('key')} ×{c.get('calls_per_pass')}: {_fmt(c.get('default_us'))} → "
                   f"{_fmt(c.get('tuned_us'))} µs {c.get('changed') or c.get('note') or ''} "
                   f"({c.get('tried')} tried, {c.get('rejected')} rejected)")
    return out


def decode_lines(d: dict) -> list[str]:
    """gpu_check's decode stage: its checks, and per decode the loop's ms per steady pass beside the records'."""
    if "error" in d:
        return [f"  FAILED: {d['error'][-600:]}"]
    out = [f"  ok {d.get('ok')}; checks {d.get('checks')}; host reads {d.get('host_reads')}; peak "
           f"{_fmt(d.get('peak_allocated'))} of {_fmt(d.get('budget'))} B; load {_fmt(d.get('load_s'))} s"]
    for name in ("first_greedy", "greedy", "sampled", "eager"):
        r = d.get(name)
        if isinstance(r, dict):
            out.append(f"  {name}: loop {_fmt(r.get('loop_ms_median'))} ms vs record {_fmt(r.get('record_ms_median'))}"
                       f" ms per steady pass ({_fmt(r.get('steady_passes'))}), {_fmt(r.get('passes'))} passes in "
                       f"{_fmt(r.get('seconds'))} s (prefill {_fmt(r.get('prefill_s'))} s)")
    g = d.get("graphs")
    if isinstance(g, dict):
        out.append("  graphs " + ", ".join(f"{k}: {v.get('captures')} captures, {v.get('replays')} replays"
                                            + (f", error {v['error']}" if v.get("error") else "")
                                            for k, v in g.items() if isinstance(v, dict)))
    return out


def finite_lines(f: dict) -> list[str]:
    """gpu_check's finite stage: per variant and pass, non-finite outputs and the first module that made one."""
    out = [f"  ok {f.get('ok')}" + (f", finite variants {f['finite_variants']}" if "finite_variants" in f else "")]
    if f.get("error"):
        out.append("  FAILED: " + str(f["error"])[-600:])
    for variant, passes in f.items():
        if not isinstance(passes, dict):
            continue
        for name, r in passes.items():
            if isinstance(r, dict):
                out.append(f"  {variant} {name}: {r.get('non_finite')}/{r.get('outputs')} non-finite, first "
                           f"{r.get('first_non_finite')}, layer max {r.get('layer_max')}"
                           + (f", {r['error']}" if r.get("error") else ""))
    return out


def census_lines(c: dict) -> list[str]:
    """`compile_check --sass --json`: the triton that compiled, failures, and the routed experts' K-loop
    instructions per weight (registers) in each form, per arch."""
    res = [r for r in c.get("results") or [] if isinstance(r, dict)]
    out = [f"  triton {c.get('triton')}, ok {c.get('ok')}, {len(res)} compiles"]
    out += [f"  FAILED {r.get('arch')} {r.get('kernel')} {r.get('case')}: {str(r.get('error'))[-200:]}" for r in res
            if not r.get("ok")]
    for r in res:
        if r.get("kernel") == "_moe_kernel" and r.get("per_weight") is not None and "4-bit H2048 I512" in r["case"] \
                and "rows" not in r["case"]:
            out.append(f"  {r['arch']} {r['case']}: {_fmt(r['per_weight'])} per weight ({r.get('reg')} registers)")
    return out


def anatomy_lines(a: dict) -> list[str]:
    """`moe_anatomy --out`: the call's launches (µs, GPU time in a graph), its GB/s over the distinct experts'
    bytes, each read probe's GB/s (the pass's programs' code words; the first per pass at the pass's own tiles),
    the flat read's (the access pattern's ceiling against the device's), and the call with one knob turned."""
    sh = a.get("shape") or {}
    out = [f"  {sh.get('distinct')} distinct experts of {sh.get('experts')} ({sh.get('runs')} runs), "
           f"{sh.get('rows')} rows, ok {a.get('ok')}, finite {a.get('finite')}",
           f"  call {_fmt(a.get('call_us'))} µs ({_fmt(a.get('call_gbps'))} GB/s); launches: "
           + ", ".join(f"{k} {_fmt(v)}" for k, v in (a.get("segments_us") or {}).items())]
    for p in a.get("tiles") or []:
        what = (f"{_fmt(p.get('us'))} µs, {_fmt(p.get('gbps'))} GB/s" if "error" not in p
                else f"FAILED {str(p['error'])[:150]}")
        out.append(f"  read {p.get('pass')} block_n {p.get('block_n')} split {p.get('split')} warps "
                   f"{p.get('num_warps')}: {what}{'' if p.get('xor_ok', True) else ' (WRONG WORDS)'}")
    fl = a.get("flat") or {}
    out.append(f"  flat read of the slabs: {_fmt(fl.get('us'))} µs, {_fmt(fl.get('gbps'))} GB/s")
    for name, v in (a.get("configs") or {}).items():  # the call with one tile knob turned
        out.append(f"  {name}: " + (f"FAILED {str(v['error'])[:150]}" if "error" in v else
                                     f"call {_fmt(v.get('call'))} µs, gate/up {_fmt(v.get('gate/up'))}, down "
                                     f"{_fmt(v.get('down'))} (rel err vs default {_fmt(v.get('rel_err_vs_default'))})"))
    return out


def summary(folder: Path) -> str:
    lines: list[str] = []
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            lines += [f"{path.relative_to(folder)}: unreadable ({exc})"]
            continue
        if not isinstance(data, dict):
            continue
        rel = path.relative_to(folder)
        if "kernels" in data and isinstance(data["kernels"], dict):
            lines += [f"{rel} (kernels, {data.get('device')})", *kernels_lines(data["kernels"])]
        elif "model" in data and isinstance(data["model"], dict):
            lines += [f"{rel} (model, {data.get('device')})", *model_lines(data["model"])]
        elif "finite" in data and isinstance(data["finite"], dict):
            lines += [f"{rel} (finite, {data.get('device')})", *finite_lines(data["finite"])]
        elif "decode" in data and isinstance(data["decode"], dict):
            lines += [f"{rel} (decode, {data.get('device')})", *decode_lines(data["decode"])]
        elif "saved_us_per_pass" in data and isinstance(data.get("calls"), list):
            lines += [f"{rel} (tune, {data.get('device')}, {data.get('date')})", *tune_lines(data)]
        elif isinstance(data.get("results"), list) and "triton" in data:
            lines += [f"{rel} (compile_check)", *census_lines(data)]
        elif isinstance(data.get("tiles"), list) and "segments_us" in data:
            lines += [f"{rel} (MoE anatomy, {data.get('device')})", *anatomy_lines(data)]
        elif "ms_per_pass_each" in data:
            lines += [f"{rel} (bench, {data.get('device_name')}, {data.get('date')})", *bench_lines(data)]
    return "\n".join(lines) if lines else f"no gpu_check or bench JSON below {folder}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python docs/gpu_summary.py OUT_DIR  (the folder docs/gpu_session.sh wrote)", file=sys.stderr)
        return 2
    print(summary(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
