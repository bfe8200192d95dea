"""GPTQ (Frantar et al., 2022) and round-to-nearest, written for this project.

GPTQ quantizes one input column at a time and pushes each column's rounding error onto the columns not yet
quantized, weighted by the inverse Hessian of the layer's inputs, so the *output* error ‖XWᵀ − XŴᵀ‖ stays small
rather than the weight error. Rows are independent given H: matrices that share an input (an expert's gate and
up projections) can be concatenated along `out` and quantized in one call, and a layer's experts are quantized
in batches with `gptq_quantize_batch` (`layer_quant.quantize_weights`), which runs the column loop once for the
whole batch (on a GPU that loop is expected to be bound by per-op launch overhead at expert sizes; not yet
measured there).

Results plug straight into `quantize.gptq_format.pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from quantize.gptq_format import default_g_idx


class HessianError(RuntimeError):
    """The Hessian cannot be inverted even with heavy damping; callers usually fall back to RTN."""


@dataclass
class QuantResult:
    """Integer codes and the parameters that decode them, in the layout `pack_weight` takes.

    `loss` is GPTQ's own proxy Σ (w − ŵ)² / (2·Uᵢᵢ²) (U the Cholesky factor of H⁻¹) for GPTQ and the plain
    ‖W − Ŵ‖² for RTN, so compare methods on output error, not on `loss`. `damp` is the relative damping that
    made H invertible (0 for RTN).
    """

    q: Tensor  # uint8 [out, in], values in [0, 2^bits)
    scales: Tensor  # fp16 [out, n_groups]
    zeros: Tensor  # int32 [out, n_groups], values in [1, 2^bits)
    g_idx: Tensor  # int32 [in]
    loss: float
    damp: float = 0.0

    def dequantize(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """Ŵ [out, in], bit-identical to what a reader of the packed tensors reconstructs."""
        cols = self.g_idx.long()
        w = (self.q.to(torch.int32) - self.zeros[:, cols]).to(torch.float32) * self.scales.float()[:, cols]
        return w.to(dtype)


CAST_ROWS = 65536  # rows cast to float32 at a time in `HessianAccumulator.add_batch` (512 MiB at 2,048 wide)


class HessianAccumulator:
    """Running H = 2/n · Σ xᵀx over every calibration row seen so far (fp32, GPTQ-paper normalisation).

    Rescaling by the running count keeps H at the magnitude of one row's contribution however many tokens
    stream through, so fp32 never loses the late batches against a huge early sum.
    """

    def __init__(self, in_features: int, device: torch.device | str | None = None) -> None:
        self.in_features = in_features
        self.H = torch.zeros(in_features, in_features, dtype=torch.float32, device=device)
        self.nsamples = 0

    def add_batch(self, x: Tensor) -> None:
        """Add rows x [..., in] (any float dtype, any leading shape: they are flattened to rows). Rows that need a
        cast or a copy to H's device are taken `CAST_ROWS` at a time: a GPU run's bf16 MoE inputs at the default
        calibration are 524K rows, 4 GiB whole in float32 (float32 rows already in place are one product, as
        before)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected inputs with {self.in_features} features, got shape {tuple(x.shape)}")
        rows = x.reshape(-1, self.in_features)
        n = rows.shape[0]
        if n == 0:
            return
        total = self.nsamples + n
        self.H.mul_(self.nsamples / total)
        step = n if rows.dtype == torch.float32 and rows.device == self.H.device else CAST_ROWS
        for s in range(0, n, step):
            part = rows[s:s + step].to(device=self.H.device, dtype=torch.float32)
            self.H.addmm_(part.t(), part, alpha=2.0 / total)
        self.nsamples = total


def _round_up_to_fp16(x: Tensor) -> Tensor:
    """Smallest fp16 value ≥ x (x > 0), as fp32, so quantizing with the *stored* scale never clips past ½ step."""
    h = x.to(torch.float16)
    low = h.to(torch.float32) < x
    if bool(low.any()):
        bumped = (h.view(torch.int16) + 1).view(torch.float16)  # next representable value for positive h
        h = torch.where(low, bumped, h)
    return h.to(torch.float32)


