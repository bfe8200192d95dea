"""Mutation-audit tests for clover_local/model and clover_local/loader: each pins a behaviour that a small
mutation of the code could break without any other test noticing (noising ratios, gated-norm rounding, routing
restriction, the grouped expert path, backbone defaults, tied embeddings, cache bounds). Random inputs, fp32,
tiny shapes.
"""

from __future__ import annotations

import pytest
import torch

from clover_local.model.clover import CloverModel, load_model
from clover_local.model.moe import Experts, restrict_logits
from clover_local.model.noising import mask_blocks
from clover_local.model.norm import GatedRMSNorm
from tests.conftest import checkpoint_with_tokenizer


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tokenizer_dir):
    return checkpoint_with_tokenizer(tmp_path_factory.mktemp("audit_ckpt"), tokenizer_dir, seed=31)


@pytest.fixture(scope="module")
def model(folder):
    return load_model(folder, dtype=torch.float32)


def _ids(model, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- noising


def test_mask_blocks_masks_each_block_at_its_own_ratio_floored_at_5_percent():
    """Each block draws one ratio, uniform in [0.05, 1]: whole blocks are nearly clean or nearly all masks, none
    below the floor; the noisy ids are the mask exactly where `masked` says, the clean ids elsewhere."""
    gen = torch.Generator().manual_seed(3)
    n, nb, bs, mask_id = 2, 200, 1024, 100
    clean = torch.randint(0, mask_id, (n, nb * bs), generator=torch.Generator().manual_seed(4))
    noisy, masked = mask_blocks(clean, bs, mask_id, gen)
    assert masked.dtype == torch.bool and masked.shape == clean.shape
    assert torch.equal(noisy[masked], torch.full_like(noisy[masked], mask_id))
    assert torch.equal(noisy[~masked], clean[~masked])
    frac = masked.view(n, nb, bs).float().mean(-1)
    assert frac.max() > 0.9 and frac.min() < 0.1  # each block at its own ratio, not one mixed ratio per block
    assert (frac < 0.03).sum() == 0  # the 5 % floor (std of a block's fraction at 5 %: 0.007)
    assert (frac < 0.07).sum() >= 5  # ... and blocks at the floor exist (≈ 7 % of 400 expected)


def test_mask_blocks_never_masks_what_is_not_maskable():
    gen = torch.Generator().manual_seed(5)
    clean = torch.randint(0, 50, (3, 8 * 64), generator=torch.Generator().manual_seed(6))
    maskable = torch.rand(clean.shape, generator=torch.Generator().manual_seed(7)) < 0.5
    noisy, masked = mask_blocks(clean, 64, 50, gen, maskable)
    assert not (masked & ~maskable).any()
    assert masked.sum() > 0.2 * maskable.sum()  # still masking among the maskable positions
    assert torch.equal(noisy[~maskable], clean[~maskable])


# ---------------------------------------------------------------------------------------------- norms


def test_gated_norm_rounds_the_fp32_mix_to_the_gates_dtype_first():
    """`GatedRMSNorm`: x (the GDN's fp32 mix) is rounded to the gate's dtype before the norm, as the backbone
    rounds its core output to the activation dtype: a bf16 model gives the same output from either."""
    g = torch.Generator().manual_seed(8)
    norm = GatedRMSNorm(64)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64, generator=g) + 0.5)
    norm = norm.to(torch.bfloat16)
    x = torch.randn(4, 16, 64, generator=g) * 3
    gate = torch.randn(4, 16, 64, generator=g).to(torch.bfloat16)
    out = norm(x, gate)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, norm(x.to(torch.bfloat16), gate))


# ---------------------------------------------------------------------------------------------- routing


