"""The tiny tokenizer builder, the shipped chat template and the runtime `ChatTokenizer` loader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clover_local.errors import CloverError
from clover_local.tiny import corpus as C
from clover_local.tiny.tokenizer_build import ADDED_TOKENS, build_tokenizer, write_tokenizer_assets
from clover_local.tokenizer import ChatTokenizer

EN = "Hello, world! The quick brown fox jumps over the lazy dog.\n\n  Tabs\tand  spaces  "
ZH = "你好！今天天气很好，我们去公园散步吧。龘"  # the last character never occurs in training
MIXED = "add 123+45 = 168; 中文 and English 🙂"

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "你好"}],
    [
        {"role": "user", "content": "add 12+30"},
        {"role": "assistant", "content": "<think>\nadd digits from the right, carrying.\n</think>\n\n42"},
        {"role": "user", "content": "reverse a b c"},
    ],
    [
        {"role": "system", "content": "You are Clover."},
        {"role": "user", "content": "what is the capital of Peru?"},
        {"role": "assistant", "content": "<think>\nThe capital.\n</think>\n\nLima."},
        {"role": "user", "content": "谢谢"},
        {"role": "assistant", "content": "不客气！"},
    ],
]


def _texts() -> list[str]:
    return [C.render_conversation(e) for e in C.make_train(1500, 0)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny_tok")
    write_tokenizer_assets(build_tokenizer(_texts(), vocab_size=512), out)
    return out


@pytest.fixture(scope="module")
def tok(folder: Path) -> ChatTokenizer:
    return ChatTokenizer.from_folder(folder)


def test_folder_has_the_three_files(folder: Path) -> None:
    assert {p.name for p in folder.iterdir()} >= {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|endoftext|>" and cfg["bos_token"] is None
    assert cfg["chat_template"] == (folder / "chat_template.jinja").read_text(encoding="utf-8")
    assert sorted(d["content"] for d in cfg["added_tokens_decoder"].values()) == sorted(t for t, _ in ADDED_TOKENS)


def test_build_is_deterministic() -> None:
    texts = _texts()[:400]
    assert build_tokenizer(texts, 400).to_str() == build_tokenizer(texts, 400).to_str()


@pytest.mark.parametrize("text", [EN, ZH, MIXED, "", " ", "\n"])
def test_round_trip(tok: ChatTokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_vocab_size(tok: ChatTokenizer) -> None:
    assert tok.vocab_size == 512


def test_special_tokens_are_single_ids(tok: ChatTokenizer) -> None:
    ids = []
    for text, _special in ADDED_TOKENS:
        enc = tok.encode(text)
        assert len(enc) == 1 and enc[0] == tok.token_to_id(text), text
        ids.append(enc[0])
    assert len(set(ids)) == len(ids)
    assert tok.think_start_id == tok.token_to_id("<think>") is not None
    assert tok.think_end_id == tok.token_to_id("</think>") is not None
    assert tok.eos_token_ids[:2] == [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    assert tok.mask_token_id == tok.token_to_id("<|mask|>")
    assert tok.token_to_id("<|no such token|>") is None
    # inside text they are still found, and nothing is added around the text
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == tok.token_to_id("<|im_start|>") and ids[-1] == tok.token_to_id("<|im_end|>")
    # specials are dropped on request; the think tags stay, as in Qwen3
    text = "<|im_start|>assistant\n<think>\nx\n</think>\n\ny<|im_end|>"
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == "assistant\n<think>\nx\n</think>\n\ny"


def test_digits_and_spaced_letters_are_single_tokens(tok: ChatTokenizer) -> None:
    ids = tok.encode("9876543210")
    assert [tok.decode([i]) for i in ids] == list("9876543210")
    ids = tok.encode("add 1234+5678")
    digits = [tok.decode([i]) for i in ids if tok.decode([i]).isdigit()]
    assert "".join(digits) == "12345678" and all(len(d) == 1 for d in digits)
    ids = tok.encode("b a n a n a")
    assert [tok.decode([i]).strip() for i in ids] == list("banana")


def test_answers_fit_a_block(tok: ChatTokenizer) -> None:
    """Checked answers plus `<|im_end|>` fit one 16-token block; prompts stay short."""
    for ex in C.make_train(600, 5):
        if ex.task in C.CHECKED_TASKS:
            assert len(tok.encode(ex.answer)) + 1 <= 16, ex
        assert len(tok.encode(C.render_prompt(ex))) <= 48, ex


def test_corpus_rendering_matches_the_template(tok: ChatTokenizer) -> None:
    examples = C.make_train(60, 2, multi_turn=0.5) + C.make_heldout(14, 2, history=True)
    assert 10 < sum(bool(ex.history) for ex in examples) < 60
    for ex in examples:
        msgs = C.to_messages(ex)
        assert tok.apply_chat_template(msgs, add_generation_prompt=False) == C.render_conversation(ex)
        for thinking in (True, False):
            got = tok.apply_chat_template(msgs[:-1], add_generation_prompt=True, enable_thinking=thinking)
            assert got == C.render_prompt(ex, enable_thinking=thinking)


def test_history_thinking_is_dropped(tok: ChatTokenizer) -> None:
    text = tok.apply_chat_template(CONVERSATIONS[2])
    assert "add digits" not in text and "<|im_start|>assistant\n42<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nreverse a b c<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template(CONVERSATIONS[0], enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_template_errors_are_clover_errors(tok: ChatTokenizer) -> None:
    with pytest.raises(CloverError, match="role"):
        tok.apply_chat_template([{"role": "robot", "content": "x"}])
    with pytest.raises(CloverError, match="system"):
        tok.apply_chat_template([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}])


def _transformers_tokenizer(folder: Path):
    try:
        from transformers import AutoTokenizer
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"transformers is not importable here ({type(exc).__name__}: {exc})")
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # pragma: no cover - depends on the transformers version
        pytest.skip(f"transformers could not load the tokenizer folder ({type(exc).__name__}: {exc})")


@pytest.mark.parametrize("enable_thinking", [True, False])
def test_matches_transformers(folder: Path, tok: ChatTokenizer, enable_thinking: bool) -> None:
    hf = _transformers_tokenizer(folder)
    conversations = CONVERSATIONS + [C.to_messages(e) for e in C.make_train(20, 4)]
    for messages in conversations:
        for add_generation_prompt in (True, False):
            ours = tok.apply_chat_template(messages, add_generation_prompt, enable_thinking)
            theirs = hf.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                enable_thinking=enable_thinking,
            )
            assert ours == theirs, messages
            assert tok.encode(ours) == hf.encode(ours, add_special_tokens=False)
    for text in (EN, ZH, MIXED):
        ids = tok.encode(text)
        assert hf.decode(ids) == tok.decode(ids) == text
        assert hf.decode(ids, skip_special_tokens=True) == tok.decode(ids, skip_special_tokens=True)


def test_missing_tokenizer_json_is_a_clover_error(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(CloverError, match="does not exist"):
        ChatTokenizer.from_folder(tmp_path / "nowhere")
    shutil.copy(folder / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    with pytest.raises(CloverError, match="tokenizer.json"):
        ChatTokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CloverError, match="tokenizer.json"):
        ChatTokenizer.from_folder(tmp_path)


def test_unreadable_tokenizer_files_say_why_in_one_phrase(folder: Path, tmp_path: Path) -> None:
    """A tokenizer_config.json or chat_template.jinja that is not UTF-8 says where it stops being UTF-8 (as every
    text file a person hands over does: text_files.unreadable), and a config that is not JSON says where."""
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(folder / name, tmp_path / name)
    (tmp_path / "chat_template.jinja").write_bytes(b"{{ x }}\xff")
    with pytest.raises(CloverError, match=r"chat_template.jinja: not UTF-8 text \(byte 0xff at offset 7\)"):
        ChatTokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_bytes(b"\xe9{}")
    with pytest.raises(CloverError, match=r"tokenizer_config.json: not UTF-8 text \(byte 0xe9 at offset 0\)"):
        ChatTokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{bad", encoding="utf-8")
    with pytest.raises(CloverError, match="tokenizer_config.json: Expecting property name"):
        ChatTokenizer.from_folder(tmp_path)


@pytest.mark.parametrize("template, says", [
    ('{{ messages[0].content ~ (1 + "a") }}', "TypeError: unsupported operand"),
    ("{{ messages | length // 0 }}", "ZeroDivisionError"),
    ('{{ "{:d}".format(messages[0].content) }}', "ValueError: Unknown format code"),
    ("{{ range(10 ** 9) | list | length }}", "OverflowError: Range too big"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
])
def test_a_template_whose_own_code_fails_is_one_line_not_a_traceback(folder: Path, tmp_path: Path, template: str,
                                                                      says: str) -> None:
    """A model's template is code: jinja raises Python's own errors (not TemplateError) for its mistakes, and they
    ended generate, chat and serve's handler in a traceback."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp_path / name)
    (tmp_path / "chat_template.jinja").write_text(template, encoding="utf-8")
    with pytest.raises(CloverError, match=f"^the chat template could not render these messages: {says}"):
        ChatTokenizer.from_folder(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}])


