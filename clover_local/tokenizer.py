"""Runtime tokenizer and chat template, read from a model folder without transformers.

Every command needs the same three things from a model folder: `tokenizer.json` (via the `tokenizers`
library), `tokenizer_config.json` (special tokens) and the chat template (`chat_template.jinja`, else
`tokenizer_config.json["chat_template"]`). The template is rendered the way transformers renders it (a jinja2
sandbox with trim_blocks/lstrip_blocks, a `tojson` filter and `raise_exception`) so outputs match, but nothing
from the folder is ever imported or executed as Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

from clover_local.errors import CloverError
from clover_local.text_files import unreadable

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
GENERATION_CONFIG_FILE = "generation_config.json"

THINK_START = "<think>"
THINK_END = "</think>"
_EOS_CANDIDATES = ("<|im_end|>", "<|endoftext|>")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CloverError(f"could not read {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CloverError(f"could not read {path}: {unreadable(exc)}") from None
    if not isinstance(data, dict):
        raise CloverError(f"{path} does not hold a JSON object")
    return data


def _token_text(value: Any) -> str | None:
    """A special-token entry in tokenizer_config.json is a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _pick_template(value: Any) -> str | None:
    """`chat_template` is a string, or (older format) a list of {"name", "template"} with a "default"."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {d.get("name"): d.get("template") for d in value if isinstance(d, Mapping)}
        template = named.get("default")
        return template if isinstance(template, str) else None
    return None


def read_template(path: Any) -> str:
    """A chat template file's text (`--chat-template`), compiled once to refuse a broken one before the model loads."""
    from jinja2 import TemplateError

    from clover_local.text_files import read_text_file

    text = read_text_file(path)
    try:
        _compile_template(text)
    except TemplateError as exc:
        raise CloverError(f"the chat template in {path} is invalid: {exc}") from None
    return text


def _compile_template(source: str):
    # Imported here so commands that never chat do not pay for jinja2.
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
               sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except TemplateError:
        raise
    except Exception as exc:  # jinja's parser and Python's compiler recurse as the template nests
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE writes each byte as one printable character: the printable Latin-1 bytes as
    themselves, the other 68 (controls, space, 0x7f-0xa0, 0xad) as characters from U+0100 up, in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    char_of = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in char_of:
            char_of[b] = 0x100 + extra
            extra += 1
    return {chr(c): b for b, c in char_of.items()}


