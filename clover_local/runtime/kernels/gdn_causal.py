"""A short causal GDN pass (a block's commit) in one Triton launch per layer: conv → SiLU → q̂, k̂ L2-normalised,
the gates, and the delta rule row by row over the block, from the committed state to the new one.

Why: the model's causal path is the chunked (WY) form plus the conv, norms and gates in eager PyTorch: ~100
launches per GDN layer (`docs/launch_count.py --pass commit`: 397 launches in a commit of the 4-layer synthetic
pack against 96 in a preview), ~3,000 in a 35B commit, each a few µs even inside a CUDA graph, for a pass
whose arithmetic is tiny (32 rows). Its state columns are independent (column j of S only needs q, k, v_j, g, β),
so each program owns one (sequence, value head, slice of value channels): it computes what does not depend on
the state for every row at once (conv, norms, gates), then keeps that [Dk, BLOCK_DV] slice of the state in
registers and runs the recurrence of `model.gdn.recurrent_delta_rule` over the rows: S ← S·e^g;
S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq. A longer causal pass (a prefill chunk) goes to the chunked form
(`gdn_chunked.py`, two launches), whose work is parallel over the rows where this kernel's is sequential.

The math is the model's (`GatedDeltaNet.conv`, `split_heads`, `gates`, `delta_rule`): tests pin it there
(interpreted on CPU; `gpu_check` at the real shapes). fp32 throughout, where the eager path rounds the conv
output to the activation dtype: they agree within bf16 rounding, to fp32 rounding in fp32.

`fused_gdn_causal(gdn, rows, ring, state, a, b)` has the signature `GatedDeltaNet.causal_kernel` expects; the
runtime installs it on CUDA (`runtime/load.py`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .gdn_chunked import fused_gdn_chunked
from .gdn_preview import _conv_silu, conv_inputs, supports  # noqa: F401 (supports: the same head-dim rule)

SHORT_ROWS = 32  # the longest pass run row by row (a block of the real model); longer ones run chunked


@triton.jit
def _gdn_causal_kernel(
    rows_ptr, ring_ptr, cw_ptr, a_ptr, b_ptr, alog_ptr, dtb_ptr, state_ptr, o_ptr, new_ptr, scratch_ptr,
    T, KEY_CH, REP, eps_qk,
    stride_rb, stride_rt, stride_gb, stride_gt, stride_ab, stride_at, stride_bb, stride_bt,
    stride_sb, stride_sh, stride_sk, stride_sv, stride_ob, stride_ot,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_T: tl.constexpr,
    KER: tl.constexpr,
):
    """Program (b·HV + h, c): value head h of sequence b, value channels c·BLOCK_DV …; key head h // REP.

    First, for every row at once: the conv, q̂ (scaled by Dk^-0.5) and k̂, v, the decay e^g and β, into this
    program's scratch; then the recurrence, row by row, on the [DK, BLOCK_DV] slice of the state it keeps in
    registers (the only sequential part: a few vector ops per row)."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    b = pid // HV
    h = pid % HV
    kh = h // REP
    rows_b = rows_ptr + b.to(tl.int64) * stride_rb
    ring_b = ring_ptr + b.to(tl.int64) * stride_gb
    t = tl.arange(0, BLOCK_T)
    inside = t < T
    dk = tl.arange(0, DK)
    dvl = tl.arange(0, BLOCK_DV)
    dv = c * BLOCK_DV + dvl
    # scratch per program: q̂ [BLOCK_T, DK], k̂ [BLOCK_T, DK], v [BLOCK_T, BLOCK_DV], decay, β [BLOCK_T]
    sq = scratch_ptr + (pid * tl.num_programs(1) + c).to(tl.int64) * (BLOCK_T * (2 * DK + BLOCK_DV + 2))
    sk = sq + BLOCK_T * DK
    sv = sk + BLOCK_T * DK
    sg = sv + BLOCK_T * BLOCK_DV
    sb = sg + BLOCK_T
    # the causal conv (no right taps: cw_ptr stands in for the right weights, never read)
    q = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, kh * DK, T, stride_rt, stride_gt, DK, BLOCK_T, KER, False)
    k = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, KEY_CH + kh * DK, T, stride_rt, stride_gt, DK, BLOCK_T, KER,
                   False)
    v = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, 2 * KEY_CH + h * DV + c * BLOCK_DV, T, stride_rt, stride_gt,
                   BLOCK_DV, BLOCK_T, KER, False)
    q = q / tl.sqrt(tl.sum(q * q, 1) + eps_qk)[:, None] * (DK ** -0.5)
    k = k / tl.sqrt(tl.sum(k * k, 1) + eps_qk)[:, None]
    # the gates: β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias) (torch's softplus: linear past 20)
    av = tl.load(a_ptr + b.to(tl.int64) * stride_ab + t * stride_at + h, mask=inside, other=0.0).to(tl.float32)
    av += tl.load(dtb_ptr + h).to(tl.float32)
    soft = tl.where(av > 20.0, av, tl.log(1.0 + tl.exp(tl.minimum(av, 20.0))))
    decay = tl.exp(-tl.exp(tl.load(alog_ptr + h).to(tl.float32)) * soft)
    bv = tl.load(b_ptr + b.to(tl.int64) * stride_bb + t * stride_bt + h, mask=inside, other=0.0).to(tl.float32)
    tl.store(sq + t[:, None] * DK + dk[None, :], q)
    tl.store(sk + t[:, None] * DK + dk[None, :], k)
    tl.store(sv + t[:, None] * BLOCK_DV + dvl[None, :], v)
    tl.store(sg + t, decay)
    tl.store(sb + t, 1.0 / (1.0 + tl.exp(-bv)))
    tl.debug_barrier()  # the rows below are read by other threads than wrote them

    s_off = dk[:, None] * stride_sk + dv[None, :] * stride_sv
    s = tl.load(state_ptr + b.to(tl.int64) * stride_sb + h * stride_sh + s_off).to(tl.float32)
    o_b = o_ptr + b.to(tl.int64) * stride_ob + h * DV + dv
    for r in range(0, T):
        kr = tl.load(sk + r * DK + dk)
        s = s * tl.load(sg + r)
        delta = (tl.load(sv + r * BLOCK_DV + dvl) - tl.sum(s * kr[:, None], 0)) * tl.load(sb + r)
        s = s + kr[:, None] * delta[None, :]
        tl.store(o_b + r * stride_ot, tl.sum(s * tl.load(sq + r * DK + dk)[:, None], 0))
    tl.store(new_ptr + b.to(tl.int64) * (HV * DK * DV) + h * (DK * DV) + dk[:, None] * DV + dv[None, :], s)


