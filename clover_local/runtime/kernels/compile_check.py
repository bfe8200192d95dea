"""Compile every Triton kernel of the runtime for real GPUs, on any machine: no GPU, no driver needed.

Why: device time is scarce (minutes a session) and Triton's interpreter, which the CPU tests use, does not type-
check the way the compiler does; a kernel that compiles nowhere would cost a GPU session to find out. This runs
each kernel's own Python wrapper at the real model's shapes on CPU tensors with the launch intercepted, then
compiles the captured launch (the same constexprs, dtypes, num_warps and num_stages) for the target
architectures with Triton's bundled ptxas, and reads the cubin's resource use (registers per thread, local
memory = spills, shared memory) with the bundled cuobjdump.

    python -m clover_local.runtime.kernels.compile_check [--arch 90,120] [--json] [--sass] [--jobs N]

sm_90 is the H200 of our benchmarks, sm_120 the RTX 5070 Ti the product is for. Run it without
TRITON_INTERPRET (the kernels must be compiled functions, not interpreted ones).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Launch:
    kernel: str
    case: str
    fn: object  # the JITFunction
    args: dict
    options: dict = field(default_factory=dict)


class _Intercept:
    """Stands in for a JITFunction in its module: `kernel[grid](...)` records the launch instead of running."""

    def __init__(self, fn, name: str, sink: list[Launch], case: Callable[[], str]) -> None:
        self.fn, self.name, self.sink, self.case = fn, name, sink, case

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}
            named = dict(zip(self.fn.arg_names, args))
            named.update(kwargs)
            self.sink.append(Launch(self.name, self.case(), self.fn, named, options))

        return launch


@contextmanager
def _intercepted(module, names: list[str], sink: list[Launch], case: Callable[[], str]) -> Iterator[None]:
    saved = {n: getattr(module, n) for n in names}
    try:
        for n in names:
            setattr(module, n, _Intercept(saved[n], n, sink, case))
        yield
    finally:
        for n, fn in saved.items():
            setattr(module, n, fn)


def capture_launches() -> list[Launch]:
    """Every kernel launch of the runtime's wrappers at the real model's shapes (bf16 activations, 32 block
    rows, a 16 GiB cache's slot count), W4A16 tiles in both forms (field-wise, the default, and unpacked)."""
    from dataclasses import replace

    from clover_local.config import parse_config
    from clover_local.model.gdn import GatedDeltaNet
    from clover_local.runtime.placement import DEFAULT_PREFILL_CHUNK
    from clover_local.runtime.synthetic_pack import synthetic_config

    from . import gdn_causal, gdn_chunked, gdn_preview, layer_ops, moe_anatomy, preview_attention, w4a16
    from .reference import PackedStack

    sink: list[Launch] = []
    label = {"case": ""}
    case = lambda: label["case"]  # noqa: E731
    kernels = {
        w4a16: ["_linear_kernel", "_moe_kernel", "_align_rank_kernel", "_align_place_kernel", "_sum_parts_kernel",
                "_planes3_kernel"],
        gdn_preview: ["_gdn_preview_kernel", "_gdn_preview_split_kernel"],
        gdn_causal: ["_gdn_causal_kernel"],
        gdn_chunked: ["_gdn_chunk_prep_kernel", "_gdn_chunk_scan_kernel"],
        preview_attention: ["_partial_kernel", "_merge_kernel"],
        layer_ops: ["_rms_norm_zc_kernel", "_route_topk_kernel", "_optimistic_slots_kernel", "_shared_combine_kernel",
                    "_silu_mul_kernel", "_norm_rope_kernel", "_gated_rms_norm_kernel"],
        moe_anatomy: ["_read_tiles_kernel", "_read_slabs_kernel"],  # gpu_check's read probes (not the runtime's)
    }
    cfg = parse_config(synthetic_config("full"))
    bf = torch.bfloat16
    m, h, inter, topk = 32, cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts_per_tok
    with _intercepted(w4a16, kernels[w4a16], sink, case), \
            _intercepted(gdn_preview, kernels[gdn_preview], sink, case), \
            _intercepted(gdn_causal, kernels[gdn_causal], sink, case), \
            _intercepted(gdn_chunked, kernels[gdn_chunked], sink, case), \
            _intercepted(preview_attention, kernels[preview_attention], sink, case), \
            _intercepted(layer_ops, kernels[layer_ops], sink, case), \
            _intercepted(moe_anatomy, kernels[moe_anatomy], sink, case):
        x = torch.zeros(m, h, dtype=bf)
        for bits, n, k in ((8, cfg.gdn_conv_dim, h), (4, cfg.gdn_conv_dim, h), (8, h, cfg.gdn_value_dim)):
            per = 32 // bits
            qw = torch.zeros(k // per, n, dtype=torch.int32)
            sc = torch.zeros(k // 128, n, dtype=torch.float16)
            qz = torch.zeros(k // 128, n // per, dtype=torch.int32)
            xx = torch.zeros(m, k, dtype=bf)
            base = w4a16.linear_config(m, n, k, 128, bits, torch.device("cpu"))
            for cfg_l, tile in ((base, 0), (replace(base, fields=False), 0), (base, 128)):
                label["case"] = f"W{bits}A16 {k}->{n}{'' if cfg_l.fields else ' unpacked'}{' repacked' if tile else ''}"
                w4a16.linear_w4a16_triton(xx, qw, sc, qz, 128, bits, config=cfg_l, k_tile=tile)
        slots = 64

        def expert_stacks(bits: int) -> tuple[PackedStack, PackedStack]:
            """(gate_up, down) over 64 slots of `bits`-bit experts, group 128."""
            def stack(k: int, n: int) -> PackedStack:
                return PackedStack(torch.zeros(slots, k * bits // 32, n, dtype=torch.int32),
                                   torch.zeros(slots, k // 128, n, dtype=torch.float16),
                                   torch.zeros(slots, k // 128, n * bits // 32, dtype=torch.int32), 128, bits)
            return stack(h, 2 * inter), stack(inter, h)

        gu, dn = expert_stacks(4)
        ids = torch.zeros(m, topk, dtype=torch.int32)
        wts = torch.zeros(m, topk, dtype=bf)
        base_moe = w4a16.moe_config(m, topk, 8515)
        for cfg_m in (base_moe, replace(base_moe, folded=False), replace(base_moe, fields=False),
                      replace(base_moe, maxnreg=128), replace(base_moe, mask_reg=False),
                      replace(base_moe, swap=not base_moe.swap)):
            label["case"] = (f"MoE 4-bit H{h} I{inter}{'' if cfg_m.fields else ' unpacked'}"
                             f"{'' if cfg_m.folded or not cfg_m.fields else ' unfolded'}"
                             f"{f' maxnreg {cfg_m.maxnreg}' if cfg_m.maxnreg else ''}"
                             f"{'' if cfg_m.mask_reg else ' mask immediate'}"
                             f"{'' if cfg_m.swap == base_moe.swap else ' swapped' if cfg_m.swap else ' unswapped'}")
            w4a16.moe_w4a16_triton(x, ids, wts, gu, dn, config=cfg_m)
        label["case"] = f"MoE 4-bit H{h} I{inter} host reads"  # non-resident experts read in place (HOST)
        w4a16.moe_w4a16_triton(x, ids, wts, gu, dn, config=base_moe, host=(gu, dn))
        label["case"] = f"MoE 4-bit H{h} I{inter} host reads, read-through"  # ... copied into free slots (INSTALL)
        w4a16.moe_w4a16_triton(x, ids, wts, gu, dn, config=base_moe, host=(gu, dn),
                               install=torch.zeros(cfg.num_experts, dtype=torch.int32))
        # 3-bit experts (`quantize --bits 3`): GPTQ's straddled runs, the unpacking form (`_weight_tile3`)
        gu3, dn3 = expert_stacks(3)
        label["case"] = f"MoE 3-bit H{h} I{inter}"
        w4a16.moe_w4a16_triton(x, ids, wts, gu3, dn3, config=base_moe)
        label["case"] = f"MoE 3-bit H{h} I{inter} host reads"
        w4a16.moe_w4a16_triton(x, ids, wts, gu3, dn3, config=base_moe, host=(gu3, dn3))
        # ... in the planes layout (every expert resident: `SlabLayout.planes`), read field-wise (`_planes3_dot`)
        gu3p, dn3p = replace(gu3, planes=True), replace(dn3, planes=True)
        for cfg_m in (base_moe, replace(base_moe, swap=not base_moe.swap)):
            label["case"] = (f"MoE 3-bit planes H{h} I{inter}"
                             f"{'' if cfg_m.swap == base_moe.swap else ' swapped' if cfg_m.swap else ' unswapped'}")
            w4a16.moe_w4a16_triton(x, ids, wts, gu3p, dn3p, config=cfg_m)
        label["case"] = f"3-bit gate/up {h}->{2 * inter}, 64 slots (the load's rewrite)"
        w4a16.planes3_rows_triton(gu3.qweight)
        label["case"] = f"MoE 3-bit planes H{h} I{inter} host reads"  # offloaded: host slabs in the layout too
        w4a16.moe_w4a16_triton(x, ids, wts, gu3p, dn3p, config=base_moe, host=(gu3p, dn3p))
        label["case"] = f"MoE 3-bit planes H{h} I{inter} host reads, read-through"
        w4a16.moe_w4a16_triton(x, ids, wts, gu3p, dn3p, config=base_moe, host=(gu3p, dn3p),
                               install=torch.zeros(cfg.num_experts, dtype=torch.int32))
        label["case"] = "moe_align 256 pairs, 8515 slots, x field-major"
        w4a16.moe_align_triton(ids, 8515, base_moe.block_m,
                               (x, torch.empty_like(x), torch.empty(m, h // 128), 128, 8))

        gdn = GatedDeltaNet(cfg).to(bf)  # random init is fine: nothing runs
        label["case"] = f"Hk{gdn.hk} Hv{gdn.hv} Dk{gdn.dk} Dv{gdn.dv}, {cfg.diffusion.block_size} rows"
        t = cfg.diffusion.block_size
        conv = cfg.gdn_conv_dim
        gdn_preview.fused_gdn_preview(
            gdn, torch.zeros(1, t, conv, dtype=bf), torch.zeros(1, gdn.kernel - 1, conv, dtype=bf),
            torch.zeros(1, gdn.hv, gdn.dk, gdn.dv), torch.zeros(1, dtype=torch.int64),
            torch.zeros(1, t, cfg.gdn_value_dim, dtype=bf))
        for bdv in (32, 64):  # CLOVER_GDN_PREVIEW=split: (head, value slice) programs, then the gated norm
            label["case"] = f"Hk{gdn.hk} Hv{gdn.hv} Dk{gdn.dk} Dv{gdn.dv}, {t} rows, value slices of {bdv}"
            gdn_preview.split_gdn_preview(
                gdn, torch.zeros(1, t, conv, dtype=bf), torch.zeros(1, gdn.kernel - 1, conv, dtype=bf),
                torch.zeros(1, gdn.hv, gdn.dk, gdn.dv), torch.zeros(1, dtype=torch.int64),
                torch.zeros(1, t, cfg.gdn_value_dim, dtype=bf), block_dv=bdv)
        label["case"] = f"Hk{gdn.hk} Hv{gdn.hv} Dk{gdn.dk} Dv{gdn.dv}, {cfg.diffusion.block_size} rows"
        gdn_causal.fused_gdn_causal(
            gdn, torch.zeros(1, t, conv, dtype=bf), torch.zeros(1, gdn.kernel - 1, conv, dtype=bf),
            torch.zeros(1, gdn.hv, gdn.dk, gdn.dv), torch.zeros(1, t, gdn.hv, dtype=bf),
            torch.zeros(1, t, gdn.hv, dtype=bf))
        pre = DEFAULT_PREFILL_CHUNK  # a prompt's prefill chunk: the chunked form
        label["case"] = f"Hk{gdn.hk} Hv{gdn.hv} Dk{gdn.dk} Dv{gdn.dv}, {pre} rows (prefill chunk)"
        gdn_causal.fused_gdn_causal(
            gdn, torch.zeros(1, pre, conv, dtype=bf), torch.zeros(1, gdn.kernel - 1, conv, dtype=bf),
            torch.zeros(1, gdn.hv, gdn.dk, gdn.dv), torch.zeros(1, pre, gdn.hv, dtype=bf),
            torch.zeros(1, pre, gdn.hv, dtype=bf))
        del gdn
        hq, hkv, d, w = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, 5120
        blk, win = torch.zeros(1, hkv, t, d, dtype=bf), torch.zeros(1, hkv, w, d, dtype=bf)
        for causal in (False, True):  # a preview, and a commit written in place
            label["case"] = f"H{hq} Hkv{hkv} D{d}, {t} rows, window {w}" + (", causal" if causal else "")
            preview_attention.preview_attention(torch.zeros(1, hq, t, d, dtype=bf), blk, blk, win, win,
                                                torch.zeros(w, dtype=torch.bool), d**-0.5,
                                                gate=torch.zeros(1, t, hq, 2 * d, dtype=bf)[..., :d], causal=causal)
        label["case"] = f"{m} rows"
        layer_ops.rms_norm_zc(x, torch.zeros(h, dtype=bf), 1e-6)
        layer_ops.add_rms_norm_zc(x, x, torch.zeros(h, dtype=bf), 1e-6)
        layer_ops.route_topk(torch.zeros(m, cfg.num_experts, dtype=bf), topk, bf)
        label["case"] = f"{m} rows, resident routing"
        table = torch.zeros(cfg.num_experts, dtype=torch.int32)
        layer_ops.route_topk(torch.zeros(m, cfg.num_experts, dtype=bf), topk, bf, (table, table))
        label["case"] = f"{m} rows"
        layer_ops.optimistic_slots(torch.zeros(m, topk, dtype=torch.int64), wts, torch.zeros(10240, dtype=torch.int32),
                                   torch.zeros(10240, dtype=torch.int32), 0)
        label["case"] = f"{m} rows, host reads read through"
        layer_ops.optimistic_slots(torch.zeros(m, topk, dtype=torch.int64), wts, torch.zeros(10240, dtype=torch.int32),
                                   torch.zeros(10240, dtype=torch.int32), 0, 8860,
                                   layer_ops.ReadThrough(torch.zeros(10240, dtype=torch.int32),
                                                         torch.zeros(40, cfg.num_experts, dtype=torch.int32),
                                                         torch.zeros(2 * cfg.num_experts, dtype=torch.int32),
                                                         torch.zeros(1 + cfg.num_experts, dtype=torch.int32),
                                                         cfg.num_experts))
        label["case"] = f"{m} rows"
        layer_ops.shared_combine(x, x, torch.zeros(1, h, dtype=bf), x, x)
        layer_ops.silu_mul(torch.zeros(m, 2 * cfg.shared_expert_intermediate_size, dtype=bf))
        qg = torch.zeros(1, m, cfg.num_attention_heads, 2 * cfg.head_dim, dtype=bf)[..., : cfg.head_dim]
        rot = torch.zeros(m, cfg.rotary_dim, dtype=bf)
        layer_ops.norm_rope(qg, torch.zeros(cfg.head_dim, dtype=bf), 1e-6, rot, rot)
        mix = torch.zeros(1, m, cfg.linear_num_value_heads, cfg.linear_value_head_dim)  # a commit's GDN output norm
        layer_ops.gated_rms_norm(mix, mix.to(bf), torch.zeros(cfg.linear_value_head_dim, dtype=bf), 1e-6)
        # a merged pass (a commit and the next block's first preview, `CloverModel.commit_and_preview`): the calls
        # whose shapes follow the rows run at twice the block, in their default tiles
        m2 = 2 * m
        x2 = torch.zeros(m2, h, dtype=bf)
        for bits, n, k in ((8, cfg.gdn_conv_dim, h), (4, cfg.gdn_conv_dim, h), (8, h, cfg.gdn_value_dim)):
            per = 32 // bits
            label["case"] = f"W{bits}A16 {k}->{n}, {m2} rows (merged pass)"
            w4a16.linear_w4a16_triton(torch.zeros(m2, k, dtype=bf), torch.zeros(k // per, n, dtype=torch.int32),
                                      torch.zeros(k // 128, n, dtype=torch.float16),
                                      torch.zeros(k // 128, n // per, dtype=torch.int32), 128, bits,
                                      config=w4a16.linear_config(m2, n, k, 128, bits, torch.device("cpu")))
        ids2, wts2 = torch.zeros(m2, topk, dtype=torch.int32), torch.zeros(m2, topk, dtype=bf)
        label["case"] = f"MoE 4-bit H{h} I{inter}, {m2} rows (merged pass)"
        w4a16.moe_w4a16_triton(x2, ids2, wts2, gu, dn, config=w4a16.moe_config(m2, topk, 8515))
        label["case"] = f"{m2} rows (merged pass)"
        layer_ops.route_topk(torch.zeros(m2, cfg.num_experts, dtype=bf), topk, bf)
        layer_ops.add_rms_norm_zc(x2, x2, torch.zeros(h, dtype=bf), 1e-6)
        # the MoE anatomy's read probes (`moe_anatomy`, gpu_check stage `anatomy`): the gate/up and down programs'
        # code words at the default tiles, one K-split and the flat read of 162 slabs
        runs = w4a16.align_length(m * topk, 256, 16) // 16
        align = (torch.zeros(runs * 16, dtype=torch.int32), torch.zeros(runs, dtype=torch.int32),
                 torch.zeros(1, dtype=torch.int32))
        for n, halves, k, split in ((inter, 2, h, 1), (inter, 2, h, 2), (h, 1, inter, 1)):
            label["case"] = f"H{h} I{inter} {'gate/up' if halves == 2 else 'down'}, split {split}"
            moe_anatomy.read_tiles(torch.zeros(256, k // 8, halves * n, dtype=torch.int32), align, n, halves, 16,
                                   128, 4, 64, split)
        label["case"] = "162 slabs"
        moe_anatomy.read_slabs(torch.zeros(256, 1 << 20, dtype=torch.uint8), torch.zeros(162, dtype=torch.int32))
    for launch in sink:  # the MoE wrapper's two launches: name the pass
        if launch.kernel == "_moe_kernel":
            launch.case += " gate/up" if launch.args["GATED"] else " down"
    return sink


def _signature(launch: Launch) -> tuple[dict, dict]:
    from triton.runtime.jit import mangle_type

    sig, consts = {}, {}
    for p in launch.fn.params:
        value = launch.args[p.name]
        if p.is_constexpr:
            sig[p.name] = "constexpr"
            consts[p.name] = value
        else:
            sig[p.name] = mangle_type(value)
    return sig, consts


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def resource_usage(cubin: bytes) -> dict:
    """REG (per thread), LOCAL (bytes: spills and stack arrays), SHARED (static) from cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True, text=True,
                              timeout=60).stdout
    use = {}
    for key in ("REG", "STACK", "SHARED", "LOCAL"):
        hit = re.search(rf"\b{key}:(\d+)", text)
        if hit:
            use[key.lower()] = int(hit.group(1))
    return use


def loop_census(cubin: bytes) -> dict:
    """The instructions of the kernel's longest loop (for the W4A16 kernels: one K tile), by opcode, from the
    bundled nvdisasm. Why: at 32 rows these kernels are bound by instruction issue, not bytes (an int→float
    conversion runs at a quarter of the integer rate), so instructions per weight is a GPU-free proxy for their
    speed — a proxy, which the GPU's times overrule."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([_tool("nvdisasm"), "-c", f.name], capture_output=True, text=True, timeout=60).stdout
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    spans = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             if (m := re.search(r"\bBRA\b[^`]*`\((\.L_x_\d+)\)", line)) and labels.get(m.group(1), i) < i]
    if not spans:
        return {}
    start, end = max(spans, key=lambda se: se[1] - se[0])
    ops: dict[str, int] = {}
    for line in lines[start:end + 1]:
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] = ops.get(m.group(1), 0) + 1
    return {"loop_instructions": sum(ops.values()), "loop_ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def _weights_per_iteration(launch: Launch) -> int | None:
    """Weights one program's K-loop iteration consumes (the W4A16 kernels), else None."""
    a = launch.args
    if launch.kernel == "_linear_kernel":
        return a["BLOCK_K"] * a["BLOCK_N"]
    if launch.kernel == "_moe_kernel":
        return a["BLOCK_K"] * a["BLOCK_N"] * (2 if a["GATED"] else 1)
    return None


# Shared memory one block may use (opt-in maximum), by compute capability: a kernel above it compiles but cannot
# launch ("out of resources").
MAX_SHARED = {80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448, 100: 232_448, 120: 101_376}


def _specialized(launch: Launch, target) -> tuple[dict, dict, dict | None, dict]:
    """Signature, constexprs, attributes and options as the JIT would make them at launch: an int argument
    equal to 1 becomes a constant and pointers and ints divisible by 16 are marked so — what lets the compiler
    vectorize a load, so the compiled code is the code that runs. Falls back to plain types (no
    specialization, attrs None) where this triton's internals differ."""
    try:
        from triton.compiler import make_backend
        from triton.runtime.jit import create_function_from_signature

        backend = make_backend(target)
        binder = create_function_from_signature(launch.fn.signature, launch.fn.params, backend)
        bound, spec, opts = binder(**launch.args, **launch.options)
        options, sig, consts, attrs = launch.fn._pack_args(backend, dict(launch.options), bound, spec, opts)
        return sig, consts, attrs, options.__dict__
    except Exception:
        sig, consts = _signature(launch)
        return sig, consts, None, dict(launch.options)


def compile_launch(launch: Launch, arch: int, sass: bool = False) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    sig, consts, attrs, options = _specialized(launch, target)
    t0 = time.perf_counter()
    try:
        compiled = triton.compile(ASTSource(fn=launch.fn, signature=sig, constexprs=consts, attrs=attrs or {}),
                                  target=target, options=options)
    except Exception as err:  # report: the finding is which kernel fails where
        msg = f"{type(err).__name__}: {err}"
        return {"ok": False, "error": msg[-1500:]}
    out = {"ok": True, "compile_s": round(time.perf_counter() - t0, 2), "num_warps": compiled.metadata.num_warps,
           "shared_bytes": compiled.metadata.shared, "specialized": attrs is not None}
    out.update(resource_usage(compiled.asm["cubin"]))
    limit = MAX_SHARED.get(arch)
    out["fits"] = limit is None or out["shared_bytes"] <= limit
    out["spills"] = out.get("stack", 0) > 0 or out.get("local", 0) > 0  # a stack frame here is spilled registers
    out["ok"] = out["fits"]
    per_iter = _weights_per_iteration(launch)
    if sass and per_iter:
        census = loop_census(compiled.asm["cubin"])
        if census:  # thread instructions per weight: a warp instruction is 32 threads' worth
            threads = 32 * compiled.metadata.num_warps
            census["per_weight"] = round(census["loop_instructions"] * threads / per_iter, 2)
            out.update(census)
    return out


def compile_share(archs: list[int], sass: bool, share: int = 0, shares: int = 1) -> list[dict]:
    """Every `shares`-th captured launch from `share` on, compiled for each arch, in capture order."""
    results = []
    for index, launch in enumerate(capture_launches()):
        if index % shares == share:
            for arch in archs:
                results.append({"kernel": launch.kernel, "case": launch.case, "arch": f"sm_{arch}", "launch": index,
                                **compile_launch(launch, arch, sass)})
    return results


def compile_in_parallel(archs: list[int], sass: bool, jobs: int) -> list[dict]:
    """The launches shared among `jobs` processes (each captures them itself: a launch holds its JIT function and
    tensors), merged back into capture order. Why: one process compiles ~90 launches × 3 archs one at a time —
    minutes on a clean machine (no triton cache), in a CI test — and each compile uses one core."""
    cmd = [sys.executable, "-m", "clover_local.runtime.kernels.compile_check", "--arch", ",".join(map(str, archs)),
           *(["--sass"] if sass else [])]
    children = [subprocess.Popen([*cmd, "--share", f"{k}/{jobs}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for k in range(jobs)]
    results = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"compile_check share failed (exit {child.returncode}): {err[-2000:]}")
        results += json.loads(out)
    return sorted(results, key=lambda r: r["launch"])  # (stable: a launch's archs stay in the order compiled)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="90,120", help="compute capabilities, e.g. 90 (H100/H200), 120 (RTX 50)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    parser.add_argument("--sass", action="store_true",
                        help="also count the W4A16 kernels' K-loop instructions per weight (nvdisasm)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                        help="processes compiling at once (default: the cores, at most 4)")
    parser.add_argument("--share", help=argparse.SUPPRESS)  # K/N: one process's share, printed as a JSON list
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("error: unset TRITON_INTERPRET: the kernels must be compiled, not interpreted", file=sys.stderr)
        return 2
    archs = [int(a) for a in args.arch.split(",") if a]
    if args.share:
        share, shares = map(int, args.share.split("/"))
        print(json.dumps(compile_share(archs, args.sass, share, shares)))
        return 0
    results = (compile_in_parallel(archs, args.sass, args.jobs) if args.jobs > 1
               else compile_share(archs, args.sass))
    ok = all(r["ok"] for r in results)
    import triton  # the compiler's version decides the census (triton 3.6 vs 3.8: BENCHMARKS.md)

    if args.json:
        print(json.dumps({"ok": ok, "triton": triton.__version__, "results": results}, indent=1))
    else:
        print(f"triton {triton.__version__}")
        for r in results:
            if "error" in r:
                what = "FAILED " + r["error"][:300]
            else:
                what = (f"regs {r.get('reg', '?'):>3}  stack {r.get('stack', '?'):>5} B  shared {r['shared_bytes']:>6} B"
                        f"{'' if r['fits'] else ' (over the limit)'}  warps {r['num_warps']}  {r['compile_s']:.1f}s")
                if "per_weight" in r:
                    top = ", ".join(f"{op} {n}" for op, n in list(r["loop_ops"].items())[:6])
                    what += f"\n{'':30} K loop: {r['loop_instructions']} instructions, {r['per_weight']}/weight ({top})"
            print(f"{r['arch']:6} {r['kernel']:22} {r['case']:44} {what}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