def test_a_template_nested_past_the_parser_is_invalid_not_a_traceback(folder: Path, tmp_path: Path) -> None:
    from clover_local.tokenizer import read_template

    deep = "{{ " + "(" * 400 + "messages" + ")" * 400 + " }}"
    (tmp_path / "deep.jinja").write_text(deep, encoding="utf-8")
    with pytest.raises(CloverError, match=r"^the chat template in .*deep\.jinja is invalid: RecursionError"):
        read_template(tmp_path / "deep.jinja")
    shutil.copy(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "chat_template.jinja").write_text(deep, encoding="utf-8")
    with pytest.raises(CloverError, match="is invalid: RecursionError"):
        ChatTokenizer.from_folder(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}])


def test_template_sources(folder: Path, tmp_path: Path) -> None:
    shutil.copy(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    # no config and no template file: loads, but chatting names both places to look
    bare = ChatTokenizer.from_folder(tmp_path)
    assert bare.encode("hi") and bare.think_start_id is not None
    with pytest.raises(CloverError, match="chat_template.jinja"):
        bare.apply_chat_template([{"role": "user", "content": "hi"}])
    # the template inside tokenizer_config.json is used when there is no chat_template.jinja
    shutil.copy(folder / "tokenizer_config.json", tmp_path / "tokenizer_config.json")
    from_config = ChatTokenizer.from_folder(tmp_path)
    full = ChatTokenizer.from_folder(folder)
    assert from_config.apply_chat_template(CONVERSATIONS[1]) == full.apply_chat_template(CONVERSATIONS[1])
    # and chat_template.jinja wins over the config entry
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0].content }}!", encoding="utf-8")
    assert ChatTokenizer.from_folder(tmp_path).apply_chat_template([{"role": "user", "content": "x"}]) == "x!"
