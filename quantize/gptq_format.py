"""The GPTQ checkpoint format ("gptq" v1 layout), so packs load in any GPTQ-aware loader.

A linear `X.weight` [out, in] is stored as four tensors:

- `qweight` int32 [in / p, out]: p = 32 / bits consecutive *input* rows per int32; row p·i + j sits in bits
  bits·j … bits·j + bits − 1 of `qweight[i]`.
- `qzeros`  int32 [n_groups, out / p]: p consecutive *output* columns per int32, same bit order, each stored
  as zero − 1 (the classic GPTQ off-by-one that v1 readers undo by adding 1).
- `scales`  fp16  [n_groups, out].
- `g_idx`   int32 [in]: the group of each input row (not monotonic when act-order permuted the columns).

w[o, i] = (q[o, i] − zero[o, g_idx[i]]) · scale[o, g_idx[i]]. Everything here is vectorised: it runs on every
routed expert of the model (10,240 matrices of 1024×2048 and 2048×512).
"""

from __future__ import annotations

import torch
from torch import Tensor

SUPPORTED_BITS = (4, 8)
TENSOR_NAMES = ("qweight", "qzeros", "scales", "g_idx")


def values_per_int32(bits: int) -> int:
    """How many `bits`-wide fields one int32 holds (8 at 4-bit, 4 at 8-bit)."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    return 32 // bits


def default_g_idx(in_features: int, group_size: int, device: torch.device | str | None = None) -> Tensor:
    """g_idx for contiguous groups (no act-order); group_size -1 means one group per output channel."""
    if group_size == -1:
        return torch.zeros(in_features, dtype=torch.int32, device=device)
    if group_size <= 0 or in_features % group_size:
        raise ValueError(f"group_size {group_size} must be -1 or a positive divisor of in_features {in_features}")
    return torch.arange(in_features, dtype=torch.int32, device=device) // group_size


def _shifts(bits: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.arange(0, 32, bits, dtype=dtype, device=device)


def _pack_last(values: Tensor, bits: int) -> Tensor:
    """Pack groups of 32/bits consecutive entries of the last dim into one int32 each (low bits first)."""
    per = 32 // bits
    *lead, n = values.shape
    v = values.to(torch.int64).reshape(*lead, n // per, per)
    packed = (v << _shifts(bits, torch.int64, values.device)).sum(dim=-1)
    # Fields are disjoint, so the sum is a bitwise OR; map [2^31, 2^32) onto negative int32 explicitly
    # rather than relying on how an out-of-range int64 → int32 cast behaves.
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)
    return packed.to(torch.int32)


def _unpack_last(packed: Tensor, bits: int) -> Tensor:
    """Inverse of `_pack_last`: int32 [..., m] → int32 [..., m · 32/bits]."""
    mask = (1 << bits) - 1
    fields = (packed.to(torch.int32).unsqueeze(-1) >> _shifts(bits, torch.int32, packed.device)) & mask
    return fields.reshape(*packed.shape[:-1], -1)


def pack_weight(q: Tensor, scales: Tensor, zeros: Tensor, g_idx: Tensor, bits: int) -> dict[str, Tensor]:
    """Pack integer codes q [out, in] (0 ≤ q < 2^bits), scales/zeros [out, n_groups] and g_idx [in].

    Zeros must lie in [1, 2^bits): the v1 format stores zero − 1 in `bits` bits, so a zero of 0 would be read
    back as 2^bits by every other loader. The quantizers in `quantize.gptq` never produce it.
    """
    per = values_per_int32(bits)
    maxq = (1 << bits) - 1
    if q.dim() != 2:
        raise ValueError(f"q must be [out, in], got shape {tuple(q.shape)}")
    if q.dtype.is_floating_point or q.dtype == torch.bool:
        raise ValueError(f"q must be an integer tensor, got {q.dtype}")
    out_features, in_features = q.shape
    if in_features % per or out_features % per:
        raise ValueError(
            f"{bits}-bit packing needs in and out features divisible by {per}, got [{out_features}, {in_features}]"
        )
    if scales.dim() != 2 or scales.shape[0] != out_features:
        raise ValueError(f"scales must be [out={out_features}, n_groups], got {tuple(scales.shape)}")
    n_groups = scales.shape[1]
    if tuple(zeros.shape) != tuple(scales.shape):
        raise ValueError(f"zeros shape {tuple(zeros.shape)} must equal scales shape {tuple(scales.shape)}")
    if tuple(g_idx.shape) != (in_features,):
        raise ValueError(f"g_idx must be [in={in_features}], got {tuple(g_idx.shape)}")
    if q.numel() and (int(q.min()) < 0 or int(q.max()) > maxq):
        raise ValueError(f"q values must lie in [0, {maxq}] for {bits}-bit")
    if zeros.numel() and (int(zeros.min()) < 1 or int(zeros.max()) > maxq):
        raise ValueError(f"zeros must lie in [1, {maxq}]: the GPTQ format stores zero-1 in {bits} bits")
    if g_idx.numel() and (int(g_idx.min()) < 0 or int(g_idx.max()) >= n_groups):
        raise ValueError(f"g_idx values must lie in [0, {n_groups})")

    qweight = _pack_last(q, bits).t().contiguous()  # [out, in/p] → [in/p, out]
    qzeros = _pack_last(zeros.t().to(torch.int64) - 1, bits).contiguous()  # [n_groups, out/p]
    return {
        "qweight": qweight,
        "qzeros": qzeros,
        "scales": scales.t().to(torch.float16).contiguous(),
        "g_idx": g_idx.to(torch.int32).contiguous(),
    }


def unpack_weight(tensors: dict[str, Tensor], bits: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inverse of `pack_weight`: q uint8 [out, in], scales fp16 [out, n_groups], zeros int32, g_idx int32."""
    per = values_per_int32(bits)
    missing = [name for name in TENSOR_NAMES if name not in tensors]
    if missing:
        raise ValueError(f"GPTQ tensors missing: {', '.join(missing)}")
    qweight, qzeros, scales, g_idx = (tensors[name] for name in TENSOR_NAMES)
    if qweight.dim() != 2 or qzeros.dim() != 2 or scales.dim() != 2 or g_idx.dim() != 1:
        raise ValueError("GPTQ tensors have the wrong number of dimensions")
    in_features, out_features = qweight.shape[0] * per, qweight.shape[1]
    if g_idx.shape[0] != in_features or qzeros.shape[1] * per != out_features:
        raise ValueError(
            f"GPTQ tensor shapes do not match {bits}-bit packing: qweight {tuple(qweight.shape)}, "
            f"qzeros {tuple(qzeros.shape)}, g_idx {tuple(g_idx.shape)} (wrong bits?)"
        )
    if tuple(scales.shape) != (qzeros.shape[0], out_features):
        raise ValueError(f"scales {tuple(scales.shape)} must be [n_groups={qzeros.shape[0]}, out={out_features}]")

    q = _unpack_last(qweight.t(), bits).to(torch.uint8)  # [out, in]
    zeros = (_unpack_last(qzeros, bits) + 1).t().contiguous()  # [out, n_groups]
    return q, scales.t().contiguous(), zeros, g_idx.to(torch.int32)


def dequantize(tensors: dict[str, Tensor], bits: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Dense weight [out, in] = (q − zero) · scale, computed in fp32 and cast to `dtype`."""
    q, scales, zeros, g_idx = unpack_weight(tensors, bits)
    out_features, in_features = q.shape
    n_groups = scales.shape[1]
    codes = q.to(torch.int32)
    if in_features % n_groups == 0 and torch.equal(
        g_idx, default_g_idx(in_features, in_features // n_groups, device=g_idx.device)
    ):
        # Contiguous groups: broadcast over a [out, n_groups, g] view instead of gathering per column.
        codes = codes.view(out_features, n_groups, in_features // n_groups)
        w = (codes - zeros.unsqueeze(-1)).to(torch.float32) * scales.to(torch.float32).unsqueeze(-1)
        return w.reshape(out_features, in_features).to(dtype)
    cols = g_idx.long()
    w = (codes - zeros[:, cols]).to(torch.float32) * scales.to(torch.float32)[:, cols]
    return w.to(dtype)