# compile_check at the real shapes (sm_90, sm_120): a [128, 32] fp32 slice of the state, 4 warps.
def fused_gdn_causal(gdn, rows: Tensor, ring: Tensor | None, state: Tensor, a: Tensor, b: Tensor
                     ) -> tuple[Tensor, Tensor]:
    """`GatedDeltaNet`'s causal core from the pre-conv rows [B,T,C]: (o [B,T,Hv,Dv] fp32 before the gated norm,
    the new state [B,Hv,Dk,Dv] fp32). ring [B,K-1,C] (None: zeros), state [B,Hv,Dk,Dv] (only read),
    a = in_proj_a(x), b = in_proj_b(x) [B,T,Hv]. Passes longer than SHORT_ROWS go to `fused_gdn_chunked`."""
    bsz, t, _ = rows.shape
    if t > SHORT_ROWS:
        return fused_gdn_chunked(gdn, rows, ring, state, a, b)
    rows, ring, cw = conv_inputs(gdn, rows, ring)
    a = a if a.stride(-1) == 1 else a.contiguous()
    b = b if b.stride(-1) == 1 else b.contiguous()
    o = torch.empty(bsz, t, gdn.hv, gdn.dv, dtype=torch.float32, device=rows.device)
    new = torch.empty(bsz, gdn.hv, gdn.dk, gdn.dv, dtype=torch.float32, device=rows.device)
    block_dv = min(32, gdn.dv)
    block_t = max(16, triton.next_power_of_2(t))
    grid = (bsz * gdn.hv, gdn.dv // block_dv)
    scratch = torch.empty(grid[0] * grid[1] * block_t * (2 * gdn.dk + block_dv + 2), dtype=torch.float32,
                          device=rows.device)
    _gdn_causal_kernel[grid](
        rows, ring, cw, a, b, gdn.A_log, gdn.dt_bias, state, o, new, scratch,
        t, gdn.hk * gdn.dk, gdn.hv // gdn.hk, 1e-6,
        rows.stride(0), rows.stride(1), ring.stride(0), ring.stride(1), a.stride(0), a.stride(1),
        b.stride(0), b.stride(1), state.stride(0), state.stride(1), state.stride(2), state.stride(3),
        o.stride(0), o.stride(1),
        HV=gdn.hv, DK=gdn.dk, DV=gdn.dv, BLOCK_DV=block_dv, BLOCK_T=block_t, KER=gdn.kernel, num_warps=4, num_stages=1,
    )
    return o, new
