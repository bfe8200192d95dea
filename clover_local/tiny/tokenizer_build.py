"""Build the tiny model's byte-level BPE tokenizer and write it as a Hugging Face-style tokenizer folder.

Byte-level BPE (as Qwen uses) covers any text, Chinese included, with a vocabulary of a few hundred.
Digits are split one per token before BPE so `123+45` is `1 2 3 + 4 5`: column-wise arithmetic is then
learnable by a tiny model. Added tokens go after the BPE vocabulary in Qwen's order and with Qwen's flags:
`<think>`/`</think>` are added but not "special" (decoding with `skip_special_tokens=True` keeps them, as
Qwen3 does); all six are single ids and are matched verbatim in input text.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# (content, special) in id order, appended after the BPE vocabulary.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|mask|>", True),
)
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"

# Word split before byte-level BPE. Unlike GPT-2's pattern (ByteLevel's built-in regex), a newline run is one
# piece whatever follows it, so `</think>\n\n` + answer tokenizes the same as a prompt ending in
# `</think>\n\n` (GPT-2's splits `\n\nYou` as `\n`, `\n`, `You` but a final `\n\n` as one piece).
SPLIT_PATTERN = (
    r" ?\p{L}+"  # a word, with its leading space
    r"|\p{N}"  # one digit
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"  # punctuation, with its leading space and trailing newlines
    r"|\s*[\r\n]+"  # a newline run, with the spaces before it
    r"|\s+(?!\S)"  # spaces, leaving the last one to the next word
    r"|\s+"
)

_ADDED_RE = re.compile("|".join(re.escape(t) for t, _ in ADDED_TOKENS))


def chat_template_text() -> str:
    """The shipped Qwen-style chat template (`chat_template.jinja` next to this module)."""
    return resources.files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")


def _pieces(texts: list[str]) -> list[str]:
    # Train BPE on the text between added tokens so no merges are wasted on `<|im_start|>` and friends.
    return [p for text in texts for p in _ADDED_RE.split(text) if p]


def build_tokenizer(texts: list[str], vocab_size: int = 512) -> Tokenizer:
    """Train a deterministic byte-level BPE on `texts`; `vocab_size` counts the 256 bytes and the added tokens.

    The result may be smaller than `vocab_size` when the texts support fewer merges.
    """
    n_bpe = vocab_size - len(ADDED_TOKENS)
    if n_bpe < 256:
        raise ValueError(f"vocab_size must be at least {256 + len(ADDED_TOKENS)} (256 bytes + added tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=n_bpe,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_pieces(texts), trainer=trainer)
    # One call per token keeps ids in ADDED_TOKENS order while giving each its own `special` flag.
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return tok


def tokenizer_config(tokenizer: Tokenizer, chat_template: str) -> dict:
    """`tokenizer_config.json` contents in Qwen's shape, loadable by transformers' fast tokenizer."""
    decoder = {}
    for content, special in ADDED_TOKENS:
        idx = tokenizer.token_to_id(content)
        if idx is None:
            raise ValueError(f"tokenizer lacks the added token {content}")
        decoder[str(idx)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [t for t, special in ADDED_TOKENS if special and t not in (EOS_TOKEN, PAD_TOKEN)],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "mask_token": MASK_TOKEN,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_tokenizer_assets(tokenizer: Tokenizer, out_dir: str | Path, chat_template: str | None = None) -> Path:
    """Write `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` into `out_dir` (created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = chat_template if chat_template is not None else chat_template_text()
    tokenizer.save(str(out / "tokenizer.json"), pretty=True)
    config = tokenizer_config(tokenizer, template)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return out
