"""Mutation-audit tests for the two token mixers, clover_local/model/gdn.py and attention.py: each pins a behaviour
that a small mutation of the code could break without the parity oracle or the preview tests noticing (the chunked
form across chunk boundaries and padding, the conv ring of short first passes, fp32 inside the GDN core for
low-precision inputs, the runtime's tensor prefix length). Random inputs, tiny shapes.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from clover_local.model.cache import GDNCache
from clover_local.model.clover import load_model
from clover_local.model.gdn import chunk_delta_rule, l2_normalize, recurrent_delta_rule
from tests.conftest import checkpoint_with_tokenizer


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer_dir):
    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("mixer_audit_ckpt"), tokenizer_dir, seed=41)
    return load_model(folder, dtype=torch.float32)


def _gdn(model):
    return next(layer for layer in model.layers if not layer.is_attention).linear_attn


def _rule_inputs(seed: int, b: int = 2, t: int = 37, h: int = 3, dk: int = 5, dv: int = 6):
    """Delta-rule inputs as the layer makes them: q, k unit rows (q scaled), decays in (-1, 0), β in (0, 1), and
    a non-zero starting state."""
    g = torch.Generator().manual_seed(seed)
    q = l2_normalize(torch.randn(b, t, h, dk, generator=g)) * dk**-0.5
    k = l2_normalize(torch.randn(b, t, h, dk, generator=g))
    v = torch.randn(b, t, h, dv, generator=g)
    decay = -F.softplus(torch.randn(b, t, h, generator=g) - 1.0).clamp(max=1.0)
    beta = torch.rand(b, t, h, generator=g) * 0.9 + 0.05
    state = torch.randn(b, h, dk, dv, generator=g)
    return q, k, v, decay, beta, state


def _per_token(q, k, v, g, beta, state):
    """The documented per-token update in float64: S ← S·e^g; S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq. Also returns
    the state before every token."""
    q, k, v, g, beta, s = (x.double() for x in (q, k, v, g, beta, state))
    outs, before = [], []
    for t in range(q.shape[1]):
        before.append(s)
        s = s * g[:, t].exp()[..., None, None]
        delta = beta[:, t][..., None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", s, k[:, t]))
        s = s + torch.einsum("bhk,bhv->bhkv", k[:, t], delta)
        outs.append(torch.einsum("bhkv,bhk->bhv", s, q[:, t]))
    return torch.stack(outs, 1), s, before


# ---------------------------------------------------------------------------------------------- the delta rule


@pytest.mark.parametrize("t_len,chunk", [(37, 8), (32, 8), (5, 8), (70, 64)])
def test_chunked_form_is_the_per_token_rule_across_chunk_boundaries(t_len, chunk):
    """`chunk_delta_rule` (several chunks, the last one padded or not, or one short chunk) and
    `recurrent_delta_rule` both give the documented per-token outputs and final state from a non-zero start, and
    `chunk_states` are the states at each chunk's first token."""
    q, k, v, g, beta, state = _rule_inputs(t_len + chunk, t=t_len)
    want_o, want_s, before = _per_token(q, k, v, g, beta, state)
    assert want_o.abs().max() > 0.1 and (want_s - state.double()).abs().max() > 0.1
    o, s, states = chunk_delta_rule(q, k, v, g, beta, state.clone(), chunk=chunk, chunk_states=True)
    assert o.dtype == s.dtype == torch.float32 and o.shape == v.shape
    assert (o.double() - want_o).abs().max().item() <= 1e-4
    assert (s.double() - want_s).abs().max().item() <= 1e-4
    n = -(-t_len // chunk)
    assert states.shape == (q.shape[0], n, q.shape[2], q.shape[3], v.shape[3])
    for i in range(n):
        assert (states[:, i].double() - before[i * chunk]).abs().max().item() <= 1e-4, i
    o_r, s_r = recurrent_delta_rule(q, k, v, g, beta, state.clone())
    assert (o_r.double() - want_o).abs().max().item() <= 1e-4
    assert (s_r.double() - want_s).abs().max().item() <= 1e-4


def test_the_delta_rules_compute_in_fp32_from_bf16_inputs():
    """The core runs in fp32 whatever its inputs (a bf16 model's v, a caller's bf16 q/k/gates): the same answer
    as from the fp32 copies of those inputs, in fp32."""
    q, k, v, g, beta, state = _rule_inputs(3, t=9)
    low = [x.to(torch.bfloat16) for x in (q, k, v, g, beta)]
    up = [x.float() for x in low]
    for fn in (recurrent_delta_rule, lambda *a: chunk_delta_rule(*a, chunk=4)[:2]):
        o, s = fn(*low, state.clone())
        o_ref, s_ref = fn(*up, state.clone())
        assert o.dtype == s.dtype == torch.float32
        assert torch.allclose(o, o_ref, atol=1e-6) and torch.allclose(s, s_ref, atol=1e-6)


def test_split_heads_normalises_q_and_k_in_fp32(model):
    """A bf16 layer's q̂, k̂ are normalised from the fp32 rows (normalising in bf16 leaves rows ~5e-3 off unit
    length): fp32, unit rows, the fp32 normalisation exactly."""
    gdn = copy.deepcopy(_gdn(model)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(4)
    mixed = (torch.randn(2, 6, gdn.conv1d.weight.shape[0], generator=g) * 3).to(torch.bfloat16)
    q, k, v = gdn.split_heads(mixed)
    assert q.dtype == k.dtype == torch.float32 and v.dtype == torch.bfloat16
    kd = gdn.hk * gdn.dk
    rep = gdn.hv // gdn.hk
    want_q = l2_normalize(mixed[..., :kd].float().reshape(2, 6, gdn.hk, gdn.dk)).repeat_interleave(rep, 2)
    want_k = l2_normalize(mixed[..., kd : 2 * kd].float().reshape(2, 6, gdn.hk, gdn.dk)).repeat_interleave(rep, 2)
    assert torch.equal(q, want_q) and torch.equal(k, want_k)
    assert (q.norm(dim=-1) - 1).abs().max() < 1e-5


# ---------------------------------------------------------------------------------------------- the layer


def test_gdn_causal_passes_of_any_length_from_an_empty_cache_equal_one_pass(model):
    """Short first passes (fewer rows than the conv ring holds: a one-token prompt) and longer ones after them
    give one pass's rows; the ring left is the last kernel-1 pre-conv rows, the state one pass's."""
    gdn = _gdn(model)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 16, model.config.hidden_size, generator=g)
    with torch.no_grad():
        whole_cache = GDNCache()
        whole = gdn(x, whole_cache, preview=False, n_prefix=0)
        for cuts in ((1, 2, 3, 16), (2, 3, 4, 9, 16), (1, 16)):
            cache, parts, start = GDNCache(), [], 0
            for end in cuts:
                parts.append(gdn(x[:, start:end], cache, preview=False, n_prefix=start))
                if end < gdn.kernel - 1:  # the ring: zeros before the first row, then the rows so far
                    assert cache.ring.shape == (1, gdn.kernel - 1, gdn.in_proj_qkv.out_features)
                    assert (cache.ring[:, : gdn.kernel - 1 - end] == 0).all()
                start = end
            assert (torch.cat(parts, 1) - whole).abs().max().item() <= 1e-5, cuts
            assert torch.allclose(cache.ring, gdn.in_proj_qkv(x[:, -(gdn.kernel - 1) :]), atol=1e-6)
            assert torch.allclose(cache.ring, whole_cache.ring) and torch.allclose(cache.state, whole_cache.state,
                                                                                   atol=1e-5)


def test_gdn_long_causal_pass_crosses_chunks_like_short_ones(model):
    """A causal pass longer than the 64-row chunk and not a multiple of it (a prompt) equals passes that never
    cross a chunk boundary, after a non-trivial prefix."""
    gdn = _gdn(model)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 150, model.config.hidden_size, generator=g)
    with torch.no_grad():
        a = GDNCache()
        gdn(x[:, :5], a, preview=False, n_prefix=0)
        long = gdn(x[:, 5:], a, preview=False, n_prefix=5)
        b, parts = GDNCache(), []
        for start in range(0, 150, 5):
            parts.append(gdn(x[:, start : start + 5], b, preview=False, n_prefix=start))
    assert (long - torch.cat(parts[1:], 1)).abs().max().item() <= 1e-4
    assert (a.state - b.state).abs().max().item() <= 1e-4 and torch.equal(a.ring, b.ring)


