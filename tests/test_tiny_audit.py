"""Gaps a mutation audit of the tiny package, the runtime tokenizer and the decoder's small helpers found: each test
pins behaviour that a small change of the code (a flipped comparison, a dropped branch, a changed default) broke
while every other test still passed."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tokenizers import AddedToken, Tokenizer

from clover_local.errors import CloverError
from clover_local.tiny import corpus as C
from clover_local.tokenizer import ChatTokenizer

USER = [{"role": "user", "content": "hi"}]


def _folder(tokenizer_dir: Path, tmp_path: Path, config: dict | None = None, generation: dict | None = None,
            template: str | None = None) -> Path:
    """A copy of the test tokenizer folder with its tokenizer_config.json entries overridden."""
    out = tmp_path / "tok"
    out.mkdir(parents=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", out / "tokenizer.json")
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg.update(config or {})
    (out / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    if template is not None:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    else:
        shutil.copy(tokenizer_dir / "chat_template.jinja", out / "chat_template.jinja")
    if generation is not None:
        (out / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return out


@pytest.fixture
def tok(tokenizer_dir) -> ChatTokenizer:
    return ChatTokenizer.from_folder(tokenizer_dir)


# ------------------------------------------------------------------------------------------ tokenizer.py


def test_specials_survive_decode_and_pieces_by_default(tok):
    """decode and pieces keep special tokens unless asked not to: the chat front ends show them and `pieces`
    promises "".join(pieces(ids)) == decode(ids)."""
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nx\n</think>\n\ny<|endoftext|>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert "".join(tok.pieces(ids)) == text
    assert tok.pieces(ids)[0] == "<|im_start|>" and tok.pieces(ids)[-1] == "<|endoftext|>"


def test_encode_adds_nothing_even_where_the_tokenizer_would(tokenizer_dir):
    """A tokenizer.json whose post-processor adds a BOS (Llama-style) still encodes text as just its tokens: the
    chat template writes every special token the prompt needs."""
    from tokenizers.processors import TemplateProcessing

    raw = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    bos = raw.token_to_id("<|endoftext|>")
    raw.post_processor = TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)])
    assert raw.encode("hi").ids[0] == bos  # (what the library itself would add)
    tok = ChatTokenizer(raw)
    assert tok.encode("hi") == raw.encode("hi", add_special_tokens=False).ids and bos not in tok.encode("hi")


def test_special_token_entries_may_be_added_token_dicts(tokenizer_dir, tmp_path):
    """tokenizer_config.json writes a special token as a string or as an AddedToken dict ({"content": ...})."""
    def dict_of(text: str) -> dict:
        return {"content": text, "lstrip": False, "normalized": False, "rstrip": False, "special": True}

    folder = _folder(tokenizer_dir, tmp_path, {"eos_token": dict_of("</think>"), "pad_token": dict_of("<|im_start|>"),
                                               "mask_token": dict_of("<|im_end|>")},
                     template="{{ eos_token }}|{{ pad_token }}|{{ mask_token }}")
    tok = ChatTokenizer.from_folder(folder)
    assert tok.special_tokens_map()["eos_token"] == "</think>"
    assert tok.token_to_id("</think>") in tok.eos_token_ids
    assert tok.pad_token_id == tok.token_to_id("<|im_start|>")
    # the config's mask token comes before the search for an added token named *mask*
    assert tok.mask_token_id == tok.token_to_id("<|im_end|>") != tok.token_to_id("<|mask|>")
    assert tok.apply_chat_template(USER) == "</think>|<|im_start|>|<|im_end|>"


def test_eos_ids_take_the_generation_configs_list_without_repeats(tokenizer_dir, tmp_path):
    think = ChatTokenizer.from_folder(tokenizer_dir).token_to_id("<think>")
    folder = _folder(tokenizer_dir, tmp_path, {"eos_token": "<|im_end|>"},
                     generation={"eos_token_id": [think, think + 1000], "mask_token_id": 7})
    tok = ChatTokenizer.from_folder(folder)
    ids = tok.eos_token_ids
    assert ids == [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>"), think, think + 1000]
    assert tok.pad_token_id == tok.token_to_id("<|endoftext|>")
    assert tok.mask_token_id == 7  # generation_config's mask id wins over every other source


def test_mask_token_fallback_is_a_special_added_token():
    class Raw:
        def get_added_tokens_decoder(self):
            return {3: AddedToken("<mask_hint>", special=False), 9: AddedToken("<|MASK|>", special=True)}

        def token_to_id(self, token):
            return None

    assert ChatTokenizer(Raw()).mask_token_id == 9


def test_an_older_configs_list_of_templates_uses_the_default(tokenizer_dir, tmp_path):
    folder = _folder(tokenizer_dir, tmp_path, {"chat_template": [
        {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain {{ messages[0].content }}"}]})
    (folder / "chat_template.jinja").unlink()
    assert ChatTokenizer.from_folder(folder).apply_chat_template(USER) == "plain hi"
    folder2 = _folder(tokenizer_dir, tmp_path / "b", {"chat_template": [{"name": "tool_use", "template": "tools"}]})
    (folder2 / "chat_template.jinja").unlink()
    with pytest.raises(CloverError, match="no chat template"):
        ChatTokenizer.from_folder(folder2).apply_chat_template(USER)


def test_use_template_replaces_the_compiled_one(tok):
    first = tok.apply_chat_template(USER)
    assert first.startswith("<|im_start|>user\nhi")
    tok.use_template("[{{ messages[0].content }}]")
    assert tok.apply_chat_template(USER) == "[hi]"


def test_template_keywords_and_tojson_as_transformers_passes_them(tok):
    """Keywords reach the template (over the special-token defaults), `tools`/`documents` default to None, and
    tojson keeps non-ASCII text as it is (transformers' filter does)."""
    tok.use_template("{{ tools | tojson }}|{{ documents is none }}|{{ eos_token }}|{{ enable_thinking }}")
    tools = [{"name": "météo", "city": "東京"}]
    assert tok.apply_chat_template(USER, tools=tools, eos_token="E") == (
        '[{"name": "météo", "city": "東京"}]|True|E|True')
    assert tok.apply_chat_template(USER) == "null|True|<|im_end|>|True"


def test_a_template_that_does_not_compile_is_refused_when_read(tmp_path):
    from clover_local.tokenizer import read_template

    bad = tmp_path / "t.jinja"
    bad.write_text("{% if x %}never closed", encoding="utf-8")
    with pytest.raises(CloverError, match="is invalid"):
        read_template(bad)
    good = tmp_path / "g.jinja"
    good.write_text("{{ messages | length }}", encoding="utf-8")
    assert read_template(good) == "{{ messages | length }}"


def test_a_config_that_is_not_an_object_is_a_clover_error(tokenizer_dir, tmp_path):
    folder = _folder(tokenizer_dir, tmp_path)
    (folder / "tokenizer_config.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CloverError, match="does not hold a JSON object"):
        ChatTokenizer.from_folder(folder)


# ------------------------------------------------------------------------------------------ chat template


def _render(tok, messages, **kw) -> str:
    return tok.apply_chat_template(messages, **kw)


def test_the_template_keeps_reasoning_only_after_the_last_user_turn(tok):
    reasoned = {"role": "assistant", "content": "done", "reasoning_content": "\nsteps\n"}
    text = _render(tok, [{"role": "user", "content": "a"}, reasoned, {"role": "user", "content": "b"}, reasoned,
                         {"role": "assistant", "content": "\n\nmore"}], add_generation_prompt=False)
    assert text == ("<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\ndone<|im_end|>\n"
                    "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>\nsteps\n</think>\n\ndone<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\nmore<|im_end|>\n")
    # reasoning written inline in the content is split off the same way (what follows the last <think>)
    inline = {"role": "assistant", "content": "pre<think>\nwhy\n</think>\n\nans"}
    assert _render(tok, [{"role": "user", "content": "q"}, inline], add_generation_prompt=False).endswith(
        "<|im_start|>assistant\n<think>\nwhy\n</think>\n\nans<|im_end|>\n")


def test_a_system_message_must_come_first(tok):
    assert _render(tok, [{"role": "system", "content": "s"}] + USER).startswith("<|im_start|>system\ns<|im_end|>\n")
    with pytest.raises(CloverError, match="system"):
        _render(tok, USER + [{"role": "assistant", "content": "x"}, {"role": "system", "content": "s"}])


# ------------------------------------------------------------------------------------------ corpus.py


def test_thinking_traces_come_at_their_documented_rates():
    train = C.make_train(3000, 11)
    checked = [e for e in train if e.task in C.CHECKED_TASKS]
    chats = [e for e in train if e.task in C.CHAT_TASKS]
    share = sum(bool(e.thinking) for e in checked) / len(checked)
    chat_share = sum(bool(e.thinking) for e in chats) / len(chats)
    assert abs(share - C.TASK_THINKING_RATE) < 0.05, share
    assert abs(chat_share - C.CHAT_THINKING_RATE) < 0.08, chat_share


def test_the_heldout_side_is_its_documented_share_of_a_stable_hash():
    rng = random.Random(5)
    prompts = [f"add {rng.randint(10, 999)}+{rng.randint(10, 999)} #{i}" for i in range(20000)]
    share = sum(map(C.is_heldout_prompt, prompts)) / len(prompts)
    assert abs(share - C.HELDOUT_PERCENT / 100) < 0.006, share
    import hashlib

    for p in prompts[:300]:
        bucket = int(hashlib.sha256(p.encode()).hexdigest()[:8], 16) % 100
        assert C.is_heldout_prompt(p) == (bucket < C.HELDOUT_PERCENT)


def test_task_prompts_keep_their_documented_shapes():
    rng = random.Random(17)
    for _ in range(300):
        add = C.make_example("add", rng)
        assert re.fullmatch(r"add [1-9]\d{1,2}\+[1-9]\d{1,2}", add.prompt), add.prompt
        look = C.make_example("lookup", rng)
        keys = [kv.split("=")[0] for kv in look.prompt.split(" in ")[1].split()]
        assert len(set(keys)) == len(keys) and 2 <= len(keys) <= 4, look.prompt


def test_the_answer_is_what_follows_the_last_think_end_without_stop_tokens():
    ex = C.Example("add", "add 12+30", "", "42")
    assert C.extract_answer("<think>\na</think>b\n</think>\n\n42") == "42"
    assert C.check_answer(ex, "<think>\n7\n</think>\n\n5</think>42")
    for stop in ("<|im_end|>", "<|endoftext|>"):
        assert C.extract_answer(f"42 {stop}") == "42"
        assert C.check_answer(ex, f"\n42\n{stop}")
    assert C.extract_answer("no thinking") == "no thinking"
    assert C.extract_answer("<think>\n42") is None and C.extract_answer("<think>") is None  # thinking never ended


def test_an_earlier_exchange_is_a_right_answer_of_any_task():
    examples = C.make_train(600, 3, multi_turn=0.5)
    firsts = [e.history[0] for e in examples if e.history]
    assert len(firsts) > 200
    answered = 0
    for prompt, answer in firsts:
        m = re.fullmatch(r"add (\d+)\+(\d+)", prompt)
        if m:
            assert answer == str(int(m[1]) + int(m[2]))
            answered += 1
        elif prompt.startswith("reverse "):
            assert answer == " ".join(reversed(prompt.split()[1:]))
            answered += 1
    assert answered > 40
    chat_prompts = {p for p, _ in firsts if not p.isascii() or p.endswith("?")}
    assert chat_prompts  # chats are earlier exchanges too
    msgs = C.history_messages(C.Example("add", "x", "", "y", (("u1", "a1"), ("u2", "a2"))))
    assert msgs == [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
                    {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}]


def test_an_empty_task_list_is_refused():
    with pytest.raises(ValueError, match="empty"):
        C.make_train(3, 0, tasks=[])


def test_rendering_matches_the_template_for_a_trace_with_blank_lines(tok):
    """assistant_content strips the trace as the template strips reasoning: the equality the training data rests
    on holds for a trace that starts or ends with newlines too."""
    ex = C.Example("add", "add 1+2", "\nstep\n\n", "3")
    assert tok.apply_chat_template(C.to_messages(ex), add_generation_prompt=False) == C.render_conversation(ex)
    assert "<think>\nstep\n</think>" in C.render_conversation(ex)
    # a generator's prompt: thinking on unless asked, as the template's default
    assert C.render_prompt(ex) == tok.apply_chat_template(C.to_messages(ex)[:-1]) == C.render_prompt(ex, True)


# ------------------------------------------------------------------------------------------ tokenizer_build.py


def test_build_tokenizer_refuses_a_vocabulary_below_the_bytes_and_added_tokens():
    from clover_local.tiny.tokenizer_build import ADDED_TOKENS, build_tokenizer

    with pytest.raises(ValueError, match="at least"):
        build_tokenizer(["abc abc"], vocab_size=256 + len(ADDED_TOKENS) - 1)
    tok = build_tokenizer(["abc abc"], vocab_size=256 + len(ADDED_TOKENS))
    assert tok.get_vocab_size() == 256 + len(ADDED_TOKENS)


def test_tokenizer_config_names_the_special_tokens_and_needs_every_added_token(tokenizer_dir):
    from clover_local.tiny.tokenizer_build import tokenizer_config

    raw = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    cfg = tokenizer_config(raw, "T")
    assert cfg["additional_special_tokens"] == ["<|im_start|>", "<|mask|>"]
    assert (cfg["mask_token"], cfg["split_special_tokens"], cfg["chat_template"]) == ("<|mask|>", False, "T")
    flags = {d["content"]: d["special"] for d in cfg["added_tokens_decoder"].values()}
    assert flags["<think>"] is False and flags["</think>"] is False and flags["<|im_end|>"] is True
    from tokenizers import models

    with pytest.raises(ValueError, match="lacks the added token"):
        tokenizer_config(Tokenizer(models.BPE()), "T")


def test_a_prompt_tokenizes_as_a_prefix_of_its_conversation(tokenizer_dir):
    """Training marks the prompt by the length of its own encoding, so the prompt's tokens must be the first
    tokens of the whole conversation, thinking on or off, whatever the answer starts with."""
    raw = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    examples = C.make_train(150, 8) + [C.Example("chat_en", "hi there", "", "\n\n  Hello  world")]
    for ex in examples:
        full = raw.encode(C.render_conversation(ex)).ids
        for thinking in (True, False):
            if not thinking and ex.thinking:
                continue
            head = raw.encode(C.render_prompt(ex, enable_thinking=thinking)).ids
            assert full[:len(head)] == head, (ex, thinking)
    pieces = [p for p, _ in raw.pre_tokenizer.pre_tokenize_str("the word\n\n\nThe 12")]
    assert pieces == ["the", "Ġword", "ĊĊĊ", "The", "Ġ", "1", "2"]  # a newline run is one piece, a word its space


# ------------------------------------------------------------------------------------------ muon.py


def test_muon_takes_two_nesterov_steps_as_written():
    """Two steps of Muon against the update spelled out: momentum buf = mu * buf + g, the orthogonalised
    g + mu * buf as the step, decoupled weight decay lr * wd, and Moonshot's 0.2 * sqrt(max(out, in)) scale. A
    parameter without a gradient is left alone (weight decay included)."""
    from clover_local.tiny.muon import Muon, orthogonalize

    torch.manual_seed(3)
    p0 = torch.randn(24, 40)
    grads = [torch.randn(24, 40), torch.randn(24, 40)]
    idle0 = torch.randn(8, 8)
    p, idle = torch.nn.Parameter(p0.clone()), torch.nn.Parameter(idle0.clone())
    lr, wd, mu = 0.01, 0.1, 0.95
    opt = Muon([p, idle], lr=lr, weight_decay=wd)
    want, buf = p0.clone(), torch.zeros_like(p0)
    for g in grads:
        p.grad = g.clone()
        opt.step()
        buf = mu * buf + g
        want = want * (1 - lr * wd) - lr * 0.2 * math.sqrt(40) * orthogonalize(g + mu * buf)
        torch.testing.assert_close(p.detach(), want, rtol=1e-4, atol=1e-5)
    assert torch.equal(idle.detach(), idle0)
    with pytest.raises(ValueError, match="matrices"):
        Muon([torch.nn.Parameter(torch.randn(5))], lr=lr)


def test_muon_steps_downhill():
    """On a random least-squares problem each step lowers the loss (the sign of the update)."""
    from clover_local.tiny.muon import Muon

    torch.manual_seed(4)
    a, b = torch.randn(64, 32), torch.randn(64, 48)
    w = torch.nn.Parameter(torch.randn(32, 48) * 0.1)
    opt = Muon([w], lr=0.01)
    losses = []
    for _ in range(5):
        loss = ((a @ w - b) ** 2).mean()
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(x > y for x, y in zip(losses, losses[1:])), losses


# ------------------------------------------------------------------------------------------ train.py


def _raw(tokenizer_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))


def test_batches_mark_real_and_maskable_tokens_exactly(tokenizer_dir):
    """The prompt (up to `<|im_start|>assistant\\n`) is never masked, the answer from `<think>` on may be, padding
    is `<|endoftext|>` and not real; each mark weight sits on its own conversation's marks."""
    from clover_local.tiny import train as T

    raw = _raw(tokenizer_dir)
    examples = C.make_train(60, 2, mix="count", scratchpad=["count_match"])
    data = T.Batches(examples, raw, 16, 1, mark_weight=3.0)
    think = raw.token_to_id("<think>")
    for ex, (ids, prompt_len) in zip(examples, data.rows):
        assert ids[prompt_len] == think and think not in ids[:prompt_len]
    picks = data.rows[:5]
    clean, real, maskable = data.collate(picks)
    assert clean.shape[1] % 16 == 0
    for row, (ids, prompt_len) in enumerate(picks):
        n = len(ids)
        assert clean[row, :n].tolist() == ids and set(clean[row, n:].tolist()) <= {raw.token_to_id("<|endoftext|>")}
        assert real[row].tolist() == [True] * n + [False] * (clean.shape[1] - n)
        assert maskable[row].tolist() == [False] * prompt_len + [True] * (clean.shape[1] - prompt_len)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        clean, noisy, masked, real, maskable, weight = data.sample(6, gen)
        for row in range(clean.shape[0]):
            ids = clean[row][real[row]].tolist()
            i = next(i for i, (r, _) in enumerate(data.rows) if r == ids)
            heavy = (weight[row] == 3.0).nonzero().flatten().tolist()
            assert heavy == data.marks[i]
        assert not (masked & ~maskable).any() and torch.equal(noisy[~masked], clean[~masked])


def test_batches_draw_every_conversation_alike_whatever_its_length(tokenizer_dir):
    """A length bucket is drawn in proportion to the conversations it holds, so short and long conversations are
    trained on as often as the corpus has them."""
    from clover_local.tiny import train as T

    data = T.Batches(C.make_train(200, 4), _raw(tokenizer_dir), 16, 3)
    sizes = {k: len(v) for k, v in data.buckets.items()}
    assert len(sizes) >= 3 and max(sizes.values()) > 2 * min(sizes.values())  # (uneven: the test means something)
    gen = torch.Generator().manual_seed(5)
    drawn = [data.sample(1, gen)[0].shape[1] // 16 for _ in range(500)]
    for k, size in sizes.items():
        assert abs(drawn.count(k) / len(drawn) - size / 200) < 0.07, (k, drawn.count(k), size)


def _toy_settings(**kw):
    from clover_local.tiny.train import TrainSettings

    base = dict(hidden_size=32, num_hidden_layers=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                shared_expert_intermediate_size=16, head_dim=16, block_size=16)
    return TrainSettings(**(base | kw))


def _toy_model(raw, s):
    from clover_local.checkpoint.synthetic import tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.clover import CloverModel
    from clover_local.tiny import train as T

    model = CloverModel(parse_config(tiny_config_dict(T.model_spec(s, raw))))
    T.init_weights(model, 0)
    return model


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_batch_loss_is_the_masked_loss_plus_the_weighted_next_token_loss(tokenizer_dir, monkeypatch, scope):
    from clover_local.tiny import train as T

    raw = _raw(tokenizer_dir)
    s = _toy_settings(ar_weight=0.37, ar_scope=scope)
    model = _toy_model(raw, s)
    data = T.Batches(C.make_train(40, 5), raw, 16, 2)
    batch = data.sample(3, torch.Generator().manual_seed(1))
    clean, noisy, masked, real, maskable, weight = batch
    calls = []
    ce = T._weighted_ce

    def spy(logits, target, w):
        out = ce(logits, target, w)
        calls.append((target, out))
        return out

    monkeypatch.setattr(T, "_weighted_ce", spy)
    loss = T.batch_loss(model, batch, s)
    (masked_targets, masked_loss), (next_targets, next_loss) = calls
    assert masked_targets.tolist() == clean[masked].tolist()
    want = []
    for row in range(clean.shape[0]):
        n, start = int(real[row].sum()), int((~maskable[row]).sum())
        want += clean[row, (start if scope == "assistant" else 1):n].tolist()
    assert next_targets.tolist() == want
    torch.testing.assert_close(loss, masked_loss + 0.37 * next_loss)


def test_optimizers_decay_matrices_only_and_run_muon_at_its_scale(tokenizer_dir):
    from clover_local.tiny import train as T

    raw = _raw(tokenizer_dir)
    s = _toy_settings(optimizer="muon", muon_lr_scale=2.5, lr=1e-3, weight_decay=0.03)
    model = _toy_model(raw, s)
    adamw, muon = T.optimizers(model, s)
    decay, no_decay = adamw.param_groups
    assert decay["weight_decay"] == 0.03 and all(p.ndim >= 2 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.ndim < 2 for p in no_decay["params"])
    (group,) = muon.param_groups
    assert group["lr"] == pytest.approx(2.5e-3) and group["lr_scale"] == 2.5 and group["weight_decay"] == 0.03


def test_the_learning_rate_warms_up_decays_and_keeps_a_floor(tmp_path, monkeypatch):
    from clover_local.tiny import train as T

    seen, made = [], []
    real_opts, real_loss = T.optimizers, T.batch_loss

    def opts(model, s):
        made.extend(real_opts(model, s))
        return made

    def loss(model, batch, s):
        seen.append([g["lr"] for o in made for g in o.param_groups])
        return real_loss(model, batch, s)

    monkeypatch.setattr(T, "optimizers", opts)
    monkeypatch.setattr(T, "batch_loss", loss)
    s = _toy_settings(n_train=200, steps=4, batch_size=2, warmup=2, lr=1e-3, optimizer="muon", muon_lr_scale=2.0,
                      threads=1, num_experts=16)
    T.train(tmp_path / "m", s, log_every=100)
    adam = [step[0] for step in seen]
    muon = [step[-1] for step in seen]
    want = [1e-3 * min(1, t / 2) * 0.5 * (1 + math.cos(math.pi * t / 4)) for t in range(1, 5)]
    want = [max(w, 2e-5) for w in want]
    assert adam == pytest.approx(want) and muon == pytest.approx([2 * w for w in want])
    assert adam[-1] == pytest.approx(2e-5)  # the floor: 2 % of lr at the end


def test_init_weights_starts_norms_at_identity_and_decays_in_their_ranges(tokenizer_dir):
    raw = _raw(tokenizer_dir)
    model = _toy_model(raw, _toy_settings())
    seen = set()
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if "layernorm" in name or name == "norm.weight":
            assert torch.count_nonzero(p) == 0, name  # (1 + w) norms: zero is the identity
            seen.add("norm")
        elif name.endswith("linear_attn.norm.weight"):
            assert torch.all(p == 1.0)
            seen.add("gated norm")
        elif leaf == "A_log":
            assert p.exp().min() >= 1.0 and p.exp().max() <= 16.0
            seen.add("A")
        elif leaf == "dt_bias":
            dt = torch.nn.functional.softplus(p)
            assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 1e-1 * 1.001, dt
            seen.add("dt")
    assert seen == {"norm", "gated norm", "A", "dt"}


def test_load_weights_needs_every_tensor(tokenizer_dir, tmp_path):
    from safetensors.torch import save_file

    from clover_local.tiny import train as T

    raw = _raw(tokenizer_dir)
    model = _toy_model(raw, _toy_settings())
    state = {(k if k == "lm_head.weight" else f"model.{k}"): v.to(torch.bfloat16).contiguous()
             for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"))
    other = _toy_model(raw, _toy_settings())
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    T.load_weights(other, tmp_path)
    torch.testing.assert_close(other.lm_head.weight, model.lm_head.weight.bfloat16().float())
    state.pop("model.norm.weight")
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(RuntimeError, match="norm.weight"):
        T.load_weights(other, tmp_path)


# ------------------------------------------------------------------------------------------ evaluate.py


def test_run_prompt_counts_passes_revealed_positions_and_the_stop():
    from clover_local.generate.events import BlockCommitted, DecodeStats, Finished, PassDone, Reveal
    from clover_local.tiny import evaluate as E

    def events(stop_reason):
        yield PassDone(0, 0, [Reveal(0, 4, 0.9), Reveal(2, 5, 0.8)], [4, None, 5], 0)
        yield PassDone(0, 1, [Reveal(1, 6, 0.95)], [4, 6, 5], 0)
        yield BlockCommitted(0, [4, 6, 5], 2)
        yield Finished([4, 6, 5], DecodeStats(tokens=3, stop_reason=stop_reason))

    class Decoder:
        def __init__(self, reason):
            self.reason = reason

        def generate(self, ids, settings):
            assert ids == [1, 2]
            return events(self.reason)

    tok = SimpleNamespace(encode=lambda text: [1, 2])
    run = E.run_prompt(Decoder("stop"), tok, "p", None)
    assert (run.ids, run.passes, run.revealed, run.stopped, run.decoded) == ([4, 6, 5], 2, 3, True, 4)
    cut = E.run_prompt(Decoder("length"), tok, "p", None)
    assert (cut.stopped, cut.decoded) == (False, 3)


def test_evaluate_scores_exact_answers_and_reports_the_rates(tokenizer_dir, monkeypatch):
    """evaluate's metrics from known runs: accuracy over prompts (not a mean of the tasks' rates), per-task rates,
    tokens per pass with and without the stop token, revealed positions per pass, the wrong answers only, and the
    chat sample rendered by the chat template."""
    from clover_local.tiny import evaluate as E

    tok = ChatTokenizer.from_folder(tokenizer_dir)
    held = C.make_heldout(15, 7)
    by_prompt = {C.render_prompt(ex, True): ex for ex in held}
    rng = random.Random(9)
    runs, asked = [], []

    def fake_run(decoder, tok_, prompt, settings):
        asked.append(prompt)
        ex = by_prompt.get(prompt)
        text = "ok" if ex is None else (ex.answer if ex.task in ("add", "reverse") else ex.answer + "9")
        ids = tok.encode(text)
        run = E.PromptRun(ids, rng.randint(1, 5), len(ids) + rng.randint(1, 4), rng.random() < 0.7)
        if ex is not None:
            runs.append(run)
        return run

    monkeypatch.setattr(E, "run_prompt", fake_run)
    monkeypatch.setattr(E, "BlockDiffusionDecoder", lambda model, mask: None)
    report = E.evaluate(None, tok, 0, n=15, seed=7)
    assert [by_prompt[p] for p in asked[:15]] == held
    assert asked[15:] == [tok.apply_chat_template([{"role": "user", "content": p}]) for p in E.CHAT_PROMPTS]
    assert report.n == 15 and report.accuracy == pytest.approx(5 / 15)  # add: 3 prompts, reverse: 2
    assert report.per_task["add"] == report.per_task["reverse"] == 1.0 and report.per_task["lookup"] == 0.0
    passes = sum(r.passes for r in runs)
    assert report.tokens_per_pass == pytest.approx(sum(len(r.ids) for r in runs) / passes)
    assert report.answer_tokens_per_pass == pytest.approx(sum(len(r.ids) + r.stopped for r in runs) / passes)
    assert report.revealed_per_pass == pytest.approx(sum(r.revealed for r in runs) / passes)
    assert len(report.failures) == 10 and all(f["got"] == f["expected"] + "9" for f in report.failures)
    assert [c["assistant"] for c in report.chat] == ["ok", "ok"]


def test_masked_ce_averages_over_the_masked_tokens_only(tokenizer_dir):
    """A model that predicts nothing (uniform logits) scores exactly log(vocab) whatever was masked."""
    from clover_local.tiny.evaluate import masked_ce

    tok = ChatTokenizer.from_folder(tokenizer_dir)
    vocab = tok.vocab_size
    model = SimpleNamespace(
        forward_all_blocks=lambda clean, noisy, blocks: (None, torch.zeros(int(blocks.sum()), 16, 4)),
        lm_head=lambda h: torch.zeros(h.shape[0], vocab))
    ce, count = masked_ce(model, tok, n=21, block_size=16)
    assert count > 21 and ce == pytest.approx(math.log(vocab), rel=1e-6)


def test_trained_traces_and_the_sampling_flags(tmp_path):
    from clover_local.tiny.evaluate import _sampling, trained_traces

    assert trained_traces(tmp_path) == ()
    (tmp_path / "training.json").write_text(json.dumps({"settings": {"scratchpad": ""}}))
    assert trained_traces(tmp_path) == ()
    (tmp_path / "training.json").write_text(json.dumps({"settings": {"scratchpad": "add,count_match"}}))
    assert trained_traces(tmp_path) == ("add", "count_match")
    args = SimpleNamespace(temperature=0.0, top_p=0.9, top_k=5, seed=3)
    assert _sampling(args) == {}
    args.temperature = 0.7
    assert _sampling(args) == {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "seed": 3}


# ------------------------------------------------------------------------------------------ thinking.py


def test_answer_room_leaves_a_quarter_up_to_its_cap_from_its_threshold():
    from clover_local.generate.thinking import ANSWER_ROOM, ROOM_FROM, answer_room_budget

    assert answer_room_budget(ROOM_FROM - 1) is None
    assert answer_room_budget(ROOM_FROM) == ROOM_FROM - ROOM_FROM // 4
    rng = random.Random(2)
    for n in [rng.randint(ROOM_FROM, 20000) for _ in range(50)] + [4 * ANSWER_ROOM, 4 * ANSWER_ROOM + 4]:
        assert answer_room_budget(n) == n - min(ANSWER_ROOM, n // 4)
    assert answer_room_budget(10_000) == 10_000 - ANSWER_ROOM


def test_a_closing_text_longer_than_a_block_fills_the_blocks_after_it():
    from clover_local.generate.thinking import BudgetTracker, ThinkBudget

    end = 99
    close = [81, 82, 83, 84, 85, 86, 87, end]
    track = BudgetTracker(ThinkBudget(9, close, 5, end, opened=True))
    assert track.place(0, 0, 4) == ([(1, 81), (2, 82), (3, 83)], 1)
    assert track.place(4, 0, 4) == ([(0, 84), (1, 85), (2, 86), (3, 87)], 0)  # never past the block's end
    assert track.place(8, 0, 4) == ([(0, end)], 0)
    assert track.place(12, 0, 4) == ([], 0)


def test_a_budget_that_runs_out_exactly_at_a_blocks_end_closes_in_the_next():
    from clover_local.generate.thinking import BudgetTracker, ThinkBudget

    close = [91, 92, 93, 94]
    track = BudgetTracker(ThinkBudget(10, close, 5, 94, opened=True))
    assert track.place(0, 0, 6) == ([], 0)  # 6 thought tokens fill the block: nothing refused in it
    assert track.place(6, 0, 6) == (list(enumerate(close)), 0)
    assert track.place(12, 0, 6) == ([], 0)  # placed once, even before its block commits


def test_a_budget_counts_from_the_token_after_the_models_think():
    from clover_local.generate.thinking import BudgetTracker, ThinkBudget

    start, end = 5, 94
    track = BudgetTracker(ThinkBudget(8, [91, 92, 93, end], start, end))
    track.committed(0, [7, start, 1, 1])
    assert track.since == 2
    assert track.place(4, 0, 4) == ([(2, 91), (3, 92)], 2)  # 2 thought + 2 more, then the closing text


# ------------------------------------------------------------------------------------------ trigger.py


def _watch(tok, armed_by=None):
    from clover_local.generate.json_schema import SchemaConstraint
    from clover_local.generate.trigger import Trigger
    from clover_local.serve.xml_calls import TagVocab, XmlCalls

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}]
    return Trigger(SchemaConstraint(TagVocab(tok), tok.eos_token_ids, XmlCalls(tools, False)), b"<tool_call>",
                   armed_by).watch()


def test_a_special_token_inside_the_tag_is_no_trigger(tok):
    watch = _watch(tok)
    head, tail = tok.encode("x <tool"), tok.encode("_call>\n<function=f>\n")
    assert watch.find(head + tail) is not None
    assert watch.find(head + [tok.token_to_id("<|im_start|>")] + tail) is None


def test_the_committed_tail_holds_a_whole_tag_across_commits(tok):
    """A tag written one byte a token, over two commits, is still found (the tail keeps as many tokens as the tag
    has bytes, from every commit since arming)."""
    byte_ids = [tok.token_to_id(c) for c in "<tool_call>"]
    assert None not in byte_ids
    watch = _watch(tok)
    watch.committed(tok.encode("ok ") + byte_ids[:4])
    watch.committed(byte_ids[4:])
    run = tok.encode("\n<function=f>\n")
    kept, state = watch.find(run)
    assert kept == len(run) and state.feed_all(b"<parameter=a>\nv\n</parameter>\n</function>\n</tool_call>")


def test_a_committed_call_start_holds_the_next_block_to_the_grammar(tok):
    """The tag committed, then a block whose first token the grammar refuses: the call is held from there (none of
    the block kept, the grammar's state after the committed tag), not left free."""
    watch = _watch(tok)
    watch.committed(tok.encode("x <tool_call>"))
    kept, state = watch.find(tok.encode("zzz"))
    assert kept == 0 and state.feed_all(b"\n<function=f>\n<parameter=a>\nv\n</parameter>\n</function>\n</tool_call>")


def test_a_token_that_runs_past_the_tag_into_what_the_grammar_refuses_is_no_trigger(tok):
    """Where the token the tag starts in goes on with bytes the call's grammar refuses, the answer stays free."""
    from clover_local.generate.json_schema import SchemaConstraint
    from clover_local.generate.trigger import Trigger
    from clover_local.serve.xml_calls import TagVocab, XmlCalls

    class Vocab(TagVocab):
        def token_bytes(self, token_id):
            return {1000: b"<tool_call>!", 1001: b"<tool_call>\n"}.get(token_id) or super().token_bytes(token_id)

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    trigger = Trigger(SchemaConstraint(Vocab(tok), tok.eos_token_ids, XmlCalls(tools, False)))
    lead = tok.encode("so ")
    assert trigger.watch().find(lead + [1000]) is None
    kept, state = trigger.watch().find(lead + [1001])
    assert kept == len(lead) + 1 and state.feed_all(b"<function=f>\n</function>\n</tool_call>")


def test_arming_counts_only_what_follows_the_arming_token(tok):
    end = tok.token_to_id("</think>")
    watch = _watch(tok, armed_by=end)
    tag = tok.encode("<tool_call>\n<function=f>\n")
    watch.committed(tag)  # inside the thinking: text
    assert not watch.armed and watch.find(tok.encode("more")) is None
    assert watch.find(tag + [end]) is None  # a tag before the arming token in the same run: still text
    run = tok.encode("a") + [end] + tag
    kept, _ = watch.find(run)
    assert kept == len(run)


# ------------------------------------------------------------------------------------------ ranges.py, events.py


def test_range_ends_their_text_and_the_off_values():
    from clover_local.generate.ranges import DECODE_RANGES, PENALTY_RANGES, Penalties, Range

    closed, half = Range(-1.5, 2.5), Range(0.0, 1.0, True)
    assert closed.allows(-1.5) and closed.allows(2.5) and not closed.allows(2.5001) and not closed.allows(-1.6)
    assert not half.allows(0.0) and half.allows(1e-9) and half.allows(1.0) and not half.allows(1.0001)
    assert (str(closed), str(half)) == ("[-1.5, 2.5]", "(0, 1]")
    assert str(DECODE_RANGES["threshold"]) == "(0, 1]" and str(PENALTY_RANGES["repetition_penalty"]) == "(0, 10]"
    assert DECODE_RANGES["temperature"].high == 10.0  # the command line's; the wire formats keep OpenAI's 2
    for name, r in {**DECODE_RANGES, **PENALTY_RANGES}.items():
        if r.off is not None:
            assert r.allows(r.off), name
    assert DECODE_RANGES["top_p"].off == 1.0 and PENALTY_RANGES["repetition_penalty"].off == 1.0
    assert not Penalties().active
    rng = random.Random(6)
    for field in ("presence", "frequency", "repetition"):
        value = rng.uniform(0.1, 1.9) + (field == "repetition") * 0.05
        assert Penalties(**{field: value}).active, field


def test_decode_stats_rates_and_their_rounding():
    from clover_local.generate.events import DecodeStats

    rng = random.Random(8)
    tokens, passes, seconds = rng.randint(5, 500), rng.randint(1, 60), rng.uniform(0.5, 9.0)
    stats = DecodeStats(tokens=tokens, passes=passes, seconds=seconds, prefill_seconds=seconds / 3)
    assert stats.tokens_per_pass == tokens / passes and stats.tokens_per_second == tokens / seconds
    assert stats.to_dict() == {"tokens": tokens, "passes": passes, "tokens_per_pass": round(tokens / passes, 4),
                               "seconds": round(seconds, 4), "tokens_per_second": round(tokens / seconds, 3)}
    empty = DecodeStats()
    assert (empty.tokens_per_pass, empty.tokens_per_second, empty.stop_reason) == (0.0, 0.0, "length")
