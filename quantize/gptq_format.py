"""The GPTQ checkpoint format ("gptq" v1 layout), so packs load in any GPTQ-aware loader.

A linear `X.weight` [out, in] is stored as four tensors:

- `qweight` int32 [in · bits / 32, out]: each run of 32 consecutive *input* rows fills `bits` int32 words, row r
  of the run at bit offset bits·r of their concatenation (low word first). At 4 and 8 bits that is p = 32 / bits
  rows per word, row p·i + j in bits bits·j … bits·j + bits − 1 of `qweight[i]`; at 3 bits, rows 10 and 21 of a
  run straddle two words (the layout GPTQ's 3-bit kernels read).
- `qzeros`  int32 [n_groups, out · bits / 32]: runs of 32 *output* columns packed the same way, each stored
  as zero − 1 (the classic GPTQ off-by-one that v1 readers undo by adding 1).
- `scales`  fp16  [n_groups, out].
- `g_idx`   int32 [in]: the group of each input row (not monotonic when act-order permuted the columns).

w[o, i] = (q[o, i] − zero[o, g_idx[i]]) · scale[o, g_idx[i]]. Everything here is vectorised: it runs on every
routed expert of the model (10,240 matrices of 1024×2048 and 2048×512).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SUPPORTED_BITS = (3, 4, 8)
TENSOR_NAMES = ("qweight", "qzeros", "scales", "g_idx")


def values_per_run(bits: int) -> int:
    """How many values make a whole number of int32 words: 8 at 4-bit (one word), 4 at 8-bit, 32 at 3-bit (three
    words). A packed dimension must be a multiple of it."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    return 32 // bits if 32 % bits == 0 else 32


def packed_length(n: int, bits: int) -> int:
    """int32 words that hold n values of `bits` bits (n a multiple of `values_per_run`)."""
    run = values_per_run(bits)
    if n % run:
        raise ValueError(f"{bits}-bit packing needs a multiple of {run} values, got {n}")
    return n * bits // 32


def check_group_size(group_size: int, in_features: int) -> int:
    """`group_size` if it divides `in_features` (or is -1, per-channel), else the one-line refusal quantize gives
    (and `plan` of a checkpoint, in the same words): the pack's config promises one group size for every module,
    and a silent per-channel fallback would make other GPTQ loaders misread this one."""
    if group_size != -1 and in_features % group_size:
        from clover_local.errors import CloverError

        raise CloverError(f"--group-size {group_size} does not divide an input width of {in_features}; "
                          "choose a group size that divides it (or -1 for per-channel)")
    return group_size


def default_g_idx(in_features: int, group_size: int, device: torch.device | str | None = None) -> Tensor:
    """g_idx for contiguous groups (no act-order); group_size -1 means one group per output channel."""
    if group_size == -1:
        return torch.zeros(in_features, dtype=torch.int32, device=device)
    if group_size <= 0 or in_features % group_size:
        raise ValueError(f"group_size {group_size} must be -1 or a positive divisor of in_features {in_features}")
    return torch.arange(in_features, dtype=torch.int32, device=device) // group_size


