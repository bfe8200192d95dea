"""The small per-layer ops of a preview pass, each one Triton launch instead of a chain of PyTorch kernels.

Why: in a CUDA-graphed preview pass at 35B, "the rest of each layer" (norms, router, residuals, the optimistic
slot mapping) took 4.0 ms of 26.8 (BENCHMARKS.md): ~30 tiny kernels a layer, each a few µs of launch and ramp
however little it computes. Each op here keeps one row (or one block of pairs) in registers:

- `rms_norm_zc`: `ZeroCenteredRMSNorm` (`x / rms(x) · (1 + w)`, fp32 inside) — 7 kernels → 1; with the residual
  sum in front of it (`add_rms_norm_zc`, a decoder layer's `x + mixer(x)` then its MoE's norm) 8 → 1;
- `route_topk`: the router after its linear: softmax (fp32) → top-k → renormalise — 6 kernels → 1; top-k by k
  rounds of max, ties to the lower expert id, descending like `torch.topk`;
- `optimistic_slots`: `OptimisticPass.run`'s mapping of (layer, expert) to cache slots with the use counts
  (atomic adds), non-resident choices sent to the host stacks (or zero-weighted on slot 0) — 9 kernels → 1;
  with read-through installs, also the layer's assignment of offered slots (`ExpertCache.read_through_targets`);
- `shared_combine`: `SparseMoe`'s routed + sigmoid(shared_expert_gate(x)) · shared_expert(x), plus the decoder
  layer's residual — the gate's one-column linear, sigmoid, product and two sums: 5 kernels → 1;
- `silu_mul`: the shared expert's silu(gate) · up from its merged gate/up projection (`PackedMLP`) — 2 → 1;
- `norm_rope`: an attention layer's q or k head norm and partial rotary embedding (`Attention.project`) — 7 → 1;
- `gated_rms_norm`: a GDN layer's output norm after a causal pass (`GatedRMSNorm`: w · rmsnorm(o) · silu(z), read
  from the fp32 mix) — the cast, 7 kernels of the norm and the gate → 1 (the preview's is inside its kernel).

The definitions stay where they were (`model/norm.py`, `SparseMoe.route`, `runtime/optimistic.py`); the runtime
installs these on CUDA (`runtime/load.py`), tests pin each to its definition through Triton's interpreter.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch import Tensor


@triton.jit
def _rms_norm_zc_kernel(x_ptr, w_ptr, out_ptr, r_ptr, sum_ptr, D, stride_x, stride_o, stride_r, stride_s, eps,
                        BLOCK_D: tl.constexpr, ADD: tl.constexpr):
    """ADD: x + r first (rounded to x's dtype, as the eager sum is, and stored to sum_ptr), then its norm."""
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    x = tl.load(x_ptr + row * stride_x + d, mask=ok, other=0.0)
    if ADD:
        x = (x.to(tl.float32) + tl.load(r_ptr + row * stride_r + d, mask=ok, other=0.0).to(tl.float32))
        x = x.to(sum_ptr.dtype.element_ty)
        tl.store(sum_ptr + row * stride_s + d, x, mask=ok)
    x = x.to(tl.float32)
    w = tl.load(w_ptr + d, mask=ok, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, 0) / D + eps) * (1.0 + w)
    tl.store(out_ptr + row * stride_o + d, y.to(out_ptr.dtype.element_ty), mask=ok)


def _rows(t: Tensor) -> Tensor:
    """t as rows [N, last dim] with a unit column stride (a view where it can be)."""
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def _norm(x: Tensor, weight: Tensor, eps: float, residual: Tensor | None) -> tuple[Tensor | None, Tensor]:
    """One `_rms_norm_zc_kernel` launch: (x + residual or None, the norm), both shaped and typed like x."""
    d = x.shape[-1]
    x2 = _rows(x)
    r2 = _rows(residual) if residual is not None else x2
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    total = torch.empty_like(out) if residual is not None else out  # ADD=False never writes it
    if x2.shape[0]:
        _rms_norm_zc_kernel[(x2.shape[0],)](x2, weight, out, r2, total, d, x2.stride(0), out.stride(0),
                                            r2.stride(0), total.stride(0), float(eps),
                                            BLOCK_D=triton.next_power_of_2(d), ADD=residual is not None,
                                            num_warps=4 if d <= 4096 else 8)
    return (total.view(x.shape) if residual is not None else None), out.view(x.shape)


