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
