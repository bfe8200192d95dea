"""Block-diffusion decoding (`BlockDiffusionDecoder`) on tiny random checkpoints: reveal rules, stops, limits,
sampling, shifted logits and the event stream. fp32 on CPU.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from clover_local.errors import CloverError
from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
from clover_local.generate.events import BlockCommitted, Finished, PassDone
from clover_local.generate.sampling import choose, pick_reveals
from clover_local.loader import load, resolve_mask_token
from clover_local.model.clover import load_model

BS = 8  # TinySpec's block size


@pytest.fixture
def loaded(make_checkpoint):
    return load(str(make_checkpoint(seed=21)), device="cpu", dtype="float32")


def run(loaded, prompt, **settings):
    """(events, Finished) of one decode."""
    settings.setdefault("stop_token_ids", [])
    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    events = list(decoder.generate(prompt, DecodeSettings(**settings)))
    assert isinstance(events[-1], Finished)
    assert not any(isinstance(e, Finished) for e in events[:-1])
    return events, events[-1]


def prompt_ids(loaded, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = loaded.config.vocab_size
    ids = torch.randint(0, vocab, (n,), generator=g).tolist()
    return [i if i != loaded.mask_token_id else 0 for i in ids]


def passes(events):
    return [e for e in events if isinstance(e, PassDone)]


def commits(events):
    return [e for e in events if isinstance(e, BlockCommitted)]


def check_event_invariants(events, fin):
    committed = [t for e in commits(events) for t in e.token_ids]
    assert committed == fin.token_ids
    assert fin.stats.tokens == len(fin.token_ids)
    assert fin.stats.passes == len(passes(events))
    assert [e.block for e in commits(events)] == list(range(len(commits(events))))
    for e in commits(events):
        assert e.passes == sum(1 for p in passes(events) if p.block == e.block)


# ---------------------------------------------------------------------------------------------- basics


def test_mask_token_resolution(loaded):
    assert loaded.mask_token_id == resolve_mask_token(loaded.config, loaded.tokenizer)
    assert loaded.mask_token_id == loaded.tokenizer.token_to_id("<|mask|>")


def test_greedy_is_deterministic_and_events_consistent(loaded):
    prompt = prompt_ids(loaded, 16)
    ev1, fin1 = run(loaded, prompt, max_new_tokens=20)
    ev2, fin2 = run(loaded, prompt, max_new_tokens=20)
    assert fin1.token_ids == fin2.token_ids
    assert len(fin1.token_ids) == 20
    assert [e for e in ev1 if not isinstance(e, Finished)] == [e for e in ev2 if not isinstance(e, Finished)]
    check_event_invariants(ev1, fin1)
    assert fin1.stats.stop_reason == "length"
    assert fin1.stats.blocks == 3 and fin1.stats.commits == 2  # the last block is not committed
    # every masked position is revealed exactly once, and a revealed token never changes
    for block in range(3):
        seen: dict[int, int] = {}
        for p in (p for p in passes(ev1) if p.block == block):
            for r in p.revealed:
                assert r.position not in seen
                seen[r.position] = r.token_id
                assert 0.0 < r.confidence <= 1.0
            for pos, tok in seen.items():
                assert p.tokens[pos] == tok
            assert sum(t is not None for t in p.tokens) == len(seen)
        assert [seen[k] for k in sorted(seen)] == commits(ev1)[block].token_ids


def test_threshold_zero_reveals_whole_block_in_one_pass(loaded):
    ev, fin = run(loaded, prompt_ids(loaded, 16, 1), max_new_tokens=3 * BS, threshold=0.0)
    ps = passes(ev)
    assert len(ps) == 3 and [p.block for p in ps] == [0, 1, 2]
    for p in ps:
        assert [r.position for r in p.revealed] == list(range(BS))
        assert None not in p.tokens
    assert fin.stats.passes == 3 and fin.stats.tokens == 3 * BS
    assert fin.stats.tokens_per_pass == BS
    check_event_invariants(ev, fin)


def test_threshold_one_reveals_one_per_pass(loaded):
    ev, fin = run(loaded, prompt_ids(loaded, 16, 2), max_new_tokens=2 * BS, threshold=1.0)
    ps = passes(ev)
    assert all(len(p.revealed) == 1 for p in ps)
    assert len(ps) == fin.stats.passes == fin.stats.tokens == 2 * BS
    check_event_invariants(ev, fin)


def test_first_pass_reveals_the_most_confident_position(loaded):
    prompt = prompt_ids(loaded, 16, 3)
    ev, _ = run(loaded, prompt, max_new_tokens=BS, threshold=1.0)
    model, mask = loaded.model, loaded.mask_token_id
    with torch.no_grad():
        cache = model.new_cache()
        model(torch.tensor([prompt]), cache)
        logits = model(torch.tensor([[mask] * BS]), cache, preview=True)[0]
    logits[:, mask] = float("-inf")
    probs = torch.softmax(logits, -1)
    conf, ids = probs.max(-1)
    best = int(conf.argmax())
    first = passes(ev)[0].revealed[0]
    assert (first.position, first.token_id) == (best, int(ids[best]))
    assert first.confidence == pytest.approx(float(conf[best]), rel=1e-5)


def test_stop_token_ends_output(loaded):
    prompt = prompt_ids(loaded, 16, 4)
    _, fin = run(loaded, prompt, max_new_tokens=3 * BS)
    toks = fin.token_ids
    # a position inside a later block whose token does not occur before it
    k = next(i for i in range(BS + 3, len(toks)) if toks[i] not in toks[:i])
    ev2, fin2 = run(loaded, prompt, max_new_tokens=3 * BS, stop_token_ids=[toks[k]])
    assert fin2.token_ids == toks[:k]
    assert fin2.stats.stop_reason == "stop"
    assert fin2.stats.tokens == k
    check_event_invariants(ev2, fin2)
    assert commits(ev2)[-1].block == k // BS  # nothing decoded past the stop's block
    assert all(p.block <= k // BS for p in passes(ev2))
    # a stop token as the very first generated token: empty output
    ev3, fin3 = run(loaded, prompt, max_new_tokens=3 * BS, stop_token_ids=[toks[0]])
    assert fin3.token_ids == [] and fin3.stats.stop_reason == "stop"
    check_event_invariants(ev3, fin3)


@pytest.mark.parametrize("prompt_len", [16, 11, 5])
def test_max_new_tokens_exact_and_prompt_tail_opens_first_block(loaded, prompt_len):
    prompt = prompt_ids(loaded, prompt_len, 5)
    tail = prompt[(prompt_len // BS) * BS :]
    ev, fin = run(loaded, prompt, max_new_tokens=13)
    assert len(fin.token_ids) == fin.stats.tokens == 13
    check_event_invariants(ev, fin)
    for p in passes(ev):
        if p.block == 0:
            assert p.fixed == len(tail)
            assert p.tokens[: len(tail)] == tail  # the prompt tail is never changed
            assert all(r.position >= len(tail) for r in p.revealed)
        else:
            assert p.fixed == 0
    sizes = [len(c.token_ids) for c in commits(ev)]
    first = BS - len(tail)
    assert sizes[0] == first
    assert sizes == [first] + [BS] * ((13 - first) // BS) + ([(13 - first) % BS] if (13 - first) % BS else [])
    # the last block reveals only the positions it needs: no pass touches a position past the budget
    last = commits(ev)[-1].block
    budget_end = (len(tail) if last == 0 else 0) + sizes[-1]
    for p in passes(ev):
        if p.block == last:
            assert all(r.position < budget_end for r in p.revealed)
            assert all(t is None for t in p.tokens[budget_end:])
    assert fin.stats.prompt_tokens == prompt_len


def test_max_new_tokens_smaller_than_the_tail_block(loaded):
    prompt = prompt_ids(loaded, 13, 6)  # tail of 5: room for 3 in the first block
    ev, fin = run(loaded, prompt, max_new_tokens=2)
    assert len(fin.token_ids) == 2
    assert [len(c.token_ids) for c in commits(ev)] == [2]
    check_event_invariants(ev, fin)


class _FavourMask(nn.Module):
    """An LM head that makes the mask token overwhelmingly likely everywhere."""

    def __init__(self, head: nn.Module, mask_id: int) -> None:
        super().__init__()
        self.head, self.mask_id = head, mask_id

    def forward(self, h):
        out = self.head(h).clone()
        out[..., self.mask_id] += 100.0
        return out


def test_mask_token_never_produced(loaded, monkeypatch):
    monkeypatch.setattr(loaded.model, "lm_head", _FavourMask(loaded.model.lm_head, loaded.mask_token_id))
    prompt = prompt_ids(loaded, 16, 7)
    with torch.no_grad():  # the head really does favour the mask
        assert int(loaded.model(torch.tensor([prompt]))[0, -1].argmax()) == loaded.mask_token_id
    for kw in (dict(), dict(temperature=1.0, seed=3), dict(threshold=0.0), dict(temperature=2.0, top_p=0.9, seed=1)):
        ev, fin = run(loaded, prompt, max_new_tokens=20, **kw)
        assert len(fin.token_ids) == 20
        assert loaded.mask_token_id not in fin.token_ids
        assert all(r.token_id != loaded.mask_token_id for p in passes(ev) for r in p.revealed)


def test_sampling_seeded_reproducible_and_seed_dependent(loaded):
    prompt = prompt_ids(loaded, 16, 8)
    kw = dict(max_new_tokens=16, temperature=1.0, threshold=0.5)
    _, a = run(loaded, prompt, seed=1, **kw)
    _, b = run(loaded, prompt, seed=1, **kw)
    assert a.token_ids == b.token_ids
    outs = {tuple(run(loaded, prompt, seed=s, **kw)[1].token_ids) for s in (2, 3, 4)}
    outs.add(tuple(a.token_ids))
    assert len(outs) > 1
    _, greedy = run(loaded, prompt, max_new_tokens=16, threshold=0.5)
    assert any(o != tuple(greedy.token_ids) for o in outs)


def test_any_integer_seeds_a_sampled_answer(loaded):
    """torch's generator takes 64 bits; a seed past them (`--seed 99999999999999999999`, a client's 20-digit seed)
    raised "Overflow when unpacking long long" mid-answer. Any integer seeds an answer now, one past 2**64 as its
    low 64 bits, a negative one as before (its two's complement, what torch took it as)."""
    prompt = prompt_ids(loaded, 16, 8)
    kw = dict(max_new_tokens=16, temperature=1.0, threshold=0.5)
    wide = run(loaded, prompt, seed=10**20, **kw)[1].token_ids
    assert wide == run(loaded, prompt, seed=10**20 % 2**64, **kw)[1].token_ids
    assert run(loaded, prompt, seed=-2**70, **kw)[1].token_ids == run(loaded, prompt, seed=0, **kw)[1].token_ids
    assert run(loaded, prompt, seed=-5, **kw)[1].token_ids == run(loaded, prompt, seed=2**64 - 5, **kw)[1].token_ids


def test_sampling_draws_each_token_at_its_probability():
    """`choose` draws on the logits' device by an exponential race (argmax of p / E): an exact categorical draw,
    so over many rows each token comes up at its probability, a token of probability 0 never, and top-p
    renormalises what it keeps."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = torch.log(p).expand(40_000, 5).contiguous()  # log 0 = -inf: the mask token's treatment
    gen = torch.Generator().manual_seed(0)
    ids, conf = choose(logits, 1.0, 1.0, gen)
    freq = torch.bincount(ids, minlength=5).double() / ids.numel()
    assert torch.allclose(freq, p.double(), atol=0.01) and freq[4] == 0  # 0.01 ≈ 4 standard errors at p = 0.5
    assert torch.allclose(conf, p[ids])
    ids, conf = choose(logits, 1.0, 0.8, gen)  # keeps 0.5 and 0.3 (0.5 + 0.3 reaches 0.8), renormalised
    freq = torch.bincount(ids, minlength=5).double() / ids.numel()
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0, 0, 0], dtype=torch.double), atol=0.01)
    assert torch.allclose(conf, torch.tensor([0.625, 0.375])[ids])
    again = choose(logits, 1.0, 1.0, torch.Generator().manual_seed(0))[0]  # seeded: the same draws
    assert torch.equal(again, choose(logits, 1.0, 1.0, torch.Generator().manual_seed(0))[0])


def test_top_k_and_min_p_cut_the_distribution_before_the_draw():
    """top_k keeps the k likeliest, min_p those at least min_p times as likely as the likeliest, after top_k and
    top_p (transformers' order), each renormalised; the confidence is the drawn token's probability after the cuts;
    a greedy answer is the argmax whatever they are."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = torch.log(p).expand(40_000, 5).contiguous()
    gen = torch.Generator().manual_seed(1)
    for kwargs, want in (({"top_k": 2}, [0.625, 0.375, 0, 0, 0]),
                         ({"min_p": 0.3}, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0, 0]),  # p >= 0.15 kept
                         # top_k 3 (0.526, 0.316, 0.158), top_p 0.9 keeps all three, min_p 0.5 drops the third
                         ({"top_k": 3, "min_p": 0.5, "top_p": 0.9}, [0.625, 0.375, 0, 0, 0]),
                         ({"top_k": 5, "min_p": 0.0}, p.tolist())):
        top_p = kwargs.pop("top_p", 1.0)
        ids, conf = choose(logits, 1.0, top_p, gen, **kwargs)
        freq = torch.bincount(ids, minlength=5).double() / ids.numel()
        want = torch.tensor(want, dtype=torch.double)
        assert torch.allclose(freq, want, atol=0.01), kwargs
        assert torch.allclose(conf.double(), want[ids], atol=1e-6), kwargs
    ids, _ = choose(logits[:4], 0.0, 1.0, None, top_k=1, min_p=0.9)
    assert ids.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("scale", [4.0, 0.3], ids=["peaked", "flat"])
def test_top_p_from_the_most_likely_tokens_draws_what_a_full_sort_draws(scale, monkeypatch):
    """Top-p sorts only the TOP_P_CUT most likely tokens when they cover top_p in every row (peaked logits),
    else the whole vocabulary (flat ones): the same tokens kept, so the same draws and confidences."""
    from clover_local.generate import sampling

    logits = torch.randn(8, 5000, generator=torch.Generator().manual_seed(0)) * scale
    head = torch.softmax(logits / 0.8, -1).topk(sampling.TOP_P_CUT, -1)[0].sum(-1)
    assert bool((head >= 0.9).all()) == (scale == 4.0)  # the cut is taken for peaked rows only
    for top_p in (0.5, 0.9):
        cut = choose(logits, 0.8, top_p, torch.Generator().manual_seed(3))
        monkeypatch.setattr(sampling, "TOP_P_CUT", 10**9)
        full = choose(logits, 0.8, top_p, torch.Generator().manual_seed(3))
        monkeypatch.undo()
        assert torch.equal(cut[0], full[0]) and torch.allclose(cut[1], full[1])


def test_greedy_confidence_is_the_argmax_softmax_probability():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(16, 3000, generator=g) * torch.tensor([0.1, 1.0, 8.0, 30.0]).repeat(4)[:, None]
    logits[:, 7] = float("-inf")  # the mask token's column, as the decoder sets it
    ids, conf = choose(logits, 0.0, 1.0, None)
    want_conf, want_ids = torch.softmax(logits, -1).max(-1)
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(conf, want_conf, rtol=1e-5, atol=1e-7)


def test_tiny_top_p_is_greedy_on_tokens(loaded):
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(50, 40, generator=g) * 3
    greedy_ids, _ = choose(logits, 0.0, 1.0, None)
    for top_p in (1e-6, 0.0):  # 0.0 is in --top-p's range (DECODE_RANGES) and must keep the top token
        ids, conf = choose(logits, 1.5, top_p, torch.Generator().manual_seed(0))
        assert torch.equal(ids, greedy_ids)
        assert torch.allclose(conf, torch.ones_like(conf))
    # whole decode: with threshold 0 every block is revealed in one pass, so the reveal order cannot differ
    prompt = prompt_ids(loaded, 16, 10)
    _, greedy = run(loaded, prompt, max_new_tokens=20, threshold=0.0)
    _, nucleus = run(loaded, prompt, max_new_tokens=20, threshold=0.0, temperature=1.0, top_p=1e-6, seed=5)
    _, plain = run(loaded, prompt, max_new_tokens=20, threshold=0.0, temperature=1.0, seed=5)
    assert nucleus.token_ids == greedy.token_ids
    assert plain.token_ids != greedy.token_ids  # sampling from the full distribution does differ


def test_pick_reveals_rules():
    conf = torch.tensor([0.2, 0.9, 0.5, 0.95, 0.1])
    assert pick_reveals(conf, 0.5) == [1, 2, 3]
    assert pick_reveals(conf, 0.99) == [3]  # at least the most confident
    assert pick_reveals(conf, 1.0) == [3]
    assert pick_reveals(conf, 0.0) == [0, 1, 2, 3, 4]


def test_the_factor_rule_reveals_the_most_confident_while_their_count_times_doubt_stays_under_it():
    """Fast-dLLM's factor rule: the n most confident, the largest n with (n + 1)(1 - c_n) < factor."""
    conf = torch.tensor([0.3, 0.95, 0.9, 0.99, 0.6])
    # (n + 1)(1 - c_n) for n = 1..5 in confidence order: 0.02, 0.15, 0.4, 2.0, 4.2
    assert sorted(pick_reveals(conf, 0.5, factor=1.0)) == [1, 2, 3]  # the threshold plays no part
    assert sorted(pick_reveals(conf, 0.5, factor=1.99)) == [1, 2, 3]
    assert sorted(pick_reveals(conf, 0.5, factor=2.01)) == [1, 2, 3, 4]
    assert pick_reveals(conf, 0.5, factor=0.1) == [3]
    assert pick_reveals(conf, 0.0, factor=1e-6) == [3]  # at least the most confident
    assert sorted(pick_reveals(conf, 1.0, factor=10.0)) == [0, 1, 2, 3, 4]


def test_decoding_by_the_factor_rule(loaded):
    """A factor too small for any second reveal decodes as threshold 1 does (one a pass, the most confident), token
    for token; a factor no block's doubts reach reveals each block in one pass."""
    prompt = prompt_ids(loaded, 16, 2)
    ev_one, one = run(loaded, prompt, max_new_tokens=2 * BS, threshold=1.0)
    ev_small, small = run(loaded, prompt, max_new_tokens=2 * BS, threshold=0.0, factor=1e-9)
    assert small.token_ids == one.token_ids and small.stats.passes == one.stats.passes == 2 * BS
    assert [p.tokens for p in passes(ev_small)] == [p.tokens for p in passes(ev_one)]
    ev, fin = run(loaded, prompt, max_new_tokens=3 * BS, threshold=1.0, factor=float(BS + 1))
    assert fin.stats.passes == 3 and fin.stats.tokens_per_pass == BS
    check_event_invariants(ev, fin)


def test_non_finite_logits_stop_the_decode_with_one_clear_error(loaded, monkeypatch):
    """A pass whose logits are NaN (hidden states gone non-finite: an optimistic pass carries them to the end
    without stopping) ends the decode with a CloverError that says so, not with tokens drawn from NaN; greedy
    and sampled alike. `pick_reveals` refuses NaN confidences."""
    from clover_local.errors import CloverError

    with pytest.raises(CloverError, match="not finite"):
        pick_reveals(torch.tensor([0.2, float("nan"), 0.5]), 0.5)
    head = loaded.model.lm_head

    class _Nan(torch.nn.Module):
        def forward(self, h):
            return head(h) * float("nan")

    monkeypatch.setattr(loaded.model, "lm_head", _Nan())
    prompt = prompt_ids(loaded, 16, 7)
    for kw in (dict(), dict(temperature=1.0, seed=3)):
        decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
        with pytest.raises(CloverError, match="logits for this pass are not finite"):
            list(decoder.generate(prompt, DecodeSettings(max_new_tokens=8, stop_token_ids=[], **kw)))


def test_logits_shifted_decodes_and_differs(loaded, monkeypatch):
    prompt = prompt_ids(loaded, 16, 11)
    _, plain = run(loaded, prompt, max_new_tokens=20, threshold=0.0)
    monkeypatch.setattr(loaded.model.config.diffusion, "logits_shifted", True)
    ev, shifted = run(loaded, prompt, max_new_tokens=20, threshold=0.0)
    assert len(shifted.token_ids) == 20
    assert loaded.mask_token_id not in shifted.token_ids
    assert shifted.token_ids != plain.token_ids
    check_event_invariants(ev, shifted)
    # shifted: a block's first token is predicted by the last committed row, i.e. the causal next-token argmax
    mask = loaded.mask_token_id
    with torch.no_grad():
        nxt = loaded.model(torch.tensor([prompt]))[0, -1]
        nxt[mask] = float("-inf")
        assert shifted.token_ids[0] == int(nxt.argmax())
        # and position i of the block by preview row i-1
        cache = loaded.model.new_cache()
        loaded.model(torch.tensor([prompt]), cache)
        pre = loaded.model(torch.tensor([[mask] * BS]), cache, preview=True)[0]
    pre[:, mask] = float("-inf")
    assert shifted.token_ids[1:BS] == pre[:-1].argmax(-1).tolist()
    # with a prompt tail the first masked position is predicted by the last tail row: decoding still works
    ev2, fin2 = run(loaded, prompt_ids(loaded, 11, 12), max_new_tokens=13, threshold=0.5)
    assert len(fin2.token_ids) == 13
    check_event_invariants(ev2, fin2)


def test_context_limit_checked_up_front(make_checkpoint):
    folder = make_checkpoint(seed=22)
    cfg_path = folder / "config.json"
    raw = json.loads(cfg_path.read_text())
    raw["max_position_embeddings"] = 40
    cfg_path.write_text(json.dumps(raw))
    model = load_model(folder, dtype=torch.float32)
    assert model.config.max_context == 40
    mask = model.config.diffusion.mask_token_id
    decoder = BlockDiffusionDecoder(model, mask)
    prompt = [5] * 30
    with pytest.raises(CloverError) as info:
        next(decoder.generate(prompt, DecodeSettings(max_new_tokens=11)))
    msg = str(info.value)
    assert "30" in msg and "11" in msg and "40" in msg
    # exactly at the limit is fine
    events = list(decoder.generate(prompt, DecodeSettings(max_new_tokens=10, threshold=0.0)))
    assert len(events[-1].token_ids) == 10


def test_bad_settings_raise_clover_errors(loaded):
    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    with pytest.raises(CloverError):
        next(decoder.generate([], DecodeSettings()))
    with pytest.raises(CloverError):
        next(decoder.generate([1, 2], DecodeSettings(max_new_tokens=0)))


@pytest.mark.parametrize("shifted", [False, True])
def test_merged_commits_decode_the_same_tokens_in_fewer_passes(loaded, monkeypatch, shifted):
    """A commit merged with the next block's first preview (`merge_commits`, the default) decodes exactly what
    the two passes did, event for event, and the model runs one pass less per commit."""
    monkeypatch.setattr(loaded.model.config.diffusion, "logits_shifted", shifted)
    prompt = prompt_ids(loaded, 11, 13)  # a prompt tail: block 0 commits tail + generated rows
    calls = []
    real_forward, real_merged = loaded.model.forward, loaded.model.commit_and_preview
    monkeypatch.setattr(loaded.model, "forward", lambda *a, **k: calls.append("pass") or real_forward(*a, **k))
    monkeypatch.setattr(loaded.model, "commit_and_preview",
                        lambda *a, **k: calls.append("merged") or real_merged(*a, **k))
    out = {}
    for merge in (False, True):
        calls.clear()
        dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id, merge_commits=merge)
        events = list(dec.generate(prompt, DecodeSettings(max_new_tokens=30, threshold=0.3, stop_token_ids=[])))
        check_event_invariants(events, events[-1])
        out[merge] = (events, list(calls))
    (plain, plain_calls), (merged, merged_calls) = out[False], out[True]
    fin = merged[-1]
    assert fin.token_ids == plain[-1].token_ids and len(fin.token_ids) == 30
    assert len(merged) == len(plain)
    for m, p in zip(merged[:-1], plain[:-1]):  # the same events; confidences to float rounding (64-row matmuls)
        assert type(m) is type(p)
        if isinstance(m, PassDone):
            assert (m.block, m.pass_index, m.tokens, m.fixed) == (p.block, p.pass_index, p.tokens, p.fixed)
            assert [(r.position, r.token_id) for r in m.revealed] == [(r.position, r.token_id) for r in p.revealed]
            assert [r.confidence for r in m.revealed] == pytest.approx([r.confidence for r in p.revealed], rel=1e-4)
        else:
            assert m == p
    n_commits, n_merged = fin.stats.commits, fin.stats.merged_commits
    assert n_commits == plain[-1].stats.commits >= 3
    # shifted, the last block needs one token, which the commit's last row predicts: no preview to merge with
    assert n_merged == n_commits - shifted and plain[-1].stats.merged_commits == 0
    assert merged_calls.count("merged") == n_merged
    assert len(merged_calls) == len(plain_calls) - n_merged  # prefill + previews + commits, one fewer per merge