@dataclass
class ChatTokenizer:
    """A `tokenizers.Tokenizer` plus the folder's special tokens and chat template."""

    tokenizer: Any  # tokenizers.Tokenizer
    config: dict = field(default_factory=dict)
    chat_template: str | None = None
    generation_config: dict = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_folder(cls, path: str | Path) -> "ChatTokenizer":
        """Load from a model or tokenizer folder; a missing or unreadable file raises CloverError."""
        from tokenizers import Tokenizer

        folder = Path(path)
        if not folder.is_dir():
            raise CloverError(f"tokenizer folder {folder} does not exist or is not a folder")
        tok_path = folder / TOKENIZER_FILE
        if not tok_path.is_file():
            raise CloverError(f"{tok_path} is missing: the model folder needs its {TOKENIZER_FILE}")
        try:
            tokenizer = Tokenizer.from_file(str(tok_path))
        except Exception as exc:  # the Rust side raises plain Exception
            raise CloverError(f"could not load {tok_path}: {exc}") from None
        cfg_path = folder / CONFIG_FILE
        config = _read_json(cfg_path) if cfg_path.is_file() else {}
        tpl_path = folder / TEMPLATE_FILE
        if tpl_path.is_file():
            try:
                template = tpl_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CloverError(f"could not read {tpl_path}: {unreadable(exc)}") from None
        else:
            template = _pick_template(config.get("chat_template"))
        gen_path = folder / GENERATION_CONFIG_FILE
        generation = _read_json(gen_path) if gen_path.is_file() else {}
        return cls(tokenizer, config, template, generation, str(folder))

    # ------------------------------------------------------------------------------------------ text

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings in it become their ids, nothing else is added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids` (partial UTF-8 sequences decode to U+FFFD)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The text each token adds, in one linear pass: "".join(pieces(ids)) == decode(ids). A token that ends
        inside a multi-byte character adds "" and the token completing it adds the character."""
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=False)
        return [stream.step(self.tokenizer, int(i)) or "" for i in ids]

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    @cached_property
    def _added_ids(self) -> frozenset[int]:
        return frozenset(self.tokenizer.get_added_tokens_decoder())

    @cached_property
    def _byte_of_char(self) -> dict[str, int] | None:
        """A byte-level BPE vocabulary's alphabet (None for other tokenizers)."""
        from tokenizers import decoders

        return _byte_level_alphabet() if isinstance(self.tokenizer.decoder, decoders.ByteLevel) else None

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes token `token_id` writes; None for an added token (special or not: `<think>` is one) or an
        unknown id. Byte-level vocabularies give the exact bytes, half a character included; others the token's
        decoded text (a partial character as U+FFFD)."""
        if token_id in self._added_ids:
            return None
        token = self.tokenizer.id_to_token(token_id)
        if token is None:
            return None
        alphabet = self._byte_of_char
        if alphabet is None:
            return self.decode([token_id]).encode()
        try:
            return bytes(alphabet[c] for c in token)
        except KeyError:  # not of the alphabet: a token the decoder would not write as bytes
            return None

    @cached_property
    def _first_bytes(self) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for token_id in self.tokenizer.get_vocab(with_added_tokens=False).values():
            data = self.token_bytes(token_id)
            if data:
                groups.setdefault(data[0], []).append(token_id)
        return groups

    def ids_by_first_byte(self) -> dict[int, list[int]]:
        """The vocabulary's (non-added) token ids grouped by their first byte, made once (JSON mode's search)."""
        return self._first_bytes

    def id_to_token(self, idx: int) -> str | None:
        return self.tokenizer.id_to_token(idx)

    # ------------------------------------------------------------------------------------------ chat

    @cached_property
    def _template(self):
        if self.chat_template is None:
            raise CloverError(
                f"{self.source or 'The tokenizer'} has no chat template: neither {TEMPLATE_FILE} nor a "
                f"chat_template entry in {CONFIG_FILE}"
            )
        from jinja2 import TemplateError

        try:
            return _compile_template(self.chat_template)
        except TemplateError as exc:
            raise CloverError(f"the chat template in {self.source or 'the tokenizer'} is invalid: {exc}") from None

    def use_template(self, template: str) -> None:
        """Render with `template` instead of the model's own (`--chat-template FILE`; read_template checked it)."""
        self.chat_template = template
        self.__dict__.pop("_template", None)  # (the cached compiled one)

    def special_tokens_map(self) -> dict[str, str | None]:
        """bos/eos/pad/unk/mask token strings from the config, passed to the template like transformers does."""
        keys = ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")
        return {k: _token_text(self.config.get(k)) for k in keys}

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        enable_thinking: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """Render `messages` ([{"role", "content"}, ...]) to prompt text, as transformers would."""
        from jinja2 import TemplateError

        template = self._template
        context: dict[str, Any] = {k: v for k, v in self.special_tokens_map().items() if v is not None}
        context.update(template_kwargs)
        context.setdefault("tools", None)
        context.setdefault("documents", None)
        context.update(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            enable_thinking=enable_thinking,
        )
        try:
            return template.render(**context)
        except TemplateError as exc:
            raise CloverError(f"the chat template could not render these messages: {exc}") from None
        except Exception as exc:  # the template's own code failed (1 + "a", 10 // 0, a macro recursing forever)
            raise CloverError(f"the chat template could not render these messages: {type(exc).__name__}: "
                              f"{exc}") from None

    # ------------------------------------------------------------------------------------------ ids

    @property
    def vocab_size(self) -> int:
        """Number of token ids including added tokens (the model's embedding may be padded larger)."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_ids(self) -> list[int]:
        """Ids that end generation: `<|im_end|>`, `<|endoftext|>`, the config's eos, generation_config's."""
        ids: list[int] = []
        for token in (*_EOS_CANDIDATES, _token_text(self.config.get("eos_token"))):
            idx = self.token_to_id(token) if token else None
            if idx is not None:
                ids.append(idx)
        gen_eos = self.generation_config.get("eos_token_id")
        for idx in gen_eos if isinstance(gen_eos, list) else [gen_eos]:
            if isinstance(idx, int):
                ids.append(idx)
        return list(dict.fromkeys(ids))

    @property
    def pad_token_id(self) -> int | None:
        token = _token_text(self.config.get("pad_token"))
        return self.token_to_id(token) if token else None

    @property
    def mask_token_id(self) -> int | None:
        """generation_config's mask_token_id, the config's mask token, else an added special token named *mask*."""
        gen_mask = self.generation_config.get("mask_token_id")
        if isinstance(gen_mask, int):
            return gen_mask
        token = _token_text(self.config.get("mask_token"))
        if token and self.token_to_id(token) is not None:
            return self.token_to_id(token)
        decoder = self.tokenizer.get_added_tokens_decoder()
        for idx in sorted(decoder):
            added = decoder[idx]
            if added.special and "mask" in added.content.lower():
                return idx
        return None

    @property
    def think_start_id(self) -> int | None:
        return self.token_to_id(THINK_START)

    @property
    def think_end_id(self) -> int | None:
        return self.token_to_id(THINK_END)
