"""Synthetic GPTQ packs written directly in packed form: random INT4 experts (random codes, scales near 0.02/σ),
8-bit attention/GDN/shared experts/LM head (the `balanced` profile), BF16 rest — no BF16 model is ever built.

- `full`: the real Clover shapes (40 layers, 256 experts, hidden 2048, vocab 248,320): ≈ 19.6 GB on disk, written
  once and cached under ~/.cache/clover-local/synthetic/ (CLOVER_LOCAL_CACHE overrides the root);
- `small`: the CI-sized version (4 layers, 16 experts, hidden 256, vocab 1024), a few MB;
- `full3`, `small3`: the same with 3-bit routed experts (`quantize --bits 3`): ≈ 15.6 GB at the real shapes.

`synthetic_index(kind)` describes the same pack without writing anything (what `plan synthetic:full` reads).
Weights are random, so routing is near uniform and tokens per pass mean nothing: `bench` assumes 3.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from clover_local.checkpoint.names import global_shapes, layer_shapes
from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
from clover_local.config import parse_config
from clover_local.errors import CloverError
from clover_local.paths import cache_root
from clover_local.runtime.pack_index import PackIndex, TensorInfo, classify_tensor
from quantize.gptq_format import check_group_size, pack_last
from quantize.profiles import MIXER_LINEARS, SHARED_LINEARS, dynamic_rules, get_profile

VERSION = 1
KINDS = ("full", "small", "full3", "small3")
GROUP = 128
_ST = {torch.int32: "I32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}


def expert_bits(kind: str) -> int:
    """The routed experts' bits of a synthetic kind: 3 for `full3` / `small3`, else 4."""
    return 3 if kind in ("full3", "small3") else 4


