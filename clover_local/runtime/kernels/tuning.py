"""Kernel tiles tuned on this GPU: the table `clover-local tune` writes and the kernels' config functions read.

Why: the tile heuristics (`w4a16.linear_config`, `moe_config`) were picked on one H200, where the best tiles of
a small sweep differed from them by ≤ 5 µs per call. The card this tool is for (RTX 5070 Ti: 70 SMs, 896 GB/s,
≈ 100 KB of shared memory per SM) was never measured, and tile choice is where GPUs differ most. So the tool
times the candidates on the user's own GPU, on the very calls a pack's passes make (`Recorder`), and keeps the
fastest per call signature, the way vLLM ships a tuned fused-MoE table per device but made where it runs.

The table is one JSON file per GPU model and Triton version under the cache root (`table_path`):

    {"format": 1, "device": "NVIDIA H200", "capability": "9.0", "triton": "3.6.0", "date": "...",
     "entries": {"linear/r32/k2048/n8192/b4/g128/t128": {"config": {...}, "us": 12.1, "default_us": 13.9}}}

A table made for another GPU or Triton version is ignored (one line on stderr); `CLOVER_TUNING=off` ignores it
too (for before/after runs), `CLOVER_TUNING_FILE` names another file. An entry only changes tiles (block sizes,
split-K, warps, stages, tile form): every candidate is checked against the heuristic's output before it is
timed, so a table can make a call slower or faster, never wrong.

Nothing here imports Triton: the table and the search are plain Python over callables (the timer and the
error measure are `bench_kernels`').
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from clover_local.errors import CloverError

from .bench_kernels import _rel_err, _time_us

FORMAT = 1
KINDS = ("linear", "moe_up", "moe_down", "gdn_preview")
# a candidate is kept only when it beats the heuristic by this much: GPU timings of a 15 µs call move by a few %
MIN_GAIN = 0.03
# a candidate's output against the heuristic's, relative to the output's largest magnitude: tiles change the
# order of fp32 sums and where bf16 rounding happens (≈ 1e-3), a wrong tile changes everything (≈ 1)
REL_TOL = 2e-2


@dataclass(frozen=True)
class Signature:
    """What a tuned config is chosen for: the kernel, the rows rounded up to a power of two, and the weight's
    shape and format. Rows are bucketed because the tiles depend on them only through BLOCK_M and the grid."""

    kind: str  # "linear" | "moe_up" | "moe_down" | "gdn_preview" (k, n: the head dims; topk: the value heads)
    rows: int
    k: int
    n: int
    bits: int
    group: int
    k_tile: int = 0  # linear: the row repack tile (`dense_k_tile`); BLOCK_K is fixed to it
    topk: int = 0  # MoE: experts per row

    def key(self) -> str:
        extra = f"/t{self.k_tile}" if self.kind == "linear" else f"/top{self.topk}"
        return f"{self.kind}/r{self.rows}/k{self.k}/n{self.n}/b{self.bits}/g{self.group}{extra}"


def rows_bucket(m: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(m, 1))))


def device_identity(device: torch.device) -> dict[str, str]:
    """What a table is valid for: the GPU model and compute capability, and the Triton version (a new Triton
    compiles the same tiles differently). On a CPU (the interpreter, tests) the device is "cpu"."""
    try:
        import triton

        tv = triton.__version__
    except Exception:  # pragma: no cover - no triton: nothing reads the table then
        tv = "none"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return {"device": torch.cuda.get_device_name(device), "capability": f"{major}.{minor}", "triton": tv}
    return {"device": "cpu", "capability": "interpreter", "triton": tv}


def table_path(identity: dict[str, str]) -> Path:
    """$CLOVER_TUNING_FILE, else <cache root>/tuning/<gpu>-sm<cap>-triton<version>.json."""
    if os.environ.get("CLOVER_TUNING_FILE"):
        return Path(os.environ["CLOVER_TUNING_FILE"]).expanduser()
    from clover_local.paths import cache_root

    slug = "".join(c if c.isalnum() else "-" for c in identity["device"].lower()).strip("-")
    cap = identity["capability"].replace(".", "")
    return cache_root() / "tuning" / f"{slug}-sm{cap}-triton{identity['triton']}.json"


def tuning_enabled() -> bool:
    return os.environ.get("CLOVER_TUNING", "on").lower() not in ("off", "0", "no")


@dataclass
class TuningTable:
    identity: dict[str, str]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    date: str = ""

    def config(self, sig: Signature) -> dict[str, Any] | None:
        entry = self.entries.get(sig.key())
        return entry["config"] if entry else None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **self.identity, "date": self.date, "entries": self.entries}

    def save(self, path: Path) -> None:
        """Atomically (a tune interrupted while writing never leaves half a table)."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError as exc:
            raise CloverError(f"cannot write the tuning table {path}: {exc.strerror or exc}") from None


