"""The GDN preview core in one Triton launch per layer: conv (left taps over the ring, right taps inside the
block) → SiLU → q̂, k̂ L2-normalised → the preview mix (`model.gdn.preview_mix`) → the gated RMSNorm.

Why: in eager PyTorch that path is ~50 small kernels per layer (4.3 ms of a 26.8 ms pass over 30 GDN layers on an
H200, graph-profiled, BENCHMARKS.md); every tensor it touches is tiny except the layer's state, so one program per
(sequence, value head) that keeps its rows in registers does it in one read of the state.

The math is the model's (`GatedDeltaNet.conv`, `split_heads`, `preview_mix`, `GatedRMSNorm`): this file is a
kernel for it, pinned to it by tests (interpreted on CPU, compiled at real shapes in `gpu_check`). It computes
in fp32 throughout and rounds once at the end, where the eager path rounds the conv output and the mix output
to the activation dtype on the way: the two agree within bf16 rounding, exactly in fp32.

`fused_gdn_preview(gdn, rows, ring, state, n_prefix, z)` has the signature `GatedDeltaNet.preview_kernel`
expects; the runtime installs it on CUDA (`runtime/load.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _conv_silu(
    rows_b, ring_b, cw_ptr, rw_ptr, ch0, T, stride_rt, stride_gt,
    D: tl.constexpr, BLOCK_T: tl.constexpr, KER: tl.constexpr, RIGHT: tl.constexpr = True, t0=0,
):
    """silu(conv) of channels ch0 … ch0+D of rows t0 … t0+BLOCK_T-1, fp32 [BLOCK_T, D] (rows ≥ T are zero).

    Left tap j of row t reads xs[t + j] where xs = [ring (KER-1 rows); rows]; with RIGHT (a preview), right tap
    d (1 … KER-1) reads rows[t + d] inside the block; without (a causal pass, kernels/gdn_causal.py) rw_ptr is
    not read. Weights: cw [C, KER], rw [C, KER-1], both contiguous. t0 > 0: a later chunk of a long causal pass
    (kernels/gdn_chunked.py), whose left taps read the rows before it."""
    t = t0 + tl.arange(0, BLOCK_T)
    ch = ch0 + tl.arange(0, D)
    inside = t < T
    acc = tl.zeros((BLOCK_T, D), dtype=tl.float32)
    for j in tl.static_range(KER):
        r = t + j - (KER - 1)  # row of `rows`; negative: row KER-1+r of the ring
        in_rows = inside & (r >= 0)
        in_ring = inside & (r < 0)
        x_rows = tl.load(rows_b + tl.maximum(r, 0)[:, None] * stride_rt + ch[None, :], mask=in_rows[:, None],
                         other=0.0)
        x_ring = tl.load(ring_b + tl.maximum(r + KER - 1, 0)[:, None] * stride_gt + ch[None, :],
                         mask=in_ring[:, None], other=0.0)
        w = tl.load(cw_ptr + ch * KER + j).to(tl.float32)
        acc += (x_rows.to(tl.float32) + x_ring.to(tl.float32)) * w[None, :]
    if RIGHT:
        for d in tl.static_range(1, KER):
            r = t + d
            ok = r < T
            x = tl.load(rows_b + tl.minimum(r, T - 1)[:, None] * stride_rt + ch[None, :], mask=ok[:, None],
                        other=0.0)
            w = tl.load(rw_ptr + ch * (KER - 1) + (d - 1)).to(tl.float32)
            acc += x.to(tl.float32) * w[None, :]
    return acc / (1.0 + tl.exp(-acc))


@triton.jit
def _preview_softmax(logits, inside, n_at, hbias_at, hc_at, block_size):
    """The preview mix's weights for scaled block logits [T, T] (every block row: bidirectional; rows past the
    block, `inside` false, get none) and one history slot of logit bias + c·ln(n / block_size), empty (no
    weight) with no prefix (n = 0): (p_block [T, T], p_hist [T]), each row summing to one."""
    logits = tl.where(inside[None, :], logits, float("-inf"))
    n = tl.load(n_at).to(tl.float32)
    hist = tl.load(hbias_at).to(tl.float32) + tl.load(hc_at).to(tl.float32) * tl.log(tl.maximum(n, 1.0) / block_size)
    hist = tl.where(n > 0, hist, float("-inf"))
    top = tl.maximum(tl.max(logits, 1), hist)
    e = tl.exp(logits - top[:, None])
    e_hist = tl.exp(hist - top)
    denom = tl.sum(e, 1) + e_hist
    return e / denom[:, None], e_hist / denom


@triton.jit
def _gdn_preview_kernel(
    rows_ptr, ring_ptr, cw_ptr, rw_ptr, state_ptr, scale_ptr, hbias_ptr, hc_ptr, n_ptr, z_ptr, nw_ptr, out_ptr,
    T, KEY_CH, REP, block_size, eps_qk, eps_norm,
    stride_rb, stride_rt, stride_gb, stride_gt, stride_sb, stride_sh, stride_sk, stride_sv, stride_n,
    stride_zb, stride_zt, stride_ob, stride_ot,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_DK: tl.constexpr,
    KER: tl.constexpr, PREC: tl.constexpr,
):
    """One program per (sequence b, value head h); key head h // REP (value heads share key heads in runs)."""
    pid = tl.program_id(0)
    b = pid // HV
    h = pid % HV
    kh = h // REP
    rows_b = rows_ptr + b.to(tl.int64) * stride_rb
    ring_b = ring_ptr + b.to(tl.int64) * stride_gb
    # q̂, k̂ in chunks of BLOCK_DK channels (the conv recomputed per use: 7 cached loads) so that neither they
    # nor the [Dk, Dv] state are ever whole in registers: first the rows' L2 norms, then the logits and the
    # state read accumulated chunk by chunk.
    q_ss = tl.zeros((BLOCK_T,), tl.float32)
    k_ss = tl.zeros((BLOCK_T,), tl.float32)
    for c in range(0, DK, BLOCK_DK):
        qc = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, kh * DK + c, T, stride_rt, stride_gt, BLOCK_DK, BLOCK_T, KER)
        kc = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, KEY_CH + kh * DK + c, T, stride_rt, stride_gt, BLOCK_DK,
                        BLOCK_T, KER)
        q_ss += tl.sum(qc * qc, 1)
        k_ss += tl.sum(kc * kc, 1)
    q_inv = 1.0 / tl.sqrt(q_ss + eps_qk)
    k_inv = 1.0 / tl.sqrt(k_ss + eps_qk)

    t = tl.arange(0, BLOCK_T)
    inside = t < T
    dv = tl.arange(0, DV)
    s_base = state_ptr + b.to(tl.int64) * stride_sb + h * stride_sh
    logits = tl.zeros((BLOCK_T, BLOCK_T), tl.float32)
    read = tl.zeros((BLOCK_T, DV), tl.float32)
    for c in range(0, DK, BLOCK_DK):
        qc = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, kh * DK + c, T, stride_rt, stride_gt, BLOCK_DK, BLOCK_T,
                        KER) * q_inv[:, None]
        kc = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, KEY_CH + kh * DK + c, T, stride_rt, stride_gt, BLOCK_DK,
                        BLOCK_T, KER) * k_inv[:, None]
        logits += tl.dot(qc, tl.trans(kc), input_precision=PREC)
        kk = c + tl.arange(0, BLOCK_DK)
        s_c = tl.load(s_base + kk[:, None] * stride_sk + dv[None, :] * stride_sv).to(tl.float32)
        read += tl.dot(qc, s_c, input_precision=PREC)  # Sᵀq̂ of the clean prefix state
    p_block, p_hist = _preview_softmax(logits * tl.load(scale_ptr + h).to(tl.float32), inside, n_ptr + b * stride_n,
                                       hbias_ptr + h, hc_ptr + h, block_size)
    v = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, 2 * KEY_CH + h * DV, T, stride_rt, stride_gt, DV, BLOCK_T, KER)
    o = p_hist[:, None] * read * (DK ** -0.5) + tl.dot(p_block, v, input_precision=PREC)

    # GatedRMSNorm: w · rmsnorm(o) · silu(z)
    o = o / tl.sqrt(tl.sum(o * o, 1) / DV + eps_norm)[:, None]
    w = tl.load(nw_ptr + dv).to(tl.float32)
    z = tl.load(z_ptr + b.to(tl.int64) * stride_zb + t[:, None] * stride_zt + (h * DV + dv)[None, :],
                mask=inside[:, None], other=0.0).to(tl.float32)
    res = o * w[None, :] * (z / (1.0 + tl.exp(-z)))
    out = out_ptr + b.to(tl.int64) * stride_ob + t[:, None] * stride_ot + (h * DV + dv)[None, :]
    tl.store(out, res.to(out_ptr.dtype.element_ty), mask=inside[:, None])