def test_restrict_logits_keeps_the_allowed_experts_slot_zero_included():
    """`allowed` is a slot table: any entry >= 0 (slot 0 too) is resident, -1 is not; the others go to -inf and
    nothing else changes."""
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(5, 6, generator=g)
    allowed = torch.tensor([0, -1, 3, -1, 1, 2])
    out = restrict_logits(logits, allowed, top_k=2)
    ok = allowed >= 0
    assert torch.equal(out[:, ok], logits[:, ok])
    assert torch.isneginf(out[:, ~ok]).all()


def test_restrict_logits_with_fewer_allowed_than_top_k_changes_nothing():
    g = torch.Generator().manual_seed(10)
    logits = torch.randn(4, 6, generator=g)
    allowed = torch.tensor([-1, -1, 5, -1, -1, -1])
    assert torch.equal(restrict_logits(logits, allowed, top_k=2), logits)


def test_restrict_logits_counts_each_rows_top_k_experts_it_took_away():
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(7, 6, generator=g)
    allowed = torch.tensor([2, -1, 0, -1, 1, -1])
    wanted = torch.zeros(6, dtype=torch.int32)
    restrict_logits(logits, allowed, top_k=3, wanted=wanted)
    expected = torch.zeros(6, dtype=torch.int32)
    for row in logits:
        for e in row.topk(3).indices.tolist():
            expected[e] += int(allowed[e] < 0)
    assert expected.sum() > 0
    assert torch.equal(wanted, expected)


def test_the_grouped_expert_path_equals_the_per_expert_loop():
    """Training on the CPU runs the experts as grouped matmuls (grad enabled), inference as one matmul per expert:
    the same sums, weights included."""
    g = torch.Generator().manual_seed(12)
    n_exp, hidden, inter, rows, k = 6, 16, 8, 20, 2
    experts = Experts(n_exp, hidden, inter)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.randn(n_exp, 2 * inter, hidden, generator=g) * 0.3)
        experts.down_proj.copy_(torch.randn(n_exp, hidden, inter, generator=g) * 0.3)
    x = torch.randn(rows, hidden, generator=g)
    idx = torch.stack([torch.randperm(n_exp - 1, generator=g)[:k] for _ in range(rows)])  # expert 5 never hit
    weights = torch.rand(rows, k, generator=g) + 0.1
    with torch.no_grad():
        looped = experts(x, idx, weights)
    grouped = experts(x, idx, weights)
    assert grouped.requires_grad
    expected = torch.zeros(rows, hidden)
    for r in range(rows):
        for j in range(k):
            gu = experts.gate_up_proj[idx[r, j]].detach() @ x[r]
            h = torch.nn.functional.silu(gu[:inter]) * gu[inter:]
            expected[r] += weights[r, j] * (experts.down_proj[idx[r, j]].detach() @ h)
    assert expected.abs().max() > 1e-2
    assert torch.allclose(looped, expected, atol=1e-5)
    assert torch.allclose(grouped.detach(), expected, atol=1e-5)


# ---------------------------------------------------------------------------------------------- passes


def test_a_merged_pass_of_zero_commit_rows_is_refused_and_leaves_the_cache(model):
    """Zero commit rows is no merged pass: it would run the preview's rows as a causal pass and commit them."""
    bs = model.config.diffusion.block_size
    cache = model.new_cache()
    with torch.no_grad():
        model(_ids(model, 11, 13), cache)
        before = [t.clone() for t in cache.tensors()]
        with pytest.raises(ValueError, match="merged pass"):
            model.commit_and_preview(_ids(model, 0, 14), _ids(model, bs, 15), cache)
    assert cache.length == 11
    assert all(torch.equal(a, b) for a, b in zip(before, cache.tensors(), strict=True))


# ---------------------------------------------------------------------------------------------- loading