def spec_of(kind: str) -> TinySpec:
    if kind not in KINDS:
        raise CloverError(f"--synthetic must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind.removesuffix("3") == "full":
        return TinySpec(hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2,
                        head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                        linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=256, num_experts_per_tok=8,
                        moe_intermediate_size=512, shared_expert_intermediate_size=512, vocab_size=248320,
                        full_attention_interval=4, rope_theta=1e7, block_size=32, mask_token_id=248319,
                        eos_token_id=248044)
    return TinySpec(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                    linear_value_head_dim=64, linear_conv_kernel_dim=4, num_experts=16, num_experts_per_tok=4,
                    moe_intermediate_size=128, shared_expert_intermediate_size=128, vocab_size=1024,
                    full_attention_interval=4, rope_theta=1e7, block_size=32, mask_token_id=1023,
                    eos_token_id=1022)


def synthetic_dir(kind: str) -> Path:
    return cache_root() / "synthetic" / f"{kind}-v{VERSION}"


def synthetic_config(kind: str) -> dict:
    return _pack_config(tiny_config_dict(spec_of(kind)), expert_bits(kind), "balanced", synthetic=True)


def _pack_config(raw: dict, bits: int, profile: str, synthetic: bool = False, group: int = GROUP) -> dict:
    """A checkpoint's config.json with the quantization_config `quantize --bits BITS --profile PROFILE
    --group-size GROUP` writes."""
    raw = {k: v for k, v in raw.items() if k != "quantization_config"}
    raw["quantization_config"] = {
        "quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": False, "sym": True,
        "checkpoint_format": "gptq", "dynamic": dynamic_rules(get_profile(profile), bits),
        "clover_profile": profile, **({"synthetic": True} if synthetic else {}),
    }
    return raw


_POOL: list[torch.Tensor] = []


def _pool(g: torch.Generator, size: int) -> torch.Tensor:
    if not _POOL or _POOL[0].numel() < size:
        n = max(1 << 24, size)
        _POOL[:] = [torch.randint(-(1 << 31), (1 << 31) - 1, (n,), dtype=torch.int32, generator=g)]
    return _POOL[0]


@dataclass
class _T:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    make: Callable[[torch.Generator], torch.Tensor]


@functools.lru_cache(maxsize=None)
def _zero_row(n: int, bits: int) -> torch.Tensor:
    """zero − 1 (mid-range) in every one of `n` columns, packed; made once per shape: packing it for each of the
    31K modules took 5 of `plan synthetic:full`'s 7 s."""
    return pack_last(torch.full((1, n), (1 << (bits - 1)) - 1), bits)


def _quant(name: str, k: int, n: int, bits: int, group: int = GROUP) -> list[_T]:
    """GPTQ tensors of a [K→N] linear with random codes, zero at mid-range, scales for weights of std ≈ 0.02
    (`group` -1: one group per output channel)."""
    kw, nw = k * bits // 32, n * bits // 32  # packed rows of qweight, packed columns of qzeros
    size = k if check_group_size(group, k) == -1 else group  # what quantize refuses, refused here alike
    groups = k // size
    base = 0.02 / (((1 << bits) ** 2 - 1) / 12) ** 0.5

    def qweight(g):
        # a slice of a shared random pool at a random offset: random codes at disk speed (content is irrelevant
        # to speed; 16.6 GB of fresh random numbers would take minutes)
        size = kw * n
        pool = _pool(g, size)
        start = int(torch.randint(0, pool.numel() - size + 1, (1,), generator=g))
        return pool[start : start + size].view(kw, n)

    def scales(g):
        return (base * (0.75 + 0.5 * torch.rand(groups, n, generator=g))).to(torch.float16)

    return [
        _T(f"{name}.qweight", torch.int32, (kw, n), qweight),
        _T(f"{name}.qzeros", torch.int32, (groups, nw),
           lambda g: _zero_row(n, bits).expand(groups, nw).contiguous()),
        _T(f"{name}.scales", torch.float16, (groups, n), scales),
        _T(f"{name}.g_idx", torch.int32, (k,), lambda g: torch.arange(k, dtype=torch.int32) // size),
    ]


def _plain(name: str, shape: tuple[int, ...]) -> _T:
    leaf = name.rsplit(".", 1)[-1] if not name.endswith(".weight") else name.rsplit(".", 2)[-2]
    fp32 = leaf in ("A_log", "dt_bias")

    def make(g):
        if leaf == "A_log":
            return torch.empty(shape).uniform_(1.0, 16.0, generator=g).log()
        if leaf == "dt_bias":
            return 1.0 + 0.2 * torch.randn(shape, generator=g)
        if name.endswith("linear_attn.norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif "norm" in name:
            t = 0.1 * torch.randn(shape, generator=g)
        elif leaf == "conv1d":
            t = 0.3 * torch.randn(shape, generator=g)
        elif leaf == "conv_right_weight":
            t = 0.2 * torch.randn(shape, generator=g)
        elif leaf == "bd_softmax_logit_scale":
            t = 4.0 + 0.5 * torch.randn(shape, generator=g)
        elif leaf.startswith("bd_softmax"):
            t = 0.5 * torch.randn(shape, generator=g)
        elif name.endswith("mlp.gate.weight"):
            t = 0.2 * torch.randn(shape, generator=g)
        else:
            t = 0.05 * torch.randn(shape, generator=g) if "embed" not in name else 0.02 * torch.randn(shape, generator=g)
        return t.to(torch.bfloat16)

    return _T(name, torch.float32 if fp32 else torch.bfloat16, tuple(shape), make)


def _shards(kind: str) -> Iterator[tuple[str, list[_T]]]:
    """(shard file name, its tensors) in write order: one shard per layer, then the globals."""
    return _shards_of(parse_config(synthetic_config(kind)), expert_bits(kind), "balanced")


def _shards_of(cfg, bits: int, profile_name: str, group: int = GROUP) -> Iterator[tuple[str, list[_T]]]:
    """The tensors of the pack `quantize` makes of a checkpoint of `cfg` (routed experts at `bits`, the rest as
    `profile_name` says, groups of `group` inputs), one shard per layer, then the globals."""
    n = cfg.num_hidden_layers + 1
    profile = get_profile(profile_name)
    for i in range(cfg.num_hidden_layers):
        kind_i = "full_attention" if cfg.is_attention(i) else "linear_attention"
        quantized = {m: profile.mixer for m in MIXER_LINEARS[kind_i]} | {m: profile.shared for m in SHARED_LINEARS}
        quantized = {m: b for m, b in quantized.items() if b is not None}  # None: the profile keeps it BF16
        tensors: list[_T] = []
        for rel, shape in layer_shapes(cfg, i).items():
            name = f"model.layers.{i}.{rel}"
            module = rel[: -len(".weight")]
            if rel == "mlp.experts.gate_up_proj":
                for e in range(cfg.num_experts):
                    for proj in ("gate_proj", "up_proj"):
                        tensors += _quant(f"model.layers.{i}.mlp.experts.{e}.{proj}", cfg.hidden_size,
                                          cfg.moe_intermediate_size, bits, group)
            elif rel == "mlp.experts.down_proj":
                for e in range(cfg.num_experts):
                    tensors += _quant(f"model.layers.{i}.mlp.experts.{e}.down_proj", cfg.moe_intermediate_size,
                                      cfg.hidden_size, bits, group)
            elif module in quantized:
                tensors += _quant(f"model.layers.{i}.{module}", shape[1], shape[0], quantized[module], group)
            else:
                tensors.append(_plain(name, shape))
        yield f"model-{i + 1:05d}-of-{n:05d}.safetensors", tensors
    glob: list[_T] = []
    for name, shape in global_shapes(cfg).items():
        if name == "lm_head.weight" and profile.lm_head is not None:
            glob += _quant("lm_head", shape[1], shape[0], profile.lm_head, group)
        elif name == "lm_head.weight":  # kept BF16 (experts-only): quantize names it lm_head.weight, no model.
            glob.append(_plain(name, shape))
        else:
            glob.append(_plain(f"model.{name}", shape))
    yield f"model-{n:05d}-of-{n:05d}.safetensors", glob


def synthetic_index(kind: str) -> PackIndex:
    """The PackIndex of a synthetic pack, computed without writing it."""
    return _index(synthetic_config(kind), {"mask_token_id": spec_of(kind).mask_token_id}, expert_bits(kind), "balanced",
                  GROUP, f"synthetic:{kind}")


def quantized_index(raw: dict, generation: dict, bits: int = 4, profile: str = "balanced", group: int = GROUP,
                    shown: str = "") -> PackIndex:
    """The PackIndex of the pack `quantize --bits BITS --profile PROFILE --group-size GROUP` would make of a
    checkpoint whose config.json is `raw` (generation_config.json: `generation`), computed from the config alone:
    what `plan` of a BF16 checkpoint shows, before hours of quantizing (and, from the Hub, a 69 GB download)."""
    return _index(_pack_config(raw, bits, profile, group=group), generation, bits, profile, group,
                  shown or "checkpoint")


def checkpoint_index(folder: Path, bits: int, profile: str, group: int, shown: str) -> PackIndex | None:
    """`quantized_index` of the checkpoint in `folder` (its config.json and generation_config.json), or None when
    the folder holds a pack (a quantization_config). Bad configs are the config's own one-line errors."""
    from clover_local.config import load_config
    from clover_local.pack.reader import is_pack

    load_config(folder)
    if is_pack(folder):
        return None
    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    gen_path = folder / "generation_config.json"
    generation = json.loads(gen_path.read_text(encoding="utf-8")) if gen_path.is_file() else {}
    return quantized_index(raw, generation, bits, profile, group, shown=shown)


def _index(raw: dict, generation: dict, bits: int, profile: str, group: int, shown: str) -> PackIndex:
    """The PackIndex of the pack `raw` (a config.json with its quantization_config) describes, without writing it."""
    cfg = parse_config(raw, generation)
    tensors = {t.name: TensorInfo(t.name, shard, _ST[t.dtype], t.shape)
               for shard, ts in _shards_of(cfg, bits, profile, group) for t in ts}
    pack = PackIndex(Path(shown), cfg, raw["quantization_config"], tensors)
    classify_tensor(pack)
    return pack


def _write_shard(path: Path, tensors: list[_T], gen: torch.Generator) -> None:
    header: dict = {}
    off = 0
    for t in tensors:
        nbytes = int(np.prod(t.shape)) * torch.empty((), dtype=t.dtype).element_size()
        header[t.name] = {"dtype": _ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__metadata__"] = {"format": "pt", "synthetic": "clover-local"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors:
            value = t.make(gen).to(t.dtype).contiguous()
            assert tuple(value.shape) == t.shape, t.name
            f.write(value.view(torch.uint8).numpy().data)
    os.replace(tmp, path)


def ensure_synthetic(kind: str, on_shard=lambda i, n: None) -> Path:
    """The folder of the synthetic pack `kind`, writing it first if it is not complete yet."""
    spec_of(kind)
    folder = synthetic_dir(kind)
    done = folder / ".complete"
    if done.is_file():
        return folder
    try:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    except OSError as exc:  # CLOVER_LOCAL_CACHE naming a file, a folder we may not write
        raise CloverError(f"cannot make the synthetic pack's folder {folder}: {exc.strerror or exc}; set "
                          "CLOVER_LOCAL_CACHE to a folder you can write") from None
    raw = synthetic_config(kind)
    spec = spec_of(kind)
    need = sum(TensorInfo(t.name, s, _ST[t.dtype], t.shape).nbytes for s, ts in _shards(kind) for t in ts)
    free = shutil.disk_usage(folder).free
    if need > free:
        shutil.rmtree(folder, ignore_errors=True)
        raise CloverError(f"the synthetic {kind} pack needs {need / 1e9:.1f} GB of disk under {cache_root()}, "
                          f"only {free / 1e9:.1f} GB free; free space or set CLOVER_LOCAL_CACHE to another disk")
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [spec.eos_token_id], "mask_token_id": spec.mask_token_id, "block_size": spec.block_size}))
    gen = torch.Generator().manual_seed(1234)
    weight_map = {}
    shards = list(_shards(kind))
    for i, (shard, tensors) in enumerate(shards):
        on_shard(i, len(shards))
        _write_shard(folder / shard, tensors, gen)
        weight_map.update({t.name: shard for t in tensors})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": need, "synthetic": True}, "weight_map": weight_map}, indent=1))
    done.write_text(f"clover-local synthetic pack v{VERSION}\n")
    return folder
