"""Where one routed-experts call's GPU time goes, at the real shapes: its launches apart, and read-only kernels that
stream the same expert bytes the way its programs do, against a flat read of them.

    python -m clover_local.runtime.kernels.moe_anatomy [--out FILE] [--quick]   (a GPU; gpu_session stage `anatomy`)

Why: the fused MoE ran at ≈ 0.9 TB/s in a graph on the H200 (BENCHMARKS.md, 2026-11-30; floor 4.8), ≈ 13.8 of a
26.8 ms pass under a real block's routing, and the tile sweeps moved it by a few per cent. Three explanations call
for different work, and one GPU run can tell them apart:
- the launches around the two passes (align, the weighted sum): `segments` — the call captured in a CUDA graph
  with an event at each launcher mark (`runtime/segments.py`), L2 flushed before each call;
- the programs' shape (a gate/up program walks K = 2048 in 16 steps of 8 KB; too few bytes in flight per SM):
  `tiles` — a kernel that loads exactly the code words of the pass's programs (same grid from the same align,
  same tiles, same K loop) and only folds them, in the pass's tiles and in wider or K-split ones. Its loads go to
  registers (nothing to stage in shared memory: the pass stages its words there with cp.async, compile_check
  --sass) and at 32 registers every program of the grid is resident at once, so it is the grid's and the access
  pattern's ceiling, not a replica of the pass's pipeline. If the pass runs near it, the pattern is the limit and
  the tiles or the grid must change; if it runs near the flat read while the pass does not, the pass's own work
  and occupancy (dequantization, MMA, 95–143 registers and 24–29 KB of shared memory a program) are;
- the device's ceiling for these bytes: `flat` — each distinct expert's slab read whole, in 16 KB vector
  loads.
Scales and zeros (≈ 3 % of the bytes) are left out of `tiles`; `flat` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl
from torch import Tensor

from clover_local.runtime import segments
from clover_local.runtime.kernels import tuning
from clover_local.runtime.kernels.w4a16 import _moe_block_k, moe_align, moe_config, moe_w4a16_triton


@triton.jit
def _read_tiles_kernel(qw_ptr, out_ptr, block_slot_ptr, num_padded_ptr, N, K_WORDS, stride_qs, stride_qk,
                       stride_qn, BLOCK_M: tl.constexpr, TILE_K: tl.constexpr, BLOCK_N: tl.constexpr,
                       HALVES: tl.constexpr, SPLIT: tl.constexpr):
    """The code words one MoE pass's program reads — a run of BLOCK_M pairs of one slot × BLOCK_N columns (and the
    up half UP = N columns on when HALVES = 2), K in tiles of TILE_K packed rows, here in SPLIT programs along K —
    folded by XOR into out[program], so no load can be dropped. Programs past the align's padded
    length write 0 and stop, as the pass's do."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    at = (pid_m * tl.num_programs(1) + pid_n) * SPLIT + pid_k
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        tl.store(out_ptr + at, 0)
        return
    slot = tl.load(block_slot_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    base = qw_ptr + slot * stride_qs
    per = K_WORDS // SPLIT
    acc = tl.zeros((TILE_K, BLOCK_N), dtype=tl.int32)
    for r0 in range(pid_k * per, pid_k * per + per, TILE_K):
        rows = r0 + tl.arange(0, TILE_K)
        for half in tl.static_range(HALVES):
            acc ^= tl.load(base + rows[:, None] * stride_qk + (offs_n + half * N)[None, :] * stride_qn,
                           mask=n_mask[None, :], other=0)
    tl.store(out_ptr + at, tl.xor_sum(tl.xor_sum(acc, axis=1), axis=0))


@triton.jit
def _read_slabs_kernel(buf_ptr, slots_ptr, out_ptr, WORDS, stride_s, BLOCK: tl.constexpr):
    """Slab slots[s]'s words [c·BLOCK, (c + 1)·BLOCK) folded by XOR into out[s, c]: the flat read."""
    s = tl.program_id(0)
    c = tl.program_id(1)
    slot = tl.load(slots_ptr + s).to(tl.int64)
    offs = c * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(buf_ptr + slot * stride_s + offs, mask=offs < WORDS, other=0)
    tl.store(out_ptr + s * tl.num_programs(1) + c, tl.xor_sum(v, axis=0))


def read_tiles(qweight: Tensor, align: tuple[Tensor, Tensor, Tensor], n: int, halves: int, block_m: int,
               block_k: int, bits: int, block_n: int, split: int = 1, num_warps: int = 4,
               num_stages: int = 3) -> Tensor:
    """`_read_tiles_kernel` over a stack's qweight [S, K·bits/32, halves·n] for the runs of `align`: int32
    [blocks, column tiles, split] (the grid's programs)."""
    sorted_ids, block_slot, num_padded = align
    tile_k = block_k * bits // 32
    k_words = qweight.shape[1]
    if k_words % (split * tile_k):
        raise ValueError(f"{k_words} packed rows do not split into {split} runs of {tile_k}-row tiles")
    grid = (block_slot.numel(), triton.cdiv(n, block_n), split)
    out = torch.empty(grid, dtype=torch.int32, device=qweight.device)
    _read_tiles_kernel[grid](qweight, out, block_slot, num_padded, n, k_words, qweight.stride(0), qweight.stride(1),
                             qweight.stride(2), BLOCK_M=block_m, TILE_K=tile_k, BLOCK_N=block_n, HALVES=halves,
                             SPLIT=split, num_warps=num_warps, num_stages=num_stages)
    return out


def read_slabs(buf: Tensor, slots: Tensor, block: int = 4096) -> Tensor:
    """`_read_slabs_kernel` over the slabs `slots` of a uint8 buffer [S, nbytes] (nbytes a multiple of 4)."""
    words = buf.view(torch.int32)
    grid = (slots.numel(), triton.cdiv(words.shape[1], block))
    out = torch.empty(grid, dtype=torch.int32, device=buf.device)
    _read_slabs_kernel[grid](words, slots, out, words.shape[1], words.stride(0), BLOCK=block, num_warps=8)
    return out


def xor_all(t: Tensor) -> int:
    """Every word of t folded by XOR, as the probes fold what they read (exact, in any order)."""
    return int(np.bitwise_xor.reduce(t.contiguous().view(torch.int32).reshape(-1).cpu().numpy(), initial=0))


def tiles_xor(qweight: Tensor, align: tuple[Tensor, Tensor, Tensor], n: int, halves: int, block_m: int) -> int:
    """What every `read_tiles` over these runs folds to, from torch: each used block's slot's code words of the
    first halves·n columns (the column tiles and K splits cover them once; a slot with two runs twice)."""
    _, block_slot, num_padded = align
    used = block_slot[: int(num_padded) // block_m].long()
    return xor_all(qweight[used][:, :, : halves * n])


def _cuda_segment_us(call: Callable[[], object], reps: int = 10) -> dict[str, float]:
    """µs per segment of one call (its launchers' marks, `segments.segment`): a CUDA graph of reps × [flush L2, call]
    with an external event at each mark and at the call's end, replayed; each segment from its mark to the next."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    marks: list[tuple[str, torch.cuda.Event]] = []

    def mark(name: str, _share: float = 0.0) -> None:
        ev = torch.cuda.Event(enable_timing=True, external=True)
        ev.record()
        marks.append((name, ev))

    side = torch.cuda.Stream()  # warm-up outside the capture (what PyTorch asks of a capture)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    segments.listen(mark)
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                flush.zero_()
                mark("start")
                call()
                mark("end")
    finally:
        segments.stop(mark)
    graph.replay()
    torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for (name, ev), (_, nxt) in zip(marks, marks[1:]):
        if name in ("start", "end"):
            continue
        totals[name] = totals.get(name, 0.0) + 1e3 * ev.elapsed_time(nxt) / reps
    starts = [ev for name, ev in marks if name == "start"]
    ends = [ev for name, ev in marks if name == "end"]
    totals["call"] = sum(1e3 * a.elapsed_time(b) for a, b in zip(starts, ends)) / reps
    return {k: round(v, 2) for k, v in totals.items()}


def _cpu_segment_us(call: Callable[[], object]) -> dict[str, float]:
    """The same keys off CUDA: wall time between the marks of one call (interpreted: mechanics, not speed)."""
    marks: list[tuple[str, float]] = []

    def mark(name: str, _share: float = 0.0) -> None:
        marks.append((name, time.perf_counter()))

    segments.listen(mark)
    try:
        mark("start")
        call()
        mark("end")
    finally:
        segments.stop(mark)
    out: dict[str, float] = {}
    for (name, t), (_, t2) in zip(marks, marks[1:]):
        if name not in ("start", "end"):
            out[name] = round(out.get(name, 0.0) + 1e6 * (t2 - t), 2)
    out["call"] = round(1e6 * (marks[-1][1] - marks[0][1]), 2)
    return out


# (block_n, split along K, num_warps) of the read probes; the first is the pass's own default tiles
UP_TILES = [(64, 1, 4), (32, 1, 4), (128, 1, 4), (256, 1, 4), (128, 1, 8), (256, 1, 8), (64, 2, 4), (64, 4, 4),
            (128, 2, 4)]
DOWN_TILES = [(64, 1, 4), (128, 1, 4), (256, 1, 4), (256, 1, 8), (64, 2, 4)]


def moe_anatomy(device: torch.device, hidden: int = 2048, inter: int = 512, experts: int = 256, rows: int = 32,
                topk: int = 8, bits: int = 4, group: int = 128, seed: int = 0, quick: bool = False,
                on_part: Callable[[dict], None] = lambda out: None) -> dict:
    """One layer's routed experts at 32 rows, routed uniformly (≈ 162 of 256 experts, a real block's load): the
    call's launches, the flat read, the read probes of both passes (each checked: its XOR of the words equals
    torch's) with GB/s over the bytes each reads, then the call with one `MoeConfig` knob turned at a time
    (`MOE_VARIANTS`: each pass's time). quick: the default tiles and one other per pass, no variants. `on_part`
    gets the report after each part (a stage that runs out of time keeps what it measured)."""
    from clover_local.runtime.slab import SlabLayout

    g = torch.Generator(device="cpu").manual_seed(seed)
    lay = SlabLayout(hidden, inter, bits, hidden // group, inter // group)
    buf = torch.randint(0, 256, (experts, lay.nbytes), dtype=torch.uint8, generator=g).to(device)
    views = lay.views(buf)
    for part in ("gu_scales", "d_scales"):  # positive fp16 scales, mid-range zeros: finite outputs
        views[part].copy_((0.002 + 0.004 * torch.rand(views[part].shape, generator=g)).half())
    views["gu_qzeros"].fill_(0x77777777 if bits == 4 else 0x7F7F7F7F)
    views["d_qzeros"].fill_(0x77777777 if bits == 4 else 0x7F7F7F7F)
    gate_up, down = lay.stacks(buf)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x = (torch.randn(rows, hidden, generator=g) * 0.5).to(device, dtype)
    idx = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(rows)]).to(device)
    w = torch.softmax(torch.randn(rows, topk, generator=g), -1).to(device, dtype)
    distinct = idx.unique()
    cfg = moe_config(rows, topk, experts, device)
    timer = tuning.gpu_timer(device)  # graph replays with L2 flushed on CUDA, wall time elsewhere
    segment_us = _cuda_segment_us if device.type == "cuda" else _cpu_segment_us
    out: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "shape": {"hidden": hidden, "inter": inter, "bits": bits, "group": group, "rows": rows, "topk": topk,
                           "experts": experts, "distinct": int(distinct.numel())},
                 "config": {"block_m": cfg.block_m, "block_n": cfg.block_n, "block_k": cfg.block_k,
                            "num_warps": cfg.num_warps, "num_stages": cfg.num_stages, "fields": cfg.fields,
                            "folded": cfg.folded, "swap": cfg.swap}}
    slab_bytes = int(distinct.numel()) * lay.weight_bytes

    def call():
        return moe_w4a16_triton(x, idx, w, gate_up, down)

    y = call()
    out["finite"] = bool(torch.isfinite(y.float()).all())
    out["segments_us"] = segment_us(call)
    out["call_us"] = round(timer(call), 2)
    out["call_gbps"] = round(slab_bytes / out["call_us"] / 1e3, 1) if out["call_us"] else None
    out["ok"] = out["finite"]
    on_part(out)
    slots = distinct.to(torch.int32)

    def flat():
        return read_slabs(buf, slots)

    flat_ok = xor_all(flat()) == xor_all(buf.view(torch.int32)[distinct.long()])
    flat_us = timer(flat)
    out["flat"] = {"bytes": int(distinct.numel()) * lay.nbytes, "xor_ok": flat_ok, "us": round(flat_us, 2),
                   "gbps": round(int(distinct.numel()) * lay.nbytes / flat_us / 1e3, 1) if flat_us else None}
    out["ok"] = out["ok"] and flat_ok
    on_part(out)
    align = moe_align(idx, experts, cfg.block_m)
    runs = int(align[2]) // cfg.block_m  # the blocks of pairs in use: one per distinct expert here, or more
    out["shape"]["runs"] = runs
    probes: list[dict] = []
    out["tiles"] = probes
    for kind, stack, n, halves, tiles in (("gate/up", gate_up, inter, 2, UP_TILES), ("down", down, hidden, 1, DOWN_TILES)):
        want = tiles_xor(stack.qweight, align, n, halves, cfg.block_m)
        nbytes = runs * stack.qweight[0].numel() * 4  # what the probe reads: each run's slot's code words
        block_k = _moe_block_k(stack, cfg)  # the pass's K tile (the group caps it)
        tile_k = block_k * bits // 32
        fits = [t for t in tiles if stack.qweight.shape[1] % (t[1] * tile_k) == 0]  # K splits into whole tiles
        for block_n, split, warps in fits[:2] if quick else fits:
            probe = {"pass": kind, "block_n": block_n, "split": split, "num_warps": warps, "bytes": nbytes}
            try:
                def run(block_n=block_n, split=split, warps=warps, stack=stack, n=n, halves=halves, block_k=block_k):
                    return read_tiles(stack.qweight, align, n, halves, cfg.block_m, block_k, bits, block_n,
                                      split, warps)

                probe["xor_ok"] = xor_all(run()) == want
                probe["us"] = round(timer(run), 2)
                probe["gbps"] = round(nbytes / probe["us"] / 1e3, 1) if probe["us"] else None
            except Exception as err:  # one variant that does not compile here is a finding, not the end
                probe["error"] = f"{type(err).__name__}: {err}"[:300]
            probes.append(probe)
            out["ok"] = out["ok"] and probe.get("xor_ok", False)
        on_part(out)
    # the call itself with one knob turned at a time (each pass's time from the launch split): what moves it
    variants: dict[str, dict] = {}
    out["configs"] = variants
    for name, change in ([] if quick else MOE_VARIANTS):
        vcfg = replace(cfg, **change(cfg))
        try:
            def vcall(vcfg=vcfg):
                return moe_w4a16_triton(x, idx, w, gate_up, down, vcfg)

            err = float((vcall().float() - y.float()).norm() / y.float().norm().clamp(min=1e-30))
            variants[name] = {"rel_err_vs_default": round(err, 5), **segment_us(vcall)}
        except Exception as exc:
            variants[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        on_part(out)
    return out


# MoeConfig changes the anatomy times the call with (both passes take them; BLOCK_M stays)
MOE_VARIANTS: list[tuple[str, Callable]] = [
    ("num_stages 4", lambda c: {"num_stages": 4}),
    ("num_stages 5", lambda c: {"num_stages": 5}),
    ("block_n 128", lambda c: {"block_n": 128}),
    ("block_n 32", lambda c: {"block_n": 32}),
    ("num_warps 8", lambda c: {"num_warps": 8}),
    ("maxnreg 128", lambda c: {"maxnreg": 128}),
    ("swap flipped", lambda c: {"swap": not c.swap}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the default tiles and one other per pass, no variants")
    ap.add_argument("--out", type=Path, help="write the JSON here, after each part (else stdout at the end)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the anatomy times GPU kernels (tests run it interpreted)")

    def write(out: dict) -> None:
        if args.out is not None:
            tmp = args.out.with_suffix(".part")
            tmp.write_text(json.dumps(out, indent=1))
            os.replace(tmp, args.out)

    res = moe_anatomy(torch.device("cuda"), quick=args.quick, on_part=write)
    write(res)
    if args.out is None:
        print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
