"""What a GPTQ pack holds, from its config, index and safetensors headers alone (no weights are read).

Both `clover-local plan` and the runtime's loader start here, so the plan's byte counts are the loader's.
A pack (see quantize/pipeline.py) has per-expert `model.layers.N.mlp.experts.E.{gate,up,down}_proj.{qweight,
qzeros,scales,g_idx}`, other quantized modules (`X.qweight`…, 4- or 8-bit, bits from the shapes), and BF16/FP32
tensors for the rest. Only packs written with `desc_act: false` (sequential g_idx) are accepted.
"""

from __future__ import annotations

import json
import re
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from clover_local.checkpoint.index import INDEX_NAME, read_weight_map
from clover_local.config import CloverConfig, load_config
from clover_local.errors import CloverError

QUANT_PARTS = ("qweight", "qzeros", "scales", "g_idx")
EXPERT_PROJS = ("gate_proj", "up_proj", "down_proj")
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(\w+)$")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shard: str
    dtype: str  # safetensors dtype string (F16, BF16, F32, I32, …)
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 4)


@dataclass(frozen=True)
class QuantModule:
    """One GPTQ-quantized linear: W [K, N] stored as qweight [K/p, N], scales [G, N], qzeros [G, N/p]."""

    name: str  # e.g. model.layers.3.self_attn.q_proj, lm_head
    bits: int
    in_features: int
    out_features: int
    groups: int

    @property
    def group_size(self) -> int:
        return self.in_features // self.groups

    @property
    def packed_bytes(self) -> int:
        """qweight + scales + qzeros (g_idx is not kept: sequential by construction)."""
        return 4 * (self.in_features * self.bits // 32) * self.out_features + 2 * self.groups * self.out_features + \
            4 * self.groups * (self.out_features * self.bits // 32)


MAX_HEADER_BYTES = 100_000_000


def header_length(first8: bytes, shard: str) -> int:
    """The length of a safetensors header from the file's first 8 bytes (checked to be plausible)."""
    if len(first8) != 8:
        raise CloverError(f"pack shard {shard} is corrupt or truncated (file shorter than its header length)")
    (n,) = struct.unpack("<Q", first8)
    if n > MAX_HEADER_BYTES:
        raise CloverError(f"pack shard {shard} is corrupt or truncated (header length {n} is implausible)")
    return n


def check_header(raw: bytes, n: int, size: int, shard: str) -> dict:
    """A shard's JSON header (`raw`: the `n` bytes after the length), checked to describe no more data than the
    file's `size` holds. Shared by local shards and those `plan` reads from the Hub by a ranged request."""
    try:
        if len(raw) != n:
            raise ValueError("file shorter than its header")
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CloverError(f"pack shard {shard} is corrupt or truncated ({exc})") from None
    if not isinstance(header, dict):
        raise CloverError(f"pack shard {shard} has no valid safetensors header")
    try:
        end = 8 + n + max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CloverError(f"pack shard {shard} is corrupt or truncated (bad data_offsets: {exc})") from None
    if size < end:
        raise CloverError(f"pack shard {shard} is corrupt or truncated ({size:,} bytes; its header describes "
                          f"{end:,})")
    return header


def header_from_prefix(first: Callable[[int], bytes], size: int, shard: str, probe: int) -> tuple[dict, int]:
    """A shard's JSON header from `first(n)` (its first n bytes: a ranged GET of a shard on the Hub), and where
    its data starts: one read of `probe` bytes, a second of the whole header where it is longer."""
    raw = first(min(size, probe))
    n = header_length(raw[:8], shard)
    if 8 + n > len(raw) and 8 + n <= size:  # a header longer than the first ask
        raw = first(8 + n)
    return check_header(raw[8:8 + n], n, size, shard), 8 + n


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file, checked to describe no more data than the file holds (the file's
    size against the last tensor's end: no data read, so cheap at 69 GB). Why: what reads headers only (`plan`)
    would otherwise take a cut-off download or copy for a whole shard."""
    try:
        with open(path, "rb") as f:
            n = header_length(f.read(8), path.name)
            raw = f.read(n)
        size = path.stat().st_size
    except OSError as exc:
        raise CloverError(f"pack shard {path.name} is corrupt or truncated ({exc})") from None
    return check_header(raw, n, size, path.name)


def kind_of(name: str) -> str:
    """Placement category of a tensor or module name (what `plan` prints per row)."""
    if name.startswith("lm_head"):
        return "lm_head"
    if "embed_tokens" in name:
        return "embeddings"
    if ".mlp.experts." in name:
        return "routed experts"
    if ".self_attn." in name:
        return "attention"
    if ".linear_attn." in name:
        return "GDN"
    if ".mlp.shared_expert" in name:
        return "shared experts"
    if name.endswith("mlp.gate.weight"):
        return "routers"
    return "norms"


@dataclass
class PackIndex:
    folder: Path
    config: CloverConfig
    quant: dict
    tensors: dict[str, TensorInfo]
    modules: dict[str, QuantModule] = field(default_factory=dict)  # non-expert quantized modules
    plain: dict[str, TensorInfo] = field(default_factory=dict)  # everything unquantized
    expert: dict[str, QuantModule] = field(default_factory=dict)  # gate_proj/up_proj/down_proj of expert 0
    expert_layers: list[int] = field(default_factory=list)

    @property
    def expert_bits(self) -> int:
        return self.expert["gate_proj"].bits

    @property
    def n_experts_total(self) -> int:
        return len(self.expert_layers) * self.config.num_experts


def _quant_module(name: str, parts: dict[str, TensorInfo]) -> QuantModule:
    missing = [p for p in QUANT_PARTS if p not in parts]
    if missing:
        raise CloverError(f"pack is missing {name}.{missing[0]}: the pack is incomplete; re-download or "
                          "re-quantize it")
    qw, qz, sc, gi = (parts[p] for p in QUANT_PARTS)
    if len(qw.shape) != 2 or len(sc.shape) != 2 or len(qz.shape) != 2 or len(gi.shape) != 1:
        raise CloverError(f"pack tensor {name} has GPTQ tensors of the wrong rank")
    k = gi.shape[0]
    if qw.dtype != "I32" or qz.dtype != "I32" or sc.dtype not in ("F16", "BF16", "F32"):
        raise CloverError(f"pack tensor {name} is not in the GPTQ layout (qweight/qzeros int32, scales fp16)")
    if (32 * qw.shape[0]) % k:
        raise CloverError(f"pack tensor {name}.qweight {list(qw.shape)} does not match g_idx of {k} rows")
    bits = 32 * qw.shape[0] // k
    if bits not in (3, 4, 8):
        raise CloverError(f"pack tensor {name} is {bits}-bit; the runtime reads 3- (routed experts), 4- and 8-bit "
                          "GPTQ")
    n, groups = qw.shape[1], sc.shape[0]
    if sc.shape[1] != n or qz.shape != (groups, n * bits // 32) or (n * bits) % 32 or groups < 1 or k % groups:
        raise CloverError(f"pack tensor {name} has inconsistent GPTQ shapes: qweight {list(qw.shape)}, "
                          f"scales {list(sc.shape)}, qzeros {list(qz.shape)}")
    return QuantModule(name, bits, k, n, groups)


def _local_header(folder: Path) -> Callable[[str], dict]:
    def header(shard: str) -> dict:
        path = folder / shard
        if not path.is_file():
            raise CloverError(f"pack shard {shard} is missing from {folder}")
        return read_header(path)
    return header


def read_pack_index(folder: str | Path, headers: Callable[[str], dict] | None = None,
                    shown: str | None = None, parallel: int = 1) -> PackIndex:
    """Read config + index + every shard's header; check the quantization settings and that every expert is
    complete. Raises CloverError (one line) on anything a user must fix.

    `headers(shard)` gives a shard's checked header (default: read from `folder`; `plan` of a Hub repo passes
    one that asks the Hub for the header bytes alone, `folder` then holding only the small JSON files, and
    `parallel` headers asked for at once); `shown` is how messages and `PackIndex.folder` name the pack (default:
    the folder)."""
    folder = Path(folder)
    headers = headers or _local_header(folder)
    where = shown or str(folder)
    config = load_config(folder)
    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    quant = raw.get("quantization_config")
    if not isinstance(quant, dict):
        raise CloverError(f"{where} is not a quantized pack (config.json has no quantization_config); quantize "
                          "it first with clover-local quantize")
    method = str(quant.get("quant_method", "")).lower()
    if method != "gptq":
        raise CloverError(f"the pack's quant_method is {method!r}; the runtime reads GPTQ packs only")
    if quant.get("checkpoint_format", "gptq") not in ("gptq",):
        raise CloverError(f"the pack's checkpoint_format is {quant.get('checkpoint_format')!r}; the runtime reads "
                          "the GPTQ v1 layout (checkpoint_format 'gptq')")
    if quant.get("desc_act"):
        raise CloverError("the pack was quantized with desc_act (act-order): the runtime needs desc_act false "
                          "(sequential groups); re-quantize with clover-local quantize")
    index = folder / INDEX_NAME
    try:
        weight_map = read_weight_map(index, f"{where}/{INDEX_NAME}")
    except FileNotFoundError:
        raise CloverError(f"{where} has no {INDEX_NAME}: not a complete pack") from None
    tensors: dict[str, TensorInfo] = {}
    for shard, header in _headers_of(sorted(set(weight_map.values())), headers, parallel):
        for name, info in header.items():
            if name == "__metadata__" or weight_map.get(name) != shard:
                continue
            tensors[name] = TensorInfo(name, shard, info["dtype"], tuple(info["shape"]))
    absent = sorted(n for n in weight_map if n not in tensors)
    if absent:
        raise CloverError(f"pack tensor {absent[0]} is listed in {INDEX_NAME} but not in its shard "
                          f"{weight_map[absent[0]]}: the shard is corrupt or from another pack")
    pack = PackIndex(Path(shown) if shown else folder, config, quant, tensors)
    classify_tensor(pack)
    return pack


def _headers_of(shards: list[str], headers: Callable[[str], dict], parallel: int) -> Iterator[tuple[str, dict]]:
    """Each shard's header in order; `parallel` at once where `headers` asks the Hub (a round trip each)."""
    if parallel <= 1:
        for shard in shards:
            yield shard, headers(shard)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(parallel) as pool:
        yield from zip(shards, pool.map(headers, shards))


def classify_tensor(pack: PackIndex) -> None:
    cfg = pack.config
    quant_parts: dict[str, dict[str, TensorInfo]] = defaultdict(dict)
    expert_parts: dict[tuple[int, int, str], dict[str, TensorInfo]] = defaultdict(dict)
    for name, info in pack.tensors.items():
        m = _EXPERT.match(name)
        if m:
            expert_parts[(int(m.group(1)), int(m.group(2)), m.group(3))][m.group(4)] = info
            continue
        module, _, leaf = name.rpartition(".")
        if leaf in QUANT_PARTS:
            quant_parts[module][leaf] = info
        else:
            pack.plain[name] = info
    for module, parts in quant_parts.items():
        pack.modules[module] = _quant_module(module, parts)
        if pack.modules[module].bits == 3:  # the dense kernels take 4 and 8 bits
            raise CloverError(f"pack tensor {module} is 3-bit: the runtime reads 3-bit routed experts only; "
                              "re-quantize with the experts alone at --bits 3")
    layers = sorted({key[0] for key in expert_parts})
    if not layers:
        raise CloverError(f"{pack.folder} has no per-expert quantized tensors (model.layers.N.mlp.experts.E.…): "
                          "not a clover-local pack")
    missing_layers = [i for i in range(cfg.num_hidden_layers) if i not in layers]
    if missing_layers:
        raise CloverError(f"pack is missing model.layers.{missing_layers[0]}.mlp.experts.0.gate_proj.qweight: the "
                          "pack is incomplete; re-download or re-quantize it")
    ref: dict[str, QuantModule] = {}
    for i in layers:
        for e in range(cfg.num_experts):
            for proj in EXPERT_PROJS:
                base = f"model.layers.{i}.mlp.experts.{e}.{proj}"
                parts = expert_parts.get((i, e, proj), {})
                mod = _quant_module(base, parts)
                if proj not in ref:
                    ref[proj] = mod
                elif (mod.bits, mod.in_features, mod.out_features, mod.groups) != (
                        ref[proj].bits, ref[proj].in_features, ref[proj].out_features, ref[proj].groups):
                    raise CloverError(f"pack expert {base} has another shape or bit width than the other experts; "
                                      "the runtime needs uniform experts")
    h, inter = cfg.hidden_size, cfg.moe_intermediate_size
    g, u, d = ref["gate_proj"], ref["up_proj"], ref["down_proj"]
    if (g.in_features, g.out_features, d.in_features, d.out_features) != (h, inter, inter, h) or \
            (u.in_features, u.out_features, u.groups, u.bits) != (h, inter, g.groups, g.bits) or d.bits != g.bits:
        raise CloverError("pack experts do not match config.json (hidden_size / moe_intermediate_size)")
    pack.expert = ref
    pack.expert_layers = layers