@triton.jit
def _gdn_preview_split_kernel(
    rows_ptr, ring_ptr, cw_ptr, rw_ptr, state_ptr, scale_ptr, hbias_ptr, hc_ptr, n_ptr, mix_ptr,
    T, KEY_CH, REP, block_size, eps_qk,
    stride_rb, stride_rt, stride_gb, stride_gt, stride_sb, stride_sh, stride_sk, stride_sv, stride_n,
    stride_mb, stride_mt,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_DV: tl.constexpr,
    KER: tl.constexpr, PREC: tl.constexpr,
):
    """Program (sequence b · value head h, value slice j): the preview mix of value channels j·BLOCK_DV … of head
    h, fp32, into mix [B, T, Hv·Dv] (the gated norm, which needs the head's whole row, is `layer_ops.gated_rms_norm`
    after it). q̂ and k̂ are whole in registers (one conv pass each, no recompute) and the state is read only
    for this slice: DV / BLOCK_DV times the programs of `_gdn_preview_kernel`, each with a shorter chain."""
    pid = tl.program_id(0)
    j = tl.program_id(1)
    b = pid // HV
    h = pid % HV
    kh = h // REP
    rows_b = rows_ptr + b.to(tl.int64) * stride_rb
    ring_b = ring_ptr + b.to(tl.int64) * stride_gb
    q = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, kh * DK, T, stride_rt, stride_gt, DK, BLOCK_T, KER)
    k = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, KEY_CH + kh * DK, T, stride_rt, stride_gt, DK, BLOCK_T, KER)
    q = q / tl.sqrt(tl.sum(q * q, 1) + eps_qk)[:, None]
    k = k / tl.sqrt(tl.sum(k * k, 1) + eps_qk)[:, None]
    t = tl.arange(0, BLOCK_T)
    inside = t < T
    dk = tl.arange(0, DK)
    dv = j * BLOCK_DV + tl.arange(0, BLOCK_DV)
    s_base = state_ptr + b.to(tl.int64) * stride_sb + h * stride_sh
    s = tl.load(s_base + dk[:, None] * stride_sk + dv[None, :] * stride_sv).to(tl.float32)
    read = tl.dot(q, s, input_precision=PREC)  # Sᵀq̂ of the clean prefix state, this slice
    logits = tl.dot(q, tl.trans(k), input_precision=PREC) * tl.load(scale_ptr + h).to(tl.float32)
    p_block, p_hist = _preview_softmax(logits, inside, n_ptr + b * stride_n, hbias_ptr + h, hc_ptr + h, block_size)
    v = _conv_silu(rows_b, ring_b, cw_ptr, rw_ptr, 2 * KEY_CH + h * DV + j * BLOCK_DV, T, stride_rt, stride_gt,
                   BLOCK_DV, BLOCK_T, KER)
    o = p_hist[:, None] * read * (DK ** -0.5) + tl.dot(p_block, v, input_precision=PREC)
    out = mix_ptr + b.to(tl.int64) * stride_mb + t[:, None] * stride_mt + (h * DV + dv)[None, :]
    tl.store(out, o, mask=inside[:, None])


