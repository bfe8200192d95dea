"""A long causal GDN pass (a prompt's prefill chunk) in two Triton launches per layer: the chunked (WY) form of
`model.gdn.chunk_delta_rule`, with the conv, L2 norms and gates inside the first.

Why: the model's chunked form is eager PyTorch, ~130 launches per GDN layer and chunk of the prompt
(`docs/launch_count.py --pass prefill`: 598 launches in a 512-row chunk of the 4-layer synthetic pack, most of
them the delta rule's matmuls, products and triangular solves; ≈ 4,500 at 35B), each on tensors of a few MB.
The row-by-row kernel of a commit (`gdn_causal.py`) would be one launch, but it walks the rows one after the
other, with a reduction across the state per row: fine for a 32-row block, slow for 512. The chunked form
walks chunks of C rows instead, and everything inside a chunk that does not depend on the state is parallel:

1. `_gdn_chunk_prep_kernel`, one program per (sequence, value head, chunk), all chunks at once: the conv → SiLU
   → q̂ (scaled by Dk^-0.5), k̂ L2-normalised, v, the decays g and β = sigmoid(b), γ = the cumulative g in the
   chunk; then A[t,s] = β_t e^{γ_t−γ_s} k̂_t·k̂_s (s < t), T = (I + A)^{-1} by forward substitution (a product of
   Neumann factors would be parallel but cancels catastrophically when keys repeat: its terms grow like
   binomials), and what the scan needs: U₀ = T(βV), W = T(β e^γ K), P = (Q Kᵀ ⊙ e^{γ_t−γ_s}) causal,
   Q e^γ, K e^{γ_C−γ}, e^{γ_C}.
2. `_gdn_chunk_scan_kernel`, one program per (sequence, value head, slice of value channels), chunk after
   chunk with its [Dk, BLOCK_DV] slice of the state in registers: U = U₀ − W S; O = (Q e^γ) S + P U;
   S ← e^{γ_C} S + (K e^{γ_C−γ})ᵀ U. Four small dots per chunk.

The math is the model's (`GatedDeltaNet.conv`, `split_heads`, `gates`, `chunk_delta_rule`): tests pin it there
(interpreted on CPU; `gpu_check` at the real shapes). fp32 throughout, where the eager path rounds the conv
output to the activation dtype: they agree within bf16 rounding, to fp32 rounding in fp32.

`fused_gdn_chunked(gdn, rows, ring, state, a, b)` has the signature of `GatedDeltaNet.causal_kernel`;
`gdn_causal.fused_gdn_causal` hands it every pass longer than a block.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .gdn_preview import _conv_silu, conv_inputs

CHUNK = 64  # rows per chunk: the forward substitution is C sequential steps, the scan one step per C rows
PREC = "tf32"  # the dots' inputs on tensor cores (fp32 FMA dots spilled 8–18 KB a thread; error: docs/gdn_tf32_error.py)


@triton.jit
def _gdn_chunk_prep_kernel(
    rows_ptr, ring_ptr, cw_ptr, a_ptr, b_ptr, alog_ptr, dtb_ptr,
    qd_ptr, kd_ptr, w_ptr, u_ptr, p_ptr, eg_ptr,
    T, NC, KEY_CH, REP, eps_qk,
    stride_rb, stride_rt, stride_gb, stride_gt, stride_ab, stride_at, stride_bb, stride_bt,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, KER: tl.constexpr,
    PREC: tl.constexpr,
):
    """Program (b·HV + h, c): chunk c (rows c·C …) of value head h of sequence b; key head h // REP. Writes the
    chunk's state-independent parts at [(b·HV + h)·NC + c]: Q e^γ, K e^{γ_C−γ}, W [C, DK]; U₀ [C, DV];
    P [C, C]; e^{γ_C}. Rows past T are zeros (k̂ = v = β = g = 0): they change nothing."""
    pid = tl.program_id(0)
    c = tl.program_id(1)
    b = pid // HV
    h = pid % HV
    kh = h // REP
    t0 = c * C
    rows_b = rows_ptr + b.to(tl.int64) * stride_rb
    ring_b = ring_ptr + b.to(tl.int64) * stride_gb
    t = tl.arange(0, C)
    inside = t0 + t < T
    dk = tl.arange(0, DK)
    dv = tl.arange(0, DV)
    slot = (pid.to(tl.int64) * NC + c)

    # the gates: β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias) (torch's softplus: linear past 20)
    av = tl.load(a_ptr + b.to(tl.int64) * stride_ab + (t0 + t) * stride_at + h, mask=inside, other=0.0)
    av = av.to(tl.float32) + tl.load(dtb_ptr + h).to(tl.float32)
    soft = tl.where(av > 20.0, av, tl.log(1.0 + tl.exp(tl.minimum(av, 20.0))))
    g = tl.where(inside, -tl.exp(tl.load(alog_ptr + h).to(tl.float32)) * soft, 0.0)
    bv = tl.load(b_ptr + b.to(tl.int64) * stride_bb + (t0 + t) * stride_bt + h, mask=inside, other=0.0)
    beta = tl.where(inside, 1.0 / (1.0 + tl.exp(-bv.to(tl.float32))), 0.0)
    gamma = tl.cumsum(g, 0)
    g_last = tl.sum(tl.where(t == C - 1, gamma, 0.0), 0)  # the chunk's decay (padded rows add g = 0)

    # what needs q̂ and k̂ first, so that neither lives through the substitution (registers: sm_120 spilled)
    k = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, KEY_CH + kh * DK, T, stride_rt, stride_gt, DK, C, KER, False,
                   t0)
    k = k / tl.sqrt(tl.sum(k * k, 1) + eps_qk)[:, None]
    q = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, kh * DK, T, stride_rt, stride_gt, DK, C, KER, False, t0)
    q = q / tl.sqrt(tl.sum(q * q, 1) + eps_qk)[:, None] * (DK ** -0.5)
    lower = t[:, None] > t[None, :]
    causal = t[:, None] >= t[None, :]
    decay = tl.exp(tl.where(causal, gamma[:, None] - gamma[None, :], 0.0))  # e^{γ_t−γ_s}, s ≤ t (never of a positive)
    p = tl.where(causal, tl.dot(q, tl.trans(k), input_precision=PREC) * decay, 0.0)
    tl.store(p_ptr + slot * (C * C) + t[:, None] * C + t[None, :], p)
    e_gamma = tl.exp(gamma)
    tile_k = slot * (C * DK) + t[:, None] * DK + dk[None, :]
    tl.store(qd_ptr + tile_k, q * e_gamma[:, None])
    tl.store(kd_ptr + tile_k, k * tl.exp(g_last - gamma)[:, None])
    tl.store(w_ptr + tile_k, k * (beta * e_gamma)[:, None])  # β e^γ K, until W = T·(β e^γ K) replaces it
    a_mat = tl.where(lower, beta[:, None] * tl.dot(k, tl.trans(k), input_precision=PREC) * decay, 0.0)
    # T = (I + A)^{-1}, row by row: T[i] = e_i − Σ_{j<i} A[i,j] T[j] (rows j < i already final)
    inv = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    for i in range(1, C):
        a_i = tl.sum(tl.where(t[:, None] == i, a_mat, 0.0), 0)  # A's row i, over j
        row = tl.sum(a_i[:, None] * inv, 0)
        inv = tl.where(t[:, None] == i, inv - row[None, :], inv)

    v = _conv_silu(rows_b, ring_b, cw_ptr, cw_ptr, 2 * KEY_CH + h * DV, T, stride_rt, stride_gt, DV, C, KER, False,
                   t0)
    tl.store(u_ptr + slot * (C * DV) + t[:, None] * DV + dv[None, :],
             tl.dot(inv, v * beta[:, None], input_precision=PREC))
    tl.debug_barrier()  # β e^γ K was stored by other threads than read it
    w = tl.dot(inv, tl.load(w_ptr + tile_k), input_precision=PREC)
    tl.debug_barrier()  # every thread has read it before any overwrites it
    tl.store(w_ptr + tile_k, w)
    tl.store(eg_ptr + slot, tl.exp(g_last))


@triton.jit
def _gdn_chunk_scan_kernel(
    qd_ptr, kd_ptr, w_ptr, u_ptr, p_ptr, eg_ptr, state_ptr, o_ptr, new_ptr,
    T, NC,
    stride_sb, stride_sh, stride_sk, stride_sv, stride_ob, stride_ot,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_DV: tl.constexpr, C: tl.constexpr,
    PREC: tl.constexpr,
):
    """Program (b·HV + h, s): value channels s·BLOCK_DV … of value head h of sequence b, over every chunk in
    order, the state's [DK, BLOCK_DV] slice in registers from the committed state to the new one."""
    pid = tl.program_id(0)
    s_id = tl.program_id(1)
    b = pid // HV
    h = pid % HV
    t = tl.arange(0, C)
    dk = tl.arange(0, DK)
    dvl = tl.arange(0, BLOCK_DV)
    dv = s_id * BLOCK_DV + dvl
    s = tl.load(state_ptr + b.to(tl.int64) * stride_sb + h * stride_sh + dk[:, None] * stride_sk
                + dv[None, :] * stride_sv).to(tl.float32)
    o_b = o_ptr + b.to(tl.int64) * stride_ob + h * DV + dv[None, :]
    for c in range(0, NC):
        slot = pid.to(tl.int64) * NC + c
        kk = slot * (C * DK) + t[:, None] * DK + dk[None, :]
        u = tl.load(u_ptr + slot * (C * DV) + t[:, None] * DV + dv[None, :])
        u -= tl.dot(tl.load(w_ptr + kk), s, input_precision=PREC)  # the chunk's values, corrected for S
        o = tl.dot(tl.load(qd_ptr + kk), s, input_precision=PREC)
        o += tl.dot(tl.load(p_ptr + slot * (C * C) + t[:, None] * C + t[None, :]), u, input_precision=PREC)
        rows = c * C + t
        tl.store(o_b + rows[:, None] * stride_ot, o, mask=(rows < T)[:, None])
        s = s * tl.load(eg_ptr + slot) + tl.dot(tl.trans(tl.load(kd_ptr + kk)), u, input_precision=PREC)
    tl.store(new_ptr + b.to(tl.int64) * (HV * DK * DV) + h * (DK * DV) + dk[:, None] * DV + dv[None, :], s)