def test_gdn_preview_takes_the_runtimes_tensor_prefix_length_as_the_int(model):
    """The runtime hands n_prefix as a 0-dim tensor (a CUDA graph reads it): the same preview as the int, for each
    row of a batch."""
    gdn = _gdn(model)
    g = torch.Generator().manual_seed(7)
    bs = model.config.diffusion.block_size
    x = torch.randn(2, bs, model.config.hidden_size, generator=g)
    ring = torch.randn(2, gdn.kernel - 1, gdn.in_proj_qkv.out_features, generator=g)
    state = torch.randn(2, gdn.hv, gdn.dk, gdn.dv, generator=g)
    with torch.no_grad():
        hist = copy.deepcopy(gdn)
        hist.bd_softmax_history_c.copy_(torch.randn(gdn.hv, generator=g))  # the prefix length matters
        as_int = hist(x, GDNCache(ring, state), preview=True, n_prefix=21)
        as_tensor = hist(x, GDNCache(ring, state), preview=True, n_prefix=torch.tensor(21))
        other = hist(x, GDNCache(ring, state), preview=True, n_prefix=22)
    assert torch.equal(as_int, as_tensor)
    assert (as_int - other).abs().max() > 1e-5


def test_gdn_preview_of_a_partial_block_reads_the_history_at_the_block_size(model):
    """The history logit is ln(n_prefix / block_size) with the configured block size, whatever the number of rows
    previewed."""
    from clover_local.model.gdn import preview_mix

    gdn = copy.deepcopy(_gdn(model))
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        gdn.bd_softmax_history_c.copy_(torch.randn(gdn.hv, generator=g) * 2)
        x = torch.randn(1, 5, model.config.hidden_size, generator=g)
        ring = torch.randn(1, gdn.kernel - 1, gdn.in_proj_qkv.out_features, generator=g)
        state = torch.randn(1, gdn.hv, gdn.dk, gdn.dv, generator=g)
        got = gdn(x, GDNCache(ring, state), preview=True, n_prefix=13)
        q, k, v = gdn.split_heads(gdn.conv(gdn.in_proj_qkv(x), ring, right=True))
        o = preview_mix(q, k, v, state, gdn.bd_softmax_logit_scale, gdn.bd_softmax_history_bias,
                        gdn.bd_softmax_history_c, torch.tensor([13]), model.config.diffusion.block_size)
        want = gdn.output(o, x)
    assert x.shape[1] != model.config.diffusion.block_size
    assert torch.allclose(got, want, atol=1e-6)


def test_gdn_conv_rounds_a_wider_ring_to_the_rows_dtype(model):
    """A ring kept wider than the rows (an fp32 copy beside a bf16 layer) is read rounded to the rows' dtype: the
    conv's output stays in that dtype, equal to the conv over the rounded ring."""
    gdn = copy.deepcopy(_gdn(model)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(9)
    c = gdn.in_proj_qkv.out_features
    rows = torch.randn(1, 6, c, generator=g).to(torch.bfloat16)
    ring = torch.randn(1, gdn.kernel - 1, c, generator=g)
    for right in (False, True):
        out = gdn.conv(rows, ring, right)
        assert out.dtype == torch.bfloat16
        assert torch.equal(out, gdn.conv(rows, ring.to(torch.bfloat16), right))
