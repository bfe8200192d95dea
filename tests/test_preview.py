"""The preview (denoising) pass: reads the prefix cache and never writes it, its operator matches the documented
(reconstructed) formula, and the training form `forward_all_blocks` equals decoding's block-by-block passes.

Everything in fp32 on tiny random checkpoints with non-trivial values everywhere.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from clover_local.model.cache import AttentionCache, GDNCache
from clover_local.model.clover import load_model
from clover_local.model.gdn import l2_normalize, preview_mix
from tests.conftest import checkpoint_with_tokenizer

PREFIX = 19


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer_dir):
    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("preview_ckpt"), tokenizer_dir, seed=11)
    return load_model(folder, dtype=torch.float32)


def _ids(model, n: int, seed: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))


def _prefilled(model, prefix: torch.Tensor):
    cache = model.new_cache()
    with torch.no_grad():
        model(prefix, cache)
    return cache


def _snapshot(cache):
    full = []
    for c in cache.layers:
        if isinstance(c, AttentionCache):
            full.append((c.length, c.k.clone(), c.v.clone()))
        else:
            full.append((c.ring.clone(), c.state.clone()))
    return [t.clone() for t in cache.tensors()], full, cache.length


def _gdn_layers(model):
    return [l for l in model.layers if not l.is_attention]


def _attn_layer(model):
    return next(l for l in model.layers if l.is_attention)


# ---------------------------------------------------------------------------------------------- the cache


def test_preview_leaves_cache_bit_identical(model):
    bs = model.config.diffusion.block_size
    cache = _prefilled(model, _ids(model, PREFIX, 1))
    assert cache.length == PREFIX
    before, before_full, before_len = _snapshot(cache)
    assert len(before) == 2 * len(_gdn_layers(model)) + 2 * (len(model.layers) - len(_gdn_layers(model)))
    with torch.no_grad():
        logits = model(_ids(model, bs, 2), cache, preview=True)
    assert logits.shape == (1, bs, model.config.vocab_size)
    after, after_full, after_len = _snapshot(cache)
    assert after_len == before_len == PREFIX
    assert len(after) == len(before)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    for b, a, c in zip(before_full, after_full, cache.layers):
        assert all((torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y) for x, y in zip(b, a))
        if isinstance(c, AttentionCache):
            assert c.length == PREFIX  # capacity buffers untouched too (checked above), length not advanced


def test_preview_output_independent_of_earlier_previews(model):
    bs = model.config.diffusion.block_size
    prefix, block = _ids(model, PREFIX, 3), _ids(model, bs, 4)
    results = []
    for n_before in (0, 1, 3):
        cache = _prefilled(model, prefix)
        with torch.no_grad():
            for i in range(n_before):
                model(_ids(model, bs, 100 + 10 * n_before + i), cache, preview=True)
            results.append(model(block, cache, preview=True))
    assert results[0].abs().max() > 1e-3
    assert torch.equal(results[0], results[1])
    assert torch.equal(results[0], results[2])


def test_commit_after_previews_equals_causal_passes(model):
    bs = model.config.diffusion.block_size
    prefix, block = _ids(model, PREFIX, 5), _ids(model, bs, 6)
    with torch.no_grad():
        a = _prefilled(model, prefix)
        for i in range(3):
            model(_ids(model, bs, 200 + i), a, preview=True)
        commit_a = model(block, a)
        b = _prefilled(model, prefix)
        commit_b = model(block, b)
        one_pass = model(torch.cat([prefix, block], 1))[:, PREFIX:]
    assert a.length == b.length == PREFIX + bs
    assert (commit_a - commit_b).abs().max().item() <= 1e-5
    assert (commit_a - one_pass).abs().max().item() <= 1e-4
    ta, tb = a.tensors(), b.tensors()
    assert len(ta) == len(tb) and ta
    for x, y in zip(ta, tb):
        assert x.shape == y.shape
        assert (x.float() - y.float()).abs().max().item() <= 1e-5
    for ca, cb in zip(a.layers, b.layers):
        if isinstance(ca, AttentionCache):
            assert ca.length == cb.length == PREFIX + bs
    # the committed cache is still a working prefix: the next preview agrees too
    nxt = _ids(model, bs, 7)
    with torch.no_grad():
        assert (model(nxt, a, preview=True) - model(nxt, b, preview=True)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("prefix_len,commit_len", [(PREFIX, None), (0, None), (PREFIX, 5)])
def test_merged_pass_equals_commit_then_preview(model, prefix_len, commit_len):
    """`commit_and_preview`: one pass, the same logits and the same cache as the commit and the preview run
    one after the other (with no prefix too: block 0's commit)."""
    bs = model.config.diffusion.block_size
    prefix, block, nxt = _ids(model, prefix_len, 8), _ids(model, commit_len or bs, 9), _ids(model, bs, 10)
    with torch.no_grad():
        a = _prefilled(model, prefix) if prefix_len else model.new_cache()
        last_a = model(block, a)[0, -1]
        preview_a = model(nxt, a, preview=True)[0]
        b = _prefilled(model, prefix) if prefix_len else model.new_cache()
        last_b, preview_b = model.commit_and_preview(block, nxt, b)
    assert preview_a.abs().max() > 1e-3 and last_a.abs().max() > 1e-3
    assert (last_b[0] - last_a).abs().max().item() <= 1e-4
    assert (preview_b[0] - preview_a).abs().max().item() <= 1e-4
    assert a.length == b.length == prefix_len + block.shape[1]
    for x, y in zip(a.tensors(), b.tensors(), strict=True):
        assert x.shape == y.shape and (x - y).abs().max().item() <= 1e-5
    later = _ids(model, bs, 11)  # the merged pass left a working prefix
    with torch.no_grad():
        assert (model(later, a, preview=True) - model(later, b, preview=True)).abs().max().item() <= 1e-4


def test_merged_pass_refuses_what_is_not_a_block_commit(model):
    bs = model.config.diffusion.block_size
    with pytest.raises(ValueError, match="merged pass"):
        model.commit_and_preview(_ids(model, bs + 1, 1), _ids(model, bs, 2), model.new_cache())
    with pytest.raises(ValueError, match="merged pass"):
        model.commit_and_preview(_ids(model, bs, 1), _ids(model, bs, 2), None)


# ---------------------------------------------------------------------------------------------- preview_mix


def _reference_mix(q, k, v, S, scale, bias, c, n_prefix, block_size):
    """The documented formula, one (batch, head, row) at a time in float64."""
    bsz, t_len, hv, dk = q.shape
    dv = v.shape[-1]
    out = torch.zeros(bsz, t_len, hv, dv, dtype=torch.float64)
    q, k, v, S = q.double(), k.double(), v.double(), S.double()
    for b in range(bsz):
        n = int(n_prefix[b])
        for h in range(hv):
            for t in range(t_len):
                logits = [float(scale[h]) * float(q[b, t, h] @ k[b, s, h]) for s in range(t_len)]
                if n > 0:
                    hist = float(bias[h]) + float(c[h]) * math.log(n / block_size)
                    m = max([hist] + logits)
                    e_hist = math.exp(hist - m)
                else:
                    m = max(logits)
                    e_hist = 0.0
                e = [math.exp(x - m) for x in logits]
                z = e_hist + sum(e)
                o = (e_hist / z) * (S[b, h].T @ q[b, t, h]) * dk**-0.5
                for s in range(t_len):
                    o = o + (e[s] / z) * v[b, s, h]
                out[b, t, h] = o
    return out


def _mix_inputs(seed, bsz=2, t_len=5, hv=3, dk=4, dv=6):
    g = torch.Generator().manual_seed(seed)
    q = l2_normalize(torch.randn(bsz, t_len, hv, dk, generator=g))
    k = l2_normalize(torch.randn(bsz, t_len, hv, dk, generator=g))
    v = torch.randn(bsz, t_len, hv, dv, generator=g)
    S = torch.randn(bsz, hv, dk, dv, generator=g)
    scale = torch.rand(hv, generator=g) * 4 + 1
    bias = torch.randn(hv, generator=g)
    c = torch.randn(hv, generator=g)
    return q, k, v, S, scale, bias, c


@pytest.mark.parametrize("n_prefix", [(19, 40), (0, 0), (0, 5), (3, 64)])
def test_preview_mix_matches_bruteforce_formula(n_prefix):
    q, k, v, S, scale, bias, c = _mix_inputs(1)
    n = torch.tensor(n_prefix)
    got = preview_mix(q, k, v, S, scale, bias, c, n, block_size=8)
    ref = _reference_mix(q, k, v, S, scale, bias, c, n, 8)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert (got.double() - ref).abs().max().item() <= 1e-5
    assert ref.abs().max().item() > 1e-2


def test_preview_mix_huge_history_bias_is_the_state_read():
    q, k, v, S, scale, _, c = _mix_inputs(2)
    bias = torch.full_like(scale, 1e4)
    got = preview_mix(q, k, v, S, scale, bias, c, torch.tensor([19, 8]), block_size=8)
    read = torch.einsum("bhkv,bthk->bthv", S, q) * q.shape[-1] ** -0.5
    assert torch.allclose(got, read, atol=1e-6)
    assert read.abs().max() > 1e-2


def test_preview_mix_without_prefix_is_pure_block_attention():
    q, k, v, S, scale, _, c = _mix_inputs(3)
    bias = torch.full_like(scale, 1e4)  # even an overwhelming history logit gets no weight without a prefix
    got = preview_mix(q, k, v, S, scale, bias, c, torch.tensor([0, 0]), block_size=8)
    logits = scale[None, None, :, None] * torch.einsum("bthd,bshd->bths", q, k)
    expected = torch.einsum("bths,bshv->bthv", torch.softmax(logits, -1), v)
    assert torch.allclose(got, expected, atol=1e-6)
    # and the state is not read at all
    got2 = preview_mix(q, k, v, S * 100 + 1, scale, bias, c, torch.tensor([0, 0]), block_size=8)
    assert torch.equal(got, got2)


# ---------------------------------------------------------------------------------------------- GDN conv


def _reference_conv(rows, ring, weight, right):
    """Depthwise conv over [ring | rows] (causal taps weight [C,1,K]) + right taps [C,K-1]; then SiLU."""
    b, t_len, c = rows.shape
    kk = weight.shape[-1]
    xs = torch.cat([ring, rows], 1).double()
    w = weight[:, 0].double()
    out = torch.zeros(b, t_len, c, dtype=torch.float64)
    for t in range(t_len):
        acc = sum(xs[:, t + j] * w[:, j] for j in range(kk))
        if right is not None:
            for d in range(1, kk):
                if t + d < t_len:
                    acc = acc + rows[:, t + d].double() * right[:, d - 1].double()
        out[:, t] = acc
    return F.silu(out)


def test_conv_right_taps(model):
    gdn = _gdn_layers(model)[0].linear_attn
    bs = model.config.diffusion.block_size
    g = torch.Generator().manual_seed(9)
    c = gdn.conv1d.weight.shape[0]
    rows = torch.randn(1, bs, c, generator=g)
    ring = torch.randn(1, gdn.kernel - 1, c, generator=g)
    assert gdn.conv_right_weight.abs().min() > 0  # the checkpoint's right taps are non-trivial

    causal = gdn.conv(rows, ring, right=False)
    preview = gdn.conv(rows, ring, right=True)
    assert (causal.double() - _reference_conv(rows, ring, gdn.conv1d.weight, None)).abs().max() <= 1e-5
    assert (preview.double() - _reference_conv(rows, ring, gdn.conv1d.weight, gdn.conv_right_weight)).abs().max() <= 1e-5
    assert (preview - causal).abs().max() > 1e-3

    # right taps zero: the preview conv is the causal conv
    zeroed = copy.deepcopy(gdn)
    with torch.no_grad():
        zeroed.conv_right_weight.zero_()
    assert torch.allclose(zeroed.conv(rows, ring, right=True), causal, atol=1e-6)

    # row t sees rows t+1..t+3 through the right taps, and nothing further
    t = 2
    far = rows.clone()
    far[:, t + 4 :] += torch.randn(1, bs - t - 4, c, generator=g)
    assert torch.allclose(gdn.conv(far, ring, right=True)[:, : t + 1], preview[:, : t + 1], atol=1e-6)
    for d in (1, 2, 3):
        near = rows.clone()
        near[:, t + d] += torch.randn(c, generator=g)
        out = gdn.conv(near, ring, right=True)
        assert (out[:, t] - preview[:, t]).abs().max() > 1e-4
        assert torch.allclose(out[:, : t + d - 3].reshape(-1), preview[:, : t + d - 3].reshape(-1), atol=1e-6)
        # the causal conv never looks ahead
        assert torch.allclose(gdn.conv(near, ring, right=False)[:, : t + d], causal[:, : t + d], atol=1e-6)
    # the last row has nothing to its right: only its own causal window matters
    last = rows.clone()
    last[:, : bs - 4] += 1.0
    assert torch.allclose(gdn.conv(last, ring, right=True)[:, -1], preview[:, -1], atol=1e-6)


# ---------------------------------------------------------------------------------------------- mixers in preview


def test_attention_preview_is_bidirectional_causal_is_not(model):
    bs = model.config.diffusion.block_size
    idx = next(i for i, l in enumerate(model.layers) if l.is_attention)
    attn = model.layers[idx].self_attn
    cache = _prefilled(model, _ids(model, PREFIX, 12))
    layer_cache = cache.layers[idx]
    g = torch.Generator().manual_seed(13)
    x = torch.randn(1, bs, model.config.hidden_size, generator=g)
    cos, sin = model.rotary.cos_sin(torch.arange(PREFIX, PREFIX + bs), torch.float32)
    x2 = x.clone()
    x2[:, -1] += torch.randn(model.config.hidden_size, generator=g)
    with torch.no_grad():
        p1 = attn(x, cos, sin, layer_cache, preview=True)
        p2 = attn(x2, cos, sin, layer_cache, preview=True)
        assert layer_cache.length == PREFIX
        c1 = attn(x, cos, sin, copy.deepcopy(layer_cache), preview=False)
        c2 = attn(x2, cos, sin, copy.deepcopy(layer_cache), preview=False)
    assert (p1[:, 0] - p2[:, 0]).abs().max() > 1e-4  # the first row sees the last one in preview
    assert torch.allclose(c1[:, :-1], c2[:, :-1], atol=1e-6)  # ... and not in the causal pass
    assert (c1[:, -1] - c2[:, -1]).abs().max() > 1e-4
    # in preview each row also sees the cached prefix: a different prefix changes row 0
    other = _prefilled(model, _ids(model, PREFIX, 14)).layers[idx]
    with torch.no_grad():
        p3 = attn(x, cos, sin, other, preview=True)
    assert (p1[:, 0] - p3[:, 0]).abs().max() > 1e-4


def test_gdn_preview_depends_on_prefix_through_cache(model):
    bs = model.config.diffusion.block_size
    idx = next(i for i, l in enumerate(model.layers) if not l.is_attention)
    # The tiny checkpoint's decays are fast (exp(A_log) in [1, 16]), so an early token's trace in S is below fp32
    # resolution; a copy with slow decays lets a token before the conv ring reach the preview through S alone.
    slow = copy.deepcopy(model)
    for layer in _gdn_layers(slow):
        with torch.no_grad():
            layer.linear_attn.A_log.fill_(math.log(0.05))
    prefix = _ids(model, PREFIX, 15)
    g = torch.Generator().manual_seed(16)
    x = torch.randn(1, bs, model.config.hidden_size, generator=g)
    for m, positions in ((slow, (2, PREFIX - 1)), (model, (PREFIX - 1,))):
        gdn = m.layers[idx].linear_attn
        outs = []
        for pos in (None, *positions):  # 2: state only (outside the ring); PREFIX - 1: ring and state
            p = prefix.clone()
            if pos is not None:
                p[0, pos] = (p[0, pos] + 1) % model.config.vocab_size
            cache = _prefilled(m, p).layers[idx]
            assert isinstance(cache, GDNCache)
            with torch.no_grad():
                outs.append(gdn(x, cache, preview=True, n_prefix=PREFIX))
        for other in outs[1:]:
            assert (outs[0] - other).abs().max() > 1e-4
    # with no prefix, the empty cache gives the same preview as no cache at all
    gdn = model.layers[idx].linear_attn
    with torch.no_grad():
        a = gdn(x, GDNCache(), preview=True, n_prefix=0)
        b = gdn(x, None, preview=True, n_prefix=0)
    assert torch.equal(a, b)
    assert (a - outs[0]).abs().max() > 1e-4


# ---------------------------------------------------------------------------------------------- training form


def test_forward_all_blocks_equals_block_by_block_decoding(model):
    bs = model.config.diffusion.block_size
    nb, batch = 3, 2
    clean = _ids(model, nb * bs, 20, batch)
    noisy = _ids(model, nb * bs, 21, batch)
    mask_id = model.config.diffusion.mask_token_id
    drop = torch.rand(batch, nb * bs, generator=torch.Generator().manual_seed(22)) < 0.5
    noisy = torch.where(drop, torch.full_like(noisy, mask_id), noisy)
    with torch.no_grad():
        h_clean, h_noisy = model.forward_all_blocks(clean, noisy)
        full = model.hidden(clean)
        assert h_clean.shape == h_noisy.shape == (batch, nb * bs, model.config.hidden_size)
        assert (h_clean - full).abs().max().item() <= 1e-4
        for j in range(nb):
            cache = model.new_cache()
            if j:
                model.hidden(clean[:, : j * bs], cache)
            step = model.hidden(noisy[:, j * bs : (j + 1) * bs], cache, preview=True)
            assert cache.length == j * bs
            assert (h_noisy[:, j * bs : (j + 1) * bs] - step).abs().max().item() <= 1e-4, f"block {j}"
            # a single-sequence run agrees with the batched one (batch rows are not mixed up)
            single = model.new_cache()
            if j:
                model.hidden(clean[1:, : j * bs], single)
            step1 = model.hidden(noisy[1:, j * bs : (j + 1) * bs], single, preview=True)
            assert (h_noisy[1:, j * bs : (j + 1) * bs] - step1).abs().max().item() <= 1e-4
    assert (h_noisy - h_clean).abs().max() > 1e-3
    with pytest.raises(ValueError):
        model.forward_all_blocks(clean[:, :-1], noisy[:, :-1])
    # previewing only some blocks (training skips those without a masked position) gives those blocks' states
    blocks = torch.tensor([[False, True, True], [True, False, True]])
    with torch.no_grad():
        h_clean2, some = model.forward_all_blocks(clean, noisy, blocks)
    assert some.shape == (4, bs, model.config.hidden_size)
    assert torch.allclose(h_clean2, h_clean, atol=1e-5)
    expected = h_noisy.view(batch, nb, bs, -1)[blocks]
    assert (some - expected).abs().max().item() <= 1e-4
