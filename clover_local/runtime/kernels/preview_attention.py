"""A preview pass's attention in two Triton launches: the block's queries over the committed window and over
the block's own keys, split along the window (flash-decoding), then one merge.

Why: the PyTorch path concatenates the window with the block's keys and values (a copy of the whole window per
layer per pass), builds the mask, regroups the query heads and runs SDPA with a mask: 2.25 ms of a 26.8 ms pass
over 10 attention layers on an H200 (BENCHMARKS.md), where the window's bytes (≈ 9 MB a layer at a 4K prefix)
take ≈ 2 µs. Here nothing is copied: each program reads one window chunk for one query head (the heads sharing
a key head hit the same chunk in L2) or, in the last split, the block's own keys; partial results (row max, sum,
unnormalised output, fp32) go to a scratch buffer the merge reads.

The math is `Attention.softmax_attention` / `grouped_attention` (scale D^-0.5, query head h reads key head
h // (H / Hkv), committed window keys where the mask says so, every block key); tests pin it there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

# a finite "minus infinity" for running maxima: exp(-inf - -inf) would be NaN on all-masked rows
_NEG = tl.constexpr(-1.0e30)


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """fp32 operands: exact products ("ieee", tests and fp32 models); bf16/fp16: the tensor cores, fp32 sums."""
    if F32:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _attend_keys(
    q, m, l, acc, k_base, v_base, mask_ptr, start, stop, s_kt, s_vt, scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
    F32: tl.constexpr,
):
    """Online softmax of q [BLOCK_T, D] over keys start … stop-1 (rows of k_base / v_base), continuing (m, l, acc);
    with MASKED only keys whose mask byte is set; with CAUSAL query row t only keys n ≤ t (the block's own)."""
    d = tl.arange(0, D)
    for n0 in range(start, stop, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        ok = n < stop
        if MASKED:
            ok = ok & (tl.load(mask_ptr + n, mask=ok, other=0) != 0)
        k = tl.load(k_base + n[:, None] * s_kt + d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_base + n[:, None] * s_vt + d[None, :], mask=ok[:, None], other=0.0)
        s = _dot(q, tl.trans(k), F32) * scale
        if CAUSAL:
            s = tl.where(ok[None, :] & (n[None, :] <= tl.arange(0, BLOCK_T)[:, None]), s, float("-inf"))
        else:
            s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, F32)
        m = m_new
    return m, l, acc


@triton.jit
def _partial_kernel(
    q_ptr, kb_ptr, vb_ptr, kw_ptr, vw_ptr, mask_ptr, m_ptr, l_ptr, acc_ptr,
    T, W, CHUNK, N_SPLITS, GROUP, scale,
    s_qb, s_qh, s_qt, s_kbb, s_kbh, s_kbt, s_vbb, s_vbh, s_vbt, s_kwb, s_kwh, s_kwt, s_vwb, s_vwh, s_vwt,
    HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, H: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr, F32: tl.constexpr,
):
    """Program (b·H + h, split): split < N_SPLITS reads window keys [split·CHUNK, (split+1)·CHUNK); split ==
    N_SPLITS reads the block's T keys (CAUSAL: row t the first t + 1). Writes the split's running max m, sum l
    and output acc (not divided)."""
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // H
    h = bh % H
    kh = h // GROUP
    t = tl.arange(0, BLOCK_T)
    d = tl.arange(0, D)
    rows = t < T
    q = tl.load(q_ptr + b * s_qb + h * s_qh + t[:, None] * s_qt + d[None, :], mask=rows[:, None], other=0.0)
    m = tl.full((BLOCK_T,), _NEG, tl.float32)
    l = tl.zeros((BLOCK_T,), tl.float32)
    acc = tl.zeros((BLOCK_T, D), tl.float32)
    if split < N_SPLITS:
        m, l, acc = _attend_keys(
            q, m, l, acc, kw_ptr + b * s_kwb + kh * s_kwh, vw_ptr + b * s_vwb + kh * s_vwh, mask_ptr,
            split * CHUNK, tl.minimum(split * CHUNK + CHUNK, W), s_kwt, s_vwt, scale, HAS_MASK, False, D, BLOCK_T,
            BLOCK_N, F32,
        )
    else:
        m, l, acc = _attend_keys(
            q, m, l, acc, kb_ptr + b * s_kbb + kh * s_kbh, vb_ptr + b * s_vbb + kh * s_vbh, mask_ptr,
            0, T, s_kbt, s_vbt, scale, False, CAUSAL, D, BLOCK_T, BLOCK_N, F32,
        )
    part = bh * (N_SPLITS + 1) + split
    tl.store(m_ptr + part * BLOCK_T + t, m)
    tl.store(l_ptr + part * BLOCK_T + t, l)
    tl.store(acc_ptr + (part * BLOCK_T + t[:, None]) * D + d[None, :], acc)


@triton.jit
def _merge_kernel(
    m_ptr, l_ptr, acc_ptr, out_ptr, gate_ptr, T, PARTS, s_ob, s_oh, s_ot, s_gb, s_gh, s_gt,
    H: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr, GATED: tl.constexpr,
):
    """Program b·H + h: the splits' partial softmaxes merged; GATED: times sigmoid(gate) (the output gate)."""
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    t = tl.arange(0, BLOCK_T)
    d = tl.arange(0, D)
    top = tl.full((BLOCK_T,), _NEG, tl.float32)
    for p in range(0, PARTS):
        top = tl.maximum(top, tl.load(m_ptr + (bh * PARTS + p) * BLOCK_T + t))
    total = tl.zeros((BLOCK_T,), tl.float32)
    out = tl.zeros((BLOCK_T, D), tl.float32)
    for p in range(0, PARTS):
        part = bh * PARTS + p
        f = tl.exp(tl.load(m_ptr + part * BLOCK_T + t) - top)
        total += f * tl.load(l_ptr + part * BLOCK_T + t)
        out += f[:, None] * tl.load(acc_ptr + (part * BLOCK_T + t[:, None]) * D + d[None, :])
    out = out / total[:, None]
    if GATED:  # the eager path rounds the attention output before the product: so does this
        g = tl.load(gate_ptr + b * s_gb + h * s_gh + t[:, None] * s_gt + d[None, :], mask=(t < T)[:, None],
                    other=0.0).to(tl.float32)
        out = out.to(out_ptr.dtype.element_ty).to(tl.float32) * (1.0 / (1.0 + tl.exp(-g)))
    tl.store(out_ptr + b * s_ob + h * s_oh + t[:, None] * s_ot + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(t < T)[:, None])


# Tiles from `compile_check` at the real shapes (D 256, 32 rows) for sm_90 and sm_120: 16 keys a step, 2 stages,
# 8 warps is the one without spilled registers whose shared memory (96 KiB) fits a consumer card's 99 KiB; 64
# keys with 3 stages asked for 544 KiB.
def preview_attention(q: Tensor, k: Tensor, v: Tensor, k_win: Tensor, v_win: Tensor, committed: Tensor | None,
                      scale: float, chunk: int = 256, gate: Tensor | None = None, causal: bool = False) -> Tensor:
    """q [B,H,T,D]; the block's k, v [B,Hkv,T,D]; the window k_win, v_win [B,Hkv,W,D] (views of the arena: any
    strides with a unit last one); committed [W] bool (None: every window key) → attention output [B,H,T,D]
    in q's dtype (a transposed view of a [B,T,H,D] tensor, so o_proj's reshape copies nothing); with `gate`
    [B,T,H,D] (any strides, unit last) the output times sigmoid(gate), `Attention.finish`'s output gate.
    `causal`: each block row sees the block's keys up to its own (a commit written in place,
    `Attention.window_attention`); else all of them (a preview)."""
    b, h, t, d = q.shape
    hkv, w = k_win.shape[1], k_win.shape[2]
    for name, x in (("q", q), ("k", k), ("v", v), ("k_win", k_win), ("v_win", v_win), ("gate", gate)):
        if x is not None and x.stride(-1) != 1:
            raise ValueError(f"{name} needs a unit stride in its last dim")
    if gate is not None and tuple(gate.shape) != (b, t, h, d):
        raise ValueError(f"gate must be [B,T,H,D] = {(b, t, h, d)}, got {tuple(gate.shape)}")
    block_t = max(16, triton.next_power_of_2(t))
    n_splits = triton.cdiv(w, chunk)
    parts = n_splits + 1
    m = torch.empty(b * h * parts * block_t, dtype=torch.float32, device=q.device)
    lsum = torch.empty_like(m)
    acc = torch.empty(b * h * parts * block_t * d, dtype=torch.float32, device=q.device)
    out = torch.empty(b, t, h, d, dtype=q.dtype, device=q.device).transpose(1, 2)
    mask = committed if committed is not None else m  # any pointer: HAS_MASK=False never reads it
    if q.device.type == "cpu":  # Triton's interpreter gets bf16 dots wrong (w4a16.py): compute in fp32 there
        q, k, v, k_win, v_win = (x.float() for x in (q, k, v, k_win, v_win))
    _partial_kernel[(b * h, parts)](
        q, k, v, k_win, v_win, mask, m, lsum, acc,
        t, w, chunk, n_splits, h // hkv, float(scale),
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
        v.stride(2), k_win.stride(0), k_win.stride(1), k_win.stride(2), v_win.stride(0), v_win.stride(1),
        v_win.stride(2),
        HAS_MASK=committed is not None, CAUSAL=causal, H=h, D=d, BLOCK_T=block_t, BLOCK_N=16,
        F32=q.dtype == torch.float32,
        num_warps=8, num_stages=2,
    )
    g, gs = (gate, (gate.stride(0), gate.stride(2), gate.stride(1))) if gate is not None else (out, (0, 0, 0))
    _merge_kernel[(b * h,)](m, lsum, acc, out, g, t, parts, out.stride(0), out.stride(1), out.stride(2), *gs,
                            H=h, D=d, BLOCK_T=block_t, GATED=gate is not None, num_warps=4)
    return out


def supports(head_dim: int) -> bool:
    """Head dims the kernel takes: powers of two ≥ 16 (tl.dot tiles; the real model's is 256)."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0
