"""Shared fixtures: tiny random Clover checkpoints (with a real tokenizer) made on the fly."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import torch

# Triton decides between compiling and interpreting when it is imported and when a kernel is defined, so without
# a GPU the kernel tests need TRITON_INTERPRET=1 before anything imports triton — and importing some of torch does
# (torch.nn.attention.bias, via torch._dynamo). Here, before any test module is collected; test_kernels.py sets it
# too, for runs of that file alone.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # ... and the tile heuristics decide as on an H200 (132 SMs: split-K where it splits), not as for one "SM",
    # so the shapes the GPU runs run here too (`w4a16._num_sms`; +2 % on the longest kernel test)
    os.environ.setdefault("CLOVER_EMULATE_SMS", "132")

from clover_local.checkpoint.synthetic import TinySpec, write_checkpoint



@pytest.fixture(autouse=True, scope="session")
def _lean_interpreter():
    """The interpreter without the overflow checks it discards (`skip_discarded_overflow_checks`)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        from interpreter_bounds import skip_discarded_overflow_checks

        skip_discarded_overflow_checks()
    yield


@pytest.fixture(autouse=True)
def _bounds_checked_kernels():
    """Every interpreted Triton launch bounds-checked (`interpreter_bounds`: a kernel reading past its tensors
    passes on the CPU and reads NaN on a GPU), its programs run last to first (the interpreter's own order is the
    one a GPU roughly keeps: the other extreme, where a dependence between programs shows). Off when the kernels
    compile (a GPU run of the tests)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from interpreter_bounds import checked_accesses

    with checked_accesses(reverse_programs=True):
        yield


@pytest.fixture(autouse=True, scope="session")
def _own_cache(tmp_path_factory):
    """clover-local's cache folder (download records, synthetic packs, tuning tables, chat history) in a temporary
    folder for the whole run, not the user's ~/.cache/clover-local: a download test's unfinished-run record was left
    there by every run (a test that needs its own sets CLOVER_LOCAL_CACHE itself)."""
    before = os.environ.get("CLOVER_LOCAL_CACHE")
    os.environ["CLOVER_LOCAL_CACHE"] = str(tmp_path_factory.mktemp("clover-local-cache"))
    yield
    if before is None:
        os.environ.pop("CLOVER_LOCAL_CACHE", None)
    else:
        os.environ["CLOVER_LOCAL_CACHE"] = before


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """No test reaches the network: any attempt to connect to, or resolve, a host other than this machine fails
    loudly (a download test whose stub missed a step tried huggingface.co with its fake token)."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"test tried to reach {address!r}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in ("127.0.0.1", "::1", "localhost", None):
            raise AssertionError(f"test tried to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is far faster than two on a busy 2-core machine (thread sync
    dominates), and a test that changes the count must not slow the ones after it."""
    torch.set_num_threads(1)
    yield

_TOKENIZER_TEXTS = [
    "Hello world, this is a tiny tokenizer for tests.",
    "add 123+45 reverse abcd sort dbca count a in banana lookup b in a=3 b=7 c=1",
    "你好，世界。今天天气很好。",
    "The quick brown fox jumps over the lazy dog. 0123456789",
]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    from clover_local.tiny.tokenizer_build import build_tokenizer, write_tokenizer_assets

    out = tmp_path_factory.mktemp("tokenizer")
    tok = build_tokenizer(_TOKENIZER_TEXTS * 4, vocab_size=320)
    write_tokenizer_assets(tok, out)
    return out


def tokenizer_spec(tokenizer_dir: Path, **overrides) -> TinySpec:
    """A TinySpec whose vocabulary, mask and eos ids match the test tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    spec = TinySpec(
        vocab_size=tok.get_vocab_size(),
        mask_token_id=tok.token_to_id("<|mask|>"),
        eos_token_id=tok.token_to_id("<|im_end|>"),
    )
    for k, v in overrides.items():
        setattr(spec, k, v)
    return spec


def checkpoint_with_tokenizer(folder: Path, tokenizer_dir: Path, spec: TinySpec | None = None, **kwargs) -> Path:
    """A random checkpoint in `folder` (write_checkpoint kwargs) with the test tokenizer's files beside it."""
    out = write_checkpoint(folder, spec or tokenizer_spec(tokenizer_dir), **kwargs)
    for f in tokenizer_dir.iterdir():
        if f.name != "generation_config.json":
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def tiny():
    """The shipped tiny model on the CPU (float32), loaded once per test module."""
    from clover_local.loader import SHORT_NAMES, load

    if not SHORT_NAMES["tiny"].is_dir():
        pytest.skip("tiny model assets are not built")
    torch.set_num_threads(1)
    return load("tiny", "cpu", "float32")


@pytest.fixture
def make_checkpoint(tmp_path, tokenizer_dir):
    """make_checkpoint(name, spec=None, **write_checkpoint kwargs) -> folder with weights and tokenizer files."""

    def make(name: str = "ckpt", spec: TinySpec | None = None, **kwargs) -> Path:
        return checkpoint_with_tokenizer(tmp_path / name, tokenizer_dir, spec, **kwargs)

    return make


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


class ByteTagVocab:
    """A byte-level vocabulary (ids 0-255), `<tool_call>` / `</tool_call>` as added tokens 256/257 with no bytes of
    their own (as in Qwen vocabularies), `</think>` 258, the stop 300; `chat_template` for the tool-call forms."""

    think_end_id = 258

    def __init__(self, chat_template: str | None = None) -> None:
        self.chat_template = chat_template

    def token_to_id(self, text):
        return {"<tool_call>": 256, "</tool_call>": 257}.get(text)

    def token_bytes(self, i):
        return bytes((i,)) if i < 256 else None

    def ids_by_first_byte(self):
        return {b: [b] for b in range(256)}


def run_cli(args: list[str]) -> int:
    """Run `clover-local ARGS` in-process; returns the exit code (the CLI always exits through SystemExit)."""
    from clover_local.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@contextlib.contextmanager
def tools_template_server(tmp_path_factory, tokenizer_dir, **options):
    """(engine, url) of a server on a random checkpoint whose chat template reads tools (test_serve_tools.py's);
    `options`: running_server's."""
    from clover_local.loader import load
    from tests.inprocess_server import running_server
    from tests.test_serve_tools import TOOL_TEMPLATE

    torch.set_num_threads(1)
    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("tools") / "ckpt", tokenizer_dir, seed=3)
    (folder / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    loaded = load(str(folder), "cpu", "float32")
    with running_server(loaded, "tools", max_tokens=1024, context=4096, **options) as (engine, url):
        yield engine, url


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory, tokenizer_dir):
    """(engine, url) of a server whose chat template reads tools and whose decoder is scripted to answer
    "Let me check." and a get_weather call (test_serve_tools.py's), for every wire format's tool-call tests."""
    from tests.test_serve_tools import XML_CALL, ScriptedDecoder

    with tools_template_server(tmp_path_factory, tokenizer_dir) as (engine, url):
        engine.decoder = ScriptedDecoder(engine.tokenizer, "Let me check.\n" + XML_CALL, engine.decoder.block_size)
        yield engine, url


@pytest.fixture(scope="module")
def forced_call_server(tmp_path_factory, tokenizer_dir):
    """(engine, url) of the same server with the real decoder: a forced call is held to its schema by the
    decoder's constraint, which a scripted answer would skip."""
    with tools_template_server(tmp_path_factory, tokenizer_dir) as (engine, url):
        yield engine, url