def read_table(path: Path, identity: dict[str, str]) -> tuple[TuningTable | None, str | None]:
    """The table at path if it is one for this identity, else (None, why) — why is None when there is no file."""
    if not path.exists():
        return None, None
    try:
        raw = json.loads(path.read_text())
        if raw.get("format") != FORMAT or not isinstance(raw.get("entries"), dict):
            return None, f"{path} is not a tuning table of format {FORMAT}"
        for k, v in identity.items():
            if raw.get(k) != v:
                return None, f"{path} was tuned for {k} {raw.get(k)!r}, this is {v!r}"
        entries = {key: e for key, e in raw["entries"].items()
                   if isinstance(e, dict) and isinstance(e.get("config"), dict)}
        return TuningTable(dict(identity), entries, str(raw.get("date", ""))), None
    except (OSError, ValueError, AttributeError) as err:
        return None, f"{path} cannot be read ({type(err).__name__}: {err})"


@lru_cache(maxsize=None)
def _active(device_key: str) -> TuningTable | None:
    device = torch.device(device_key)
    identity = device_identity(device)
    path = table_path(identity)
    table, why = read_table(path, identity)
    if why:
        print(f"note: kernel tuning table ignored: {why}; run `clover-local tune` again", file=sys.stderr)
    return table


def active_table(device: torch.device) -> TuningTable | None:
    """This process's table for device (read once), or None (no table, another GPU's, or CLOVER_TUNING=off)."""
    if not tuning_enabled():
        return None
    if device.type != "cuda":
        return _active("cpu")
    return _active(f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}")


def reset_active() -> None:
    """Forget the tables read so far (after `tune` wrote one, and in tests)."""
    _active.cache_clear()


def tuned(sig: Signature, device: torch.device) -> dict[str, Any] | None:
    """The tuned config fields for sig on device, or None (then the heuristic's tiles run)."""
    table = active_table(device)
    return table.config(sig) if table is not None else None


def apply(default: Any, fields: dict[str, Any] | None, keep: Iterable[str] = ("block_m",)) -> Any:
    """default (a LinearConfig / MoeConfig) with a table entry's fields, but never the ones in keep (BLOCK_M
    follows the call's rows; the MoE's is shared by its two passes through the align)."""
    if not fields:
        return default
    names = {f for f in asdict(default) if f not in keep}
    return replace(default, **{k: v for k, v in fields.items() if k in names})


# ---- recording the calls a pass makes ----------------------------------------------------------------------


@dataclass
class RecordedCall:
    """One call signature seen while recording: how often it ran, its heuristic config, and a closure running
    the same call (same tensors: the model's packed weights, a copy of its input) with any config."""

    sig: Signature
    default: Any
    run: Callable[[Any], torch.Tensor]
    calls: int = 1


class Recorder:
    """Collects the W4A16 kernels' calls while active (`with Recorder(rows=32) as rec:` around a pass); the
    kernels report each call through `note`. Only the first call of a signature keeps its tensors."""

    def __init__(self, rows: int | None = None) -> None:
        self.rows = rows
        self.calls: dict[str, RecordedCall] = {}

    def __enter__(self) -> Recorder:
        _RECORDERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _RECORDERS.remove(self)

    def note(self, sig: Signature, default: Any, make_run: Callable[[], Callable[[Any], torch.Tensor]]) -> None:
        if self.rows is not None and sig.rows != rows_bucket(self.rows):
            return
        key = sig.key()
        if key in self.calls:
            self.calls[key].calls += 1
        else:
            self.calls[key] = RecordedCall(sig, default, make_run())