def rms_norm_zc(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """`ZeroCenteredRMSNorm.forward` over the last dim, in x's dtype."""
    return _norm(x, weight, eps, None)[1]


def add_rms_norm_zc(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(x + residual, its `ZeroCenteredRMSNorm`) in one launch, both in x's dtype: a decoder layer's residual
    sum after its mixer and the norm in front of its MoE (`DecoderLayer.forward`). The sum is rounded to x's dtype
    before the norm reads it, as the eager `x + h` then `norm(x)` does."""
    if residual.shape != x.shape:
        raise ValueError(f"add_rms_norm_zc: x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    return _norm(x, weight, eps, residual)


@triton.jit
def _route_topk_kernel(logits_ptr, idx_ptr, w_ptr, allowed_ptr, wanted_ptr, E, stride_l, TOPK: tl.constexpr,
                       BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, ALLOWED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, BLOCK_E)
    valid = e < E
    keep = valid
    raw = tl.load(logits_ptr + row * stride_l + e, mask=valid, other=float("-inf")).to(tl.float32)
    if ALLOWED:  # `restrict_logits`: experts with allowed < 0 out, unless fewer than TOPK are left
        ok = tl.load(allowed_ptr + e, mask=valid, other=-1) >= 0
        few = tl.sum(tl.where(ok, 1, 0), 0) < TOPK
        keep = tl.where(few, valid, valid & ok)
        q = raw  # ... and the choices it took away, counted in wanted (the router's own top-k, by logit)
        for i in tl.static_range(TOPK):
            top = tl.max(q, 0)
            pick = tl.min(tl.where(q == top, e, BLOCK_E), 0)
            lost = tl.sum(tl.where((e == pick) & ~keep, 1, 0), 0)
            tl.atomic_add(wanted_ptr + pick, lost, mask=lost > 0)
            q = tl.where(e == pick, float("-inf"), q)
    p = tl.where(keep, raw, float("-inf"))
    p = tl.exp(p - tl.max(p, 0))
    p = p / tl.sum(p, 0)  # the router's probabilities (rounded as softmax rounds them), -inf rows are 0
    p = tl.where(keep, p, -1.0)
    slot = tl.arange(0, BLOCK_K)
    vals = tl.zeros((BLOCK_K,), dtype=tl.float32)
    ids = tl.zeros((BLOCK_K,), dtype=tl.int64)
    for i in tl.static_range(TOPK):
        top = tl.max(p, 0)
        # a row of NaN logits matches no expert: expert E − 1 (its weights stay NaN), never an id past the tables
        # the passes index on the device (`Runtime.run_experts` names the cause where it syncs)
        pick = tl.minimum(tl.min(tl.where(p == top, e, BLOCK_E), 0), E - 1)
        vals = tl.where(slot == i, top, vals)
        ids = tl.where(slot == i, pick.to(tl.int64), ids)
        p = tl.where(e == pick, -1.0, p)
    vals = vals / tl.sum(vals, 0)
    keep = slot < TOPK
    tl.store(idx_ptr + row * TOPK + slot, ids, mask=keep)
    tl.store(w_ptr + row * TOPK + slot, vals.to(w_ptr.dtype.element_ty), mask=keep)


def route_topk(logits: Tensor, top_k: int, dtype: torch.dtype, limit: tuple[Tensor, Tensor] | None = None
               ) -> tuple[Tensor, Tensor]:
    """Router logits [N, E] → (expert ids int64 [N, k], renormalised weights [N, k] in `dtype`): what
    `SparseMoe.route` returns first and second, `limit` = (allowed, wanted) as `restrict_logits` takes it."""
    n, e = logits.shape
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    idx = torch.empty(n, top_k, dtype=torch.int64, device=logits.device)
    w = torch.empty(n, top_k, dtype=dtype, device=logits.device)
    if limit is not None:
        for name, t in zip(("allowed", "wanted"), limit):
            if t.shape != (e,) or t.stride(0) != 1 or t.dtype != torch.int32:
                raise ValueError(f"route_topk: {name} {tuple(t.shape)} {t.dtype} must be a contiguous int32 [{e}]")
    allowed, wanted = limit if limit is not None else (idx, idx)
    if n:
        _route_topk_kernel[(n,)](logits, idx, w, allowed, wanted, e, logits.stride(0), TOPK=top_k,
                                 BLOCK_E=triton.next_power_of_2(e), BLOCK_K=triton.next_power_of_2(top_k),
                                 ALLOWED=limit is not None)
    return idx, w


class ReadThrough(NamedTuple):
    """`optimistic_slots`'s device buffers for read-through installs (`OptimisticPass` owns them): the pass's
    targets install [rows × E] (1 + slot, or 0), the offered slots [rows, E] (`ExpertCache.offer_slots`), a
    scratch [≥ 2E] for the compacted candidates, and carry [1 + E] (count, then slots) zeroed before the pass:
    the offered slots a layer left over, for the next."""

    install: Tensor
    offers: Tensor
    scratch: Tensor
    carry: Tensor
    n_experts: int


@triton.jit
def _optimistic_slots_kernel(idx_ptr, w_ptr, table_ptr, counts_ptr, slots_ptr, w_out_ptr, T, row_base, host_base,
                             install_ptr, offers_ptr, scratch_ptr, carry_ptr, E,
                             BLOCK: tl.constexpr, HOST: tl.constexpr, READ_THROUGH: tl.constexpr,
                             BLOCK_E: tl.constexpr):
    if READ_THROUGH:  # one program: every choice, then the layer's assignment of its offered slots
        n_chunks = tl.cdiv(T, BLOCK)
    else:
        n_chunks = 1
    for chunk in range(0, n_chunks):
        i = (tl.program_id(0) + chunk) * BLOCK + tl.arange(0, BLOCK)
        ok = i < T
        e = tl.load(idx_ptr + i, mask=ok, other=0).to(tl.int64)
        flat = e + row_base
        tl.atomic_add(counts_ptr + flat, tl.full((BLOCK,), 1, tl.int32), mask=ok)
        s = tl.load(table_ptr + flat, mask=ok, other=-1)
        w = tl.load(w_ptr + i, mask=ok, other=0.0)
        if HOST:
            tl.store(slots_ptr + i, tl.where(s >= 0, s, host_base + e).to(slots_ptr.dtype.element_ty), mask=ok)
            tl.store(w_out_ptr + i, w, mask=ok)
        else:
            tl.store(slots_ptr + i, tl.maximum(s, 0).to(slots_ptr.dtype.element_ty), mask=ok)
            tl.store(w_out_ptr + i, tl.where(s >= 0, w, tl.zeros_like(w)), mask=ok)
    if READ_THROUGH:
        tl.debug_barrier()  # every choice's count added before they are read (volatile: from L2, not L1)
        ex = tl.arange(0, BLOCK_E)
        in_row = ex < E
        # the offered slots still usable: free (row 0's), or holding the layer before's expert ex, which this
        # pass did not use (that layer is done: its count is final); s ≥ 0 not pinned, −2 − s pinned
        cval = tl.load(offers_ptr + row_base + ex, mask=in_row, other=-1)
        before = in_row & (row_base + ex >= E)  # not row 0 (row_base ≥ E), as a tensor
        cused = tl.load(counts_ptr + tl.maximum(row_base - E, 0) + ex, mask=before, other=0, volatile=True)
        first = (cval >= 0) & (cused == 0)
        second = (cval <= -2) & (cused == 0)
        n_first = tl.sum(first.to(tl.int32), 0)
        n_carry = tl.load(carry_ptr, volatile=True)  # what earlier layers left over, at most E (this pass's)
        carried = tl.load(carry_ptr + 1 + ex, mask=ex < n_carry, other=-1, volatile=True)
        # the candidates compacted in order: unpinned, carried, pinned
        tl.store(scratch_ptr + tl.cumsum(first.to(tl.int32), 0) - 1, cval, mask=first)
        tl.store(scratch_ptr + n_first + ex, carried, mask=ex < n_carry)
        tl.store(scratch_ptr + n_first + n_carry + tl.cumsum(second.to(tl.int32), 0) - 1, -2 - cval, mask=second)
        total = n_first + n_carry + tl.sum(second.to(tl.int32), 0)
        c = tl.load(counts_ptr + row_base + ex, mask=in_row, other=0, volatile=True)
        t = tl.load(table_ptr + row_base + ex, mask=in_row, other=0)
        missing = (c > 0) & (t < 0) & in_row
        rank = tl.cumsum(missing.to(tl.int32), 0) - 1
        tl.debug_barrier()  # the candidates stored (and the carry read) before they are read (or overwritten)
        take = missing & (rank < total)
        slot = tl.load(scratch_ptr + rank, mask=take, other=-1, volatile=True)
        tl.store(install_ptr + row_base + ex, tl.where(take, slot + 1, 0), mask=in_row)
        taken = tl.minimum(tl.sum(missing.to(tl.int32), 0), total)
        left = tl.minimum(total - taken, E)
        rest = tl.load(scratch_ptr + taken + ex, mask=ex < left, other=-1, volatile=True)
        tl.store(carry_ptr + 1 + ex, rest, mask=ex < left)
        tl.store(carry_ptr, left)


def optimistic_slots(idx: Tensor, weights: Tensor, table: Tensor, counts: Tensor, row_base: int,
                     host_base: int = -1, read_through: ReadThrough | None = None) -> tuple[Tensor, Tensor]:
    """(slots, weights) of `OptimisticPass.run`: counts[row_base + idx] += 1 for every choice; slot =
    table[row_base + idx]; where that is -1 (not resident): host_base + idx with the weight kept (host reads,
    host_base ≥ 0), else slot 0 with weight 0. Shapes of idx.

    read_through (`ReadThrough`), with host reads: then also, once the layer's counts are in, its non-resident
    experts by id take its offered slots in the order `ExpertCache.read_through_targets` gives (offers [rows, E]:
    row r's column e holds row r − 1's expert e's slot s as s or, pinned, −2 − s; row 0's are free; −1 none) that
    are free or whose expert the pass did not use, after the unpinned ones what earlier layers left over (`carry`),
    then the pinned ones: install[row_base + e] = 1 + slot, or 0 when they run out; what is left is carried to the
    next layer's call. One program does it all, so the layer's counts are complete when it reads them."""
    flat = idx.reshape(-1)
    flat = flat if flat.is_contiguous() else flat.contiguous()
    wf = weights.reshape(-1).contiguous()
    slots = torch.empty(flat.shape, dtype=table.dtype, device=idx.device)
    w_out = torch.empty_like(wf)
    t = flat.numel()
    through = read_through is not None and host_base >= 0
    rt = read_through if through else ReadThrough(table, table, table, table, 1)
    if through and (rt.scratch.numel() < 2 * rt.n_experts or rt.carry.numel() < 1 + rt.n_experts):
        raise ValueError(f"optimistic_slots: scratch needs ≥ {2 * rt.n_experts} and carry ≥ {1 + rt.n_experts} "
                         "int32 elements")
    if t:
        block = 256
        grid = (1,) if through else (triton.cdiv(t, block),)
        _optimistic_slots_kernel[grid](flat, wf, table, counts, slots, w_out, t, row_base, host_base, rt.install,
                                       rt.offers, rt.scratch, rt.carry, rt.n_experts, BLOCK=block,
                                       HOST=host_base >= 0, READ_THROUGH=through,
                                       BLOCK_E=triton.next_power_of_2(rt.n_experts))
    return slots.view(idx.shape), w_out.view(idx.shape)


@triton.jit
def _shared_combine_kernel(r_ptr, x_ptr, g_ptr, s_ptr, res_ptr, out_ptr, D, stride_r, stride_x, stride_s,
                           stride_res, stride_o, BLOCK_D: tl.constexpr, RESIDUAL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    x = tl.load(x_ptr + row * stride_x + d, mask=ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + d, mask=ok, other=0.0).to(tl.float32)
    gate = 1.0 / (1.0 + tl.exp(-tl.sum(x * g, 0)))
    r = tl.load(r_ptr + row * stride_r + d, mask=ok, other=0.0).to(tl.float32)
    sh = tl.load(s_ptr + row * stride_s + d, mask=ok, other=0.0).to(tl.float32)
    y = r + gate * sh
    if RESIDUAL:  # the decoder layer's residual: the MoE's output rounded as the eager sum rounds it, then added
        y = y.to(out_ptr.dtype.element_ty).to(tl.float32)
        y += tl.load(res_ptr + row * stride_res + d, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + d, y.to(out_ptr.dtype.element_ty), mask=ok)


def shared_combine(routed: Tensor, x: Tensor, gate_weight: Tensor, shared: Tensor,
                   residual: Tensor | None = None) -> Tensor:
    """routed + sigmoid(x @ gate_weightᵀ) · shared, rows [N, H] in routed's dtype: `SparseMoe.forward`'s last
    line with the gate (`shared_expert_gate`, a [1, H] weight) inside, and with `residual` the decoder layer's
    residual sum after it. fp32 inside, rounded where the eager sum rounds the MoE's output (the eager line also
    rounds the gate's logit, the sigmoid and the product: they agree within bf16 rounding)."""
    r2, x2, s2 = _rows(routed), _rows(x), _rows(shared)
    n, d = r2.shape
    g = gate_weight.reshape(-1)
    res2 = _rows(residual) if residual is not None else r2
    if x2.shape != (n, d) or s2.shape != (n, d) or res2.shape != (n, d) or g.numel() != d:
        raise ValueError(f"shared_combine: routed {tuple(r2.shape)}, x {tuple(x2.shape)}, shared "
                         f"{tuple(s2.shape)}, residual {tuple(res2.shape)} and gate weight "
                         f"{tuple(gate_weight.shape)} disagree")
    g = g if g.is_contiguous() else g.contiguous()
    out = torch.empty_like(r2)
    if n:
        _shared_combine_kernel[(n,)](r2, x2, g, s2, res2, out, d, r2.stride(0), x2.stride(0), s2.stride(0),
                                     res2.stride(0), out.stride(0), BLOCK_D=triton.next_power_of_2(d),
                                     RESIDUAL=residual is not None, num_warps=4 if d <= 4096 else 8)
    return out.view(routed.shape)


@triton.jit
def _silu_mul_kernel(h_ptr, out_ptr, I, stride_h, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = c < I
    gate = tl.load(h_ptr + row * stride_h + c, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(h_ptr + row * stride_h + I + c, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + c, (gate / (1.0 + tl.exp(-gate)) * up).to(out_ptr.dtype.element_ty),
             mask=ok)


def silu_mul(h: Tensor) -> Tensor:
    """h [..., 2I] (gate columns first, then up) → silu(gate) · up [..., I] in h's dtype (fp32 inside)."""
    two_i = h.shape[-1]
    if two_i % 2:
        raise ValueError(f"silu_mul: the last dim must be gate and up halves, got {two_i}")
    h2 = _rows(h)
    i = two_i // 2
    out = torch.empty(h2.shape[0], i, dtype=h.dtype, device=h.device)
    if h2.shape[0]:
        block = min(1024, triton.next_power_of_2(i))
        _silu_mul_kernel[(h2.shape[0], triton.cdiv(i, block))](h2, out, i, h2.stride(0), out.stride(0), BLOCK=block)
    return out.view(*h.shape[:-1], i)


@triton.jit
def _norm_rope_kernel(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, T, H, stride_xb, stride_xt, stride_xh,
                      stride_ct, stride_ob, stride_ot, stride_oh, eps,
                      D: tl.constexpr, R: tl.constexpr, BLOCK_H: tl.constexpr):
    """One (sequence, row): every head's x / rms(x) · (1 + w), rounded to the output dtype as the eager norm
    rounds it, then the first R dims rotated: y·cos + rotate_half(y)·sin with rotate_half = [−y[R/2:R], y[:R/2]]."""
    pid = tl.program_id(0)
    b = (pid // T).to(tl.int64)
    t = pid % T
    hh = tl.arange(0, BLOCK_H)
    d = tl.arange(0, D)
    ok = (hh < H)[:, None]
    base = x_ptr + b * stride_xb + t * stride_xt + hh[:, None] * stride_xh
    x = tl.load(base + d[None, :], mask=ok, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, 1) / D + eps)
    HALF: tl.constexpr = R // 2
    rot = d < R
    partner = tl.where(d < HALF, d + HALF, d - HALF)  # for d < R: the dim rotate_half reads
    xp = tl.load(base + partner[None, :], mask=ok & rot[None, :], other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=rot, other=0.0).to(tl.float32)
    dt = out_ptr.dtype.element_ty
    y = (x * inv[:, None] * (1.0 + w[None, :])).to(dt).to(tl.float32)
    yp = (xp * inv[:, None] * (1.0 + wp[None, :])).to(dt).to(tl.float32)
    c = tl.load(cos_ptr + t * stride_ct + d, mask=rot, other=1.0).to(tl.float32)
    sn = tl.load(sin_ptr + t * stride_ct + d, mask=rot, other=0.0).to(tl.float32)
    sign = tl.where(d < HALF, -1.0, 1.0)
    res = tl.where(rot[None, :], y * c[None, :] + (sign[None, :] * yp) * sn[None, :], y)
    out = out_ptr + b * stride_ob + t * stride_ot + hh[:, None] * stride_oh + d[None, :]
    tl.store(out, res.to(dt), mask=ok)


def norm_rope(x: Tensor, weight: Tensor, eps: float, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B,T,H,D] (any strides with a unit last one) → the head norm (`ZeroCenteredRMSNorm`, weight [D]) and
    `rope.apply_rotary` with cos/sin [T, R] (R ≤ D, even), as [B,H,T,D] in x's dtype (a transposed view of a
    [B,T,H,D] tensor, which is what the attention kernels and the KV cache read). fp32 inside; the norm's output
    is rounded to x's dtype as the eager norm rounds it, and cos/sin are used as given."""
    b, t, h, d = x.shape
    r = cos.shape[-1]
    cos2, sin2 = cos.reshape(-1, r), sin.reshape(-1, r)
    if x.stride(-1) != 1 or r > d or r % 2 or cos2.shape[0] != t or sin2.shape != cos2.shape:
        raise ValueError(f"norm_rope: x {tuple(x.shape)} (last stride {x.stride(-1)}) and cos/sin "
                         f"{tuple(cos.shape)} do not fit")
    if d & (d - 1):
        raise ValueError(f"norm_rope: head dim {d} must be a power of two")
    cos2, sin2 = cos2.contiguous(), sin2.contiguous()  # [T, R]: one row stride for both
    out = torch.empty(b, t, h, d, dtype=x.dtype, device=x.device)
    if b * t:
        _norm_rope_kernel[(b * t,)](x, weight, cos2, sin2, out, t, h, x.stride(0), x.stride(1), x.stride(2),
                                    cos2.stride(0), out.stride(0), out.stride(1), out.stride(2), float(eps),
                                    D=d, R=r, BLOCK_H=triton.next_power_of_2(h), num_warps=4)
    return out.transpose(1, 2)


@triton.jit
def _gated_rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, N, H, stride_xn, stride_xh, stride_zn, stride_zh, eps,
                           D: tl.constexpr, BLOCK_R: tl.constexpr):
    """BLOCK_R of the N·H rows of D (row r: head r % H of row r // H): x rounded to the output dtype (as the eager
    path casts the fp32 mix first), then w · x / rms(x) · silu(z) in fp32, rounded once."""
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    n = r // H
    h = r % H
    d = tl.arange(0, D)
    ok = (r < N * H)[:, None]
    x = tl.load(x_ptr + (n * stride_xn + h * stride_xh)[:, None] + d[None, :], mask=ok, other=0.0)
    x = x.to(out_ptr.dtype.element_ty).to(tl.float32)
    z = tl.load(z_ptr + (n * stride_zn + h * stride_zh)[:, None] + d[None, :], mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, 1) / D + eps)[:, None] * w[None, :] * (z / (1.0 + tl.exp(-z)))
    tl.store(out_ptr + r[:, None] * D + d[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)


def _heads(t: Tensor) -> Tensor:
    """t [..., H, D] as [N, H, D] with a unit last stride: a view where it can be (a column slice of a wider
    projection, as z is in a packed in_proj_qkvz, stays a view: its heads are strided, not copied)."""
    t = t.reshape(-1, t.shape[-2], t.shape[-1]) if t.dim() != 3 else t
    return t if t.stride(-1) == 1 else t.contiguous()


def gated_rms_norm(x: Tensor, gate: Tensor, weight: Tensor, eps: float) -> Tensor:
    """`GatedRMSNorm.forward` over the last dim (a power of two: a GDN value head) in one launch: x [..., H, D]
    (the fp32 mix, read as is), gate [..., H, D] → gate's shape and dtype."""
    d = x.shape[-1]
    if d & (d - 1) or gate.shape != x.shape or x.dim() < 2:
        raise ValueError(f"gated_rms_norm: x {tuple(x.shape)} and gate {tuple(gate.shape)} must match as [..., H, "
                         "D], D a power of two")
    x3, z3 = _heads(x), _heads(gate)
    n, h = x3.shape[:2]
    out = torch.empty(n, h, d, dtype=gate.dtype, device=gate.device)
    if n * h:
        block_r = max(1, min(16, 2048 // d))
        _gated_rms_norm_kernel[(triton.cdiv(n * h, block_r),)](
            x3, z3, weight, out, n, h, x3.stride(0), x3.stride(1), z3.stride(0), z3.stride(1), float(eps),
            D=d, BLOCK_R=block_r, num_warps=4)
    return out.view(gate.shape)
