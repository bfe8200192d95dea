"""Triton W4A16 / W8A16 kernels that read the GPTQ v1 layout directly (see `reference.py` for the exact math).

Two kernels share one weight-tile loader:

- `_linear_kernel`: out[M, N] = x[M, K] @ W[K, N] for small M (decode and 32-row preview passes). Grid
  (N tiles, M tiles, K splits). Each step loads a [BLOCK_K / p, BLOCK_N] int32 tile of qweight once; each of
  its p fields (`_fields_dot`; or the tile unpacked to [BLOCK_K, BLOCK_N] codes, `_weight_tile`) minus the
  group's zero (qzeros + 1) is an integer tile, exact in bf16/fp16, fed to `tl.dot` against x; the fp32 partial
  of that K tile is multiplied by the group's scale row and accumulated in fp32. BLOCK_K divides the group, so
  one K tile has one scale and zero row.
  Split-K (for few N tiles at small M) writes fp32 partials [SPLIT_K, M, N], summed in a fixed order by one
  small launch (`_sum_parts_kernel`: deterministic, and one launch where a torch sum and cast were two).
- `_moe_kernel`: the vLLM-style grouped GEMM over (token, choice) pairs sorted by expert slot and padded to
  BLOCK_M per slot (`moe_align`: two small Triton launches, no host sync, static shapes: CUDA-graph friendly). Every
  program serves one BLOCK_M run of one slot and reads that slot's weights through the stack's strides.
  Pass 1 (GATED): gate and up columns n and I + n in one program, epilogue silu(gate) · up → act [T, I] in x's
  dtype. Pass 2: act @ down, times the routing weight, fp32 [T, H]; `_sum_parts_kernel` sums each token's topk
  rows (fixed order, fp32) into x's dtype. Folded (`MoeConfig.folded`, the default for 16-bit codes): each K
  tile's zero comes off through a's row sums (`_folded_fields_dot`), and both passes read a field-major (x copied
  so by the align pass, act stored so by pass 1's epilogue), so each field's columns load contiguously and
  pipelined (`_field_cols`).

TRITON_INTERPRET=1 (tests on CPU): the interpreter of triton 3.9 gets bf16 `tl.dot` and int → bf16 casts wrong,
so interpreted runs do the dot in fp32 (`DOT_F32`); that is exact for the integer weight tile and matches what
the GPU's bf16 MMA with fp32 accumulation computes up to summation order. Its bit casts to bf16 are right, so
the field-wise form's exponent-bit trick runs as on a GPU; its bf16 arithmetic is not (NaN: `_minus` subtracts in
fp32 there) and its fp32 → bf16 casts truncate where a GPU rounds to nearest (the MoE's activations and
`_sum_parts` stay fp32 there and torch rounds them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from torch import Tensor

from clover_local.runtime.segments import listening, segment

from . import tuning
from .reference import PLANES_TILE, PackedStack, check_host_stacks, check_packed, field_major, repacked_input

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _packed_tile(
    qw_base, sc_base, qz_base, k0, offs_n, n_mask,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """The packed int32 tile [BLOCK_K / PER, BLOCK_N] of input rows k0 … k0+BLOCK_K, its zero row (qzeros + 1,
    int32 [BLOCK_N]) and scale row (fp32 [BLOCK_N]).

    qw_base / sc_base / qz_base point at one matrix (one slot); k0 is a multiple of BLOCK_K and BLOCK_K divides
    GROUP, so the tile lies in group k0 // GROUP."""
    PER: tl.constexpr = 32 // BITS
    MASK: tl.constexpr = (1 << BITS) - 1
    offs_kp = k0 // PER + tl.arange(0, BLOCK_K // PER)
    packed = tl.load(
        qw_base + offs_kp[:, None] * stride_qk + offs_n[None, :] * stride_qn, mask=n_mask[None, :], other=0
    )
    g = k0 // GROUP
    scale = tl.load(sc_base + g * stride_sg + offs_n * stride_sn, mask=n_mask, other=0.0).to(tl.float32)
    zword = tl.load(qz_base + g * stride_zg + (offs_n // PER) * stride_zn, mask=n_mask, other=0)
    zero = ((zword >> ((offs_n % PER) * BITS)) & MASK) + 1
    return packed, zero, scale


@triton.jit
def _weight_tile(
    qw_base, sc_base, qz_base, k0, offs_n, n_mask,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Codes minus zero, int32 [BLOCK_K, BLOCK_N], and the scale row fp32 [BLOCK_N] (see `_packed_tile`)."""
    PER: tl.constexpr = 32 // BITS
    MASK: tl.constexpr = (1 << BITS) - 1
    packed, zero, scale = _packed_tile(
        qw_base, sc_base, qz_base, k0, offs_n, n_mask,
        stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, GROUP, BITS, BLOCK_K,
    )
    shifts = tl.arange(0, PER) * BITS
    # Field j of packed row i is input row PER·i + j: expand to [BLOCK_K / PER, PER, BLOCK_N], then merge.
    codes = (packed[:, None, :] >> shifts[None, :, None]) & MASK
    codes = tl.reshape(codes, (BLOCK_K, BLOCK_N))
    return codes - zero[None, :], scale


@triton.jit
def _straddled3(lo, hi, sh):
    """3-bit fields at bit offsets sh of words lo, continuing into words hi where sh > 29 (GPTQ's 3-bit runs:
    32 values in 3 words, values 10 and 21 across a boundary). Shifts are arithmetic (int32): the bits a shift
    brings in above a straddling field's low part are masked off before its high part is ORed in."""
    over = sh > 29
    n_hi = tl.where(over, 32 - sh, 0)  # bits of lo the field keeps (1 or 2), or none
    low = (lo >> sh) & tl.where(over, (1 << n_hi) - 1, 7)
    return low | tl.where(over, (hi << n_hi) & 7, 0)


@triton.jit
def _runs3(ptrs, stride_qk, mask, RUNS: tl.constexpr, BLOCK_N: tl.constexpr):
    """3-bit codes int32 [RUNS·32, BLOCK_N] of GPTQ runs whose first words ptrs [RUNS, BLOCK_N] point at: input
    row r of a run sits at bit 3r of its three words (low word first)."""
    w0 = tl.load(ptrs, mask=mask, other=0)[:, None, :]  # [RUNS, 1, BLOCK_N]
    w1 = tl.load(ptrs + stride_qk, mask=mask, other=0)[:, None, :]
    w2 = tl.load(ptrs + 2 * stride_qk, mask=mask, other=0)[:, None, :]
    r = tl.arange(0, 32)
    word = ((3 * r) // 32)[None, :, None]
    sh = ((3 * r) % 32)[None, :, None]
    codes = _straddled3(tl.where(word == 0, w0, tl.where(word == 1, w1, w2)), tl.where(word == 0, w1, w2), sh)
    return tl.reshape(codes, (RUNS * 32, BLOCK_N))


@triton.jit
def _group_row3(sc_base, qz_base, g, offs_n, n_mask, stride_sg, stride_sn, stride_zg, stride_zn):
    """Group g's scale row (fp32) and zero row (qzeros + 1, int32) of 3-bit weights: column n's zero at bit 3n of
    the group's row of qzeros (GPTQ's runs)."""
    scale = tl.load(sc_base + g * stride_sg + offs_n * stride_sn, mask=n_mask, other=0.0).to(tl.float32)
    zcol = (3 * offs_n) // 32
    zsh = (3 * offs_n) % 32
    zrow = qz_base + g * stride_zg
    zlo = tl.load(zrow + zcol * stride_zn, mask=n_mask, other=0)
    zhi = tl.load(zrow + (zcol + 1) * stride_zn, mask=n_mask & (zsh > 29), other=0)
    return scale, _straddled3(zlo, zhi, zsh) + 1


@triton.jit
def _weight_tile3(
    qw_base, sc_base, qz_base, k0, offs_n, n_mask,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    GROUP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, MAGIC: tl.constexpr, DT: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    """`_weight_tile` for 3-bit codes: codes minus zero [BLOCK_K, BLOCK_N] and the scale row. Input rows
    32c … 32c + 31 are qweight rows 3c, 3c + 1, 3c + 2; row r of the run sits at bit 3r of the three (low word
    first). BLOCK_K is a multiple of 32 and divides GROUP. MAGIC ≠ 0 (16-bit activations of dtype DT): the tile
    comes as DT, each code ORed into MAGIC's mantissa and the zero subtracted there, exactly (`_fields_dot`'s
    trick: no int→float conversion, a quarter-rate instruction, per weight); else int32."""
    RUNS: tl.constexpr = BLOCK_K // 32
    offs_c = k0 // 32 + tl.arange(0, RUNS)
    ptrs = qw_base + (3 * offs_c)[:, None] * stride_qk + offs_n[None, :] * stride_qn
    codes = _runs3(ptrs, stride_qk, n_mask[None, :], RUNS, BLOCK_N)
    scale, zero = _group_row3(sc_base, qz_base, k0 // GROUP, offs_n, n_mask, stride_sg, stride_sn, stride_zg,
                              stride_zn)
    if MAGIC != 0:
        zw = (zero.to(tl.uint32) | MAGIC).to(tl.uint16).to(DT, bitcast=True)
        w = _minus((codes.to(tl.uint32) | MAGIC).to(tl.uint16).to(DT, bitcast=True), zw[None, :], DOT_F32)
    else:
        w = codes - zero[None, :]
    return w, scale


@triton.jit
def _unpacked_tile(
    qw_base, sc_base, qz_base, k0, offs_n, n_mask,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, MAGIC: tl.constexpr,
    DT: tl.constexpr, DOT_F32: tl.constexpr,
):
    """The unpacking form's weight tile and scale row: `_weight_tile3` for 3-bit codes, else `_weight_tile`."""
    if BITS == 3:
        w, scale = _weight_tile3(qw_base, sc_base, qz_base, k0, offs_n, n_mask, stride_qk, stride_qn, stride_sg,
                                 stride_sn, stride_zg, stride_zn, GROUP, BLOCK_K, BLOCK_N, MAGIC, DT, DOT_F32)
    else:
        w, scale = _weight_tile(qw_base, sc_base, qz_base, k0, offs_n, n_mask, stride_qk, stride_qn, stride_sg,
                                stride_sn, stride_zg, stride_zn, GROUP, BITS, BLOCK_K, BLOCK_N)
    return w, scale


@triton.jit
def _field_major_col(col, TILE: tl.constexpr, PER: tl.constexpr):
    """Where column col of a goes when a is stored field-major in tiles of TILE (`reference.field_major`)."""
    r = col % TILE
    return col - r + (r % PER) * (TILE // PER) + r // PER


@triton.jit
def _field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER: tl.constexpr, j: tl.constexpr,
                A_FM: tl.constexpr = False, SWAP: tl.constexpr = False):
    """Columns k0 + PER·i + j of a (i = offs_i): the input rows field j of a packed tile's words hold. A_FM: a
    holds its columns field-major within each K tile (column k0 + R·j + i; the MoE's activations between its two
    passes, written so by the gate/up epilogue, and x, copied so by the align pass), so a field's columns are
    contiguous: vector loads the pipeliner issues ahead (cp.async), where strided 2-byte gathers are waited on."""
    if A_FM:
        cols = k0 + j * offs_i.shape[0] + offs_i
    else:
        cols = k0 + offs_i * PER + j
    if SWAP:  # [columns, rows]: the MMA's second operand (`_folded_fields_dot`'s SWAP)
        a = tl.load(a_rows_ptr[None, :] + cols[:, None] * stride_ak, mask=row_mask[None, :], other=0.0)
    else:
        a = tl.load(a_rows_ptr[:, None] + cols[None, :] * stride_ak, mask=row_mask[:, None], other=0.0)
    return a


@triton.jit
def _in_register(v, k0, KEEP: tl.constexpr):
    """v, or with KEEP v as a value ptxas cannot fold into an immediate ((k0 >> 30) is 0 for every K tile start,
    K < 2^30, but unknown to the compiler). Why: `(w >> s) & MASK | MAGIC` is one LOP3, which takes one immediate;
    ptxas materialized the other constant before every use (46 IMAD.MOV per folded gate/up K step, sm_90) rather
    than keep one register. Census sm_90: MoE gate/up 3.62 → 3.18 instructions per weight (102 → 128 registers),
    down 4.53 → 4.06 (64 → 91), W4A16 2048→8192 repacked 4.44 → 4.09. Not for the 8-bit fp32 form (W8A16
    2048→8192 5.3 → 5.15 but 166 → 235 registers), and only in the forms that read a field-major (the folded MoE,
    the repacked dense rows: the forms before them keep their census, 174 registers instead of 135 for the
    unfolded gate/up). `LinearConfig` / `MoeConfig.mask_reg`: the tuner tries both."""
    if KEEP:
        return (k0 >> 30) | v
    return v


@triton.jit
def _row_pair_fields(words2, j: tl.constexpr, BITS: tl.constexpr, PAIR_MASK, PAIR_MAGIC: tl.constexpr,
                     dt: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr, SWAP: tl.constexpr = False):
    """Field j of a packed tile as R × BLOCK_N floats MAGIC + code, from words2 [R / 2, BLOCK_N]: 16-bit halves of
    the words of packed rows 2i and 2i + 1 side by side (see `_folded_fields_dot`). One shift and one and-or make
    both codes, and the register that holds them is already the MMA's operand pair (rows 2i, 2i + 1 of one
    column): the join / permute / reshape is free in registers, where halves of one word would need a `PRMT`."""
    f = ((words2 >> (j * BITS)) & PAIR_MASK) | PAIR_MAGIC
    return _joined_pairs(f, dt, R, BLOCK_N, SWAP)


@triton.jit
def _joined_pairs(f, dt: tl.constexpr, R: tl.constexpr, BLOCK_N: tl.constexpr, SWAP: tl.constexpr):
    """Words holding two 16-bit floats' bits (K entries 2i and 2i + 1 in their low and high halves) as the
    [R, BLOCK_N] operand (SWAP: [BLOCK_N, R]); no instructions where the layouts line up."""
    w = tl.join(f.to(tl.uint16).to(dt, bitcast=True), (f >> 16).to(tl.uint16).to(dt, bitcast=True))
    if SWAP:  # f [BLOCK_N, R / 2]: the pairs are already along the last axis, K's
        w = tl.reshape(w, (BLOCK_N, R))
    else:
        w = tl.reshape(tl.permute(w, (0, 2, 1)), (R, BLOCK_N))
    return w


@triton.jit
def _folded_fields_dot(a_rows_ptr, row_mask, stride_ak, words, zw, scale, k0, offs_i, PER: tl.constexpr,
                       BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
                       PREC: tl.constexpr, MAGIC: tl.constexpr, A_FM: tl.constexpr, asum_rows_ptr,
                       A_SUM: tl.constexpr, MASK_REG: tl.constexpr, SWAP: tl.constexpr):
    """`_fields_dot`'s exponent-bit form with the zero folded out: a · (MAGIC + code) summed per K tile, minus
    (MAGIC + zero) · Σ_k a once per row and column — no subtraction per weight (the `HADD2`s: ~15 % of the MoE's K
    loop), and the weight operand goes from the packed words to the MMA without a trip through shared memory.
    Exact in the integer part; the fp32 sums carry MAGIC (128 for bf16 4-bit codes) on every term, an error of
    ~2^-24 · 136 · Σ|a| against the bf16 output's 2^-8. Census (compile_check --sass, sm_90, MoE at the real
    shapes): gate/up 4.9 → 4.05 instructions per weight (4.02 with x field-major, 3.62 with A_SUM); the dense
    linear got worse (4.84 → 6.09), so only the MoE folds (`MoeConfig.folded`).

    A_SUM ≠ 0: Σ_k a per row and K tile comes precomputed, as A_SUM fp32 partials per K tile summed in a fixed
    order (asum_rows_ptr [BLOCK_M]: each row's partials; for the gate/up pass one per tile, written by the align
    pass beside its field-major copy of x; for the down pass one per tile or per gate/up program's columns,
    written by the gate/up epilogue from the very bf16 values it stores) instead of being summed here from the
    tile: the bf16 → fp32 conversions, adds and shuffles were ~50 of the 514 instructions of a gate/up K step and
    54 of the down pass's 338 (sm_90), and the gate/up pass did them twice (its gate and up halves).

    SWAP: the dots transposed, out^T [BLOCK_N, BLOCK_M] = W^T · a^T, W's field tiles the MMA's first operand and a's
    columns loaded as [columns, rows] (`MoeConfig.swap`). Why: built from row pairs by `tl.join`, the weight
    operand makes triton 3.6 (the H200 machine's) give both operands 4 consecutive K values a thread (kWidth 4),
    and a's fragment, loaded from shared memory 64 bits at a time, then needs ~3 register moves per MMA to reach
    the order the MMA reads (100 `IMAD.MOV` in a gate/up K step, sm_90; triton 3.8 gives kWidth 2 and none). As
    the second operand a's 4 K values per column are the two registers the MMA wants, in order. zw: MAGIC + zero
    per column [BLOCK_N]."""
    R: tl.constexpr = offs_i.shape[0]
    MASK: tl.constexpr = (1 << BITS) - 1
    HALF: tl.constexpr = PER // 2
    PAIR_MASK: tl.constexpr = MASK | (MASK << 16)
    PAIR_MAGIC: tl.constexpr = MAGIC | (MAGIC << 16)
    pm = _in_register(PAIR_MASK, k0, MASK_REG)
    dt = a_rows_ptr.dtype.element_ty
    if SWAP:
        ev, od = tl.split(tl.reshape(tl.trans(words), (BLOCK_N, R // 2, 2)))
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        a_sum = tl.zeros((R, BLOCK_M), dtype=tl.float32)
    else:
        ev, od = tl.split(tl.permute(tl.reshape(words, (R // 2, 2, BLOCK_N)), (0, 2, 1)))
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_sum = tl.zeros((BLOCK_M, R), dtype=tl.float32)
    lo_words = (ev & 0xFFFF) | (od << 16)
    hi_words = (ev >> 16) | (od & 0xFFFF0000)
    for j in tl.static_range(HALF):
        a_lo = _field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER, j, A_FM, SWAP)
        a_hi = _field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER, j + HALF, A_FM, SWAP)
        w_lo = _row_pair_fields(lo_words, j, BITS, pm, PAIR_MAGIC, dt, R, BLOCK_N, SWAP)
        w_hi = _row_pair_fields(hi_words, j, BITS, pm, PAIR_MAGIC, dt, R, BLOCK_N, SWAP)
        acc = _dot_into(acc, w_lo, a_lo, DOT_F32, PREC, SWAP)
        acc = _dot_into(acc, w_hi, a_hi, DOT_F32, PREC, SWAP)
        if A_SUM == 0:
            a_sum += a_lo.to(tl.float32) + a_hi.to(tl.float32)
    return _folded_out(acc, a_sum, zw, scale, row_mask, asum_rows_ptr, k0 // (R * PER), A_SUM, SWAP)


@triton.jit
def _dot_into(acc, w, a, DOT_F32: tl.constexpr, PREC: tl.constexpr, SWAP: tl.constexpr):
    """acc + a · w, or with SWAP (acc transposed) acc + w · a: the folded dots either way round."""
    if SWAP:
        out = acc + _dot(w, a, DOT_F32, PREC)
    else:
        out = acc + _dot(a, w, DOT_F32, PREC)
    return out


@triton.jit
def _folded_out(acc, a_sum, zw, scale, row_mask, asum_rows_ptr, tile, A_SUM: tl.constexpr, SWAP: tl.constexpr):
    """A folded K tile's partial: acc minus zw (what every weight carries: the magic's value and the zero, per
    column) times a's row sums (precomputed, A_SUM partials of K tile `tile`, or summed here in a_sum), scaled."""
    if A_SUM != 0:
        part = tile * A_SUM + tl.arange(0, A_SUM)
        row_sum = tl.sum(tl.load(asum_rows_ptr[:, None] + part[None, :], mask=row_mask[:, None], other=0.0), axis=1)
    elif SWAP:
        row_sum = tl.sum(a_sum, axis=0)
    else:
        row_sum = tl.sum(a_sum, axis=1)
    if SWAP:
        out = (acc - zw.to(tl.float32)[:, None] * row_sum[None, :]) * scale[:, None]
    else:
        out = (acc - row_sum[:, None] * zw.to(tl.float32)[None, :]) * scale[None, :]
    return out


@triton.jit
def _planes3_dot(a_rows_ptr, row_mask, stride_ak, qw_base, sc_base, qz_base, k0, offs_n, n_mask,
                 stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, GROUP: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr, PREC: tl.constexpr,
                 MAGIC: tl.constexpr, asum_rows_ptr, A_SUM: tl.constexpr, MASK_REG: tl.constexpr,
                 SWAP: tl.constexpr):
    """`_folded_fields_dot` for 3-bit codes in the planes layout (`reference.planes3_rows`: per 128-input tile, 8
    words of low bits and 4 of high bits, pairs of K entries in 16-bit halves), a read field-major as a 4-bit
    tile (8 fields of 16 columns). Field f's weights are two MMA operands: the low bits ORed into MAGIC
    (value M + l) and the high bit into MAGIC four times larger (4M + 4h: two more exponent steps, so the bit is
    worth 4), both summed into one accumulator: a · (5M + code), the 5M + zero taken off once per K tile through
    a's row sums. Each operand costs one shift and one and-or per two weights (≈ 2 a weight, where GPTQ's
    straddled runs cost the unpacking form ≈ 8 and a shared-memory store), plus a second MMA per field.
    The words come as one [16, BLOCK_N] tile, low-bit word i in row 2i and high-bit word i mod 4 in row 2i + 1
    (pairs p and p + 4 of a field share high-bit word p mod 4, the second 8 bits further: loaded twice, so each
    thread holds what its MMA fragment reads), split as `_folded_fields_dot` splits its words: the compiler then
    loads them straight in the MMA operand's layout (loaded as two tiles, both operands went through shared memory
    once more: compile_check). Returns fp32 [BLOCK_M, BLOCK_N] (SWAP: its transpose), scaled."""
    MAGIC_HI: tl.constexpr = MAGIC + (256 if MAGIC == 0x4300 else 2048)  # bf16 / fp16: ×4
    r = tl.arange(0, 16)
    rows = 12 * (k0 // 128) + tl.where(r % 2 == 0, r // 2, 8 + (r // 2) % 4)
    words = tl.load(qw_base + rows.to(tl.int64)[:, None] * stride_qk + (offs_n * stride_qn)[None, :],
                    mask=n_mask[None, :], other=0).to(tl.uint32, bitcast=True)
    offs_p = tl.arange(0, 8)
    if SWAP:
        w_lo, w_hi = tl.split(tl.reshape(tl.trans(words), (BLOCK_N, 8, 2)))
        w_hi = w_hi >> ((offs_p // 4) * 8).to(tl.uint32)[None, :]
    else:
        w_lo, w_hi = tl.split(tl.permute(tl.reshape(words, (8, 2, BLOCK_N)), (0, 2, 1)))
        w_hi = w_hi >> ((offs_p // 4) * 8).to(tl.uint32)[:, None]
    scale, zero = _group_row3(sc_base, qz_base, k0 // GROUP, offs_n, n_mask, stride_sg, stride_sn, stride_zg,
                              stride_zn)
    dt = a_rows_ptr.dtype.element_ty
    mval = tl.full((1,), MAGIC, tl.uint16).to(dt, bitcast=True).to(tl.float32)  # M
    zw = zero.to(tl.float32) + 5 * mval  # what every weight carries: M + 4M, and the zero
    # the magics kept in registers (`_in_register`): one and-or per pair in the gate/up pass; the down pass still
    # takes two under triton 3.8 (the masks in registers instead, or the magics behind an inline mov: the same)
    mg_lo = _in_register(MAGIC | (MAGIC << 16), k0, MASK_REG)
    mg_hi = _in_register(MAGIC_HI | (MAGIC_HI << 16), k0, MASK_REG)
    offs_i = tl.arange(0, 16)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        a_sum = tl.zeros((16, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_sum = tl.zeros((BLOCK_M, 16), dtype=tl.float32)
    for f in tl.static_range(8):
        a = _field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, 8, f, True, SWAP)
        lo = _joined_pairs(((w_lo >> (2 * f)) & 0x00030003) | mg_lo, dt, 16, BLOCK_N, SWAP)
        hi = _joined_pairs(((w_hi >> f) & 0x00010001) | mg_hi, dt, 16, BLOCK_N, SWAP)
        acc = _dot_into(acc, lo, a, DOT_F32, PREC, SWAP)
        acc = _dot_into(acc, hi, a, DOT_F32, PREC, SWAP)
        if A_SUM == 0:
            a_sum += a.to(tl.float32)
    return _folded_out(acc, a_sum, zw, scale, row_mask, asum_rows_ptr, k0 // 128, A_SUM, SWAP)


@triton.jit
def _minus(w, zw, DOT_F32: tl.constexpr):
    """w − zw, exact either way (both integers in a 16-bit float's exact range); in fp32 for interpreted runs,
    whose bf16 arithmetic returns NaN (triton 3.9), in the operands' dtype on a GPU (two per instruction)."""
    if DOT_F32:
        return w.to(tl.float32) - zw.to(tl.float32)
    return w - zw


@triton.jit
def _fields_dot(
    a_rows_ptr, row_mask, stride_ak, qw_base, sc_base, qz_base, k0, offs_n, n_mask,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr, PREC: tl.constexpr, MAGIC: tl.constexpr, FOLD: tl.constexpr, A_FM: tl.constexpr,
    asum_rows_ptr, A_SUM: tl.constexpr, MASK_REG: tl.constexpr, SWAP: tl.constexpr = False,
):
    """a[:, k0 … k0+BLOCK_K] @ W's tile, scaled, fp32 [BLOCK_M, BLOCK_N] (with FOLD and SWAP its transpose), without unpacking the tile into K
    order: field j of every packed row (input rows k0 + PER·i + j) is its own [BLOCK_K / PER, BLOCK_N] tile,
    multiplied with the matching strided columns of a (loaded straight from a, cached) — PER small dots, no
    register reshuffle through shared memory (the compiler loads the packed words straight into the MMA operand
    layout), and only one or two fields' weights live at a time. a_rows_ptr [BLOCK_M]: each row's first column.

    Codes become floats by exponent bits, not int→float instructions (I2F runs at a quarter of the integer rate
    and was one instruction per weight; see `magic_bits`): MAGIC ≠ 0 is a 16-bit float whose mantissa's low bits
    take a code exactly (bf16 0x4300 = 128 + c for 4-bit codes, fp16 0x6400 = 1024 + c up to 8 bits), so one
    shift and one and-or turn a word into two fields (j and j + PER/2, its low and high halves) and the zero is
    subtracted in the same dtype, exactly. MAGIC = 0 (8-bit codes with bf16, fp32 activations): the fp32 form
    2^23 + c, one field at a time. BITS = 3: the weights are in the planes layout (`_planes3_dot`)."""
    if BITS == 3:  # the planes layout (the only 3-bit form read field-wise)
        out = _planes3_dot(a_rows_ptr, row_mask, stride_ak, qw_base, sc_base, qz_base, k0, offs_n, n_mask,
                           stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, GROUP, BLOCK_M,
                           BLOCK_N, DOT_F32, PREC, MAGIC, asum_rows_ptr, A_SUM, MASK_REG, SWAP)
    else:  # GPTQ's whole fields per word (4 and 8 bits)
        PER: tl.constexpr = 32 // BITS
        MASK: tl.constexpr = (1 << BITS) - 1
        packed, zero, scale = _packed_tile(
            qw_base, sc_base, qz_base, k0, offs_n, n_mask,
            stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, GROUP, BITS, BLOCK_K,
        )
        words = packed.to(tl.uint32, bitcast=True)
        offs_i = tl.arange(0, BLOCK_K // PER)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if MAGIC != 0:
            dt = a_rows_ptr.dtype.element_ty
            # MAGIC's value + zero, per column
            zw = (zero.to(tl.uint32) | MAGIC).to(tl.uint16).to(dt, bitcast=True)
            if FOLD:
                out = _folded_fields_dot(a_rows_ptr, row_mask, stride_ak, words, zw, scale, k0, offs_i, PER,
                                         BITS, BLOCK_M, BLOCK_N, DOT_F32, PREC, MAGIC, A_FM, asum_rows_ptr, A_SUM,
                                         MASK_REG, SWAP)
            else:
                HALF: tl.constexpr = PER // 2  # field j + HALF sits 16 bits above field j
                PAIR_MASK: tl.constexpr = MASK | (MASK << 16)
                PAIR_MAGIC: tl.constexpr = MAGIC | (MAGIC << 16)
                pm = _in_register(PAIR_MASK, k0, MASK_REG)
                for j in tl.static_range(HALF):
                    pair = ((words >> (j * BITS)) & pm) | PAIR_MAGIC
                    lo = _minus(pair.to(tl.uint16).to(dt, bitcast=True), zw[None, :], DOT_F32)
                    hi = _minus((pair >> 16).to(tl.uint16).to(dt, bitcast=True), zw[None, :], DOT_F32)
                    acc += _dot(_field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER, j, A_FM), lo,
                                DOT_F32, PREC)
                    acc += _dot(_field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER, j + HALF, A_FM),
                                hi, DOT_F32, PREC)
                out = acc * scale[None, :]
        else:
            zf = (zero.to(tl.float32) + 8388608.0)[None, :]  # 2^23 + zero
            for j in tl.static_range(PER):
                w = (((words >> (j * BITS)) & MASK) | 0x4B000000).to(tl.float32, bitcast=True) - zf
                acc += _dot(_field_cols(a_rows_ptr, row_mask, stride_ak, k0, offs_i, PER, j, A_FM), w, DOT_F32,
                            PREC)
            out = acc * scale[None, :]
    return out


@triton.jit
def _dot(a, w, DOT_F32: tl.constexpr, PREC: tl.constexpr):
    """a [BM, BK] (x's dtype) @ weight tile [BK, BN] (integer-valued: int32 or a float dtype) → fp32."""
    if DOT_F32:
        return tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision=PREC)
    return tl.dot(a, w.to(a.dtype))


@triton.jit
def _linear_kernel(
    x_ptr, qw_ptr, sc_ptr, qz_ptr, out_ptr,
    M, N, TILES_PER_SPLIT,
    stride_xm, stride_xk,
    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
    stride_os, stride_om, stride_on,
    GROUP: tl.constexpr, BITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr, PREC: tl.constexpr, FIELDS: tl.constexpr, MAGIC: tl.constexpr, FOLD: tl.constexpr,
    A_FM: tl.constexpr, MASK_REG: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_start = pid_k * TILES_PER_SPLIT * BLOCK_K
    for t in range(0, TILES_PER_SPLIT):
        k0 = k_start + t * BLOCK_K
        if FIELDS:
            acc += _fields_dot(x_ptr + offs_m * stride_xm, m_mask, stride_xk, qw_ptr, sc_ptr, qz_ptr, k0, offs_n,
                               n_mask, stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                               GROUP, BITS, BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, PREC, MAGIC, FOLD, A_FM, x_ptr, 0,
                               MASK_REG)
        else:
            a = tl.load(
                x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk, mask=m_mask[:, None],
                other=0.0,
            )
            w, scale = _weight_tile(
                qw_ptr, sc_ptr, qz_ptr, k0, offs_n, n_mask,
                stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                GROUP, BITS, BLOCK_K, BLOCK_N,
            )
            acc += _dot(a, w, DOT_F32, PREC) * scale[None, :]
    out = out_ptr + pid_k * stride_os + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _rounded16(v, BF16: tl.constexpr):
    """fp32 v rounded to the nearest bf16 (BF16) or fp16, kept in fp32. bf16 by bits (round half to even), not
    a cast: triton's interpreter truncates fp32 → bf16 where a GPU rounds, and the fold needs the sums of the
    values the next pass reads to be exact on both."""
    if BF16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return v.to(tl.float16).to(tl.float32)


@triton.jit
def _copy_columns(src_qw, src_sc, src_qz, dst_qw, dst_sc, dst_qz, n0, N, K,
                  stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                  GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """Copy one matrix's columns n0 … n0+BLOCK_N (every input row: qweight, scales, qzeros) from src to dst, bit
    for bit: what the K loop then reads of them. A read-through install (`_moe_kernel` INSTALL): src is a host
    slab, dst a cache slot. 3-bit: a K tile's BLOCK_K · 3/32 rows (GPTQ's or the planes layout: rows are rows),
    and every zero word a column's bits touch, the second of a straddled one too (a word shared with the next
    tile's columns is written whole by both: the same value)."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    ROWS: tl.constexpr = BLOCK_K * BITS // 32  # packed rows of a K tile (3-bit: 12 a 128-input tile)
    SPAN: tl.constexpr = BLOCK_K // 8 if BITS == 3 else ROWS  # a power of two ≥ ROWS
    r = tl.arange(0, SPAN)
    ok = (r < ROWS)[:, None] & n_mask[None, :]
    for k0 in range(0, K, BLOCK_K):
        at = (k0 * BITS // 32 + r)[:, None] * stride_qk + offs_n[None, :] * stride_qn
        tl.store(dst_qw + at, tl.load(src_qw + at, mask=ok, other=0), mask=ok)
    for g in range(0, K // GROUP):
        sc_at = g * stride_sg + offs_n * stride_sn
        tl.store(dst_sc + sc_at, tl.load(src_sc + sc_at, mask=n_mask, other=0.0), mask=n_mask)
        zw_at = g * stride_zg + (offs_n * BITS // 32) * stride_zn  # lanes of one word store the same value
        tl.store(dst_qz + zw_at, tl.load(src_qz + zw_at, mask=n_mask, other=0), mask=n_mask)
        if BITS == 3:  # the straddled fields' second words
            over = n_mask & ((3 * offs_n) % 32 > 29)
            tl.store(dst_qz + zw_at + stride_zn, tl.load(src_qz + zw_at + stride_zn, mask=over, other=0), mask=over)


@triton.jit
def _moe_kernel(
    a_ptr, out_ptr, qw_ptr, sc_ptr, qz_ptr, rw_ptr, asum_ptr, osum_ptr,
    sorted_ids_ptr, block_slot_ptr, num_padded_ptr,
    N, K, T, UP_OFFSET,
    stride_am, stride_ak, stride_om, stride_on, stride_sum_m, stride_osum_m,
    stride_qs, stride_qk, stride_qn, stride_ss, stride_sg, stride_sn, stride_zs, stride_zg, stride_zn,
    hqw_ptr, hsc_ptr, hqz_ptr, N_SLOTS, stride_hqs, stride_hss, stride_hzs, HOST: tl.constexpr,
    inst_ptr, down_slot_ptr, dqw_ptr, dsc_ptr, dqz_ptr, hdqw_ptr, hdsc_ptr, hdqz_ptr, DN, DK,
    stride_dqs, stride_dqk, stride_dqn, stride_dss, stride_dsg, stride_dsn, stride_dzs, stride_dzg, stride_dzn,
    stride_hdqs, stride_hdss, stride_hdzs, INSTALL: tl.constexpr, DGROUP: tl.constexpr, DBLOCK_K: tl.constexpr,
    A_ROW_DIV: tl.constexpr, GATED: tl.constexpr, MUL_WEIGHT: tl.constexpr,
    GROUP: tl.constexpr, BITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr, PREC: tl.constexpr, FIELDS: tl.constexpr, MAGIC: tl.constexpr, FOLD: tl.constexpr,
    A_FM: tl.constexpr, OUT_FM: tl.constexpr, OUT_PER: tl.constexpr, A_SUM: tl.constexpr,
    OUT_SUM: tl.constexpr, OUT_BF16: tl.constexpr, MASK_REG: tl.constexpr, SWAP: tl.constexpr = False,
):
    """One BLOCK_M run of (token, choice) pairs of one slot × one BLOCK_N tile of output columns.

    Row r of the run is pair id = sorted_ids[r] (token id // A_ROW_DIV gives the row of a; id ≥ T is padding).
    GATED: columns n (gate) and UP_OFFSET + n (up) of the slot's weight, out = silu(gate) · up.
    MUL_WEIGHT: out = (a @ W) · rw[id].
    A_SUM ≠ 0 (folded): asum [rows of a, K / BLOCK_K · A_SUM] fp32 holds a's sums, A_SUM partials per K tile (see
    `_folded_fields_dot`). OUT_SUM ≠ 0: out's values are rounded to the 16-bit dtype the next pass reads (bf16
    if OUT_BF16, else fp16) before they are stored, and each row's sums of them over every OUT_SUM columns go to
    osum [T, N / OUT_SUM] (the next pass's A_SUM partials: sums of exactly the values its MMA reads).
    HOST: a slot ≥ N_SLOTS names expert slot − N_SLOTS of the host stack (hqw/hsc/hqz, the layer's pinned host
    slabs, same strides within a slab), read in place over PCIe: a run of a non-resident expert needs no copy.
    INSTALL (the gate/up pass, with HOST): inst[e] = 1 + the cache slot host expert e goes to (0: none): one no
    program of this launch reads (free, or an earlier layer's expert this pass did not use: `offer_slots`). Such
    a run's programs first copy the host slab into that slot — each its own gate and up columns, which its K loop
    then reads from there, and a share of the down matrix (dqw/dsc/dqz: the down stack, hd*: its host slabs) —
    and record the slot in down_slot[pid_m], the block slots the down pass takes: it reads the expert from the
    device. The expert crosses PCIe once and is resident for the next pass (a read-through install), where a copy
    after the pass moved it a second time. Runs of one expert write the same values. Where the code sits is
    ptxas's doing (compile_check --sass, sm_90, K-loop instructions per weight against plain host reads): any of
    it in the down pass's kernel made its K loop 4.06 → 4.45, the down copy before the gate/up K loop 3.21 → 3.6;
    as here (gate/up copies and selects before the loop, the down copy after it) 3.21 → 3.25 and down unchanged,
    at 151 registers instead of 128 (loading `to` again after the loop keeps 128 but costs 3.54)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return
    slot = tl.load(block_slot_ptr + pid_m).to(tl.int64)  # int64: a cache buffer can exceed 2^31 elements
    ids = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    row_mask = ids < T
    a_rows = ids // A_ROW_DIV
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    qw_base = qw_ptr + slot * stride_qs
    sc_base = sc_ptr + slot * stride_ss
    qz_base = qz_ptr + slot * stride_zs
    if HOST:
        if slot >= N_SLOTS:  # not resident: the expert's host slab, mapped into the device's address space
            qw_base = hqw_ptr + (slot - N_SLOTS) * stride_hqs
            sc_base = hsc_ptr + (slot - N_SLOTS) * stride_hss
            qz_base = hqz_ptr + (slot - N_SLOTS) * stride_hzs
    if INSTALL:  # a static shape: copy loops of K rows or of none, bases chosen by select, no branch
        e = tl.maximum(slot - N_SLOTS, 0)
        to = tl.where(slot >= N_SLOTS, tl.load(inst_ptr + e).to(tl.int64), 0) - 1
        rows = tl.where(to >= 0, K, 0)
        slot_to = tl.maximum(to, 0)
        gqw, gsc, gqz = qw_ptr + slot_to * stride_qs, sc_ptr + slot_to * stride_ss, qz_ptr + slot_to * stride_zs
        for half in tl.static_range(2):  # gate, then up (UP_OFFSET columns on)
            _copy_columns(qw_base + half * UP_OFFSET * stride_qn, sc_base + half * UP_OFFSET * stride_sn,
                          qz_base + (half * UP_OFFSET * BITS // 32) * stride_zn, gqw + half * UP_OFFSET * stride_qn,
                          gsc + half * UP_OFFSET * stride_sn, gqz + (half * UP_OFFSET * BITS // 32) * stride_zn,
                          pid_n * BLOCK_N, N, rows, stride_qk, stride_qn, stride_sg, stride_sn, stride_zg,
                          stride_zn, GROUP, BITS, BLOCK_K, BLOCK_N)
        tl.debug_barrier()  # the program's own stores, before its threads read them back
        qw_base = tl.where(to >= 0, gqw, qw_base)
        sc_base = tl.where(to >= 0, gsc, sc_base)
        qz_base = tl.where(to >= 0, gqz, qz_base)
    asum_rows = asum_ptr + a_rows * stride_sum_m
    if SWAP:  # the folded field-wise dots accumulate out^T (`_folded_fields_dot`), turned once after the loop
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros_like(acc)
    for k0 in range(0, K, BLOCK_K):
        if FIELDS:
            acc += _fields_dot(a_ptr + a_rows * stride_am, row_mask, stride_ak, qw_base, sc_base, qz_base, k0, offs_n,
                               n_mask, stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                               GROUP, BITS, BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, PREC, MAGIC, FOLD, A_FM,
                               asum_rows, A_SUM, MASK_REG, SWAP)
            if GATED:  # the up half (see the unpacking branch)
                acc_up += _fields_dot(a_ptr + a_rows * stride_am, row_mask, stride_ak, qw_base + UP_OFFSET * stride_qn,
                                      sc_base + UP_OFFSET * stride_sn,
                                      qz_base + (UP_OFFSET * BITS // 32) * stride_zn, k0, offs_n, n_mask,
                                      stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                                      GROUP, BITS, BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, PREC, MAGIC, FOLD, A_FM,
                                      asum_rows, A_SUM, MASK_REG, SWAP)
        else:
            a = tl.load(
                a_ptr + a_rows[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                mask=row_mask[:, None], other=0.0,
            )
            w, scale = _unpacked_tile(
                qw_base, sc_base, qz_base, k0, offs_n, n_mask,
                stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                GROUP, BITS, BLOCK_K, BLOCK_N, MAGIC, a_ptr.dtype.element_ty, DOT_F32,
            )
            acc += _dot(a, w, DOT_F32, PREC) * scale[None, :]
            if GATED:
                # The up half: UP_OFFSET is a whole number of runs, so its packed zero columns start at word
                # UP_OFFSET · BITS / 32.
                w_up, scale_up = _unpacked_tile(
                    qw_base + UP_OFFSET * stride_qn, sc_base + UP_OFFSET * stride_sn,
                    qz_base + (UP_OFFSET * BITS // 32) * stride_zn, k0, offs_n, n_mask,
                    stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn,
                    GROUP, BITS, BLOCK_K, BLOCK_N, MAGIC, a_ptr.dtype.element_ty, DOT_F32,
                )
                acc_up += _dot(a, w_up, DOT_F32, PREC) * scale_up[None, :]
    if GATED:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if SWAP:
        acc = tl.trans(acc)
    if OUT_SUM != 0:
        acc = _rounded16(acc, OUT_BF16)
        parts = tl.sum(tl.reshape(acc, (BLOCK_M, BLOCK_N // OUT_SUM, OUT_SUM)), axis=2)
        pcol = pid_n * (BLOCK_N // OUT_SUM) + tl.arange(0, BLOCK_N // OUT_SUM)
        tl.store(osum_ptr + ids[:, None] * stride_osum_m + pcol[None, :], parts,
                 mask=row_mask[:, None] & (pcol[None, :] < N // OUT_SUM))
    if MUL_WEIGHT:
        rw = tl.load(rw_ptr + ids, mask=row_mask, other=0.0).to(tl.float32)
        acc = acc * rw[:, None]
    cols = offs_n
    if OUT_FM != 0:  # out's columns field-major in tiles of OUT_FM (the next pass reads them with A_FM)
        cols = _field_major_col(offs_n, OUT_FM, OUT_PER)
    out = out_ptr + ids[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])
    if INSTALL:  # after the K loop (see the docstring)
        # the down matrix, which the down pass reads from the slot: this program's share of its column tiles
        down_rows = tl.where(to >= 0, DK, 0)
        for c0 in range(pid_n * BLOCK_N, DN, tl.num_programs(1) * BLOCK_N):
            _copy_columns(hdqw_ptr + e * stride_hdqs, hdsc_ptr + e * stride_hdss, hdqz_ptr + e * stride_hdzs,
                          dqw_ptr + slot_to * stride_dqs, dsc_ptr + slot_to * stride_dss,
                          dqz_ptr + slot_to * stride_dzs, c0, DN, down_rows, stride_dqk, stride_dqn, stride_dsg,
                          stride_dsn, stride_dzg, stride_dzn, DGROUP, BITS, DBLOCK_K, BLOCK_N)
        tl.store(down_slot_ptr + pid_m, tl.where(to >= 0, to, slot).to(down_slot_ptr.dtype.element_ty))


# ----------------------------------------------------------------------------------------------------------
# Host side


# The default is the field-wise form (`_fields_dot`); fields=False unpacks each tile into K order (`_weight_tile`:
# one int→float instruction and one shared-memory store per weight). Chosen from the compiled code, not yet from
# GPU times: `compile_check --sass` counts the K loop's instructions per weight (MoE gate/up at 32 rows, sm_90:
# 6.5 unpacked, with 128 int→float conversions at a quarter rate, vs 4.9 field-wise; BENCHMARKS.md), and
# `gpu_check` times both forms at real shapes.
@dataclass(frozen=True)
class LinearConfig:
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    fields: bool = True  # `_fields_dot` (needs block_k / (32 / bits) ≥ 16, else the unpacking form runs)
    mask_reg: bool = True  # the field mask held in a register (`_in_register`)


@dataclass(frozen=True)
class MoeConfig:
    block_m: int
    block_n: int = 64
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 3
    fields: bool = True  # as LinearConfig.fields
    # where the passes read field-wise: x and the activations between the two passes field-major (`_field_cols`,
    # `field_major`), and for 16-bit codes (bf16 4-bit, fp16 ≤ 8-bit) the zero taken off once per K tile through
    # a's row sums (`_folded_fields_dot`).
    # Why: compile_check --sass, sm_90, instructions per weight: gate/up 4.9 → 3.62, down 5.75 → 4.53 with the row
    # sums precomputed (4.02 / 5.28 without; BENCHMARKS), and every load of a in the K loop a pipelined cp.async
    # (before: 2-byte gathers, waited on each K step).
    # False (CLOVER_W4A16_FOLD=0) keeps the form before, for a before/after on a GPU.
    folded: bool = True
    # a register cap per thread (None: the compiler's choice). Why: the unfolded field-wise gate/up takes 135
    # registers on sm_90, 3 programs of 4 warps an SM; 128 (32 B spilled, compile_check) fits a 4th. The folded
    # default takes 128 uncapped (102 with mask_reg off), so the cap only adds a spill there. Unmeasured: gpu_check
    # times it beside the default.
    maxnreg: int | None = None
    mask_reg: bool = True  # as LinearConfig.mask_reg
    # the folded dots transposed: weights as the MMA's first operand, out^T accumulated (`_folded_fields_dot`, SWAP);
    # `moe_config`'s default by arch and triton version (`_default_swap`: off on sm_90 with triton ≥ 3.7).
    # Why: compile_check --sass, instructions per weight, gate/up · down, this form vs the one before: triton 3.6
    # (the H200 machine's) sm_90 4.14 → 3.41 · 4.95 → 4.62 (100 register moves a gate/up K step gone; wgmma), sm_120
    # 4.04 → 3.12 · 5.88 → 4.72; triton 3.8 sm_120 3.31 → 3.09 · 4.47 → 4.23, sm_89 3.2 → 3.0 · 4.28 → 3.83, but
    # sm_90 3.24 → 3.43 · 4.14 → 4.73 (a proxy; the tuner tries both). False (CLOVER_W4A16_SWAP=0): the form before.
    swap: bool = True


def _default_fields() -> bool:
    """The tile form the configs pick: field-wise unless CLOVER_W4A16_FORM=unpacked (a whole-pass before/after
    on a GPU, `docs/gpu_session.sh` stage `unpacked`)."""
    return os.environ.get("CLOVER_W4A16_FORM", "fields") != "unpacked"


def _num_sms(device: torch.device) -> int:
    """The device's SM count, which the tile heuristics size the grid by (split-K). Elsewhere 1, or
    CLOVER_EMULATE_SMS: the CPU tests take an H200's decisions (132), so its split-K shapes run interpreted too —
    the uneven split that read past K on the H200 (`k_split`) had never run on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return int(os.environ.get("CLOVER_EMULATE_SMS", "1"))


def _block_k(k: int, group_size: int, bits: int, cap: int = 128) -> int:
    """Largest power of two ≤ cap dividing the group (so a K tile has one scale row), ≥ 16 for tl.dot."""
    bk = cap
    while bk > 16 and group_size % bk:
        bk //= 2
    if group_size % bk or bk < 32 // bits:
        raise ValueError(f"group_size {group_size} needs to be a multiple of 16 for the Triton kernels")
    if 32 % bits and bk % 32:  # 3-bit: whole runs of 32 rows a tile
        raise ValueError(f"group_size {group_size} needs to be a multiple of 32 for {bits}-bit Triton kernels")
    return bk


def _block_m(m: int) -> int:
    return max(16, min(64, triton.next_power_of_2(max(m, 1))))


def _fields_ok(fields: bool, block_k: int, bits: int) -> bool:
    """Field-wise dots need each field's K (block_k / values per int32) to be a tl.dot size (≥ 16); 3-bit codes
    in GPTQ's layout (which straddle words) always unpack (`_weight_tile3`); in the planes layout they are always
    read field-wise (`_reads_fields`)."""
    return fields and 32 % bits == 0 and block_k // (32 // bits) >= 16


def _reads_fields(stack: PackedStack, cfg: MoeConfig, block_k: int) -> bool:
    """Whether a MoE pass over `stack` reads field-wise with the zero folded (a field-major, `_folded_fields_dot`
    or `_planes3_dot`): always for a planes-layout stack (its only form), else as the config says."""
    return stack.planes or (cfg.folded and _fields_ok(cfg.fields, block_k, stack.bits))


def _fm_per(stack: PackedStack) -> int:
    """Fields per packed word of a's field-major order for `stack`: a planes-layout 3-bit K tile is read as a 4-bit
    one (8 fields of 16 columns)."""
    return 8 if stack.planes else 32 // stack.bits


def magic_bits(dtype: torch.dtype, bits: int) -> int:
    """The 16-bit float `_fields_dot` ORs each code into, or 0 for its fp32 form. Its mantissa's low bits must
    hold every code and every zero (qzeros + 1 ≤ 2^bits) with a step of exactly 1: bf16 keeps 7 mantissa bits, so
    0x4300 (128.0) takes 4-bit codes; fp16 keeps 10, so 0x6400 (1024.0) takes up to 8 bits."""
    if dtype == torch.bfloat16 and bits <= 4:
        return 0x4300
    if dtype == torch.float16 and bits <= 8:
        return 0x6400
    return 0


def _dot_mode(x: Tensor) -> tuple[bool, str]:
    if x.dtype == torch.float32:
        return True, "ieee"
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"x must be fp32, bf16 or fp16, got {x.dtype}")
    return _INTERPRET, "ieee" if _INTERPRET else "tf32"


def k_split(k_tiles: int, split_k: int) -> tuple[int, int]:
    """(K tiles per split, splits): the most splits ≤ split_k that share the K tiles evenly. Why: the K loop has
    a static trip count (TILES_PER_SPLIT) and no bound, so a last split with fewer tiles would run past K into
    x's next row and whatever memory follows the weight — on a GPU other tensors' bytes read as scales, NaN.
    2026-12-04 on an H200: the merged attention q/k/v (2048 → 9216, 72 column tiles at 32 rows, 132 SMs) asked
    for 3 splits of 16 tiles (6 + 6 + 4, the last reading 2 tiles past K) and every 32-row pass went NaN."""
    split = max(1, min(split_k, k_tiles))
    while k_tiles % split:
        split -= 1
    return k_tiles // split, split


def linear_config(m: int, n: int, k: int, group_size: int, bits: int, device: torch.device, k_tile: int = 0,
                  use_table: bool = True) -> LinearConfig:
    """Tiles for a small-M GEMM: this GPU's tuned entry for the call (`tuning`, written by `clover-local tune`)
    where there is one, else the heuristic: enough programs to fill the GPU, splitting K when N alone cannot.
    k_tile ≠ 0 (rows repacked at load): BLOCK_K is that tile."""
    bm = _block_m(m)
    bk = k_tile or _block_k(k, group_size, bits)
    # BLOCK_N 128 at BLOCK_M 64 spills on sm_90 (255 registers, 32 B of stack for W8A16 2048→8192: compile_check),
    # so a merged pass's 64-row calls take 64; a prefill chunk's (512 rows) keep 128, not re-measured
    bn = 64 if n <= 4096 or 32 < m <= 64 else 128
    tiles = triton.cdiv(n, bn) * triton.cdiv(m, bm)
    k_tiles = k // bk
    target = 2 * _num_sms(device)
    split = k_split(k_tiles, min(16, target // max(tiles, 1)))[1]
    cfg = LinearConfig(bm, bn, bk, split, fields=_default_fields())
    if use_table:
        cfg = tuning.apply(cfg, tuning.tuned(_linear_signature(m, n, k, group_size, bits, k_tile), device),
                           keep=("block_m", "block_k"))
    return cfg


def _linear_signature(m: int, n: int, k: int, group_size: int, bits: int, k_tile: int) -> tuning.Signature:
    return tuning.Signature("linear", tuning.rows_bucket(m), k, n, bits, group_size, k_tile=k_tile)


def linear_w4a16_triton(
    x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int = 4,
    config: LinearConfig | None = None, k_tile: int = 0,
) -> Tensor:
    """x [..., K] @ dequant(W [K, N]) → [..., N] in x's dtype (GPTQ layout, g_idx = k // group).

    k_tile ≠ 0: qweight's rows are repacked field-major per tile of k_tile inputs (`field_major_rows`); the
    field-wise dots then read x's columns contiguously (A_FM) with BLOCK_K = k_tile, and the unpacking form runs
    on x permuted to match."""
    k, n = check_packed(qweight, scales, qzeros, group_size, bits)
    if 32 % bits:
        raise ValueError(f"the dense Triton kernel takes 4- and 8-bit weights, not {bits}-bit")
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, the weight expects K={k}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if config is None and (rec := tuning.recording()) is not None:
        def rerun():  # the same call with any config, on a copy of this x (taken once per signature)
            xs = x2.clone()
            return lambda c: linear_w4a16_triton(xs, qweight, scales, qzeros, group_size, bits, c, k_tile)

        rec.note(_linear_signature(m, n, k, group_size, bits, k_tile),
                 linear_config(m, n, k, group_size, bits, x.device, k_tile, use_table=False), rerun)
    cfg = config or linear_config(m, n, k, group_size, bits, x.device, k_tile)
    a_fm = False
    if k_tile:
        cfg = replace(cfg, block_k=k_tile)
        a_fm = _fields_ok(cfg.fields, k_tile, bits)
        if not a_fm:
            x2 = repacked_input(x2, k_tile, bits)
    if group_size % cfg.block_k:
        raise ValueError(f"block_k {cfg.block_k} must divide group_size {group_size}")
    per_split, split = k_split(k // cfg.block_k, cfg.split_k)
    if split == 1:
        out = torch.empty(1, m, n, dtype=x.dtype, device=x.device)
    else:
        out = torch.empty(split, m, n, dtype=torch.float32, device=x.device)
    dot_f32, prec = _dot_mode(x)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_m), split)
    _linear_kernel[grid](
        x2, qweight, scales, qzeros, out,
        m, n, per_split,
        x2.stride(0), x2.stride(1),
        qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1), qzeros.stride(0), qzeros.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        GROUP=group_size, BITS=bits, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        DOT_F32=dot_f32, PREC=prec, FIELDS=_fields_ok(cfg.fields, cfg.block_k, bits),
        MAGIC=magic_bits(x.dtype, bits), FOLD=False, A_FM=a_fm, MASK_REG=cfg.mask_reg and a_fm, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if split == 1:
        return out[0].reshape(*lead, n)
    segment("split-K sum")
    return _sum_parts(out, split, m, n, m * n, n, x.dtype).reshape(*lead, n)


@triton.jit
def _align_rank_kernel(
    slots_ptr, rank_ptr, runlen_ptr, sorted_ids_ptr, L,
    T, BLOCK_M: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_L: tl.constexpr,
    x_ptr, xfm_ptr, xsum_ptr, X_NUMEL, stride_xm, H: tl.constexpr, TILE: tl.constexpr, PER: tl.constexpr,
    COPY: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Pass 1 of `moe_align_triton`, one program per BLOCK_I pairs: each pair's rank among the pairs of its slot
    (how many come before it) and, for the first pair of a slot, the slot's padded run length (0 for the rest);
    the programs also fill sorted_ids with the padding id T. COPY: they also write x [·, H] field-major into
    xfm (`reference.field_major(x, TILE, PER)`, what the folded gate/up pass reads) and each row's sum per
    tile of TILE columns into xsum [rows, H / TILE] fp32 (the fold's Σ a, `_folded_fields_dot`): one launch
    fewer a layer. BLOCK_C is a multiple of TILE and H of both, so a chunk holds whole tiles of one row."""
    pid = tl.program_id(0)
    i = pid * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < T
    s_i = tl.load(slots_ptr + i, mask=live, other=-1)
    rank = tl.zeros((BLOCK_I,), dtype=tl.int32)
    count = tl.zeros((BLOCK_I,), dtype=tl.int32)
    for j0 in range(0, T, BLOCK_J):
        j = j0 + tl.arange(0, BLOCK_J)
        s_j = tl.load(slots_ptr + j, mask=j < T, other=-2)
        same = s_i[:, None] == s_j[None, :]
        count += tl.sum(same.to(tl.int32), axis=1)
        rank += tl.sum((same & (j[None, :] < i[:, None])).to(tl.int32), axis=1)
    runlen = tl.where(rank == 0, (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M, 0)
    tl.store(rank_ptr + i, rank, mask=live)
    tl.store(runlen_ptr + i, runlen, mask=live)
    for l0 in range(pid * BLOCK_L, L, tl.num_programs(0) * BLOCK_L):
        offs = l0 + tl.arange(0, BLOCK_L)
        tl.store(sorted_ids_ptr + offs, tl.zeros((BLOCK_L,), dtype=tl.int32) + T, mask=offs < L)
    if COPY:
        for e0 in range(pid * BLOCK_C, X_NUMEL, tl.num_programs(0) * BLOCK_C):
            e = e0 + tl.arange(0, BLOCK_C)
            row = (e // H).to(tl.int64)
            col = e % H
            v = tl.load(x_ptr + row * stride_xm + col, mask=e < X_NUMEL, other=0.0)
            tl.store(xfm_ptr + row * H + _field_major_col(col, TILE, PER), v, mask=e < X_NUMEL)
            tiles = e0 // TILE + tl.arange(0, BLOCK_C // TILE)  # x's rows are H / TILE tiles each: flat index
            sums = tl.sum(tl.reshape(v.to(tl.float32), (BLOCK_C // TILE, TILE)), axis=1)
            tl.store(xsum_ptr + tiles, sums, mask=tiles < X_NUMEL // TILE)


@triton.jit
def _align_place_kernel(
    slots_ptr, rank_ptr, runlen_ptr, sorted_ids_ptr, block_slot_ptr, num_padded_ptr,
    T, MAX_RUNS, BLOCK_M: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Pass 2: a slot's run starts after the runs of every smaller slot in use; pair i goes to its run's start
    plus its rank, and the first pair of a slot writes the slot into block_slot for each of its runs."""
    pid = tl.program_id(0)
    i = pid * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < T
    s_i = tl.load(slots_ptr + i, mask=live, other=-1)
    rank = tl.load(rank_ptr + i, mask=live, other=0)
    runlen = tl.load(runlen_ptr + i, mask=live, other=0)
    start = tl.zeros((BLOCK_I,), dtype=tl.int32)
    total = tl.zeros((1,), dtype=tl.int32)
    for j0 in range(0, T, BLOCK_J):
        j = j0 + tl.arange(0, BLOCK_J)
        s_j = tl.load(slots_ptr + j, mask=j < T, other=-2)
        len_j = tl.load(runlen_ptr + j, mask=j < T, other=0)
        start += tl.sum(tl.where(s_j[None, :] < s_i[:, None], len_j[None, :], 0), axis=1)
        total += tl.sum(len_j, axis=0)
    tl.store(sorted_ids_ptr + start + rank, i.to(tl.int32), mask=live)
    n_runs = runlen // BLOCK_M
    for r0 in range(0, MAX_RUNS, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        tl.store(block_slot_ptr + start[:, None] // BLOCK_M + r[None, :], s_i[:, None] + r[None, :] * 0,
                 mask=live[:, None] & (r[None, :] < n_runs[:, None]))
    if pid == 0:
        tl.store(num_padded_ptr + tl.arange(0, 1), total)


# Above this many (token, choice) pairs the pairwise passes (O(pairs²) comparisons) give way to the torch sort.
ALIGN_MAX_PAIRS = 4096


def align_length(t: int, num_slots: int, block_m: int) -> int:
    """Rows of the padded layout: every pair, plus up to block_m − 1 padding rows per slot in use."""
    return triton.cdiv(t + min(num_slots, t) * (block_m - 1), block_m) * block_m


def moe_align(slot_ids: Tensor, num_slots: int, block_m: int,
              copy: tuple[Tensor, Tensor, Tensor, int, int] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Sort the (token, choice) pairs by slot and pad each slot's run to a multiple of block_m.

    Returns sorted_ids int32 [L] (pair id m·topk + j, or T = M·topk for padding), block_slot int32 [L / block_m]
    (the slot of each run; entries past num_padded are unspecified) and num_padded int32 [1] (rows in use;
    later blocks exit at once). L depends only on T, num_slots and block_m, and nothing syncs with the host, so
    the step can be captured in a CUDA graph. Two Triton launches on CUDA up to ALIGN_MAX_PAIRS pairs
    (`moe_align_triton`), else torch ops (`moe_align_torch`)."""
    if slot_ids.numel() <= ALIGN_MAX_PAIRS and (slot_ids.is_cuda or _INTERPRET):
        return moe_align_triton(slot_ids, num_slots, block_m, copy)
    if copy is not None:  # (x, out, sums, tile, per): out = field_major(x, tile, per), sums per tile; torch here
        x, out, sums, tile, per = copy
        out.copy_(field_major(x, tile, per))
        sums.copy_(x.float().reshape(x.shape[0], -1, tile).sum(-1))
    return moe_align_torch(slot_ids, num_slots, block_m)


def moe_align_triton(slot_ids: Tensor, num_slots: int, block_m: int,
                     copy: tuple[Tensor, Tensor, Tensor, int, int] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """`moe_align` in two Triton launches. Why: the torch version is ~15 small kernels (a sort, scatters,
    cumsums over every cache slot, a searchsorted), 76 µs of GPU time per MoE call on an H200 inside a CUDA graph
    (2026-11-30), ~3 ms of a 27 ms preview pass over 40 layers. Pairwise comparisons over the pairs only (never
    an array as long as the cache's ~9,000 slots), split over programs of BLOCK_I pairs so no program holds more
    than BLOCK_I × BLOCK_J of them: a single program holding all 256 × 256 spilled (310 µs, reverted).
    copy = (x, out, sums, tile, per): pass 1 also writes field_major(x, tile, per) into out and x's sums per tile
    of tile columns into sums [rows, H / tile] fp32 (x's rows unit-stride)."""
    flat = slot_ids.reshape(-1).to(torch.int32)
    t = flat.numel()
    length = align_length(t, num_slots, block_m)
    dev = flat.device
    sorted_ids = torch.empty(length, dtype=torch.int32, device=dev)
    block_slot = torch.empty(length // block_m, dtype=torch.int32, device=dev)  # past num_padded: unread
    num_padded = torch.empty(1, dtype=torch.int32, device=dev)
    rank = torch.empty(t, dtype=torch.int32, device=dev)
    runlen = torch.empty(t, dtype=torch.int32, device=dev)
    block_i, block_j = 32, min(256, max(16, triton.next_power_of_2(t)))
    grid = (triton.cdiv(t, block_i),)
    if copy is None:  # nothing to copy: COPY=False compiles the copy loop out, the rest only fills the signature
        x, xfm, xsum, tile, per = flat, flat, flat, 1, 1
        x_numel, stride_xm, h = 0, 0, 1
    else:
        x, xfm, xsum, tile, per = copy
        x_numel, stride_xm, h = x.numel(), x.stride(0), x.shape[-1]
        if h % tile or 1024 % tile:
            raise ValueError(f"the field-major copy needs tile {tile} to divide H={h} and 1024")
    _align_rank_kernel[grid](flat, rank, runlen, sorted_ids, length, t,
                             BLOCK_M=block_m, BLOCK_I=block_i, BLOCK_J=block_j, BLOCK_L=256,
                             x_ptr=x, xfm_ptr=xfm, xsum_ptr=xsum, X_NUMEL=x_numel, stride_xm=stride_xm, H=h,
                             TILE=tile, PER=per, COPY=copy is not None, BLOCK_C=1024)
    _align_place_kernel[grid](flat, rank, runlen, sorted_ids, block_slot, num_padded, t, triton.cdiv(t, block_m),
                              BLOCK_M=block_m, BLOCK_I=block_i, BLOCK_J=block_j, BLOCK_R=16)
    return sorted_ids, block_slot, num_padded


def moe_align_torch(slot_ids: Tensor, num_slots: int, block_m: int) -> tuple[Tensor, Tensor, Tensor]:
    """`moe_align` in plain torch ops (a stable sort by slot): any number of pairs, any device."""
    flat = slot_ids.reshape(-1).to(torch.int64)
    t = flat.numel()
    device = flat.device
    order = torch.argsort(flat, stable=True)
    sorted_slots = flat[order]
    counts = torch.zeros(num_slots, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    count_start = torch.cumsum(counts, 0) - counts
    dest = pad_start[sorted_slots] + torch.arange(t, device=device) - count_start[sorted_slots]
    length = align_length(t, num_slots, block_m)
    sorted_ids = torch.full((length,), t, dtype=torch.int32, device=device)
    sorted_ids[dest] = order.to(torch.int32)
    block_starts = torch.arange(0, length, block_m, device=device)
    block_slot = torch.searchsorted(pad_end, block_starts, right=True).clamp_(max=num_slots - 1).to(torch.int32)
    return sorted_ids, block_slot, pad_end[-1:].to(torch.int32)


def _default_swap(device: torch.device | None) -> bool:
    """`MoeConfig.swap` unless CLOVER_W4A16_SWAP says: on, but off on Hopper (sm_90). Why: measured on the H200
    (triton 3.6, `gpu_check` kernels stage, 2026-12-04): the 32-row MoE call 0.74 ms transposed vs 0.44 ms the
    other way round, though the transposed form compiled to fewer instructions per weight there (3.41 vs 4.14
    gate/up: the census is a proxy, the GPU's time decides); under triton ≥ 3.7 the transposed dots are also
    waited-for (3.8) and fenced (3.9) warpgroup MMAs with more instructions than the other way round. On RTX 40 /
    50 (mma.sync either way) the transposed form compiles smaller everywhere: unmeasured there, `tune` decides."""
    env = os.environ.get("CLOVER_W4A16_SWAP")
    if env is not None:
        return env != "0"
    return device is None or device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9


def moe_config(m: int, topk: int, num_slots: int, device: torch.device | None = None) -> MoeConfig:
    """The heuristic: BLOCK_M from the mean pairs per slot in use (16 for decode/preview: most slots see 1–4
    pairs), the same tiles for both passes; the dots' orientation for `device`'s arch (`_default_swap`; None: the
    transposed default)."""
    t = m * topk
    per_slot = t / max(1, min(num_slots, t))
    return MoeConfig(block_m=16 if per_slot <= 16 else 32 if per_slot <= 32 else 64, fields=_default_fields(),
                     folded=os.environ.get("CLOVER_W4A16_FOLD", "1") != "0", swap=_default_swap(device))


def _moe_signatures(m: int, topk: int, gate_up: PackedStack, down: PackedStack) -> tuple[tuning.Signature, ...]:
    rows = tuning.rows_bucket(m)
    return tuple(tuning.Signature(kind, rows, st.in_features, st.out_features, st.bits, st.group_size, topk=topk)
                 for kind, st in (("moe_up", gate_up), ("moe_down", down)))


def moe_configs(m: int, topk: int, num_slots: int, gate_up: PackedStack, down: PackedStack, device: torch.device,
                use_table: bool = True) -> tuple[MoeConfig, MoeConfig]:
    """(gate/up, down) configs: the heuristic, with each pass's tuned entry (`tuning`) where this GPU has one.
    BLOCK_M stays the heuristic's: the two passes share one align."""
    cfg = moe_config(m, topk, num_slots, device)
    if not use_table:
        return cfg, cfg
    up_sig, down_sig = _moe_signatures(m, topk, gate_up, down)
    return tuning.apply(cfg, tuning.tuned(up_sig, device)), tuning.apply(cfg, tuning.tuned(down_sig, device))


def _moe_block_k(stack: PackedStack, cfg: MoeConfig) -> int:
    if stack.planes:  # the layout's tile
        return PLANES_TILE
    return min(cfg.block_k, _block_k(stack.in_features, stack.group_size, stack.bits))


def _launch_moe(a, out, stack: PackedStack, rw, align, t, n, up_offset, a_row_div, gated, mul_weight, cfg,
                a_fm=False, out_fm=0, out_per=1, a_sum: tuple[Tensor, int] | None = None,
                out_sum: tuple[Tensor, int, torch.dtype] | None = None, host: PackedStack | None = None,
                install: tuple[Tensor, Tensor, PackedStack, PackedStack] | None = None):
    """One pass of `_moe_kernel`. a_sum = (sums, partials per K tile): a's precomputed row sums for the fold;
    out_sum = (sums, columns per sum, 16-bit dtype): out rounded to that dtype and its row sums written; host:
    the stack slots ≥ stack.num_slots index (their number minus num_slots); install (gate/up pass only): (int32 [E]
    1 + the slot each host expert is read through into or 0, the down pass's block slots to write, the down stack,
    its host stack; see `_moe_kernel`)."""
    sorted_ids, block_slot, num_padded = align
    k = stack.in_features
    bk = _moe_block_k(stack, cfg)
    fields = stack.planes or _fields_ok(cfg.fields, bk, stack.bits)
    magic = magic_bits(a.dtype, stack.bits)
    if stack.planes and not (magic and stack.group_size % PLANES_TILE == 0):
        raise ValueError(f"planes-layout 3-bit experts need bf16 or fp16 activations (got {a.dtype}) and groups of "
                         f"a multiple of {PLANES_TILE} inputs (got {stack.group_size})")
    dot_f32, prec = _dot_mode(a)
    qw, sc, qz = stack.qweight, stack.scales, stack.qzeros
    hs = host or stack  # without a host stack HOST=False compiles its branch out; these only fill the signature
    grid = (block_slot.numel(), triton.cdiv(n, cfg.block_n))
    fold = bool(fields and magic and (cfg.folded or stack.planes))
    asum, parts = a_sum if fold and a_sum is not None else (rw, 0)
    osum, per_sum, sum_dtype = out_sum if out_sum is not None else (rw, 0, None)
    if install is not None and not (gated and host is not None):
        raise ValueError("a read-through install is the gate/up pass's, with host stacks")
    # without INSTALL these only fill the signature (its code is compiled out)
    inst, down_slot, d, hd = install if install is not None else (rw, block_slot, stack, hs)
    _moe_kernel[grid](
        a, out, qw, sc, qz, rw, asum, osum,
        sorted_ids, block_slot, num_padded,
        n, k, t, up_offset,
        a.stride(0), a.stride(1), out.stride(0), out.stride(1), asum.stride(0), osum.stride(0),
        qw.stride(0), qw.stride(1), qw.stride(2), sc.stride(0), sc.stride(1), sc.stride(2),
        qz.stride(0), qz.stride(1), qz.stride(2),
        hs.qweight, hs.scales, hs.qzeros, stack.num_slots, hs.qweight.stride(0), hs.scales.stride(0),
        hs.qzeros.stride(0), HOST=host is not None, inst_ptr=inst, down_slot_ptr=down_slot,
        dqw_ptr=d.qweight, dsc_ptr=d.scales, dqz_ptr=d.qzeros, hdqw_ptr=hd.qweight, hdsc_ptr=hd.scales,
        hdqz_ptr=hd.qzeros, DN=d.out_features, DK=d.in_features, stride_dqs=d.qweight.stride(0),
        stride_dqk=d.qweight.stride(1), stride_dqn=d.qweight.stride(2), stride_dss=d.scales.stride(0),
        stride_dsg=d.scales.stride(1), stride_dsn=d.scales.stride(2), stride_dzs=d.qzeros.stride(0),
        stride_dzg=d.qzeros.stride(1), stride_dzn=d.qzeros.stride(2), stride_hdqs=hd.qweight.stride(0),
        stride_hdss=hd.scales.stride(0), stride_hdzs=hd.qzeros.stride(0), INSTALL=install is not None,
        DGROUP=d.group_size, DBLOCK_K=_block_k(d.in_features, d.group_size, d.bits),
        A_ROW_DIV=a_row_div, GATED=gated, MUL_WEIGHT=mul_weight,
        GROUP=stack.group_size, BITS=stack.bits,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=bk,
        DOT_F32=dot_f32, PREC=prec, FIELDS=fields, MAGIC=magic,
        FOLD=fold, A_FM=bool(a_fm and fields),
        OUT_FM=out_fm, OUT_PER=out_per, A_SUM=parts, OUT_SUM=per_sum, OUT_BF16=sum_dtype == torch.bfloat16,
        MASK_REG=cfg.mask_reg and fold, SWAP=cfg.swap and fold, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}),
    )


@triton.jit
def _planes3_kernel(qw_ptr, N, stride_s, stride_k, stride_n, BLOCK_N: tl.constexpr):
    """One slot's 128-input tile (program axis 1) of 3-bit qweight, BLOCK_N columns, rewritten in place from GPTQ's
    runs into the planes layout (`reference.planes3_codes`: the spec, tested against this). Every program reads
    its 12 words a column before it writes them, and no other program touches them."""
    base = qw_ptr + tl.program_id(0).to(tl.int64) * stride_s + (tl.program_id(1) * 12).to(tl.int64) * stride_k
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = offs_n < N
    c = tl.arange(0, 4)  # the tile's 4 runs of 32 rows, 3 words each
    ptrs = base + (3 * c)[:, None] * stride_k + offs_n[None, :] * stride_n
    codes = _runs3(ptrs, stride_k, ok[None, :], 4, BLOCK_N)
    codes = tl.reshape(codes, (8, 2, 8, BLOCK_N))  # row 16p + 8·half + f: [p, half, f, N]
    half = tl.arange(0, 2)[None, :, None, None]
    f = tl.arange(0, 8)[None, None, :, None]
    low = tl.sum(tl.sum((codes & 3) << (2 * f + 16 * half), axis=2), axis=1)  # disjoint bits: sums are ors
    high = tl.reshape((codes >> 2) & 1, (2, 4, 2, 8, BLOCK_N))  # p = 4q + w: [q, w, half, f, N]
    q = tl.arange(0, 2)[:, None, None, None, None]
    high = high << (f[None] + 8 * q + 16 * half[None])
    high = tl.sum(tl.sum(tl.sum(high, axis=3), axis=2), axis=0)  # [w, N]
    p = tl.arange(0, 8)
    tl.store(base + p[:, None] * stride_k + offs_n[None, :] * stride_n, low, mask=ok[None, :])
    tl.store(base + (8 + c)[:, None] * stride_k + offs_n[None, :] * stride_n, high, mask=ok[None, :])


def planes3_rows_triton(qweight: Tensor) -> Tensor:
    """`reference.planes3_rows(qweight, out=qweight)` in one launch: a 3-bit qweight [S, K·3/32, N] (any strides,
    e.g. a layer's slots of the expert cache) rewritten in place, without temporaries. Why: the torch form needs
    ≈ 32 bytes of temporaries a code of a piece and ≈ 15 launches a piece (≈ 15,000 pieces of 2M codes at 35B)."""
    if qweight.dim() != 3 or qweight.dtype != torch.int32 or qweight.shape[1] % 12:
        raise ValueError(f"planes3_rows_triton: int32 [S, K·3/32, N] with K a multiple of {PLANES_TILE}, got "
                         f"{qweight.dtype} {tuple(qweight.shape)}")
    s, rows, n = qweight.shape
    if s and n:
        block = min(64, triton.next_power_of_2(n))
        _planes3_kernel[(s, rows // 12, triton.cdiv(n, block))](qweight, n, *qweight.stride(), BLOCK_N=block)
    return qweight


@triton.jit
def _sum_parts_kernel(y_ptr, out_ptr, N, stride_j, stride_m, PARTS: tl.constexpr, BLOCK: tl.constexpr):
    """out[m, c] = Σ_j y[j·stride_j + m·stride_m + c] over the PARTS fp32 partials (split-K slices, a token's topk
    rows), in a fixed order, rounded once into out's dtype: one launch instead of a sum and a cast."""
    m = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = c < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(PARTS):
        acc += tl.load(y_ptr + j * stride_j + m * stride_m + c, mask=ok, other=0.0)
    tl.store(out_ptr + m * N + c, acc.to(out_ptr.dtype.element_ty), mask=ok)


def _slot_bytes(stack: PackedStack) -> int:
    """Bytes of one expert's matrix in a stack (codes, scales, zeros)."""
    return sum(t[0].numel() * t.element_size() for t in (stack.qweight, stack.scales, stack.qzeros))


def _sum_parts(y: Tensor, parts: int, m: int, n: int, stride_j: int, stride_m: int, dtype: torch.dtype) -> Tensor:
    # Interpreted (CPU tests), the sum stays fp32 and torch rounds it: triton 3.9's interpreter truncates fp32 →
    # bf16 (up to 1 ulp, not ½), where a GPU's store rounds to nearest.
    out = torch.empty(m, n, dtype=torch.float32 if _INTERPRET else dtype, device=y.device)
    if m and n:
        block = min(1024, triton.next_power_of_2(n))
        _sum_parts_kernel[(m, triton.cdiv(n, block))](y, out, n, stride_j, stride_m, PARTS=parts, BLOCK=block)
    return out.to(dtype)


def moe_w4a16_triton(
    x: Tensor, slot_ids: Tensor, weights: Tensor, gate_up: PackedStack, down: PackedStack,
    config: MoeConfig | None = None, down_config: MoeConfig | None = None,
    host: tuple[PackedStack, PackedStack] | None = None, install: Tensor | None = None,
) -> Tensor:
    """Routed experts of one layer, experts addressed by slot; same contract as `moe_w4a16_ref` (host and install
    included: slots ≥ S read the host stacks in place, which on CUDA must be pinned; install names where they are
    read through to). config: the gate/up pass's tiles (and BLOCK_M for both), down_config the down pass's
    (default: config); neither given: `moe_configs` (this GPU's tuned entries, else the heuristic)."""
    m, h = x.shape
    if slot_ids.shape != weights.shape or slot_ids.shape[0] != m:
        raise ValueError(
            f"slot_ids {tuple(slot_ids.shape)} and weights {tuple(weights.shape)} must both be [M={m}, topk]"
        )
    for name, st in (("gate_up", gate_up), ("down", down)):
        check_packed(st.qweight, st.scales, st.qzeros, st.group_size, st.bits)
        if st.qweight.dim() != 3 or st.scales.shape[0] != st.num_slots or st.qzeros.shape[0] != st.num_slots:
            raise ValueError(f"{name}: qweight, scales and qzeros must be [S, ·, ·] with the same S")
    inter = gate_up.out_features // 2
    if gate_up.in_features != h or down.in_features != inter or down.out_features != h:
        raise ValueError(
            f"stack shapes do not match H={h}: gate_up [{gate_up.in_features}, {gate_up.out_features}], "
            f"down [{down.in_features}, {down.out_features}]"
        )
    if (inter * gate_up.bits) % 32:
        raise ValueError(f"I={inter} must fill whole int32 words of {gate_up.bits}-bit zeros (gate/up halves split "
                         "packed zeros)")
    num_slots = min(gate_up.num_slots, down.num_slots)
    if host is not None:
        check_host_stacks((gate_up, down), host)
        num_slots += min(host[0].num_slots, host[1].num_slots)  # the align's slot numbers run past S into them
    topk = slot_ids.shape[1]
    t = m * topk
    if config is None and (rec := tuning.recording()) is not None:
        base = moe_config(m, topk, num_slots, x.device)

        def rerun(up: bool):  # one pass's config varied, the other at the heuristic's; on copies of the inputs
            xs, ids, ws = x.clone(), slot_ids.clone(), weights.clone()
            if up:
                return lambda c: moe_w4a16_triton(xs, ids, ws, gate_up, down, c, base, host)
            return lambda c: moe_w4a16_triton(xs, ids, ws, gate_up, down, base, c, host)

        up_sig, down_sig = _moe_signatures(m, topk, gate_up, down)
        rec.note(up_sig, base, lambda: rerun(True))
        rec.note(down_sig, base, lambda: rerun(False))
    if config is None:
        cfg, down_cfg = moe_configs(m, topk, num_slots, gate_up, down, x.device)
    else:
        cfg, down_cfg = config, down_config or config
    down_cfg = replace(down_cfg, block_m=cfg.block_m)  # one align serves both passes
    # folded: x too is read field-major (`field_major`, written by the align pass: no launch of its own), which
    # turns the gate/up pass's loads of a into contiguous vector loads the pipeliner can issue ahead (cp.async):
    # strided 2-byte gathers cannot be
    bk_up = _moe_block_k(gate_up, cfg)
    x_fm = _reads_fields(gate_up, cfg, bk_up)
    xc = x if x.stride(-1) == 1 else x.contiguous()
    copy = x_sums = None
    if x_fm:  # and x's sums per K tile beside it: the fold's Σ a, summed once instead of per program and half
        x_field_major = torch.empty(m, h, dtype=x.dtype, device=x.device)
        x_sums = torch.empty(m, h // bk_up, dtype=torch.float32, device=x.device)
        copy = (xc, x_field_major, x_sums, bk_up, _fm_per(gate_up))
        xc = x_field_major
    segment("align")  # the bench's profile splits the call by launch (runtime/segments.py); else a no-op
    align = moe_align(slot_ids, num_slots, cfg.block_m, copy)
    read_through = install is not None and host is not None
    down_slots = torch.empty_like(align[1]) if read_through else None  # written by the gate/up pass
    rw = weights.reshape(-1).contiguous()
    # interpreted, silu(gate)·up stays fp32 and torch rounds it (the interpreter's fp32 → bf16 cast truncates: a
    # bias toward zero that the down pass sums up; a GPU rounds to nearest)
    act = torch.empty(t, inter, dtype=torch.float32 if _INTERPRET else x.dtype, device=x.device)
    # act's columns field-major per down K tile when the down pass reads field-wise: its loads of a field's
    # columns become contiguous (`_field_cols`), written so by the gate/up pass at no cost
    bk_down = _moe_block_k(down, down_cfg)
    act_fm = _reads_fields(down, down_cfg, bk_down)
    # and where the down pass folds, act's row sums (per gate/up program's columns, or per down K tile where a
    # program's columns span several), written by the gate/up epilogue from the values it stores
    act_sums = None
    if act_fm and magic_bits(x.dtype, down.bits):
        per_sum = min(cfg.block_n, bk_down)
        act_sums = (torch.empty(t, inter // per_sum, dtype=torch.float32, device=x.device), per_sum, x.dtype)
    up_share = 0.0  # computed only for a listening profiler (a few numel products a layer otherwise wasted)
    if listening():
        up_share = _slot_bytes(gate_up) / (_slot_bytes(gate_up) + _slot_bytes(down))
    segment("gate/up", up_share)
    _launch_moe(xc, act, gate_up, rw, align, t, inter, inter, topk, True, False, cfg, a_fm=x_fm,
                out_fm=bk_down if act_fm else 0, out_per=_fm_per(down),
                a_sum=(x_sums, 1) if x_sums is not None else None, out_sum=act_sums,
                host=host[0] if host is not None else None,
                install=(install, down_slots, down, host[1]) if read_through else None)
    act = act.to(x.dtype)
    y = torch.empty(t, h, dtype=torch.float32, device=x.device)
    if read_through:  # the down pass reads the experts read through from their new slots
        align = (align[0], down_slots, align[2])
    segment("down", 1.0 - up_share)
    _launch_moe(act, y, down, rw, align, t, h, 0, 1, False, True, down_cfg, a_fm=act_fm,
                a_sum=(act_sums[0], bk_down // act_sums[1]) if act_sums is not None else None,
                host=host[1] if host is not None else None)
    segment("sum")
    return _sum_parts(y, topk, m, h, h, topk * h, x.dtype)  # each token's topk rows