def _without_extras(folder, out):
    """A copy of `folder` as a plain Qwen3.5 backbone: no block-diffusion extras."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    tensors = load_file(str(out / "model.safetensors"))
    plain = {k: v for k, v in tensors.items()
             if not k.endswith(("conv_right_weight", "bd_softmax_logit_scale", "bd_softmax_history_bias",
                                "bd_softmax_history_c"))}
    assert len(plain) < len(tensors)
    save_file(plain, str(out / "model.safetensors"))
    return out


def test_a_backbone_without_the_preview_extras_gets_neutral_ones(folder, tmp_path):
    """No right taps, unit logit scale, no history preference; and the model says it lacks them."""
    plain = load_model(_without_extras(folder, tmp_path / "plain"), dtype=torch.float32)
    assert not plain.has_preview_params
    assert load_model(folder, dtype=torch.float32).has_preview_params
    gdns = [layer.linear_attn for layer in plain.layers if not layer.is_attention]
    assert gdns
    for gdn in gdns:
        assert torch.equal(gdn.conv_right_weight, torch.zeros_like(gdn.conv_right_weight))
        assert torch.equal(gdn.bd_softmax_logit_scale, torch.ones(gdn.hv))
        assert torch.equal(gdn.bd_softmax_history_bias, torch.zeros(gdn.hv))
        assert torch.equal(gdn.bd_softmax_history_c, torch.zeros(gdn.hv))
        rows = torch.randn(1, 6, gdn.conv1d.weight.shape[0], generator=torch.Generator().manual_seed(16))
        assert torch.equal(gdn.conv(rows, None, right=True), gdn.conv(rows, None, right=False))


def _tied(folder, out):
    """A copy of `folder` whose LM head is the embedding table (tie_word_embeddings, no lm_head tensor)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    raw = json.loads((out / "config.json").read_text())
    raw["tie_word_embeddings"] = True
    (out / "config.json").write_text(json.dumps(raw))
    tensors = load_file(str(out / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_tied_embeddings_load_as_the_head_and_are_counted_once(folder, tmp_path):
    tied = load_model(_tied(folder, tmp_path / "tied"), dtype=torch.float32)
    cfg = tied.config
    assert cfg.tie_word_embeddings
    ids = _ids(tied, 9, 17)
    with torch.no_grad():
        logits = tied(ids)
        expected = (tied.hidden(ids) @ tied.embed_tokens.weight.T).float()
    assert logits.abs().max() > 1e-3
    assert torch.allclose(logits, expected, atol=1e-5)
    untied = load_model(folder, dtype=torch.float32).config
    table = cfg.vocab_size * cfg.hidden_size * 2
    assert CloverModel.weight_bytes(cfg, torch.bfloat16) == CloverModel.weight_bytes(untied, torch.bfloat16) - table


# ---------------------------------------------------------------------------------------------- cache


def test_attention_cache_keeps_every_row_across_growth_and_bounds_truncation():
    """Appends past the first buffer (64 rows) keep the earlier keys AND values; truncation goes to any length
    from 0 to the current one, never beyond or below."""
    from clover_local.model.cache import AttentionCache

    g = torch.Generator().manual_seed(18)
    parts = [(torch.randn(1, 2, n, 4, generator=g), torch.randn(1, 2, n, 4, generator=g)) for n in (40, 30, 70)]
    cache = AttentionCache()
    for k, v in parts:
        cache.append(k, v)
    k_all, v_all = cache.keys_values()
    assert torch.equal(k_all, torch.cat([k for k, _ in parts], 2))
    assert torch.equal(v_all, torch.cat([v for _, v in parts], 2))
    cache.truncate(140)  # its own length: allowed
    assert cache.length == 140
    for bad in (141, -1):
        with pytest.raises(ValueError):
            cache.truncate(bad)
    cache.truncate(0)
    assert cache.keys_values() is None


# ---------------------------------------------------------------------------------------------- loader


def test_a_negative_mask_token_id_is_outside_the_vocabulary(folder):
    from types import SimpleNamespace

    from clover_local.config import load_config
    from clover_local.errors import CloverError
    from clover_local.loader import resolve_mask_token

    cfg = load_config(folder)
    cfg.diffusion.mask_token_id = -1
    with pytest.raises(CloverError, match="mask_token_id -1 is outside the vocabulary"):
        resolve_mask_token(cfg, SimpleNamespace(mask_token_id=None))
    cfg.diffusion.mask_token_id = 0  # the first id is inside it
    assert resolve_mask_token(cfg, SimpleNamespace(mask_token_id=5)) == 0


def test_load_refuses_a_runtime_that_is_neither_none_auto_nor_options(folder):
    from clover_local.loader import load

    with pytest.raises(ValueError, match="runtime must be None"):
        load(str(folder), "cpu", "float32", runtime="offload")


def test_asking_for_cuda_without_a_gpu_is_refused(monkeypatch):
    from clover_local.errors import CloverError
    from clover_local.loader import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CloverError, match="no CUDA GPU is available"):
        pick_device("cuda")
    assert pick_device(None) == torch.device("cpu")
    with pytest.raises(CloverError, match="is not a device"):
        pick_device("gpu0")


def test_weights_that_exactly_fit_the_free_memory_are_not_refused(folder, monkeypatch):
    """Only what the weights alone need is compared, so nothing that could load is refused: need == free loads."""
    from clover_local.config import load_config
    from clover_local.loader import _whole_load_refusal
    from clover_local.runtime import sizes

    cfg = load_config(folder)
    need = CloverModel.weight_bytes(cfg, torch.float32)
    cpu = torch.device("cpu")
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: need)
    assert _whole_load_refusal("m", cfg, False, cpu, torch.float32) == ""
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: need - 1)
    assert "needs" in _whole_load_refusal("m", cfg, False, cpu, torch.float32)