@pytest.mark.parametrize("shifted", [False, True])
def test_the_lm_head_sees_only_the_rows_that_predict_masked_positions(loaded, monkeypatch, shifted):
    """Each preview's LM head runs over the rows whose logits predict a masked position (shifted: the row before
    each, and none for position 0, which the last committed row predicts), not the whole block; the tokens are
    those of a decoder that takes every row's logits and picks the masked ones."""
    monkeypatch.setattr(loaded.model.config.diffusion, "logits_shifted", shifted)
    bs = loaded.model.config.diffusion.block_size
    prompt = prompt_ids(loaded, 2 * bs, 5)  # block-aligned: position 0 of each block starts masked
    model, real_forward = loaded.model, loaded.model.forward
    calls: list[tuple[list[int], list[int]]] = []  # per preview: (masked positions, LM head rows)

    def forward(ids, cache=None, preview=False, rows=None):
        if preview:
            masked = (ids[0] == loaded.mask_token_id).nonzero().flatten().tolist()
            calls.append((masked, list(range(bs))[rows] if isinstance(rows, slice) else list(rows)))
        return real_forward(ids, cache, preview, rows)

    monkeypatch.setattr(model, "forward", forward)
    _, fin = run(loaded, prompt, max_new_tokens=2 * bs, threshold=0.5)
    assert len(calls) >= 3
    for masked, rows in calls:
        assert rows == ([p - 1 for p in masked if p > 0] if shifted else masked)
    assert any(len(rows) < bs - 1 for _, rows in calls)  # rows were left out

    def every_row(ids, cache=None, preview=False, rows=None):  # the whole block through the LM head, then pick
        out = real_forward(ids, cache, preview)
        return out[:, rows] if rows is not None else out

    monkeypatch.setattr(model, "forward", every_row)
    _, ref_fin = run(loaded, prompt, max_new_tokens=2 * bs, threshold=0.5)
    assert ref_fin.token_ids == fin.token_ids


