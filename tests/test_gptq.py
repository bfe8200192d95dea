"""GPTQ core: Hessian statistics, error feedback that beats round-to-nearest, and the awkward-Hessian paths."""

from __future__ import annotations

import pytest
import torch

from quantize.gptq import (
    HessianAccumulator,
    HessianError,
    compute_scale_zero,
    gptq_quantize,
    gptq_quantize_batch,
    rtn_quantize,
)
from quantize.gptq_format import dequantize, pack_weight

IN, OUT, ROWS = 256, 128, 2048


def correlated_inputs(rows: int, features: int, seed: int, rank: int = 32, noise: float = 0.5) -> torch.Tensor:
    """Activations live near a low-rank subspace, as real ones do; this is where GPTQ earns its keep."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(rows, rank, generator=gen) @ torch.randn(rank, features, generator=gen) / rank**0.5
    return latent + noise * torch.randn(rows, features, generator=gen)


def random_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    return torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed))


def hessian(x: torch.Tensor) -> torch.Tensor:
    acc = HessianAccumulator(x.shape[-1])
    acc.add_batch(x)
    return acc.H


def output_error(x: torch.Tensor, w: torch.Tensor, w_hat: torch.Tensor) -> float:
    return float(((x @ (w - w_hat).T) ** 2).sum())


def test_hessian_accumulates_in_batches_like_one_batch() -> None:
    x = correlated_inputs(1000, 64, seed=0)
    one = HessianAccumulator(64)
    one.add_batch(x)
    many = HessianAccumulator(64)
    for chunk in (x[:1], x[1:300], x[300:300], x[300:777], x[777:]):
        many.add_batch(chunk)
    assert one.nsamples == many.nsamples == 1000
    torch.testing.assert_close(many.H, one.H, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(one.H, 2.0 / 1000 * x.T @ x, rtol=1e-5, atol=1e-6)
    batched = HessianAccumulator(64)
    batched.add_batch(x.view(10, 100, 64).to(torch.bfloat16))  # leading dims flatten; low precision accepted
    assert batched.nsamples == 1000 and batched.H.dtype == torch.float32
    with pytest.raises(ValueError, match="features"):
        batched.add_batch(torch.zeros(3, 65))


def test_rows_that_need_a_cast_are_taken_a_slice_at_a_time(monkeypatch) -> None:
    """bf16 rows (a GPU run's MoE inputs) are cast to float32 `CAST_ROWS` at a time, never whole: the same H as
    the whole cast, within float32 summation order; float32 rows stay one product."""
    import quantize.gptq as gptq

    x = correlated_inputs(1000, 64, seed=1).to(torch.bfloat16)
    whole = HessianAccumulator(64)
    whole.add_batch(x.float())
    seen: list[int] = []
    real_addmm = torch.Tensor.addmm_
    monkeypatch.setattr(torch.Tensor, "addmm_", lambda h, a, b, alpha: seen.append(b.shape[0]) or real_addmm(
        h, a, b, alpha=alpha))
    monkeypatch.setattr(gptq, "CAST_ROWS", 300)
    sliced = HessianAccumulator(64)
    sliced.add_batch(x)
    assert seen == [300, 300, 300, 100] and sliced.nsamples == 1000
    torch.testing.assert_close(sliced.H, whole.H, rtol=1e-5, atol=1e-6)
    seen.clear()
    HessianAccumulator(64).add_batch(x.float())
    assert seen == [1000]


@pytest.mark.parametrize("group_size", [128, -1])
def test_gptq_beats_rtn_on_output_error(group_size: int) -> None:
    x = correlated_inputs(ROWS, IN, seed=1)
    w = random_weight(OUT, IN, seed=2)
    g = gptq_quantize(w, hessian(x), bits=4, group_size=group_size)
    r = rtn_quantize(w, bits=4, group_size=group_size)
    ratio = output_error(x, w, g.dequantize()) / output_error(x, w, r.dequantize())
    # Measured ≈ 0.31–0.32 for both settings over several seeds; 0.5 leaves room for platform noise.
    assert ratio < 0.5, ratio
    assert g.damp == pytest.approx(0.01) and g.loss > 0
    # What the pack stores is exactly what GPTQ decided.
    tensors = pack_weight(g.q, g.scales, g.zeros, g.g_idx, 4)
    assert torch.equal(dequantize(tensors, 4), g.dequantize())


def test_gptq_8bit_and_act_order() -> None:
    x = correlated_inputs(ROWS, IN, seed=3)
    x[:, 5] *= 20.0  # an outlier channel, the case act-order is for
    w = random_weight(OUT, IN, seed=4)
    rtn_err = output_error(x, w, rtn_quantize(w, bits=8, group_size=128).dequantize())
    assert output_error(x, w, gptq_quantize(w, hessian(x), bits=8).dequantize()) < 0.8 * rtn_err

    ordered = gptq_quantize(w, hessian(x), bits=4, group_size=64, act_order=True)
    assert not torch.equal(ordered.g_idx, torch.sort(ordered.g_idx).values)  # groups follow the permutation
    assert torch.equal(torch.bincount(ordered.g_idx.long()), torch.full((IN // 64,), 64))
    assert ordered.g_idx[5] == 0  # the outlier channel is quantized first
    tensors = pack_weight(ordered.q, ordered.scales, ordered.zeros, ordered.g_idx, 4)
    assert torch.equal(dequantize(tensors, 4), ordered.dequantize())
    rtn4 = output_error(x, w, rtn_quantize(w, bits=4, group_size=64).dequantize())
    assert output_error(x, w, ordered.dequantize()) < 0.8 * rtn4


def reference_gptq_per_channel(
    w: torch.Tensor, H: torch.Tensor, scale: torch.Tensor, bits: int, damp: float
) -> tuple[torch.Tensor, float]:
    """Textbook GPTQ in float64 without blocks or lazy updates: quantize one column, update all later ones.
    Returns the codes and GPTQ's own loss proxy Σ (w − ŵ)² / (2·Uᵢᵢ²)."""
    maxq = 2**bits - 1
    w = w.double().clone()
    H = H.double() + damp * H.diagonal().mean() * torch.eye(H.shape[0], dtype=torch.float64)
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    scale = scale.double()
    zero = (maxq + 1) // 2
    codes = torch.empty_like(w)
    loss = 0.0
    for i in range(w.shape[1]):
        codes[:, i] = torch.clamp(torch.round(w[:, i] / scale) + zero, 0, maxq)
        err = (w[:, i] - (codes[:, i] - zero) * scale) / U[i, i]
        loss += float((err**2).sum()) / 2
        w[:, i + 1 :] -= err[:, None] * U[i, i + 1 :][None, :]
    return codes, loss


def test_blocked_lazy_updates_match_textbook_gptq() -> None:
    x = correlated_inputs(1024, 128, seed=5)
    w = random_weight(64, 128, seed=6)
    H = hessian(x)
    scale, _ = compute_scale_zero(w, bits=4, sym=True)  # the scale rule is tested on its own below
    expected, _ = reference_gptq_per_channel(w, H, scale, bits=4, damp=0.01)
    for block_size in (16, 128):
        got = gptq_quantize(w, H, bits=4, group_size=-1, block_size=block_size)
        agree = float((got.q.double() == expected).double().mean())
        assert agree > 0.995, (block_size, agree)  # measured: 1.0


def test_dead_columns_are_zeroed_not_nan() -> None:
    x = correlated_inputs(ROWS, IN, seed=7)
    dead = [0, 17, 200]
    x[:, dead] = 0.0
    w = random_weight(OUT, IN, seed=8)
    for act_order in (False, True):
        g = gptq_quantize(w, hessian(x), bits=4, group_size=128, act_order=act_order)
        w_hat = g.dequantize()
        assert torch.isfinite(w_hat).all()
        assert torch.all(w_hat[:, dead] == 0)
        r = rtn_quantize(w, bits=4, group_size=128)
        assert output_error(x, w, w_hat) < 0.5 * output_error(x, w, r.dequantize())
    with pytest.raises(HessianError, match="all zero"):
        gptq_quantize(w, torch.zeros(IN, IN))


def indefinite_hessian(n: int, negative: float, seed: int) -> torch.Tensor:
    """Positive diagonal but one eigenvalue `negative` (mean eigenvalue ≈ 1), as fp32 sums can produce."""
    gen = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    eigenvalues = torch.ones(n, dtype=torch.float64)
    eigenvalues[0] = negative
    return ((basis * eigenvalues) @ basis.T).float()


def test_cholesky_failure_retries_with_more_damping() -> None:
    w = random_weight(32, 64, seed=9)
    H = indefinite_hessian(64, negative=-0.05, seed=10)  # +0.01·mean fails, +0.1·mean works
    g = gptq_quantize(w, H, bits=4, group_size=32, damp=0.01)
    assert g.damp == pytest.approx(0.1)
    assert torch.isfinite(g.dequantize()).all()

    from_zero = gptq_quantize(w, H, bits=4, group_size=32, damp=0.0)
    assert from_zero.damp == pytest.approx(0.1)  # 0 → 0.01 → 0.1

    with pytest.raises(HessianError, match="not positive definite"):
        gptq_quantize(w, indefinite_hessian(64, negative=-20.0, seed=11), group_size=32, max_retries=3)
    with pytest.raises(HessianError, match="NaN"):
        gptq_quantize(w, torch.full((64, 64), float("nan")), group_size=32)


def test_batch_matches_single_and_retries_per_element() -> None:
    xs = [correlated_inputs(512, 64, seed=s) for s in (12, 13)]
    Hs = torch.stack([hessian(xs[0]), indefinite_hessian(64, -0.05, seed=14), hessian(xs[1])])
    ws = torch.stack([random_weight(32, 64, seed=s) for s in (15, 16, 17)])
    results = gptq_quantize_batch(ws, Hs, bits=4, group_size=32)
    assert [r.damp for r in results] == pytest.approx([0.01, 0.1, 0.01])
    for b, res in enumerate(results):
        single = gptq_quantize(ws[b], Hs[b], bits=4, group_size=32)
        assert float((single.q == res.q).float().mean()) > 0.99
        torch.testing.assert_close(single.scales, res.scales, rtol=2e-3, atol=0)


def test_scale_zero_rules() -> None:
    w = torch.tensor([[0.0, 0.5, 1.0, 3.0], [-2.0, -1.0, -0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [0.01, 0.0, 2.0, 1.0]])
    scale, zero = compute_scale_zero(w, bits=4, sym=False)
    assert torch.all(zero >= 1) and torch.all(zero <= 15)  # zero 0 cannot be stored in the v1 format
    assert torch.equal(scale, scale.half().float())  # codes use exactly the stored fp16 scale
    grouped = rtn_quantize(w, bits=4, group_size=4, sym=False).dequantize()
    assert torch.all((grouped - w).abs() <= scale[:, None] / 2 + 1e-6)
    sym_scale, sym_zero = compute_scale_zero(w, bits=4, sym=True)
    assert torch.all(sym_zero == 8) and torch.all(sym_scale > 0)
    with pytest.raises(ValueError, match="group_size"):
        rtn_quantize(torch.randn(8, 100), group_size=128)
    with pytest.raises(ValueError, match="NaN"):
        rtn_quantize(torch.full((8, 128), float("inf")))


def heavy_tailed_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """Student-t weights (a few large entries per group), the shape real checkpoints' rows have."""
    gen = torch.Generator().manual_seed(seed)
    normal = torch.randn(out_features, in_features, generator=gen)
    chi = torch.randn(out_features, in_features, 3, generator=gen).pow(2).mean(-1)
    return normal / chi.sqrt()


def group_error(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    codes = torch.clamp(torch.round(w / scale[:, None]) + zero[:, None], 0, 2**bits - 1)
    err = ((codes - zero[:, None]) * scale[:, None] - w) ** 2
    return (err if weights is None else err * weights).sum(-1)


@pytest.mark.parametrize("bits,sym", [(4, True), (3, True), (3, False)])
def test_clip_search_never_loses_to_min_max_and_wins_on_heavy_tails(bits: int, sym: bool) -> None:
    w = heavy_tailed_weight(256, 128, seed=3)
    plain = compute_scale_zero(w, bits, sym)
    clipped = compute_scale_zero(w, bits, sym, clip=20)
    assert torch.equal(clipped[0], clipped[0].half().float())  # still exactly the stored fp16 scale
    assert torch.all(clipped[1] >= 1) and torch.all(clipped[1] <= 2**bits - 1)
    before, after = group_error(w, *plain, bits), group_error(w, *clipped, bits)
    assert torch.all(after <= before * (1 + 1e-6))  # the full range is one of the candidates
    assert float(after.sum()) < 0.9 * float(before.sum())  # and outliers make a narrower range pay
    assert bool((clipped[0] < plain[0]).float().mean() > 0.5)
    # rtn with the search is the same rule applied per group
    r = rtn_quantize(w, bits=bits, group_size=64, sym=sym, clip=20)
    plain_r = rtn_quantize(w, bits=bits, group_size=64, sym=sym)
    assert float(((r.dequantize() - w) ** 2).sum()) < float(((plain_r.dequantize() - w) ** 2).sum())


def test_clip_search_weighs_errors_by_importance() -> None:
    # every row has one outlier in column 0; whether to spend the range on it depends on how much it matters
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(64, 32, generator=gen) * 0.5
    w[:, 0] = -2.0 - torch.rand(64, generator=gen)
    unimportant = torch.ones(32)
    unimportant[0] = 1e-4
    important = torch.ones(32)
    important[0] = 1e4
    cut = compute_scale_zero(w, 3, True, clip=20, importance=unimportant)
    kept = compute_scale_zero(w, 3, True, clip=20, importance=important)
    outlier_only = torch.zeros(32)
    outlier_only[0] = 1.0
    assert float(group_error(w, *cut, 3, 1 - outlier_only).sum()) < 0.8 * float(
        group_error(w, *kept, 3, 1 - outlier_only).sum())  # the other 31 get the finer step
    assert float(group_error(w, *kept, 3, outlier_only).sum()) < 0.2 * float(
        group_error(w, *cut, 3, outlier_only).sum())  # the outlier the output sees stays near exact


@pytest.mark.parametrize("bits", [4, 3])
def test_gptq_with_the_clip_search_lowers_output_error(bits: int) -> None:
    x = correlated_inputs(ROWS, IN, seed=1)
    H = hessian(x)
    total_plain = total_clip = 0.0
    for seed in range(3):
        w = heavy_tailed_weight(OUT, IN, seed=10 + seed)
        plain = gptq_quantize(w, H, bits=bits, group_size=128)
        clipped = gptq_quantize(w, H, bits=bits, group_size=128, clip=20)
        total_plain += output_error(x, w, plain.dequantize())
        total_clip += output_error(x, w, clipped.dequantize())
        assert torch.equal(clipped.g_idx, plain.g_idx)
        ref = dequantize(pack_weight(clipped.q, clipped.scales, clipped.zeros, clipped.g_idx, bits), bits)
        torch.testing.assert_close(ref.float(), clipped.dequantize())  # the pack holds what was chosen
    assert total_clip < 0.9 * total_plain


@pytest.mark.parametrize("bits", [4, 3])
def test_static_groups_act_order_keeps_the_layout_and_lowers_output_error(bits: int) -> None:
    x = correlated_inputs(ROWS, IN, seed=1) * torch.linspace(0.2, 3.0, IN)  # inputs of very different energy
    H = hessian(x)
    total_plain = total_ordered = 0.0
    for seed in range(3):
        w = heavy_tailed_weight(OUT, IN, seed=20 + seed)
        plain = gptq_quantize(w, H, bits=bits, group_size=64, clip=20)
        ordered = gptq_quantize(w, H, bits=bits, group_size=64, clip=20, act_order=True, static_groups=True)
        assert torch.equal(ordered.g_idx, plain.g_idx)  # contiguous groups: nothing for a reader to permute
        ref = dequantize(pack_weight(ordered.q, ordered.scales, ordered.zeros, ordered.g_idx, bits), bits)
        torch.testing.assert_close(ref.float(), ordered.dequantize())
        # each group's scale is chosen from the weights before any error feedback (the search of a whole row)
        static_scale, _ = compute_scale_zero(w.view(OUT, -1, 64), bits, True, 20,
                                             torch.diagonal(H).view(1, -1, 64))
        torch.testing.assert_close(ordered.scales, static_scale.half())
        total_plain += output_error(x, w, plain.dequantize())
        total_ordered += output_error(x, w, ordered.dequantize())
    assert total_ordered < 0.95 * total_plain


def test_static_groups_in_a_batch_match_one_at_a_time() -> None:
    # each element has its own column order; the per-column scales must follow each element's own
    xs = [correlated_inputs(512, 64, seed=s) * torch.rand(64, generator=torch.Generator().manual_seed(s)) * 3
          for s in range(3)]
    Hs = torch.stack([hessian(x) for x in xs])
    ws = torch.stack([heavy_tailed_weight(32, 64, seed=30 + s) for s in range(3)])
    batch = gptq_quantize_batch(ws, Hs, bits=3, group_size=16, clip=20, act_order=True, static_groups=True)
    for b, res in enumerate(batch):
        single = gptq_quantize(ws[b], Hs[b], bits=3, group_size=16, clip=20, act_order=True, static_groups=True)
        torch.testing.assert_close(single.scales, res.scales)
        assert float((single.q == res.q).float().mean()) > 0.99


# --- mutation-testing additions: behaviour the tests above did not pin down ---------------------------------


def test_damping_from_zero_starts_at_one_percent_and_retries_count() -> None:
    w = random_weight(32, 64, seed=40)
    # 0 fails (one negative eigenvalue), 0.01 · mean(diag) ≈ 0.01 lifts it: the ladder's first rung is used
    mild = indefinite_hessian(64, negative=-0.005, seed=41)
    assert gptq_quantize(w, mild, bits=4, group_size=32, damp=0.0).damp == pytest.approx(0.01)
    # needs exactly one retry (0.01 → 0.1): allowed with max_retries=1, refused with 0
    H = indefinite_hessian(64, negative=-0.05, seed=10)
    assert gptq_quantize(w, H, bits=4, group_size=32, damp=0.01, max_retries=1).damp == pytest.approx(0.1)
    with pytest.raises(HessianError, match="not positive definite"):
        gptq_quantize(w, H, bits=4, group_size=32, damp=0.01, max_retries=0)


def test_blocks_smaller_than_a_group_still_see_the_whole_group() -> None:
    x = correlated_inputs(1024, 128, seed=42)
    w = heavy_tailed_weight(64, 128, seed=43)
    H = hessian(x)
    whole = gptq_quantize(w, H, bits=4, group_size=64, block_size=128)
    small = gptq_quantize(w, H, bits=4, group_size=64, block_size=16)  # blocks are widened to whole groups
    torch.testing.assert_close(small.scales, whole.scales, rtol=2e-3, atol=0)
    assert float((small.q == whole.q).float().mean()) > 0.99


def test_gptq_loss_is_the_documented_proxy() -> None:
    x = correlated_inputs(1024, 128, seed=44)
    w = random_weight(64, 128, seed=45)
    H = hessian(x)
    scale, _ = compute_scale_zero(w, bits=4, sym=True)
    _, expected = reference_gptq_per_channel(w, H, scale, bits=4, damp=0.01)
    for block_size in (16, 128):
        got = gptq_quantize(w, H, bits=4, group_size=-1, block_size=block_size)
        assert got.loss == pytest.approx(expected, rel=2e-2), (block_size, got.loss, expected)


@pytest.mark.parametrize("sym", [True, False])
def test_clip_search_tries_exactly_the_documented_ranges(sym: bool) -> None:
    # with clip=1 the only other candidate is the range shrunk to min_shrink: every row keeps either the min/max
    # scale or exactly that one, and on heavy-tailed rows the narrow one wins somewhere
    w = heavy_tailed_weight(256, 64, seed=46)
    plain, _ = compute_scale_zero(w, 3, sym)
    narrow_won = 0
    for min_shrink in (0.75, 0.5):
        narrow, _ = compute_scale_zero(w * min_shrink, 3, sym)  # min/max scaled exactly like the search does
        got, zero = compute_scale_zero(w, 3, sym, clip=1, min_shrink=min_shrink)
        assert torch.all((got == plain) | (got == narrow))
        narrow_won += int(((got == narrow) & (narrow != plain)).sum())
        assert torch.all(zero >= 1) and torch.all(zero <= 7)
    assert narrow_won > 0
    # with 4 steps the candidates are 1, 0.9375, 0.875, 0.8125, 0.75 of the range
    candidates = torch.stack([compute_scale_zero(w * (1 - 0.25 * k / 4), 3, sym)[0] for k in range(5)])
    got, _ = compute_scale_zero(w, 3, sym, clip=4)
    assert torch.all((got[None] == candidates).any(dim=0))


@pytest.mark.parametrize("sym", [True, False])
def test_stored_scale_is_rounded_up_never_clipping_past_half_a_step(sym: bool) -> None:
    gen = torch.Generator().manual_seed(47)
    w = torch.randn(512, 32, generator=gen) * torch.rand(512, 1, generator=gen) * 3
    scale, _ = compute_scale_zero(w, 4, sym)
    hi, lo = w.amax(-1).clamp(min=0), w.amin(-1).clamp(max=0)
    needed = 2 * torch.maximum(hi, -lo) / 15 if sym else (hi - lo) / 15
    assert torch.equal(scale, scale.half().float())
    assert torch.all(scale >= needed)  # fp16 rounding to nearest would go below on about half the rows
    r = rtn_quantize(w, bits=4, group_size=32, sym=sym)
    assert torch.all((r.dequantize() - w).abs() <= r.scales.float() / 2 * (1 + 1e-6))


def test_gptq_clip_search_weighs_by_the_hessian_diagonal() -> None:
    # The first group's (or per-channel) range is searched before any error feedback reaches it, so it must be
    # exactly compute_scale_zero's choice weighted by each input's Hessian diagonal.
    x = correlated_inputs(ROWS, 128, seed=48) * torch.linspace(0.05, 5.0, 128)
    H = hessian(x)
    w = heavy_tailed_weight(128, 128, seed=49)
    d = torch.diagonal(H)
    for group_size in (64, -1):
        g = gptq_quantize(w, H, bits=3, group_size=group_size, clip=20)
        width = 128 if group_size == -1 else group_size
        expected, _ = compute_scale_zero(w[:, :width], 3, True, 20, d[None, :width])
        unweighted, _ = compute_scale_zero(w[:, :width], 3, True, 20)
        assert not torch.equal(expected, unweighted)  # the weighting matters for these rows
        torch.testing.assert_close(g.scales[:, 0], expected.half(), rtol=0, atol=0)
