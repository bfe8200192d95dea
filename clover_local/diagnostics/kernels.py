"""Kernel checks: a small INT4 dense and MoE problem through the kernels chat would use (the Triton kernels against
the reference where they run, else the reference against the weights it was packed from), and the tuning table."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clover_local.diagnostics.common import FAIL, OK, REPORT, WARN, Result, cuda_available


@dataclass
class _KernelCase:
    """Where the smoke test runs and what it compares: the Triton kernels against the reference where they run
    (a CUDA GPU), else the PyTorch reference against the weights the pack was made from."""

    device: Any
    dtype: Any
    triton: bool
    tol: float

    @property
    def label(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        if self.triton:
            how = "interpreted " if self.device.type == "cpu" else ""
            return f"{how}Triton kernel ({self.device.type}, {dt}) vs the dequantize-then-matmul reference"
        return f"PyTorch reference ({self.device.type}, {dt}) vs the weights it was packed from"


def _kernel_case() -> _KernelCase:
    import torch

    from clover_local.loader import pick_dtype
    from clover_local.runtime.kernels import triton_on

    dev = torch.device("cuda" if cuda_available() else "cpu")
    dtype = pick_dtype(None, dev)  # what chat runs in: bfloat16 on CUDA, float32 on the CPU
    return _KernelCase(dev, dtype, triton_on(dev), 2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-3)


def _random_weight(out_f: int, in_f: int, group: int, gen: Any) -> tuple[dict, Any]:
    """A GPTQ-packed random 4-bit weight [out, in] (codes over the full range, zeros in [1, 15], scales > 0) and
    the dense fp32 weight it encodes, computed from the codes, not from the pack."""
    import torch

    from quantize.gptq_format import default_g_idx, pack_weight

    q = torch.randint(0, 16, (out_f, in_f), generator=gen)
    zeros = torch.randint(1, 16, (out_f, in_f // group), generator=gen)
    scales = (torch.rand(out_f, in_f // group, generator=gen) * 0.02 + 0.005).half().float()
    g_idx = default_g_idx(in_f, group)
    dense = (q - zeros[:, g_idx.long()]).float() * scales[:, g_idx.long()]
    return pack_weight(q, scales, zeros, g_idx, 4), dense


def _random_x(m: int, k: int, gen: Any) -> Any:
    import torch

    x = torch.randn(m, k, generator=gen)
    return torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)  # never zeros


def _max_rel(got: Any, want: Any) -> float:
    """max |got − want| / max |want| (NaN or inf anywhere: inf)."""
    import torch

    g, w = got.float().cpu(), want.float().cpu()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float((g - w).abs().max() / w.abs().max().clamp_min(1e-12))


def _kernel_result(kind: str, case: _KernelCase, err: float, seconds: float) -> Result:
    facts = {"path": "triton" if case.triton else "reference", "device": case.device.type,
             "dtype": str(case.dtype).replace("torch.", ""), "max_rel_err": err, "tolerance": case.tol,
             "seconds": round(seconds, 3)}
    detail = f"{case.label}: max rel. error {err:.2g} (tolerance {case.tol:g})"
    if not case.triton and case.device.type == "cpu":
        detail += "; the Triton kernel needs a CUDA GPU (the tests run it under TRITON_INTERPRET=1)"
    if err <= case.tol:
        return Result(OK, detail, facts=facts)
    what = "the Triton kernel's" if case.triton else "the PyTorch reference's"
    fix = ("CLOVER_DISABLE_TRITON=1 runs the PyTorch reference instead; " if case.triton else "") + REPORT
    return Result(FAIL, f"{detail}: {what} {kind} output is wrong on this machine", fix, facts)


def _compiling_note(case: _KernelCase, kind: str, say: Callable[[str], None]) -> None:
    if case.triton and case.device.type == "cuda":
        say(f"compiling the {kind} Triton kernel for this GPU (the first run only: Triton caches it)")


def check_kernel_dense(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime import kernels

    case = _kernel_case()
    gen = torch.Generator().manual_seed(0)
    k, n, group, m = 512, 256, 128, 32
    pack, dense = _random_weight(n, k, group, gen)
    x = _random_x(m, k, gen)
    args = [pack["qweight"], pack["scales"], pack["qzeros"]]
    xd, qw, sc, qz = (t.to(case.device) for t in (x.to(case.dtype), *args))
    _compiling_note(case, "dense", say)
    t0 = time.perf_counter()
    got = kernels.linear_w4a16(xd, qw, sc, qz, group, 4)
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    seconds = time.perf_counter() - t0
    if case.triton:
        want = kernels.linear_w4a16_ref(xd, qw, sc, qz, group, 4)
    else:
        want = (x.to(case.dtype).float() @ dense.t()).to(case.dtype)
    return _kernel_result("dense", case, _max_rel(got, want), seconds)


def check_kernel_moe(say: Callable[[str], None]) -> Result:
    import torch
    import torch.nn.functional as F

    from clover_local.runtime import kernels
    from clover_local.runtime.slab import SlabLayout

    case = _kernel_case()
    gen = torch.Generator().manual_seed(1)
    hidden, inter, experts, topk, m, group = 256, 128, 8, 2, 32, 128
    lay = SlabLayout(hidden, inter, 4, hidden // group, inter // group)  # the runtime's expert slab layout
    buf = torch.zeros(experts, lay.nbytes, dtype=torch.uint8)
    views = lay.views(buf)
    dense = []
    for e in range(experts):
        (gate, wg), (up, wu), (down, wd) = (_random_weight(inter, hidden, group, gen),
                                            _random_weight(inter, hidden, group, gen),
                                            _random_weight(hidden, inter, group, gen))
        lay.fill(views, e, gate, up, down)
        dense.append((wg, wu, wd))
    x = _random_x(m, hidden, gen).to(case.dtype)
    slot_ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(m)])
    weights = (torch.softmax(torch.randn(m, topk, generator=gen), -1) + 0.05).to(case.dtype)
    gate_up, down_stack = lay.stacks(buf.to(case.device))
    xd, sd, wd_ = x.to(case.device), slot_ids.to(case.device), weights.to(case.device)
    _compiling_note(case, "MoE", say)
    t0 = time.perf_counter()
    got = kernels.moe_w4a16(xd, sd, wd_, gate_up, down_stack)
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    seconds = time.perf_counter() - t0
    if case.triton:
        want = kernels.moe_w4a16_ref(xd, sd, wd_, gate_up, down_stack)
    else:  # token by token from the dense weights (the activation rounded to x's dtype, as the spec says)
        want = torch.zeros(m, hidden)
        for i in range(m):
            for j in range(topk):
                wg, wu, wdn = dense[int(slot_ids[i, j])]
                xi = x[i].float()
                act = (F.silu(xi @ wg.t()) * (xi @ wu.t())).to(case.dtype).float()
                want[i] += weights[i, j].float() * (act @ wdn.t())
        want = want.to(case.dtype)
    return _kernel_result("MoE", case, _max_rel(got, want), seconds)


def check_tuning(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.kernels import triton_on
    from clover_local.runtime.kernels.tuning import device_identity, read_table, table_path, tuning_enabled

    if not cuda_available():
        return Result(OK, "no GPU: tuning tables are made per GPU (`clover-local tune` on one)", facts={"gpu": False})
    dev = torch.device("cuda")
    if not triton_on(dev):
        return Result(OK, "not used: the Triton kernels do not run here (see triton above)", facts={"gpu": True})
    identity = device_identity(dev)
    path = table_path(identity)
    facts: dict[str, Any] = {"gpu": True, "identity": identity, "path": str(path), "enabled": tuning_enabled()}
    if not tuning_enabled():
        return Result(OK, f"off (CLOVER_TUNING={os.environ.get('CLOVER_TUNING')}): the default tiles run", facts=facts)
    table, why = read_table(path, identity)
    tune = "clover-local tune --synthetic full --quick (a few minutes, once per GPU; or tune YOUR_PACK)"
    if why:
        facts["problem"] = why
        return Result(WARN, f"ignored: {why}", tune, facts)
    if table is None:
        return Result(WARN, f"no tuning table for {identity['device']} with triton {identity['triton']} ({path}): "
                            "the default tiles run", tune, facts)
    facts["entries"] = len(table.entries)
    return Result(OK, f"{path} ({len(table.entries)} calls tuned{', ' + table.date if table.date else ''})",
                  facts=facts)