def fused_gdn_chunked(gdn, rows: Tensor, ring: Tensor | None, state: Tensor, a: Tensor, b: Tensor,
                      chunk: int = CHUNK) -> tuple[Tensor, Tensor]:
    """`GatedDeltaNet`'s causal core over any number of rows, from the pre-conv rows [B,T,C]: (o [B,T,Hv,Dv] fp32
    before the gated norm, the new state [B,Hv,Dk,Dv] fp32). ring [B,K-1,C] (None: zeros), state [B,Hv,Dk,Dv]
    (only read), a = in_proj_a(x), b = in_proj_b(x) [B,T,Hv]. `chunk`: rows per chunk, a power of two ≥ 16.
    Scratch: ≈ (3·Dk + Dv + C)·4 bytes per row and value head (at 35B, 512 rows: 36 MB)."""
    bsz, t, _ = rows.shape
    rows, ring, cw = conv_inputs(gdn, rows, ring)
    a = a if a.stride(-1) == 1 else a.contiguous()
    b = b if b.stride(-1) == 1 else b.contiguous()
    hv, dk, dv = gdn.hv, gdn.dk, gdn.dv
    nc = triton.cdiv(t, chunk)
    f32 = dict(dtype=torch.float32, device=rows.device)
    qd, kd, w = (torch.empty(bsz * hv * nc * chunk * dk, **f32) for _ in range(3))
    u = torch.empty(bsz * hv * nc * chunk * dv, **f32)
    p = torch.empty(bsz * hv * nc * chunk * chunk, **f32)
    eg = torch.empty(bsz * hv * nc, **f32)
    big = dk * dv >= 128 * 128
    _gdn_chunk_prep_kernel[(bsz * hv, nc)](
        rows, ring, cw, a, b, gdn.A_log, gdn.dt_bias, qd, kd, w, u, p, eg,
        t, nc, gdn.hk * dk, hv // gdn.hk, 1e-6,
        rows.stride(0), rows.stride(1), ring.stride(0), ring.stride(1), a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        HV=hv, DK=dk, DV=dv, C=chunk, KER=gdn.kernel, PREC=PREC, num_warps=8 if big else 4, num_stages=1,
    )
    o = torch.empty(bsz, t, hv, dv, **f32)
    new = torch.empty(bsz, hv, dk, dv, **f32)
    block_dv = min(32, dv)
    _gdn_chunk_scan_kernel[(bsz * hv, dv // block_dv)](
        qd, kd, w, u, p, eg, state, o, new,
        t, nc,
        state.stride(0), state.stride(1), state.stride(2), state.stride(3), o.stride(0), o.stride(1),
        HV=hv, DK=dk, DV=dv, BLOCK_DV=block_dv, C=chunk, PREC=PREC, num_warps=4, num_stages=1,
    )
    return o, new