def _placement(bits: int) -> tuple[list[int], list[int]]:
    """For each value r of a run (`values_per_run`): its word in the run and its bit offset in that word (a value
    whose offset + bits passes 32 continues in the next word)."""
    run = values_per_run(bits)
    return [bits * r // 32 for r in range(run)], [bits * r % 32 for r in range(run)]


# Values packed at a time: `pack_last`'s int64 temporaries stay ≈ 32 MiB each, where the 8-bit LM head packed whole
# (248,320 × 2,048 at 35B) made 4 GiB of them at once and was quantize's host peak (10.06 GiB at one real-size layer).
PACK_CHUNK = 1 << 22


def pack_last(values: Tensor, bits: int) -> Tensor:
    """Pack the last dim (runs of 32 values into `bits` int32 words, low bits first; at 4 and 8 bits, 32/bits
    values a word) — vectorised over everything else, a bounded slice of rows at a time (`PACK_CHUNK`)."""
    *lead, n = values.shape
    rows = values.reshape(math.prod(lead), n)
    out = torch.empty(rows.shape[0], packed_length(n, bits), dtype=torch.int32, device=values.device)
    step = max(1, PACK_CHUNK // max(n, 1))
    for s in range(0, rows.shape[0], step):
        out[s:s + step] = _pack_rows(rows[s:s + step], bits)
    return out.reshape(*lead, out.shape[-1])


def _pack_rows(values: Tensor, bits: int) -> Tensor:
    """`pack_last` of a 2-D slice of rows, whole."""
    run = values_per_run(bits)
    v = values.to(torch.int64).reshape(values.shape[0], -1, run)  # [rows, runs, run]
    words = torch.zeros(*v.shape[:2], run * bits // 32, dtype=torch.int64, device=values.device)
    for r, (w, sh) in enumerate(zip(*_placement(bits))):
        words[..., w] |= (v[..., r] << sh) & 0xFFFFFFFF
        if sh + bits > 32:  # its high bits open the next word
            words[..., w + 1] |= v[..., r] >> (32 - sh)
    # map [2^31, 2^32) onto negative int32 explicitly rather than relying on an out-of-range int64 → int32 cast
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.reshape(values.shape[0], -1).to(torch.int32)


def unpack_last(packed: Tensor, bits: int) -> Tensor:
    """Inverse of `pack_last`: int32 [..., m] → int32 [..., m · 32 / bits]."""
    *lead, m = packed.shape
    mask = (1 << bits) - 1
    run = values_per_run(bits)
    words = packed.to(torch.int64).reshape(*lead, -1, run * bits // 32) & 0xFFFFFFFF  # [..., runs, words], unsigned
    where, shift = _placement(bits)
    w = torch.tensor(where, device=packed.device)
    sh = torch.tensor(shift, dtype=torch.int64, device=packed.device)
    values = words[..., w] >> sh  # [..., runs, run]
    spill = [r for r in range(run) if shift[r] + bits > 32]
    if spill:  # straddling values: their high bits from the next word
        nxt = torch.tensor([where[r] + 1 for r in spill], device=packed.device)
        high = words[..., nxt] << torch.tensor([32 - shift[r] for r in spill], device=packed.device)
        values[..., spill] |= high
    return (values & mask).to(torch.int32).reshape(*lead, -1)


def pack_weight(q: Tensor, scales: Tensor, zeros: Tensor, g_idx: Tensor, bits: int) -> dict[str, Tensor]:
    """Pack integer codes q [out, in] (0 ≤ q < 2^bits), scales/zeros [out, n_groups] and g_idx [in].

    Zeros must lie in [1, 2^bits): the v1 format stores zero − 1 in `bits` bits, so a zero of 0 would be read
    back as 2^bits by every other loader. The quantizers in `quantize.gptq` never produce it.
    """
    run = values_per_run(bits)
    maxq = (1 << bits) - 1
    if q.dim() != 2:
        raise ValueError(f"q must be [out, in], got shape {tuple(q.shape)}")
    if q.dtype.is_floating_point or q.dtype == torch.bool:
        raise ValueError(f"q must be an integer tensor, got {q.dtype}")
    out_features, in_features = q.shape
    if in_features % run or out_features % run:
        raise ValueError(
            f"{bits}-bit packing needs in and out features divisible by {run}, got [{out_features}, {in_features}]"
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

    qweight = pack_last(q, bits).t().contiguous()  # [out, in/p] → [in/p, out]
    qzeros = pack_last(zeros.t().to(torch.int64) - 1, bits).contiguous()  # [n_groups, out/p]
    return {
        "qweight": qweight,
        "qzeros": qzeros,
        "scales": scales.t().to(torch.float16).contiguous(),
        "g_idx": g_idx.to(torch.int32).contiguous(),
    }


def unpack_weight(tensors: dict[str, Tensor], bits: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inverse of `pack_weight`: q uint8 [out, in], scales fp16 [out, n_groups], zeros int32, g_idx int32."""
    run = values_per_run(bits)
    missing = [name for name in TENSOR_NAMES if name not in tensors]
    if missing:
        raise ValueError(f"GPTQ tensors missing: {', '.join(missing)}")
    qweight, qzeros, scales, g_idx = (tensors[name] for name in TENSOR_NAMES)
    if qweight.dim() != 2 or qzeros.dim() != 2 or scales.dim() != 2 or g_idx.dim() != 1:
        raise ValueError("GPTQ tensors have the wrong number of dimensions")
    in_features, out_features = qweight.shape[0] * 32 // bits, qweight.shape[1]
    if (g_idx.shape[0] != in_features or qzeros.shape[1] * 32 != out_features * bits or in_features % run
            or (qweight.shape[0] * 32) % bits):
        raise ValueError(
            f"GPTQ tensor shapes do not match {bits}-bit packing: qweight {tuple(qweight.shape)}, "
            f"qzeros {tuple(qzeros.shape)}, g_idx {tuple(g_idx.shape)} (wrong bits?)"
        )
    if tuple(scales.shape) != (qzeros.shape[0], out_features):
        raise ValueError(f"scales {tuple(scales.shape)} must be [n_groups={qzeros.shape[0]}, out={out_features}]")

    q = unpack_last(qweight.t(), bits).to(torch.uint8)  # [out, in]
    zeros = (unpack_last(qzeros, bits) + 1).t().contiguous()  # [out, n_groups]
    return q, scales.t().contiguous(), zeros, g_idx.to(torch.int32)


def dequantize_rows(tensors: dict[str, Tensor], bits: int, start: int, stop: int,
                    dtype: torch.dtype = torch.float32) -> Tensor:
    """Rows [start, stop) of `dequantize(tensors, bits)`, from those columns of the packed tensors (start and stop
    multiples of 32, or stop the last row: every layout packs whole runs of 32 outputs into qzeros' words). Why:
    the whole matrix's temporaries are several times its float32 size (the 248K-row LM head: ≈ 8 GB)."""
    qweight, qzeros, scales, g_idx = (tensors[name] for name in TENSOR_NAMES)
    return dequantize({"qweight": qweight[:, start:stop], "qzeros": qzeros[:, start * bits // 32:-(-stop * bits // 32)],
                       "scales": scales[:, start:stop], "g_idx": g_idx}, bits, dtype)


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