# ---------------------------------------------------------------------------------------------- more passes


def test_short_causal_passes_after_a_prefix_equal_one_pass(model):
    """Causal passes of 2 and 3 rows after a cached prefix (each row masked from the ones after it) give the
    rows of one pass over everything."""
    ids = _ids(model, 16, 19)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        parts = [model(ids[:, :11], cache), model(ids[:, 11:13], cache), model(ids[:, 13:16], cache)]
    assert cache.length == 16
    assert (torch.cat(parts, 1) - full).abs().max().item() <= 1e-4


def test_window_attention_masks_the_keys_its_window_leaves_out(model):
    """`Attention.window_heads` with a window mask (the runtime's fixed-size arena): the rows attend to the
    window's unmasked keys only, exactly as over those keys alone; in a preview to all of the block's own rows,
    in a commit causally."""
    attn = next(layer for layer in model.layers if layer.is_attention).self_attn
    g = torch.Generator().manual_seed(20)
    hkv, d, t, w = attn.n_kv, attn.head_dim, 5, 9
    q = torch.randn(1, attn.n_heads, t, d, generator=g)
    k, v = torch.randn(1, hkv, t, d, generator=g), torch.randn(1, hkv, t, d, generator=g)
    kw, vw = torch.randn(1, hkv, w, d, generator=g), torch.randn(1, hkv, w, d, generator=g)
    gate = torch.randn(1, t, attn.n_heads, d, generator=g)
    keep = torch.tensor([True, False, True, True, False, False, True, False, True])
    for causal in (False, True):
        got = attn.window_heads(q, k, v, gate, (kw, vw, keep), causal)
        want = attn.window_heads(q, k, v, gate, (kw[:, :, keep], vw[:, :, keep], None), causal)
        assert torch.allclose(got, want, atol=1e-5), causal
    preview = attn.window_heads(q, k, v, gate, (kw, vw, keep), False)
    commit = attn.window_heads(q, k, v, gate, (kw, vw, keep), True)
    assert torch.allclose(preview[:, -1], commit[:, -1], atol=1e-5)  # the last row sees every row either way
    assert (preview[:, 0] - commit[:, 0]).abs().max() > 1e-3  # the first sees only itself in a commit


