"""A tiny GPTQ pack made by the quantize pipeline from a tiny random checkpoint, built once per test session and
shared by the runtime, plan/bench, offload-command and prompt-cache tests (every input width 128, so group
128 divides); its `pack` and `ref` fixtures are imported by name where they are used."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

N_EXPERTS, TOP_K, N_LAYERS = 8, 2, 4
_BUILT: dict[str, Path] = {}


def tiny_pack(tmp_path_factory, tokenizer_dir: Path, bits: int = 4) -> Path:
    """The tiny pack with routed experts at `bits` (4: the shared one; 3: for the 3-bit tests)."""
    key = f"{tokenizer_dir}:{bits}"
    if key not in _BUILT:
        _BUILT[key] = make_pack(tmp_path_factory.mktemp(f"runtime-pack-{bits}bit"), tokenizer_dir, bits)
    return _BUILT[key]


@pytest.fixture(scope="module")
def pack(tmp_path_factory, tokenizer_dir: Path) -> Path:
    """The shared tiny pack, as a fixture (test modules import it by name)."""
    return tiny_pack(tmp_path_factory, tokenizer_dir)


@pytest.fixture(scope="module")
def ref(pack: Path):
    """The pack dequantized into a plain fp32 model: the reference the runtime is checked against."""
    from clover_local.loader import load

    return load(str(pack), "cpu", "float32")


def make_pack(root: Path, tokenizer_dir: Path, bits: int = 4) -> Path:
    from conftest import _TOKENIZER_TEXTS, checkpoint_with_tokenizer, tokenizer_spec

    from quantize.pipeline import QuantizeSettings, quantize_checkpoint

    spec = tokenizer_spec(tokenizer_dir, hidden_size=128, moe_intermediate_size=128,
                          shared_expert_intermediate_size=128, num_experts=N_EXPERTS, num_experts_per_tok=TOP_K,
                          num_hidden_layers=N_LAYERS, head_dim=32, linear_key_head_dim=32,
                          linear_value_head_dim=32)  # every input width a multiple of 128
    src = checkpoint_with_tokenizer(root / "src", tokenizer_dir, spec, fused=False, seed=5)
    calib = root / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"text": t * 3}) for t in _TOKENIZER_TEXTS * 2), encoding="utf-8")
    out = root / "pack"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        quantize_checkpoint(src, out, QuantizeSettings(bits=bits, samples=4, seq_len=64, calib=str(calib)),
                            torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    return out


# ---------------------------------------------------------------------------------------------- shared helpers
# (test_runtime.py and test_runtime_optimistic.py load, prompt and decode the tiny pack the same way)


def runtime(pack: Path, **kw):
    """The pack through the offloading runtime (a 128-token context unless told otherwise)."""
    from clover_local.loader import load
    from clover_local.runtime.load import RuntimeOptions

    kw.setdefault("context", 128)
    return load(str(pack), "cpu", "float32", runtime=RuntimeOptions(**kw))


def cold(loaded):
    """The loaded runtime's expert cache, emptied (load fills it: `ExpertCache.warm`), for tests that build a
    cache state call by call."""
    ec = loaded.model.runtime.cache
    for layer in ec.layer_ids.tolist():
        ec.evict(layer, np.arange(ec.n_experts))
    assert ec.resident() == 0
    return ec


def prompt(loaded, n: int, seed: int = 0) -> list[int]:
    """`n` random token ids, never the mask token."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, loaded.config.vocab_size, (n,), generator=g).tolist()
    return [i if i != loaded.mask_token_id else 0 for i in ids]


def decode(loaded, ids: list[int], n: int = 24, merge: bool = True) -> list[int]:
    """Greedy block-diffusion output of `n` tokens (no stop tokens); `merge`: commits merged with the next
    block's first preview (the decoder's default)."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished

    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id, merge_commits=merge)
    events = list(dec.generate(ids, DecodeSettings(max_new_tokens=n, stop_token_ids=[])))
    assert isinstance(events[-1], Finished)
    return events[-1].token_ids
