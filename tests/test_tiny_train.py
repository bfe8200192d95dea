"""The tiny model's training script runs end to end at toy size, and a second stage continues from the first."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from clover_local.loader import load
from clover_local.model.clover import CloverModel
from clover_local.tiny import corpus
from clover_local.tiny.train import TrainSettings, load_weights, train

TOY = dict(n_train=300, steps=3, batch_size=4, warmup=1, hidden_size=32, num_hidden_layers=4,
           num_experts=16, moe_intermediate_size=16, shared_expert_intermediate_size=16, threads=1)


def test_two_stages_train_save_and_continue(tmp_path):
    first, second = tmp_path / "stage1", tmp_path / "stage2"
    result = train(first, TrainSettings(mix="base", **TOY), log_every=1)
    assert result["final_loss"] > 0
    loaded = load(str(first), "cpu", "float32")  # the saved folder is a complete checkpoint
    assert loaded.model.config.num_experts == 16 and loaded.mask_token_id == loaded.tokenizer.mask_token_id

    # stage 2 starts from stage 1's weights exactly and keeps its tokenizer
    model = CloverModel(loaded.model.config)
    load_weights(model, first)
    saved = load_file(str(first / "model.safetensors"))
    assert torch.equal(model.layers[0].mlp.experts.gate_up_proj.detach(),
                       saved["model.layers.0.mlp.experts.gate_up_proj"].float())
    train(second, TrainSettings(mix="hard", init=str(first), **TOY), log_every=1)
    assert (second / "tokenizer.json").read_text() == (first / "tokenizer.json").read_text()
    record = json.loads((second / "training.json").read_text())
    assert record["settings"]["init"] == str(first) and record["settings"]["mix"] == "hard"
    # the record says how the model was made from scratch: stage 1 travels with it
    assert [st["settings"]["mix"] for st in record["earlier_stages"]] == ["base"]
    after = load_file(str(second / "model.safetensors"))
    assert not torch.equal(after["model.layers.0.mlp.gate.weight"], saved["model.layers.0.mlp.gate.weight"])


def test_mixes_differ_and_unknown_mix_is_refused():
    base = [e.task for e in corpus.make_train(2000, 0, mix="base")]
    hard = [e.task for e in corpus.make_train(2000, 0, mix="hard")]
    assert hard.count("reverse") < base.count("reverse") and hard.count("lookup") > base.count("lookup")
    with pytest.raises(ValueError, match="unknown mix"):
        corpus.make_train(10, 0, mix="nope")


@pytest.mark.skipif(not hasattr(torch.nn.functional, "grouped_mm"), reason="this torch has no grouped_mm")
def test_training_experts_grouped_path_equals_the_per_expert_loop():
    """Training runs routed experts as two grouped matmuls; inference runs one matmul per expert hit. Same
    outputs and the same gradients (skewed routing with unused experts, random inputs)."""
    from clover_local.model import moe

    torch.manual_seed(0)
    experts = moe.Experts(16, 32, 24)
    with torch.no_grad():
        experts.gate_up_proj.normal_(0, 0.2)
        experts.down_proj.normal_(0, 0.2)
    x = torch.randn(40, 32)
    probs = torch.softmax(torch.randn(40, 16) * 3 + torch.linspace(0, 4, 16), -1)  # skewed towards high ids
    weights, idx = probs.topk(2, -1)
    assert len(idx.unique()) < 16  # some experts unused: empty groups
    up = torch.randn(40, 32)

    def run(grouped: bool):
        experts.zero_grad()
        xg = x.clone().requires_grad_()
        saved = moe._grouped_mm
        moe._grouped_mm = saved if grouped else None
        try:
            out = experts(xg, idx, weights)
        finally:
            moe._grouped_mm = saved
        out.backward(up)
        return out.detach(), xg.grad, experts.gate_up_proj.grad.clone(), experts.down_proj.grad.clone()

    grouped, loop = run(True), run(False)
    assert grouped[0].abs().mean() > 0.01 and grouped[2].abs().mean() > 0  # not vacuous
    for a, b in zip(grouped, loop):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # inference stays on the loop; its result is the same
        torch.testing.assert_close(experts(x, idx, weights), loop[0], rtol=1e-5, atol=1e-6)


def test_muon_orthogonalizes_each_expert_matrix_on_its_own():
    """The update's singular values are flattened towards 1 whatever the gradient's spread, and a stack of
    expert matrices is treated as separate matrices (the same as orthogonalising each one)."""
    from clover_local.tiny.muon import orthogonalize

    torch.manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(3, 48, 48))
    v, _ = torch.linalg.qr(torch.randn(3, 20, 20))
    spread = torch.logspace(0, -2, 20)  # singular values from 1 down to 0.01, then one stack entry scaled x1000
    g = u[:, :, :20] @ torch.diag_embed(spread.expand(3, 20)) @ v.mT
    g[1] *= 1000.0
    out = orthogonalize(g)
    sv = torch.linalg.svdvals(out)
    assert sv.min() > 0.5 and sv.max() < 1.3, sv
    assert torch.linalg.svdvals(g).min() < 0.02  # the input really was spread
    for i in range(3):  # batched == one at a time (wide and tall shapes both)
        torch.testing.assert_close(out[i], orthogonalize(g[i]), rtol=0, atol=0)
        torch.testing.assert_close(orthogonalize(g[i].mT), orthogonalize(g[i]).mT, rtol=0.02, atol=0.02)


def test_muon_batches_matrices_of_a_shape_and_matches_one_at_a_time():
    """The optimizer orthogonalises all matrices of one shape (tall ones transposed) in one batched iteration;
    each result equals orthogonalising that tensor alone, up to bf16 rounding, in its own shape."""
    from clover_local.tiny.muon import orthogonalize, orthogonalize_all

    torch.manual_seed(1)
    updates = [torch.randn(40, 24), torch.randn(24, 40), torch.randn(3, 40, 24), torch.randn(24, 24),
               torch.randn(2, 24, 24) * 100.0]
    together = orthogonalize_all(updates, 5)
    for u, t in zip(updates, together):
        assert t.shape == u.shape
        torch.testing.assert_close(t, orthogonalize(u), rtol=0.03, atol=0.03)
        assert torch.linalg.svdvals(t).max() < 1.3  # scaled: the x100 stack is no larger than the rest


def test_muon_training_splits_parameters_and_trains(tmp_path):
    from clover_local.tiny.muon import split_params

    result = train(tmp_path / "m", TrainSettings(mix="base", optimizer="muon", **TOY), log_every=1)
    assert result["final_loss"] > 0
    model = load(str(tmp_path / "m"), "cpu", "float32").model
    muon, decay, no_decay = split_params(model)  # TOY: hidden 32, so the 16-expert router is a thin matrix
    names = {id(p): n for n, p in model.named_parameters()}
    muon_names = {names[id(p)] for p in muon}
    assert "layers.0.mlp.experts.gate_up_proj" in muon_names and "layers.3.self_attn.q_proj.weight" in muon_names
    assert not muon_names & {"embed_tokens.weight", "lm_head.weight", "layers.0.mlp.gate.weight"}
    assert not any("conv" in n for n in muon_names)
    assert all(p.ndim < 2 for p in no_decay)
    assert len(muon) + len(decay) + len(no_decay) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="unknown optimizer"):
        train(tmp_path / "x", TrainSettings(optimizer="sgd", **TOY))


def test_warm_mix_serves_the_first_steps(tmp_path, monkeypatch):
    """`--warm-mix count --warm-steps N`: the first N steps sample a second corpus drawn with the warm mix (more
    letter counting), the rest the main one; the record keeps both settings."""
    from clover_local.tiny import train as train_mod

    seen = []
    sample = train_mod.Batches.sample

    def spy(self, n, gen):
        seen.append(id(self))  # which corpus served the step
        return sample(self, n, gen)

    made = []
    init = train_mod.Batches.__init__

    def record_init(self, examples, *a):
        made.append((id(self), sum(e.task == "count_letter" for e in examples) / len(examples)))
        init(self, examples, *a)

    monkeypatch.setattr(train_mod.Batches, "sample", spy)
    monkeypatch.setattr(train_mod.Batches, "__init__", record_init)
    train(tmp_path / "w", TrainSettings(mix="short", warm_mix="count", warm_steps=2, **TOY), log_every=1)
    (main_id, main_share), (warm_id, warm_share) = made
    assert seen == [warm_id, warm_id, main_id]
    assert warm_share > main_share  # the count mix: 44 % letter counting against 20 %
    record = json.loads((tmp_path / "w" / "training.json").read_text())
    assert (record["settings"]["warm_mix"], record["settings"]["warm_steps"]) == ("count", 2)


def test_mark_weight_weighs_exactly_the_count_traces_marks(tmp_path):
    """`--mark-weight w`: the `-` or match number after each letter of a letter-count trace gets weight w in the
    loss, every other token 1 (addition's digits too); at w = 1 the loss is the plain mean it always was."""
    from clover_local.tiny import train as train_mod
    from clover_local.tiny.tokenizer_build import build_tokenizer

    examples = corpus.make_train(200, 0, mix="short", scratchpad=["add", "count_match"])
    tok = build_tokenizer([corpus.render_conversation(e) for e in examples], 400)
    data = train_mod.Batches(examples, tok, 16, 0, mark_weight=3.0)
    for ex, (ids, _), marks in zip(examples, data.rows, data.marks):
        if ex.task != "count_letter":
            assert marks == []
            continue
        words = corpus.count_prompt_parts(ex.prompt)[1]
        assert len(marks) == len(words)  # one mark per letter of the word
        expected = [step[len(c):] for step, c in zip(ex.thinking.split(), words)]
        assert [tok.id_to_token(ids[i]).removesuffix("Ċ") for i in marks] == expected
    gen = torch.Generator().manual_seed(0)
    clean, *_, weight = data.sample(8, gen)
    assert set(weight.unique().tolist()) <= {1.0, 3.0}
    plain = train_mod.Batches(examples, tok, 16, 0)
    assert plain.sample(8, torch.Generator().manual_seed(0))[-1] is None

    logits, target = torch.randn(10, 7), torch.randint(0, 7, (10,))
    w = torch.ones(10)
    assert torch.allclose(train_mod._weighted_ce(logits, target, w), torch.nn.functional.cross_entropy(logits, target))
    w[3] = 5.0
    per = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    assert torch.allclose(train_mod._weighted_ce(logits, target, w), (per.sum() + 4 * per[3]) / 10)
    train(tmp_path / "m", TrainSettings(mix="short", scratchpad="count_match", mark_weight=4.0, **TOY), log_every=1)
    assert json.loads((tmp_path / "m" / "training.json").read_text())["settings"]["mark_weight"] == 4.0