def test_preview_mix_gradients_stay_finite_for_a_block_without_prefix():
    """Training previews block 0 of every sequence with no prefix (n_prefix = 0): its empty history slot must not
    turn the gradients of the history parameters into NaN (ln 0 times a zero gradient)."""
    from clover_local.model.gdn import l2_normalize, preview_mix

    g = torch.Generator().manual_seed(21)
    bsz, t, hv, dk, dv = 2, 4, 3, 4, 5
    q = l2_normalize(torch.randn(bsz, t, hv, dk, generator=g))
    k = l2_normalize(torch.randn(bsz, t, hv, dk, generator=g))
    v, state = torch.randn(bsz, t, hv, dv, generator=g), torch.randn(bsz, hv, dk, dv, generator=g)
    scale = (torch.rand(hv, generator=g) + 1).requires_grad_()
    bias, c = torch.randn(hv, generator=g).requires_grad_(), torch.randn(hv, generator=g).requires_grad_()
    out = preview_mix(q, k, v, state, scale, bias, c, torch.tensor([0, 24]), block_size=8)
    (out * torch.randn(out.shape, generator=g)).sum().backward()
    for p in (scale, bias, c):
        assert torch.isfinite(p.grad).all()
        assert p.grad.abs().max() > 1e-4


# ---------------------------------------------------------------------------------------------- more cache


def test_restore_refuses_a_snapshot_of_another_cache():
    """A snapshot longer than the cache, or of another set of GDN layers, is refused before anything changes."""
    from clover_local.model.cache import GDNCache, PrefixCache

    g = torch.Generator().manual_seed(22)
    types = ["linear_attention", "full_attention", "linear_attention"]
    cache = PrefixCache.empty(types)
    for c in cache.layers:
        if isinstance(c, GDNCache):
            c.update(torch.randn(1, 3, 6, generator=g), torch.randn(1, 2, 4, 4, generator=g))
        else:
            c.append(torch.randn(1, 2, 10, 4, generator=g), torch.randn(1, 2, 10, 4, generator=g))
    cache.length = 10
    snap = cache.snapshot()
    assert snap.nbytes == sum(t.numel() * t.element_size() for c in cache.layers if isinstance(c, GDNCache)
                              for t in (c.ring, c.state))
    other = PrefixCache.empty(types + ["linear_attention"])  # a GDN layer the snapshot lacks
    other.layers[1].append(torch.randn(1, 2, 10, 4, generator=g), torch.randn(1, 2, 10, 4, generator=g))
    other.length = 10
    with pytest.raises(ValueError, match="was not taken from this"):
        other.restore(snap)
    cache.layers[1].truncate(9)
    cache.length = 9
    with pytest.raises(ValueError, match="was not taken from this"):
        cache.restore(snap)
    assert cache.length == 9 and cache.layers[1].length == 9


def test_a_chained_attention_cache_hands_its_appends_back():
    """`chained`/`adopt` (a long pass layer by layer): what the chained copy appended is the cache's after adopt."""
    from clover_local.model.cache import AttentionCache

    g = torch.Generator().manual_seed(23)
    cache = AttentionCache()
    cache.append(torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 4, generator=g))
    own = cache.chained()
    k, v = torch.randn(1, 2, 7, 4, generator=g), torch.randn(1, 2, 7, 4, generator=g)
    own.append(k, v)
    cache.adopt(own)
    assert cache.length == 12
    assert torch.equal(cache.keys_values()[0][:, :, 5:], k) and torch.equal(cache.keys_values()[1][:, :, 5:], v)


def test_a_local_folder_shaped_like_a_repo_id_is_not_a_hub_id(tmp_path, monkeypatch):
    """`org/model` that exists here is a local folder: no Hub look-up before loading it."""
    from clover_local.loader import is_hub_id

    monkeypatch.chdir(tmp_path)
    assert is_hub_id("org/model")
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert not is_hub_id("org/model")