def test_threshold_one_reveals_exactly_one_even_where_confidences_saturate():
    """fp32 softmax saturates: a peaked row's argmax probability is exactly 1.0, often for several masked
    positions at once. A threshold of 1.0 still means one reveal per pass (the most confident, the first of
    equals), not every position that reached 1.0."""
    assert pick_reveals([1.0, 0.3, 1.0, 1.0], 1.0) == [0]
    assert pick_reveals(torch.tensor([0.2, 1.0, 1.0]), 1.0) == [1]
    assert pick_reveals([1.0, 0.3, 1.0], 2.0) == [0]
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(11))
    logits[torch.arange(4), torch.tensor([3, 9, 9, 21])] = 200.0  # softmax 1.0 in fp32 for every row
    ids, conf = choose(logits, 0.0, 1.0, None)
    assert conf.tolist() == [1.0] * 4
    assert pick_reveals(conf.tolist(), 1.0) == [0]
    assert pick_reveals(conf.tolist(), 0.999) == [0, 1, 2, 3]


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_sharpens_below_one_and_flattens_above(temperature):
    """The draw is from softmax(logits / T): token i comes up with probability ∝ p_i^(1/T), and the confidence
    reported is that tempered probability. T < 1 favours the likely token, T > 1 the unlikely ones."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    logits = torch.log(p).float().expand(40_000, 4).contiguous()
    want = p ** (1 / temperature)
    want = want / want.sum()
    ids, conf = choose(logits, temperature, 1.0, torch.Generator().manual_seed(1))
    freq = torch.bincount(ids, minlength=4).double() / ids.numel()
    assert torch.allclose(freq, want, atol=0.01)
    torch.testing.assert_close(conf.double(), want[ids], rtol=1e-5, atol=1e-6)
    if temperature < 1:
        assert freq[0] > 0.6
    else:
        assert freq[0] < 0.45 and freq[3] > 0.1


def test_top_p_sorts_the_whole_vocabulary_when_any_row_needs_it(monkeypatch):
    """The TOP_P_CUT shortcut holds only when the most likely tokens cover top_p in EVERY row: a batch with peaked
    and flat rows together draws, for each row, what a full sort draws (a flat row cut to TOP_P_CUT tokens would
    keep far less than top_p of its mass)."""
    from clover_local.generate import sampling

    g = torch.Generator().manual_seed(5)
    logits = torch.randn(8, 5000, generator=g) * torch.tensor([4.0, 0.3] * 4)[:, None]
    head = torch.softmax(logits / 0.8, -1).topk(sampling.TOP_P_CUT, -1)[0].sum(-1)
    assert bool((head >= 0.9).any()) and not bool((head >= 0.9).all())  # mixed: some rows peaked, some flat
    cut = choose(logits, 0.8, 0.9, torch.Generator().manual_seed(3))
    monkeypatch.setattr(sampling, "TOP_P_CUT", 10**9)
    full = choose(logits, 0.8, 0.9, torch.Generator().manual_seed(3))
    monkeypatch.undo()
    torch.testing.assert_close(cut[1], full[1])
    assert torch.equal(cut[0], full[0])


def test_a_snapshot_point_before_the_reused_prefix_saves_at_the_reused_prefix(loaded):
    """A prompt cache resumed at 24 tokens, with the next save point asked for at 8 (the history rendered
    shorter this turn): the saved prefix cannot move back (a GDN state cannot be rewound), so it is saved again
    at 24, and the answer is the one a fresh prefill gives."""
    from clover_local.generate.prompt_cache import PromptCache

    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=10, threshold=0.9, stop_token_ids=[])
    pc, first = PromptCache(), prompt_ids(loaded, 24, 12)
    one = list(dec.generate(first, settings, reuse=pc))[-1]
    assert pc.saved_tokens == 24
    second = first + one.token_ids + prompt_ids(loaded, 7, 13)
    two = list(dec.generate(second, settings, reuse=pc, snapshot_at=8))[-1]
    assert isinstance(two, Finished) and two.stats.reused_tokens == 24
    assert pc.saved_tokens == 24
    _, scratch = run(loaded, second, max_new_tokens=10, threshold=0.9)
    assert two.token_ids == scratch.token_ids
    three = list(dec.generate(second, settings, reuse=pc))[-1]  # and the saved prefix still resumes
    assert three.stats.reused_tokens == 24 and three.token_ids == scratch.token_ids
    assert pc.stats.to_dict() == {"lookups": 3, "hits": 2, "parked_hits": 0, "parked": 0, "reused_tokens": 48,
                                  "last_reused": 24}


@pytest.mark.parametrize("at", [0, 23])
def test_a_prompt_differing_in_the_first_or_last_token_of_the_saved_prefix_is_not_resumed(loaded, at):
    """The saved prefix is compared token for token, its ends included: a prompt that differs from it only in
    its first or its last token starts from a fresh cache (and decodes what a fresh prefill does)."""
    from clover_local.generate.prompt_cache import PromptCache

    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=8, threshold=0.9, stop_token_ids=[])
    pc, first = PromptCache(), prompt_ids(loaded, 24, 14)
    list(dec.generate(first, settings, reuse=pc))
    assert pc.saved_tokens == 24
    changed = list(first) + prompt_ids(loaded, 9, 15)
    changed[at] = (changed[at] + 1) % loaded.mask_token_id
    fin = list(dec.generate(changed, settings, reuse=pc))[-1]
    assert fin.stats.reused_tokens == 0 and pc.stats.hits == 0
    assert fin.token_ids == run(loaded, changed, max_new_tokens=8, threshold=0.9)[1].token_ids


def test_penalties_change_the_logits_as_openai_and_vllm_define_them():
    """presence: minus once for a token the answer holds; frequency: minus once per time; repetition: a positive
    logit divided, a negative multiplied, for tokens in the prompt or the answer. Numbers worked by hand."""
    from clover_local.generate.ranges import Penalties
    from clover_local.generate.sampling import TokenCounts

    counts = TokenCounts(5, torch.device("cpu"), prompt_ids=[0])
    counts.add([2, 2])
    counts.add([3])
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0]])
    got = counts.apply(logits.clone(), Penalties(presence=0.5, frequency=0.25, repetition=2.0))
    # 0: prompt only, 2/2; 1: untouched; 2: twice in the answer, 0.5/2 - 2*0.25 - 0.5; 3: once, 3/2 - 0.25 - 0.5
    assert got.tolist() == [[1.0, -1.0, -0.75, 0.75, -2.0]]
    counts.add([4])
    assert counts.apply(logits.clone(), Penalties(repetition=2.0)).tolist() == [[1.0, -1.0, 0.25, 1.5, -4.0]]
    assert not Penalties().active
    assert Penalties(presence=0.5).active and Penalties(frequency=-0.5).active and Penalties(repetition=1.1).active


def test_a_presence_penalty_keeps_the_answer_from_repeating_a_token(loaded):
    """One token a pass (threshold 1), so each pass sees every token revealed before it: with a large presence
    penalty no token comes twice, where the plain greedy answer repeats some."""
    from clover_local.generate.ranges import Penalties

    prompt = prompt_ids(loaded, 16, 3)
    _, plain = run(loaded, prompt, max_new_tokens=BS, threshold=1.0)
    assert len(set(plain.token_ids)) < len(plain.token_ids), "the plain answer repeats nothing: pick another prompt"
    _, penalized = run(loaded, prompt, max_new_tokens=BS, threshold=1.0, penalties=Penalties(presence=100.0))
    assert len(penalized.token_ids) == BS and len(set(penalized.token_ids)) == BS
    _, same = run(loaded, prompt, max_new_tokens=BS, threshold=1.0, penalties=Penalties())
    assert same.token_ids == plain.token_ids  # the defaults change nothing


def test_a_repetition_penalty_covers_the_prompts_tokens_too(loaded):
    """vLLM's repetition_penalty counts the prompt's tokens as seen, not only the answer's: with a large one (and
    one token a pass) the answer avoids every token of the prompt, where the plain greedy answer reuses some."""
    from clover_local.generate.ranges import Penalties

    prompt = prompt_ids(loaded, 96, 5)
    _, plain = run(loaded, prompt, max_new_tokens=BS, threshold=1.0)
    assert set(plain.token_ids) & set(prompt), "the plain answer reuses no prompt token: pick another prompt"
    _, penalized = run(loaded, prompt, max_new_tokens=BS, threshold=1.0, penalties=Penalties(repetition=1e6))
    assert not set(penalized.token_ids) & set(prompt)
    assert len(set(penalized.token_ids)) == len(penalized.token_ids)