@dataclass(frozen=True)
class PreviewConfig:
    """How a GDN preview runs: "whole" (`fused_gdn_preview`: one launch, a program per value head) or "split"
    (`split_gdn_preview` over value slices of block_dv channels). A tuned field set like the W4A16 tiles."""
    form: str = "whole"
    block_dv: int = 64


def preview_config() -> PreviewConfig:
    """The default form: CLOVER_GDN_PREVIEW=split, else the one-launch form (the one measured on a GPU so far)."""
    return PreviewConfig("split" if os.environ.get("CLOVER_GDN_PREVIEW") == "split" else "whole")


def run_preview(cfg: PreviewConfig, gdn, rows: Tensor, ring: Tensor | None, state: Tensor, n_prefix: Tensor,
                z: Tensor) -> Tensor:
    if cfg.form == "split":
        return split_gdn_preview(gdn, rows, ring, state, n_prefix, z, block_dv=min(cfg.block_dv, gdn.dv))
    return fused_gdn_preview(gdn, rows, ring, state, n_prefix, z)


def tuned_gdn_preview(gdn, rows: Tensor, ring: Tensor | None, state: Tensor, n_prefix: Tensor, z: Tensor) -> Tensor:
    """The preview kernel the runtime installs (`GatedDeltaNet.preview_kernel`): the form this GPU's tuning table
    names for the call (`clover-local tune` times the forms on the user's GPU, `tuning.gdn_preview_candidates`),
    else `preview_config()`'s. Host-side choice: a captured graph keeps the form it was captured with."""
    from . import tuning

    sig = tuning.Signature("gdn_preview", tuning.rows_bucket(rows.shape[1]), gdn.dk, gdn.dv, 0, 0, topk=gdn.hv)
    base = preview_config()
    if (rec := tuning.recording()) is not None:
        def rerun():  # the same call with any form, on copies of its inputs
            args = (rows.clone(), None if ring is None else ring.clone(), state.clone(), n_prefix.clone(), z.clone())
            return lambda c: run_preview(c, gdn, *args)

        rec.note(sig, base, rerun)
    return run_preview(tuning.apply(base, tuning.tuned(sig, rows.device), keep=()), gdn, rows, ring, state,
                       n_prefix, z)


