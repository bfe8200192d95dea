"""`clover-local tune`: time the W4A16 / W8A16 kernels' tiles on this GPU, on the calls a pack's preview pass
makes, and write the winners to this GPU's tuning table (`kernels/tuning.py`), which every later run reads.

Flow: load the pack as `bench` does (eager: no CUDA graphs, every layer synced), run one preview pass of a
masked block to load its experts, record the next one's kernel calls (`tuning.Recorder`: each signature's
tensors once, and how often it ran), then search each signature's tiles (`tuning.tune_call`) and merge the
results into the table. The report says what each call costs per pass before and after.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any, Callable

import torch

from clover_local.errors import CloverError
from clover_local.runtime.kernels import tuning
from clover_local.runtime.load import RuntimeOptions, load_packed_model
from clover_local.runtime.sizes import MIB, default_budget

# device memory left beside the runtime while timing (CUDA graphs of 10 calls, a 256 MiB L2 flush buffer)
TIMING_HEADROOM = 1536 * MIB


def record_preview_calls(model, block_size: int, device: torch.device, uniform: bool = False) -> tuning.Recorder:
    """The kernel calls of one steady preview pass over a masked block (after a first pass that loads its
    experts), with the runtime's own tensors: its packed weights and expert-cache slots. uniform: the block's
    rows routed to random experts (`bench.UniformRouting`: a synthetic pack's router sends a block to ~15
    experts a layer, a real one to ~160, and the MoE's best tiles depend on how many)."""
    from clover_local.runtime.bench import UniformRouting

    cfg = model.config
    mask = cfg.diffusion.mask_token_id if cfg.diffusion.mask_token_id is not None else cfg.vocab_size - 1
    block = torch.full((1, block_size), mask, dtype=torch.long, device=device)
    rerouted = UniformRouting(model, block_size) if uniform else None
    try:
        with torch.inference_mode():
            cache = model.new_cache()
            model(block, cache, preview=True)
            with tuning.Recorder(rows=block_size) as rec:
                model(block, cache, preview=True)
    finally:
        if rerouted is not None:
            rerouted.close()
    return rec


def check_device(device: torch.device) -> None:
    """Refuse (one line) where the Triton kernels do not run: before anything is loaded or written (`tune
    --synthetic full` writes a ≈ 20 GB pack first)."""
    from clover_local.runtime.kernels import triton_on

    if not triton_on(device):
        raise CloverError("tune times the Triton kernels' tiles, which run on a CUDA GPU; on this device the "
                          "PyTorch reference runs (no tiles to tune); run it on the machine that will chat")


def run_tune(folder: Path, *, label: str, device: torch.device, dtype: torch.dtype, vram_budget: int | None,
             quick: bool = False, write: bool = True, uniform: bool = False, timer: Callable | None = None,
             on_step: Callable[[str], None] = lambda msg: None,
             on_trial: Callable[[int, int, int, int, str], None] = lambda *a: None) -> dict[str, Any]:
    """Tune the calls of folder's preview pass on device; returns the report (and writes the table unless
    write=False). uniform: route the recorded pass uniformly (synthetic packs, see `record_preview_calls`).
    on_trial(call, calls, trial, trials, key) reports progress; timer(fn) → µs replaces the GPU timer (tests)."""
    from clover_local.config import load_config

    check_device(device)
    bs = load_config(folder).diffusion.block_size
    if vram_budget is None and device.type == "cuda":  # room beside the runtime for the timing's graphs and flush
        vram_budget = default_budget(device, margin=TIMING_HEADROOM)
    on_step("loading")
    options = RuntimeOptions(vram_budget=vram_budget, context=4 * bs, optimistic=False, cuda_graphs=False)
    model = load_packed_model(folder, device, dtype, options)
    on_step("recording a preview pass")
    rec = record_preview_calls(model, bs, device, uniform)
    if not rec.calls:
        raise CloverError("the preview pass made no Triton kernel call to tune (CLOVER_DISABLE_TRITON set?)")
    timer = timer or tuning.gpu_timer(device)
    identity = tuning.device_identity(device)
    path = tuning.table_path(identity)
    table = (tuning.read_table(path, identity)[0] or tuning.TuningTable(dict(identity))) if write else None
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results: list[tuning.TuneResult] = []
    calls = list(rec.calls.values())
    try:
        with torch.inference_mode():  # the recorded tensors were made in inference mode
            _tune_all(calls, quick, timer, table, path, date, results, on_step, on_trial)
    finally:
        tuning.reset_active()
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return _report(results, label, identity, path, quick, write, uniform, date)


def _tune_all(calls: list[tuning.RecordedCall], quick: bool, timer: Callable, table: tuning.TuningTable | None,
              path: Path, date: str, results: list[tuning.TuneResult], on_step, on_trial) -> None:
    """Each recorded call's search, appended to results and saved into table (when writing) call by call, so
    an interruption keeps what was finished."""
    for i, call in enumerate(calls):
        key = call.sig.key()
        on_step(f"tuning {key} ({i + 1}/{len(calls)})")
        try:
            r = tuning.tune_call(call, tuning.stages_for(call, quick), timer,
                                 lambda j, n, i=i, key=key: on_trial(i, len(calls), j, n, key))
        except torch.cuda.OutOfMemoryError:
            kept = f"; the {len(results)} calls tuned before it are in {path}" if table and results else ""
            raise CloverError(f"the GPU ran out of memory timing {key}{kept}: lower --vram-budget (the runtime's "
                              "share) and run tune again") from None
        results.append(r)
        if table is not None and not math.isnan(r.default_us):
            table.entries[key] = r.entry()
            table.date = date
            table.save(path)


def _diff(best: dict, default: dict) -> dict:
    return {k: v for k, v in best.items() if default.get(k) != v}


def _report(results: list[tuning.TuneResult], label: str, identity: dict, path: Path, quick: bool,
            write: bool, uniform: bool, date: str) -> dict[str, Any]:
    rows = []
    for r in results:
        finite = not math.isnan(r.default_us)
        rows.append({
            "key": r.sig.key(), "kind": r.sig.kind, "k": r.sig.k, "n": r.sig.n, "bits": r.sig.bits,
            "calls_per_pass": r.calls,
            "default_us": round(r.default_us, 3) if finite else None,
            "tuned_us": round(r.best_us, 3) if finite else None,
            "changed": _diff(r.best, r.default), "tried": len(r.trials),
            "rejected": sum(t.us is None for t in r.trials), "note": r.note,
        })
    ok = [r for r in results if not math.isnan(r.default_us)]
    before = sum(r.calls * r.default_us for r in ok)
    after = sum(r.calls * r.best_us for r in ok)
    return {
        "model": label, **identity, "quick": quick, "routing": "uniform" if uniform else "model",
        "date": date,
        "table": str(path), "written": write, "calls": rows,
        "kernel_us_per_pass_default": round(before, 1), "kernel_us_per_pass_tuned": round(after, 1),
        "saved_us_per_pass": round(before - after, 1),
    }
