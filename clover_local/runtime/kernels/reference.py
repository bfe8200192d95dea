"""Pure-PyTorch reference for the W4A16 / W8A16 kernels: the spec the Triton kernels are tested against.

Weights are in the GPTQ v1 layout of `quantize.gptq_format` (desc_act false, so g_idx[k] = k // group_size):

- `qweight` int32 [K / p, N], p = 32 / bits: input rows p·i + j sit in bits bits·j … bits·j + bits − 1 of row i.
- `qzeros`  int32 [K / group, N / p]: p consecutive output columns per int32, same bit order, stored as zero − 1.
- `scales`  fp16  [K / group, N].

W[k, n] = (q[k, n] − (qzero[k // group, n] + 1)) · scale[k // group, n], and a linear computes x @ W (x [M, K]).
Everything is computed in fp32 and cast back to x's dtype. Nothing here imports triton.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from quantize.gptq_format import SUPPORTED_BITS, pack_last, unpack_last, values_per_run


def field_major(x: Tensor, tile: int, per: int) -> Tensor:
    """x [M, K] with each tile of columns laid out field-major: column t·tile + R·j + i holds x's column
    t·tile + per·i + j (R = tile / per), so field j of a packed K tile is R contiguous columns (the Triton
    kernels' A_FM loads). Its inverse is field_major(·, tile, R)."""
    m, k = x.shape
    return x.reshape(m, k // tile, tile // per, per).transpose(2, 3).reshape(m, k)


def repacked_input(x: Tensor, k_tile: int, bits: int) -> Tensor:
    """x [M, K] in the input order of a weight repacked by `field_major_rows(·, k_tile, bits)`: the GPTQ-order
    kernels (the reference, the unpacking form) compute x @ W as repacked_input(x) @ repacked."""
    return field_major(x, k_tile, k_tile // (32 // bits))


def field_major_rows(qweight: Tensor, tile: int, bits: int, out: Tensor | None = None,
                     chunk_elems: int = 1 << 23) -> Tensor:
    """qweight (GPTQ layout, [K / p, N]) with its input rows permuted inside each tile of `tile` rows so that a
    kernel reading x field-major (A_FM) computes x @ W: word row t·R + i, field j then holds input row
    t·tile + R·j + i (R = tile / p). The result is again a GPTQ-layout weight, of the input permuted by
    `repacked_input`: `linear_w4a16_ref(repacked_input(x, tile, bits), repacked, …)` is x @ W. Scales and zeros
    stay as they are (tile divides the group: rows move inside their group). Why: the Triton kernels' field-wise
    dots read x's columns PER apart, 2-byte gathers the pipeliner cannot issue ahead; repacked once at load, they
    read contiguous columns. In column chunks of ≤ chunk_elems codes (32 MiB as int32: at load the expert cache
    already fills the device), into `out` (may be qweight itself: each chunk is read before it is written)."""
    p = 32 // bits
    kp, n = qweight.shape
    k = kp * p
    if tile % p or k % tile:
        raise ValueError(f"tile {tile} must be a multiple of {p} dividing K = {k}")
    out = torch.empty_like(qweight) if out is None else out
    chunk = max(1, chunk_elems // k)
    for c0 in range(0, n, chunk):
        codes = unpack_rows(qweight[:, c0 : c0 + chunk], bits)  # [K, n], input order
        # new row p·i' + j' of a tile = its old row R·j' + i': the tile's rows read as [p, R], transposed
        codes = codes.reshape(k // tile, p, tile // p, -1).transpose(1, 2).reshape(k, -1)
        out[:, c0 : c0 + chunk] = pack_rows(codes, bits)
    return out


# The 3-bit planes layout (`planes3_rows`): per tile of 128 input rows and per output column, GPTQ's 12 words
# rearranged into 8 words of the codes' low two bits and 4 words of their high bit, placed for the Triton MoE's
# folded field-wise dots (`w4a16._planes3_dot`). Tile row ρ = 8κ + f is K entry κ = 2p + half of dot f (the
# order of a 4-bit K tile read field-major, `field_major(·, 128, 8)`):
# - low bits, word p (0..7): bits 2f + 16·half;
# - high bit, word 8 + w (w = 0..3): bit f + 8q + 16·half, where p = 4q + w.
# So one shift and one and-or turn a word into two codes' bits already paired as the MMA reads them, where
# GPTQ's straddled runs cost the unpacking form a shared-memory store and ~8 instructions per weight.
PLANES_TILE = 128


def _planes_shifts(device) -> tuple[Tensor, Tensor]:
    """Bit offsets of the planes layout: low bits [half, f] → 2f + 16·half; high bit [q, 1, half, f] → f + 8q +
    16·half (the 1 broadcasts over w)."""
    half = torch.arange(2, device=device).view(2, 1) * 16
    f = torch.arange(8, device=device).view(1, 8)
    q = torch.arange(2, device=device).view(2, 1, 1, 1) * 8
    return (2 * f + half).view(2, 8, 1), (f + half + q).view(2, 1, 2, 8, 1)


def _int32_words(bits: Tensor) -> Tensor:
    """int64 values below 2^32 → int32 words with the same bits (the top bit as the sign)."""
    return torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)


def planes3_codes(codes: Tensor) -> Tensor:
    """3-bit codes [..., K, N] (input order, K a multiple of 128) → int32 [..., K·3/32, N] in the planes layout."""
    *lead, k, n = codes.shape
    if k % PLANES_TILE:
        raise ValueError(f"the 3-bit planes layout needs K a multiple of {PLANES_TILE}, got {k}")
    t = k // PLANES_TILE
    sh_low, sh_high = _planes_shifts(codes.device)
    c = codes.to(torch.int64).reshape(*lead, t, 8, 2, 8, n)  # [.., tile, p, half, f, N]
    low = ((c & 3) << sh_low).sum(dim=(-3, -2))  # disjoint bits: the sum is their or
    high = (((c >> 2) & 1).reshape(*lead, t, 2, 4, 2, 8, n) << sh_high).sum(dim=(-5, -3, -2))  # p = 4q + w
    return _int32_words(torch.cat([low, high], dim=-2)).reshape(*lead, t * 12, n)


def unplanes3_codes(words: Tensor) -> Tensor:
    """Inverse of `planes3_codes`: int32 [..., K·3/32, N] → int32 codes [..., K, N]."""
    *lead, r, n = words.shape
    if r % 12:
        raise ValueError(f"planes-layout rows come in tiles of 12 words, got {r}")
    t = r // 12
    sh_low, sh_high = _planes_shifts(words.device)
    w = words.to(torch.int64).reshape(*lead, t, 12, n) & 0xFFFFFFFF
    low = (w[..., :8, None, None, :] >> sh_low) & 3  # [.., tile, p, half, f, N]
    high = (w[..., None, 8:, None, None, :] >> sh_high) & 1  # [.., tile, q, w, half, f, N]
    codes = low | (high.reshape(low.shape) << 2)
    return codes.to(torch.int32).reshape(*lead, t * PLANES_TILE, n)


def planes3_rows(qweight: Tensor, out: Tensor | None = None, chunk_elems: int = 1 << 23) -> Tensor:
    """A 3-bit qweight [..., K·3/32, N] (GPTQ layout) in the planes layout, into `out` (may be qweight itself:
    each piece is read before it is written), in pieces of ≤ chunk_elems codes — leading indices (slots) at a
    time, or columns of one — so a load that runs it on the device's filled expert cache needs only ≈ 10 bytes a
    code of a piece beside it."""
    out = torch.empty_like(qweight) if out is None else out
    k, n = qweight.shape[-2] * 32 // 3, qweight.shape[-1]
    lead = qweight.reshape(-1, *qweight.shape[-2:]) if qweight.dim() > 2 else qweight[None]
    dest = out.view(lead.shape) if out.dim() > 2 else out[None]
    per = max(1, chunk_elems // (k * n))  # matrices at a time
    cols = n if per > 1 else max(1, chunk_elems // k)
    for s0 in range(0, lead.shape[0], per):
        for c0 in range(0, n, cols):
            codes = unpack_rows(lead[s0 : s0 + per, :, c0 : c0 + cols], 3)
            dest[s0 : s0 + per, :, c0 : c0 + cols] = planes3_codes(codes)
    return out


def gptq_rows(planar: Tensor) -> Tensor:
    """Inverse of `planes3_rows`: the GPTQ-layout 3-bit qweight of a planes-layout one."""
    codes = unplanes3_codes(planar)
    return pack_last(codes.transpose(-1, -2), 3).transpose(-1, -2).contiguous()


@dataclass
class PackedStack:
    """Quantized weights of several experts (or one dense layer with S=1), indexed by slot on dim 0.
    Views may be strided (slots live inside a larger cache buffer)."""

    qweight: Tensor  # int32 [S, K·bits/32, N]
    scales: Tensor  # fp16  [S, K//group, N]
    qzeros: Tensor  # int32 [S, K//group, N·bits/32]
    group_size: int
    bits: int = 4
    planes: bool = False  # 3-bit qweight in the planes layout (`planes3_rows`), not GPTQ's

    @property
    def num_slots(self) -> int:
        return self.qweight.shape[0]

    @property
    def in_features(self) -> int:
        return self.qweight.shape[1] * 32 // self.bits

    @property
    def out_features(self) -> int:
        return self.qweight.shape[2]

    def slot(self, s: int) -> tuple[Tensor, Tensor, Tensor]:
        """(qweight, scales, qzeros) of one slot, as views (qweight in the stack's layout)."""
        return self.qweight[s], self.scales[s], self.qzeros[s]

    def gptq_slot(self, s: int) -> tuple[Tensor, Tensor, Tensor]:
        """(qweight, scales, qzeros) of one slot in the GPTQ layout (a copy of qweight where the stack's is
        planar)."""
        qw, sc, qz = self.slot(s)
        return (gptq_rows(qw) if self.planes else qw), sc, qz


def check_packed(qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int) -> tuple[int, int]:
    """Validate one matrix's tensors (the last two dims); returns (K, N). Raises ValueError on a mismatch."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    run = values_per_run(bits)
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ValueError(f"qweight and qzeros must be int32, got {qweight.dtype} and {qzeros.dtype}")
    if (qweight.shape[-2] * 32) % bits:
        raise ValueError(f"qweight's {qweight.shape[-2]} rows are not whole runs of {bits}-bit values")
    k, n = qweight.shape[-2] * 32 // bits, qweight.shape[-1]
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} must be a positive divisor of K={k}")
    groups = k // group_size
    if tuple(scales.shape[-2:]) != (groups, n):
        raise ValueError(f"scales must be [K/group={groups}, N={n}], got {tuple(scales.shape[-2:])}")
    if n % run or tuple(qzeros.shape[-2:]) != (groups, n * bits // 32):
        raise ValueError(f"qzeros must be [K/group={groups}, N·{bits}/32={n * bits // 32}], got "
                         f"{tuple(qzeros.shape[-2:])}")
    return k, n


def unpack_rows(packed: Tensor, bits: int) -> Tensor:
    """int32 [..., R, C] → int32 [..., R·32/bits, C]: the qweight layout's rows unpacked (at 4 and 8 bits field j
    of packed row i is row p·i + j; at 3 bits runs of 32 rows fill 3 words, `quantize.gptq_format`)."""
    if 32 % bits:
        return unpack_last(packed.transpose(-1, -2), bits).transpose(-1, -2)
    p = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=packed.device).view(p, 1)
    fields = (packed.unsqueeze(-2) >> shifts) & ((1 << bits) - 1)  # [..., R, p, C]
    return fields.flatten(-3, -2)


def pack_rows(codes: Tensor, bits: int) -> Tensor:
    """Inverse of `unpack_rows` for one matrix: int32 codes [R·32/bits, C] → int32 [R, C], ORed in int32 so a
    code in the top field sets the sign bit exactly."""
    if 32 % bits:
        return pack_last(codes.t(), bits).t().contiguous()
    p = 32 // bits
    fields = codes.reshape(-1, p, codes.shape[-1])
    words = torch.zeros(fields.shape[0], fields.shape[2], dtype=torch.int32, device=codes.device)
    for j in range(p):
        words |= fields[:, j].to(torch.int32) << (bits * j)
    return words


def unpack_cols(packed: Tensor, bits: int) -> Tensor:
    """int32 [..., R, C] → int32 [..., R, C·32/bits]: the qzeros layout's columns unpacked (at 4 and 8 bits field
    j of packed column i is column p·i + j)."""
    if 32 % bits:
        return unpack_last(packed, bits)
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=packed.device)
    fields = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [..., R, C, p]
    return fields.flatten(-2, -1)


def dequantize_w(qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int = 4) -> Tensor:
    """Dense fp32 W [..., K, N] from the packed tensors (leading dims, e.g. slots, broadcast through)."""
    k, n = check_packed(qweight, scales, qzeros, group_size, bits)
    groups = k // group_size
    codes = unpack_rows(qweight, bits)  # [..., K, N]
    zeros = unpack_cols(qzeros, bits) + 1  # [..., G, N]
    codes = codes.reshape(*codes.shape[:-2], groups, group_size, n)
    w = (codes - zeros.unsqueeze(-2)).float() * scales.float().unsqueeze(-2)  # [..., G, group, N]
    return w.reshape(*w.shape[:-3], k, n)


def linear_w4a16_ref(x: Tensor, qweight, scales, qzeros, group_size: int, bits: int = 4) -> Tensor:
    """x [M, K] (fp32/bf16/fp16) @ dequant(W) where W is [K, N] in GPTQ layout (desc_act false: g_idx = k // group).

    Leading dims of x beyond one are flattened and restored. Returns [M, N] in x's dtype."""
    w = dequantize_w(qweight, scales, qzeros, group_size, bits)
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"x has {x.shape[-1]} features, the weight expects K={w.shape[0]}")
    return (x.float() @ w).to(x.dtype)


def check_host_stacks(stacks: tuple[PackedStack, PackedStack], host: tuple[PackedStack, PackedStack]) -> None:
    """A layer's host stacks (gate_up, down) must hold slabs shaped like the device stacks', with the same strides
    inside a slab (the kernel takes one set of strides and a slot stride per stack). Raises ValueError."""
    for name, dev, hst in zip(("gate_up", "down"), stacks, host):
        for part in ("qweight", "scales", "qzeros"):
            a, b = getattr(dev, part), getattr(hst, part)
            if a.shape[1:] != b.shape[1:] or a.stride()[1:] != b.stride()[1:] or a.dtype != b.dtype:
                raise ValueError(f"host {name}.{part} {b.dtype} {tuple(b.shape)} does not match the device "
                                 f"stack's {a.dtype} {tuple(a.shape)} slab for slab")
        if (dev.group_size, dev.bits, dev.planes) != (hst.group_size, hst.bits, hst.planes):
            raise ValueError(f"host {name} is quantized differently from the device stack")
    if host[0].num_slots != host[1].num_slots:
        raise ValueError("host gate_up and down stacks must hold the same experts")


def moe_w4a16_ref(x: Tensor, slot_ids: Tensor, weights: Tensor, gate_up: PackedStack, down: PackedStack,
                  host: tuple[PackedStack, PackedStack] | None = None, install: Tensor | None = None) -> Tensor:
    """x [M, H]; slot_ids int [M, topk] (which slot of the stacks serves each routed choice); weights [M, topk].
    gate_up: N = 2*I (gate columns 0..I-1, then up); down: K = I, N = H.
    out[m] = Σ_j weights[m,j] · down(silu(gate(x_m)) * up(x_m)) with the slot's weights. Returns [M, H] in x's dtype.
    host (gate_up, down) over a layer's E experts, in host memory: slot S + e (S = the stacks' slots) is expert e
    of those, read where it lies (the runtime's non-resident experts, `OptimisticPass`). install int32 [E] (with
    host): 1 + the slot host expert e is copied into when a choice reads it (0: none), before it is used — a
    read-through install, which the Triton kernel does with the bytes it reads anyway; the slot must be one no
    choice of this call reads (a free one).

    The activation silu(gate)·up is rounded to x's dtype before the down projection, as the fused kernel stores
    it (and as a BF16 model computes it); everything else is fp32."""
    m, h = x.shape
    if slot_ids.shape != weights.shape or slot_ids.shape[0] != m:
        raise ValueError(
            f"slot_ids {tuple(slot_ids.shape)} and weights {tuple(weights.shape)} must both be [M={m}, topk]"
        )
    inter = gate_up.out_features // 2
    if gate_up.in_features != h or down.in_features != inter or down.out_features != h:
        raise ValueError(
            f"stack shapes do not match H={h}: gate_up [{gate_up.in_features}, {gate_up.out_features}], "
            f"down [{down.in_features}, {down.out_features}]"
        )
    out = torch.zeros(m, h, dtype=torch.float32, device=x.device)
    flat_slots = slot_ids.reshape(-1).long()
    flat_tokens = torch.arange(m, device=x.device).repeat_interleave(slot_ids.shape[1])
    flat_weights = weights.reshape(-1).float()
    n_slots = gate_up.num_slots
    if host is not None:
        check_host_stacks((gate_up, down), host)
    used = torch.unique(flat_slots).tolist()
    if host is not None and install is not None:
        for s in used:
            to = int(install[s - n_slots]) - 1 if s >= n_slots else -1
            if to >= 0:
                for dev, hst in zip((gate_up, down), host):
                    for part in ("qweight", "scales", "qzeros"):
                        getattr(dev, part)[to].copy_(getattr(hst, part)[s - n_slots])
    for s in used:
        sel = (flat_slots == s).nonzero(as_tuple=True)[0]
        tokens = flat_tokens[sel]
        xs = x[tokens].float()
        gu_st, dn_st, i = (gate_up, down, s) if s < n_slots or host is None else (*host, s - n_slots)
        w_gu = dequantize_w(*gu_st.gptq_slot(i), gu_st.group_size, gu_st.bits).to(x.device)
        gu = xs @ w_gu  # [n, 2I]
        act = (F.silu(gu[:, :inter]) * gu[:, inter:]).to(x.dtype).float()
        y = act @ dequantize_w(*dn_st.gptq_slot(i), dn_st.group_size, dn_st.bits).to(x.device)  # [n, H]
        out.index_add_(0, tokens, y * flat_weights[sel, None])
    return out.to(x.dtype)