def _pow2(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def supports(gdn) -> bool:
    """Head dims the kernel handles: powers of two ≥ 16 (tl.dot tiles; the real model's are 128)."""
    return _pow2(gdn.dk) and _pow2(gdn.dv) and gdn.hv % gdn.hk == 0


def conv_inputs(gdn, rows: Tensor, ring: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """What `_conv_silu` reads, as it needs them: rows [B,T,C] and ring [B,K-1,C] (zeros for None, in the rows'
    dtype) with unit channel strides, the conv weight as a contiguous [C, K]."""
    b, _, c = rows.shape
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    ring = rows.new_zeros(b, gdn.kernel - 1, c) if ring is None else ring.to(rows.dtype)
    ring = ring if ring.stride(-1) == 1 else ring.contiguous()
    cw = gdn.conv1d.weight.reshape(c, gdn.kernel)
    return rows, ring, cw if cw.is_contiguous() else cw.contiguous()


# compile_check at the real shapes (sm_90): the whole-tile first version spilled 8.5 KB of registers a thread;
# chunks of 32 key channels in a loop (not unrolled), 8 warps, 2 stages: 24 B, 24 KB of shared memory.
def fused_gdn_preview(gdn, rows: Tensor, ring: Tensor | None, state: Tensor, n_prefix: Tensor, z: Tensor) -> Tensor:
    """`GatedDeltaNet`'s preview from the pre-conv rows [B,T,C] to the normed output [B,T,Hv·Dv] (rows' dtype),
    ready for out_proj. ring [B,K-1,C] (None: zeros), state [B,Hv,Dk,Dv], n_prefix [B] (a device tensor: a
    captured graph reads it), z = in_proj_z(x) [B,T,Hv·Dv]."""
    b, t, c = rows.shape
    rows, ring, cw = conv_inputs(gdn, rows, ring)
    z = z.reshape(b, t, gdn.hv * gdn.dv)
    z = z if z.stride(-1) == 1 else z.contiguous()
    rw = gdn.conv_right_weight if gdn.conv_right_weight.is_contiguous() else gdn.conv_right_weight.contiguous()
    n = n_prefix.expand(b)
    out = rows.new_empty(b, t, gdn.hv * gdn.dv)
    block_t = max(16, triton.next_power_of_2(t))
    big = gdn.dk * gdn.dv >= 128 * 128
    _gdn_preview_kernel[(b * gdn.hv,)](
        rows, ring, cw, rw, state, gdn.bd_softmax_logit_scale, gdn.bd_softmax_history_bias,
        gdn.bd_softmax_history_c, n, z, gdn.norm.weight, out,
        t, gdn.hk * gdn.dk, gdn.hv // gdn.hk, float(gdn.block_size), 1e-6, float(gdn.norm.eps),
        rows.stride(0), rows.stride(1), ring.stride(0), ring.stride(1),
        state.stride(0), state.stride(1), state.stride(2), state.stride(3), n.stride(0),
        z.stride(0), z.stride(1), out.stride(0), out.stride(1),
        HV=gdn.hv, DK=gdn.dk, DV=gdn.dv, BLOCK_T=block_t, BLOCK_DK=min(32, gdn.dk), KER=gdn.kernel, PREC="ieee",
        num_warps=8 if big else 4, num_stages=2,
    )
    return out


def split_gdn_preview(gdn, rows: Tensor, ring: Tensor | None, state: Tensor, n_prefix: Tensor, z: Tensor,
                      block_dv: int = 64, num_warps: int | None = None) -> Tensor:
    """`fused_gdn_preview` in two launches: the mix over (head, value slice) programs (`_gdn_preview_split_kernel`:
    Hv·Dv/block_dv programs where the one-launch form has Hv, 32 at the real shapes on a GPU of 132 SMs), then the
    gated norm (`layer_ops.gated_rms_norm`, which rounds the mix to the rows' dtype first, as the eager path does).
    Chosen by CLOVER_GDN_PREVIEW=split; gpu_check times both forms at the real shapes (slices of 64 and 16). Why
    these tiles (compile_check at the real shapes, registers a thread and spilled bytes, sm_90 · sm_120, 8 warps):
    triton 3.8 — slices of 64: 108 · 140, none spilled (64 KB of shared memory); of 32: 255 with 376 B spilled on
    sm_90; of 16: 173 · 239; triton 3.6 (the H200 machine's) — of 64: 255 with 160 · 272 B spilled; of 32:
    246 · 255 (16 B); of 16: 223 · 166, none. At 4 warps every width spilled kilobytes. The one-launch form: 214 ·
    118 registers (3.8), 112 · 115 (3.6). The compilers disagree; the GPU's time decides the default."""
    from .layer_ops import gated_rms_norm

    b, t, c = rows.shape
    rows, ring, cw = conv_inputs(gdn, rows, ring)
    rw = gdn.conv_right_weight if gdn.conv_right_weight.is_contiguous() else gdn.conv_right_weight.contiguous()
    n = n_prefix.expand(b)
    block_dv = min(block_dv, gdn.dv)
    mix = rows.new_empty(b, t, gdn.hv * gdn.dv, dtype=torch.float32)
    block_t = max(16, triton.next_power_of_2(t))
    _gdn_preview_split_kernel[(b * gdn.hv, gdn.dv // block_dv)](
        rows, ring, cw, rw, state, gdn.bd_softmax_logit_scale, gdn.bd_softmax_history_bias,
        gdn.bd_softmax_history_c, n, mix,
        t, gdn.hk * gdn.dk, gdn.hv // gdn.hk, float(gdn.block_size), 1e-6,
        rows.stride(0), rows.stride(1), ring.stride(0), ring.stride(1),
        state.stride(0), state.stride(1), state.stride(2), state.stride(3), n.stride(0),
        mix.stride(0), mix.stride(1),
        HV=gdn.hv, DK=gdn.dk, DV=gdn.dv, BLOCK_T=block_t, BLOCK_DV=block_dv, KER=gdn.kernel, PREC="ieee",
        num_warps=num_warps or (8 if gdn.dk >= 128 else 4), num_stages=1,
    )
    gate = z.reshape(b, t, gdn.hv * gdn.dv).unflatten(-1, (gdn.hv, gdn.dv))
    normed = gated_rms_norm(mix.unflatten(-1, (gdn.hv, gdn.dv)), gate, gdn.norm.weight, float(gdn.norm.eps))
    return normed.reshape(b, t, gdn.hv * gdn.dv)
