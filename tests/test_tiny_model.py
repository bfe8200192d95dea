"""The shipped tiny model really answers: held-out prompts, parallel decoding, the chat template."""

from __future__ import annotations

import pytest
import torch

from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
from clover_local.generate.events import Finished, PassDone
from clover_local.loader import SHORT_NAMES, load
from clover_local.tiny import corpus
from clover_local.tiny.evaluate import HELDOUT_SEED, evaluate

pytestmark = pytest.mark.skipif(not SHORT_NAMES["tiny"].is_dir(), reason="tiny model assets are not built")


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load("tiny", "cpu", "float32")


def test_shipped_files_are_small_and_complete():
    folder = SHORT_NAMES["tiny"]
    names = {p.name for p in folder.iterdir()}
    for need in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja", "calibration.jsonl"):
        assert need in names
    assert sum(p.stat().st_size for p in folder.iterdir()) < 12_000_000


def test_answers_a_held_out_prompt_of_every_task(tiny):
    decoder = BlockDiffusionDecoder(tiny.model, tiny.mask_token_id)
    settings = DecodeSettings(max_new_tokens=48, threshold=0.9, stop_token_ids=tiny.stop_token_ids)
    heldout = corpus.make_heldout(70, HELDOUT_SEED)
    train_prompts = {e.prompt for e in corpus.make_train(20000, 0)}
    right = 0
    for ex in heldout[:21]:  # three of each checked task
        assert ex.prompt not in train_prompts
        events = list(decoder.generate(tiny.tokenizer.encode(corpus.render_prompt(ex, enable_thinking=False)), settings))
        text = tiny.tokenizer.decode(events[-1].token_ids)
        right += corpus.check_answer(ex, text)
    assert right >= 18, f"only {right}/21 held-out prompts answered right"


def test_parallel_decoding_reveals_several_tokens_per_pass(tiny):
    report = evaluate(tiny.model, tiny.tokenizer, tiny.mask_token_id, n=14, threshold=0.9)
    assert report.tokens_per_pass >= 1.5
    assert report.accuracy >= 0.8


def test_cli_generate_answers(capsys):
    from tests.conftest import run_cli

    assert run_cli(["generate", "tiny", "--prompt", "add 47+38", "--no-think", "--json", "--device", "cpu"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["text"].split("</think>")[-1].strip() == "85"
    assert out["stats"]["tokens_per_pass"] > 1.0