_RECORDERS: list[Recorder] = []


def recording() -> Recorder | None:
    return _RECORDERS[-1] if _RECORDERS else None


# ---- the search ------------------------------------------------------------------------------------------------


@dataclass
class Trial:
    config: dict[str, Any]
    us: float | None = None
    rel_err: float | None = None
    error: str | None = None


@dataclass
class TuneResult:
    sig: Signature
    calls: int
    default: dict[str, Any]
    default_us: float
    best: dict[str, Any]
    best_us: float
    trials: list[Trial]
    note: str = ""

    def entry(self) -> dict[str, Any]:
        return {"config": self.best, "us": round(self.best_us, 3), "default_us": round(self.default_us, 3),
                "default": self.default, "tried": len(self.trials)}


def tune_call(rec: RecordedCall, stages: list[Callable[[Any], list[Any]]],
              timer: Callable[[Callable[[], Any]], float],
              on_trial: Callable[[int, int], None] = lambda i, n: None) -> TuneResult:
    """Time rec's heuristic config, then each stage's candidates (a stage is a function of the best config so
    far: a grid first, refinements of its winner next), each checked against the heuristic's output before it
    is timed. The fastest wins if it beats the heuristic by MIN_GAIN, else the heuristic stays (the entry
    records that too, so a later run need not time it again)."""
    want = rec.run(rec.default)
    d = asdict(rec.default)
    if not bool(torch.isfinite(want.float()).all()):
        return TuneResult(rec.sig, rec.calls, d, math.nan, d, math.nan, [],
                          note="the call's output is not finite with the default tiles: kept them")
    default_us = timer(lambda: rec.run(rec.default))
    best, best_us = rec.default, default_us
    trials: list[Trial] = []
    seen = [d]
    for stage in stages:
        todo = [c for c in stage(best) if asdict(c) not in seen]
        for i, cfg in enumerate(todo):
            on_trial(i, len(todo))
            seen.append(asdict(cfg))
            trial = Trial(asdict(cfg))
            try:
                got = rec.run(cfg)
                trial.rel_err = _rel_err(got, want) if bool(torch.isfinite(got.float()).all()) else math.inf
                if trial.rel_err <= REL_TOL:
                    trial.us = timer(lambda cfg=cfg: rec.run(cfg))
                else:
                    trial.error = f"output differs from the default tiles' (rel. error {trial.rel_err:.3g})"
            except Exception as err:  # too much shared memory for this GPU, an unsupported tile: not a candidate
                trial.error = f"{type(err).__name__}: {err}"[:200]
            trials.append(trial)
            if trial.us is not None and trial.us < best_us:
                best, best_us = cfg, trial.us
    if best_us < (1 - MIN_GAIN) * default_us:
        return TuneResult(rec.sig, rec.calls, d, default_us, asdict(best), best_us, trials)
    return TuneResult(rec.sig, rec.calls, d, default_us, d, default_us, trials,
                      note=f"no candidate beat the default tiles by {100 * MIN_GAIN:.0f} %")