def _check_bits(bits: int) -> int:
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be between 2 and 8, got {bits}")
    return (1 << bits) - 1


def _range_scale_zero(xmin: Tensor, xmax: Tensor, maxq: int, sym: bool) -> tuple[Tensor, Tensor]:
    """Scale (fp16-representable, fp32) and zero that cover [xmin, xmax] (xmin ≤ 0 ≤ xmax)."""
    if sym:
        absmax = torch.maximum(-xmin, xmax)
        absmax = torch.where(absmax == 0, torch.ones_like(absmax), absmax)
        scale = _round_up_to_fp16(2.0 * absmax / maxq)
        zero = torch.full_like(scale, (maxq + 1) // 2, dtype=torch.int32)
        return scale, zero
    empty = (xmin == 0) & (xmax == 0)
    xmin = torch.where(empty, -torch.ones_like(xmin), xmin)
    xmax = torch.where(empty, torch.ones_like(xmax), xmax)
    scale = _round_up_to_fp16((xmax - xmin) / maxq)
    zero = torch.round(-xmin / scale)
    # Range [0, xmax] with a tiny negative part: a zero of 1 with a slightly wider step still covers it.
    at_zero = zero < 1
    scale = torch.where(at_zero, _round_up_to_fp16(xmax / (maxq - 1)), scale)
    zero = torch.where(at_zero, torch.ones_like(zero), zero).clamp(1, maxq)
    return scale, zero.to(torch.int32)


CLIP_STEPS = 20  # ranges tried by the clip search (quantize's default; 0 turns it off)
CLIP_MIN_SHRINK = 0.75  # the narrowest range tried, as a fraction of min/max


def compute_scale_zero(
    w: Tensor, bits: int, sym: bool, clip: int = 0, importance: Tensor | None = None,
    min_shrink: float = CLIP_MIN_SHRINK,
) -> tuple[Tensor, Tensor]:
    """Scale and zero over the last dim of w → (scale fp32 [...], zero int32 [...]).

    The range always includes 0 (so exact zeros stay exact). Symmetric uses GPTQ's convention: scale =
    2·max|w| / (2^bits − 1), zero = 2^(bits−1) (8 at 4-bit, stored as 7). Asymmetric zeros are kept ≥ 1
    because the v1 format cannot store a zero of 0. Scales are rounded *up* to fp16 here, so the codes are
    computed with exactly the scale the pack stores, and without the search every weight stays within half
    a step.

    `clip` > 0 also tries `clip` narrower ranges (the min/max range shrunk by up to `1 − min_shrink`) and keeps,
    per group, the one with the least Σ importance·(w − ŵ)² over the group: clipping a rare outlier trades its
    error for a finer step on every other weight, which at 3 bits is most of the rounding error.
    `importance` (broadcast against w, e.g. each input's Hessian weight) says which inputs' errors count most.
    """
    maxq = _check_bits(bits)
    w = w.to(torch.float32)
    xmin = w.amin(dim=-1).clamp(max=0.0)
    xmax = w.amax(dim=-1).clamp(min=0.0)
    scale, zero = _range_scale_zero(xmin, xmax, maxq, sym)
    if clip <= 0:
        return scale, zero
    best = _weighted_error(w, scale, zero, maxq, importance)
    for k in range(1, clip + 1):
        shrink = 1.0 - (1.0 - min_shrink) * k / clip
        s, z = _range_scale_zero(xmin * shrink, xmax * shrink, maxq, sym)
        err = _weighted_error(w, s, z, maxq, importance)
        better = err < best
        best = torch.where(better, err, best)
        scale, zero = torch.where(better, s, scale), torch.where(better, z, zero)
    return scale, zero


def _weighted_error(w: Tensor, scale: Tensor, zero: Tensor, maxq: int, importance: Tensor | None) -> Tensor:
    """Σ over the last dim of importance · (w − dequant(quant(w)))² for one scale/zero per row."""
    s, z = scale.unsqueeze(-1), zero.unsqueeze(-1).to(torch.float32)
    err = ((_quantize_codes(w, s, z, maxq) - z) * s - w).square_()
    if importance is not None:
        err.mul_(importance)
    return err.sum(dim=-1)


def _quantize_codes(w: Tensor, scale: Tensor, zero: Tensor, maxq: int) -> Tensor:
    """Float codes clamp(round(w / scale) + zero, 0, maxq) (float so the GPTQ loop avoids casts)."""
    return torch.clamp(torch.round(w / scale) + zero, 0, maxq)


def _check_weight(weight: Tensor, group_size: int) -> None:
    cols = weight.shape[-1]
    if group_size != -1 and (group_size <= 0 or cols % group_size):
        raise ValueError(f"group_size {group_size} must be -1 or a positive divisor of in_features {cols}")
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("weight contains NaN or inf")


def rtn_quantize(weight: Tensor, bits: int = 4, group_size: int = 128, sym: bool = True, clip: int = 0) -> QuantResult:
    """Round-to-nearest baseline: no calibration, same scale/zero rule and layout as GPTQ (`clip`: see
    `compute_scale_zero`; every input counts the same here)."""
    maxq = _check_bits(bits)
    if weight.dim() != 2:
        raise ValueError(f"weight must be [out, in], got shape {tuple(weight.shape)}")
    _check_weight(weight, group_size)
    w = weight.to(torch.float32)
    out_features, cols = w.shape
    g = cols if group_size == -1 else group_size
    grouped = w.reshape(out_features, cols // g, g)
    scale, zero = compute_scale_zero(grouped, bits, sym, clip)
    codes = _quantize_codes(grouped, scale.unsqueeze(-1), zero.unsqueeze(-1).float(), maxq)
    loss = float((((codes - zero.unsqueeze(-1)) * scale.unsqueeze(-1) - grouped) ** 2).sum())
    return QuantResult(
        q=codes.reshape(out_features, cols).to(torch.uint8),
        scales=scale.to(torch.float16),
        zeros=zero,
        g_idx=default_g_idx(cols, group_size, device=w.device),
        loss=loss,
    )


def _next_damp(damp: float) -> float:
    return damp * 10.0 if damp > 0 else 0.01


def _inverse_hessian_factor(H: Tensor, damp: float, max_retries: int) -> tuple[Tensor, Tensor]:
    """Upper Cholesky factor of (H + λI)⁻¹ per batch element, λ = damp · mean(diag H).

    Elements whose factorisation fails are retried alone with 10× the damping, up to `max_retries` times;
    returns (U [B, n, n], relative damping used [B]).
    """
    batch, n, _ = H.shape
    eye = torch.eye(n, dtype=H.dtype, device=H.device)
    mean_diag = H.diagonal(dim1=-2, dim2=-1).mean(dim=-1)
    damps = torch.full((batch,), float(damp), dtype=torch.float64)
    U = torch.empty_like(H)
    todo = torch.arange(batch)
    current = float(damp)
    for attempt in range(max_retries + 1):
        idx = todo.to(H.device)
        lam = (current * mean_diag[idx]).view(-1, 1, 1)
        L, info = torch.linalg.cholesky_ex(H[idx] + lam * eye)
        Hinv = torch.cholesky_inverse(L)
        del L
        factor, info_inv = torch.linalg.cholesky_ex(Hinv, upper=True)
        del Hinv
        ok = (info == 0) & (info_inv == 0) & torch.isfinite(factor).flatten(1).all(dim=1)
        ok_cpu = ok.cpu()
        U[idx[ok]] = factor[ok]
        damps[todo[ok_cpu]] = current
        todo = todo[~ok_cpu]
        if todo.numel() == 0:
            return U, damps
        if attempt < max_retries:
            current = _next_damp(current)
    raise HessianError(
        f"Hessian is not positive definite even with damping {current:g} x mean(diag) "
        f"({todo.numel()} of {batch} matrices); use round-to-nearest for these weights"
    )


def gptq_quantize_batch(
    weights: Tensor,
    H: Tensor,
    bits: int = 4,
    group_size: int = 128,
    sym: bool = True,
    damp: float = 0.01,
    block_size: int = 128,
    act_order: bool = False,
    max_retries: int = 3,
    clip: int = 0,
    static_groups: bool = False,
) -> list[QuantResult]:
    """GPTQ for a batch of weights [B, out, in] with their own Hessians [B, in, in] (e.g. one layer's experts).

    Runs on `weights.device`. See `gptq_quantize` for the arguments.
    """
    maxq = _check_bits(bits)
    if weights.dim() != 3:
        raise ValueError(f"weights must be [batch, out, in], got shape {tuple(weights.shape)}")
    batch, out_features, cols = weights.shape
    if tuple(H.shape) != (batch, cols, cols):
        raise ValueError(f"H must be [{batch}, {cols}, {cols}], got shape {tuple(H.shape)}")
    _check_weight(weights, group_size)
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    device = weights.device
    W = weights.to(torch.float32).clone()
    H = H.to(device=device, dtype=torch.float32).clone()
    if not bool(torch.isfinite(H).all()):
        raise HessianError("Hessian contains NaN or inf; the calibration activations overflowed")

    # Inputs that were always zero carry no information: pin their weights to 0 (exactly representable)
    # and give H a unit diagonal there so it stays invertible.
    diag = H.diagonal(dim1=-2, dim2=-1)
    dead = diag == 0
    if bool(dead.all(dim=-1).any()):
        raise HessianError("Hessian is all zero (no calibration rows reached this weight); use round-to-nearest")
    diag.masked_fill_(dead, 1.0)
    W.masked_fill_(dead.unsqueeze(1), 0.0)

    n_groups = 1 if group_size == -1 else cols // group_size
    scales = torch.empty(batch, out_features, n_groups, dtype=torch.float32, device=device)
    zeros = torch.empty(batch, out_features, n_groups, dtype=torch.int32, device=device)
    static = act_order and static_groups and group_size != -1
    if static:
        # Every group's scale from the weights as they come, before any error feedback: the columns can then go in
        # activation order while each keeps its own contiguous group (g_idx stays trivial: kernels unaffected).
        for g in range(n_groups):  # group by group: the search's passes stay in cache
            cols_g = slice(g * group_size, (g + 1) * group_size)
            weights = diag[:, None, cols_g] if clip > 0 else None
            scales[..., g], zeros[..., g] = compute_scale_zero(W[..., cols_g], bits, sym, clip, weights)

    perm = inv_perm = None
    if act_order:
        # Most-activated inputs first: they are quantized while the most columns remain to absorb error.
        perm = torch.argsort(diag, dim=-1, descending=True)
        inv_perm = torch.argsort(perm, dim=-1)
        W = W.gather(-1, perm.unsqueeze(1).expand(batch, out_features, cols))
        H = H.gather(-1, perm.unsqueeze(1).expand(batch, cols, cols))
        H = H.gather(-2, perm.unsqueeze(2).expand(batch, cols, cols))

    U, damps = _inverse_hessian_factor(H, damp, max_retries)
    # how much each input's error costs the output (its mean square activation): the clip search's weights
    importance = H.diagonal(dim1=-2, dim2=-1).clone() if clip > 0 and not static else None
    del H

    Q = torch.empty(batch, out_features, cols, dtype=torch.uint8, device=device)
    losses = torch.zeros(batch, dtype=torch.float32, device=device)
    if static:
        assert perm is not None
        # each (permuted) column's scale and zero, gathered once: the column loop then only slices
        column_group = (perm // group_size).unsqueeze(1).expand(batch, out_features, cols)
        column_scale = scales.gather(-1, column_group).transpose(1, 2).contiguous()  # [B, cols, out]
        column_zero = zeros.gather(-1, column_group).to(torch.float32).transpose(1, 2).contiguous()
        del column_group
        block = block_size
    elif group_size == -1:
        scale, zero = compute_scale_zero(W, bits, sym, clip, None if importance is None else importance[:, None])
        scales[..., 0], zeros[..., 0] = scale, zero
        zero_f = zero.to(torch.float32)
        block = block_size
    else:
        # Blocks hold whole groups, so each group's scale is read from fully error-updated weights.
        block = max(1, block_size // group_size) * group_size

    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        W1 = W[..., i1:i2].clone()
        U1 = U[:, i1:i2, i1:i2]
        Q1 = torch.empty_like(W1)
        Err1 = torch.empty_like(W1)
        for i in range(i2 - i1):
            col = i1 + i
            if static:
                scale, zero_f = column_scale[:, col], column_zero[:, col]
            elif group_size != -1 and col % group_size == 0:
                weights = None if importance is None else importance[:, None, col : col + group_size]
                scale, zero = compute_scale_zero(W1[..., i : i + group_size], bits, sym, clip, weights)
                scales[..., col // group_size], zeros[..., col // group_size] = scale, zero
                zero_f = zero.to(torch.float32)
            w = W1[..., i]
            codes = _quantize_codes(w, scale, zero_f, maxq)
            Q1[..., i] = codes
            err = (w - (codes - zero_f) * scale) / U1[:, i, i].unsqueeze(-1)
            Err1[..., i] = err
            W1[..., i + 1 :].addcmul_(err.unsqueeze(-1), U1[:, i, i + 1 :].unsqueeze(1), value=-1.0)
        Q[..., i1:i2] = Q1.to(torch.uint8)
        losses += Err1.pow(2).sum(dim=(1, 2)) / 2
        if i2 < cols:
            W[..., i2:].baddbmm_(Err1, U[:, i1:i2, i2:], alpha=-1.0)  # lazy batch update of later blocks

    if act_order:
        assert perm is not None and inv_perm is not None
        Q = Q.gather(-1, inv_perm.unsqueeze(1).expand(batch, out_features, cols))
    if act_order and not static:
        g_idx = (inv_perm // (cols if group_size == -1 else group_size)).to(torch.int32)
    else:
        g_idx = default_g_idx(cols, group_size, device=device).expand(batch, cols)

    scales16 = scales.to(torch.float16)
    return [
        QuantResult(
            q=Q[b],
            scales=scales16[b],
            zeros=zeros[b],
            g_idx=g_idx[b].contiguous(),
            loss=float(losses[b]),
            damp=float(damps[b]),
        )
        for b in range(batch)
    ]


def gptq_quantize(
    weight: Tensor,
    H: Tensor,
    bits: int = 4,
    group_size: int = 128,
    sym: bool = True,
    damp: float = 0.01,
    block_size: int = 128,
    act_order: bool = False,
    max_retries: int = 3,
    clip: int = 0,
    static_groups: bool = False,
) -> QuantResult:
    """GPTQ-quantize weight [out, in] given the input Hessian H [in, in] (from `HessianAccumulator`).

    group_size -1 means one scale per output channel. `damp` is relative to mean(diag H); when the Cholesky
    factorisation fails it is raised 10× (from 0.01 if it was 0) up to `max_retries` times before
    `HessianError`. act_order (desc_act) quantizes columns by decreasing H diagonal; g_idx then records each
    column's group and is no longer monotonic, which slows some kernels. `clip` > 0 searches each group's range
    (`compute_scale_zero`), weighing each input's error by its Hessian diagonal.
    """
    if weight.dim() != 2:
        raise ValueError(f"weight must be [out, in], got shape {tuple(weight.shape)}")
    if H.dim() != 2:
        raise ValueError(f"H must be [in, in], got shape {tuple(H.shape)}")
    (result,) = gptq_quantize_batch(
        weight.unsqueeze(0),
        H.unsqueeze(0),
        bits=bits,
        group_size=group_size,
        sym=sym,
        damp=damp,
        block_size=block_size,
        act_order=act_order,
        max_retries=max_retries,
        clip=clip,
        static_groups=static_groups,
    )
    return result