def _powers(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


def linear_candidates(default: Any, sig: Signature, quick: bool = False) -> list[Any]:
    """Tiles for a dense call: BLOCK_N × split-K at the default warps and stages, then warps × stages and the
    tile form on the best few (`two_stage`). BLOCK_K stays (the group, or the repack tile)."""
    k_tiles = max(1, sig.k // default.block_k)
    bns = (64, 128) if quick else (32, 64, 128, 256)
    splits = sorted({s for s in _powers(1, 16) if s <= k_tiles} | {default.split_k})
    if quick:
        splits = sorted({1, default.split_k, min(k_tiles, 2 * default.split_k), max(1, default.split_k // 2)})
    return [replace(default, block_n=bn, split_k=sk) for bn in bns for sk in splits]


def moe_candidates(default: Any, sig: Signature, quick: bool = False) -> list[Any]:
    """Tiles for one MoE pass: BLOCK_N × BLOCK_K at the default warps and stages (BLOCK_K is capped at the group
    by the kernel's launcher)."""
    bns = (64, 128, 256) if quick else (32, 64, 128, 256)  # the down pass's programs run only K=I/BLOCK_K steps:
    bks = (default.block_k,) if quick else tuple(sorted({64, 128, default.block_k}))  # wider ones, fewer of them
    return [replace(default, block_n=bn, block_k=bk) for bn in bns for bk in bks]


def refinements(best: Any, quick: bool = False) -> list[Any]:
    """The second stage around a winner: warps × pipeline stages, the other tile form (`fields`, `folded`), the
    field mask as an immediate or in a register (`mask_reg`) and the folded MoE's dots either way round (`swap`);
    for the MoE also 5 stages and a register cap of 128 (`maxnreg`) or none."""
    out = [replace(best, num_warps=w, num_stages=s) for w in (4, 8) for s in ((2, 3, 4) if not quick else (2, 4))]
    if hasattr(best, "maxnreg"):  # the MoE: a deeper pipeline (more bytes in flight a program), and a register cap
        # that fits one program more an SM (the gate/up pass takes 95–143 registers on sm_90: 3–4 programs of 4
        # warps; compile_check) — or none, where the winner had one
        out.append(replace(best, num_stages=5))
        out.append(replace(best, maxnreg=None if best.maxnreg else 128))
    out.append(replace(best, fields=not best.fields))
    if hasattr(best, "mask_reg") and best.fields and getattr(best, "folded", True):  # else MASK_REG is off anyway
        out.append(replace(best, mask_reg=not best.mask_reg))
    if hasattr(best, "folded") and best.fields:
        out.append(replace(best, folded=not best.folded))
    if hasattr(best, "swap") and best.fields and best.folded:  # else SWAP is off anyway
        out.append(replace(best, swap=not best.swap))
    return out


def gpu_timer(device: torch.device) -> Callable[[Callable[[], Any]], float]:
    """µs of GPU time per call: CUDA-graph replays with L2 flushed (bench_kernels' measure; its launch-inclusive
    figure where a call cannot be captured) on CUDA; on a CPU the wall time of one interpreted call (meaningless
    for speed; it lets the command run anywhere)."""
    if device.type == "cuda":
        return _time_us

    def wall(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return 1e6 * (time.perf_counter() - t0)

    return wall


def gdn_preview_candidates(default: Any, sig: Signature, quick: bool = False) -> list[Any]:
    """The GDN preview's forms (`gdn_preview.PreviewConfig`): one launch a layer, or the split form over value
    slices of 64, 32 and 16 channels (those that divide the head's Dv = sig.n)."""
    return [replace(default, form="whole")] + [replace(default, form="split", block_dv=b) for b in (64, 32, 16)
                                               if b <= sig.n and sig.n % b == 0]


def stages_for(rec: RecordedCall, quick: bool = False) -> list[Callable[[Any], list[Any]]]:
    """The two stages of a call's search: its kind's grid around the heuristic, then `refinements` of the
    grid's winner (≈ 27 candidates for a dense call, 16 for a MoE pass; about half with quick); the GDN preview's
    forms in one stage."""
    if rec.sig.kind == "gdn_preview":
        return [lambda _best: gdn_preview_candidates(rec.default, rec.sig, quick)]
    grid = moe_candidates if rec.sig.kind.startswith("moe") else linear_candidates
    return [lambda _best: grid(rec.default, rec.sig, quick), lambda best: refinements(best, quick)]


def summary(device: torch.device) -> dict[str, Any]:
    """What a run's report says about tuning: whether a table is in use, where, and how many entries."""
    table = active_table(device)
    path = table_path(device_identity(device)) if table is not None else None
    return {"enabled": tuning_enabled(), "table": str(path) if path else None,
            "entries": len(table.entries) if table else 0}
