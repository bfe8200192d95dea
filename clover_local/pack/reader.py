"""Read a GPTQ-format pack back as float tensors, with the same interface as `CheckpointReader`.

This is the reference path (dequantize at load): evaluation streams it layer by layer against the BF16
source, and the CPU runtime uses it. Quantized modules are recognised by their `.qweight`; the bit width
follows from the shapes (qweight rows × 32 / input width), so per-module 8-bit exceptions need no lookup.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from clover_local.checkpoint.index import INDEX_NAME, read_weight_map
from clover_local.checkpoint.names import global_shapes, layer_shapes, optional
from clover_local.config import load_config
from clover_local.errors import CloverError
from quantize.gptq_format import dequantize, dequantize_rows

QUANT_PARTS = ("qweight", "qzeros", "scales", "g_idx")
_EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)$")


def is_pack(folder: str | Path) -> bool:
    try:
        raw = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(raw.get("quantization_config"), dict)


def bits_of(tensors: dict[str, torch.Tensor]) -> int:
    return 32 * tensors["qweight"].shape[0] // tensors["g_idx"].shape[0]


class PackReader:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.config = load_config(self.folder)
        try:
            self.weight_map = read_weight_map(self.folder / INDEX_NAME)
        except FileNotFoundError:
            raise CloverError(f"{self.folder} has no {INDEX_NAME}: not a complete pack") from None
        for shard in sorted(set(self.weight_map.values())):
            if not (self.folder / shard).is_file():
                raise CloverError(f"pack shard {shard} is missing from {self.folder}")
        self._handles: dict[str, object] = {}
        self.by_layer: dict[int, list[str]] = defaultdict(list)
        for name in self.weight_map:
            m = re.match(r"^model\.layers\.(\d+)\.", name)
            if m:
                self.by_layer[int(m.group(1))].append(name)

    def _read(self, name: str) -> torch.Tensor:
        shard = self.weight_map[name]
        handle = self._handles.get(shard)
        try:
            if handle is None:
                handle = self._handles[shard] = safe_open(str(self.folder / shard), framework="pt", device="cpu")
            return handle.get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CloverError(f"pack shard {shard} is corrupt or truncated ({exc})") from None

    def tensor(self, name: str) -> torch.Tensor:
        """One stored tensor by its name in the pack (`model.layers.0.input_layernorm.weight`), as stored."""
        if name not in self.weight_map:
            raise CloverError(f"pack {self.folder} has no tensor {name}")
        return self._read(name)

    def close(self) -> None:
        """Unmap the shards (they reopen on the next read)."""
        self._handles.clear()

    @property
    def has_preview_params(self) -> bool:
        return all(f"model.layers.{i}.linear_attn.conv_right_weight" in self.weight_map
                   for i in range(self.config.num_hidden_layers) if not self.config.is_attention(i))

    def _module_tensors(self, names: list[str], prefix: str) -> dict[str, torch.Tensor]:
        """Relative names → float weights, dequantizing every module that has a qweight."""
        plain: dict[str, torch.Tensor] = {}
        quant: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
        for name in names:
            rel = name[len(prefix):]
            module, _, leaf = rel.rpartition(".")
            if leaf in QUANT_PARTS:
                quant[module][leaf] = self._read(name)
            else:
                plain[rel] = self._read(name)
        for module, parts in quant.items():
            missing = [p for p in QUANT_PARTS if p not in parts]
            if missing:
                raise CloverError(f"pack is missing {prefix}{module}.{missing[0]}")
            plain[f"{module}.weight"] = dequantize(parts, bits_of(parts), torch.float32)
        return plain

    def layer_state(self, i: int) -> dict[str, torch.Tensor]:
        prefix = f"model.layers.{i}."
        flat = self._module_tensors(self.by_layer.get(i, []), prefix)
        experts: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)
        state: dict[str, torch.Tensor] = {}
        for rel, t in flat.items():
            m = _EXPERT.match(rel[: -len(".weight")]) if rel.endswith(".weight") else None
            if m:
                experts[m.group(2)][int(m.group(1))] = t
            else:
                state[rel] = t
        n = self.config.num_experts
        if experts:
            for part in ("gate_proj", "up_proj", "down_proj"):
                have = experts.get(part, {})
                absent = [e for e in range(n) if e not in have]
                if absent:
                    raise CloverError(f"pack is missing {prefix}mlp.experts.{absent[0]}.{part}")
            state["mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat([experts["gate_proj"][e], experts["up_proj"][e]]) for e in range(n)])
            state["mlp.experts.down_proj"] = torch.stack([experts["down_proj"][e] for e in range(n)])
        out = {}
        for rel, shape in layer_shapes(self.config, i).items():
            if rel not in state:
                if optional(rel):
                    continue
                raise CloverError(f"pack has no tensor for {prefix}{rel}")
            if tuple(state[rel].shape) != tuple(shape):
                raise CloverError(f"pack tensor {prefix}{rel} has shape {list(state[rel].shape)}, expected {list(shape)}")
            out[rel] = state[rel]
        return out

    def logit_weights(self) -> dict[str, torch.Tensor | QuantizedRows]:
        """The final norm and the LM head (the embeddings where the head is tied): what logits need after the
        last layer. A quantized head stays packed, its rows dequantized a slice at a time where they are used."""
        if "lm_head.qweight" in self.weight_map:
            head: torch.Tensor | QuantizedRows = QuantizedRows({p: self.tensor(f"lm_head.{p}") for p in QUANT_PARTS})
        else:
            head = self.tensor("lm_head.weight" if "lm_head.weight" in self.weight_map else "model.embed_tokens.weight")
        return {"norm.weight": self.tensor("model.norm.weight"), "lm_head.weight": head}

    def global_state(self) -> dict[str, torch.Tensor]:
        names = [n for n in self.weight_map if not n.startswith("model.layers.")]
        flat = self._module_tensors(names, "")
        out = {}
        for name, shape in global_shapes(self.config).items():
            key = name if name.startswith("lm_head") else f"model.{name}"
            if key not in flat:
                raise CloverError(f"pack has no tensor for {key}")
            out[name] = flat[key]
        return out


class QuantizedRows:
    """A packed matrix [out, in] whose rows are dequantized (float32) a slice at a time: `rows[a:b]`, for a slice
    whose bounds are multiples of 32 or the end. Whole, the 248K-row LM head's dequantization passes through
    ≈ 8 GB of temporaries."""

    def __init__(self, parts: dict[str, torch.Tensor]) -> None:
        self.parts, self.bits = parts, bits_of(parts)
        self.shape = (parts["qweight"].shape[1], parts["g_idx"].shape[0])

    def __getitem__(self, rows: slice) -> torch.Tensor:
        start, stop, step = rows.indices(self.shape[0])
        if step != 1 or (start % 32) or (stop % 32 and stop != self.shape[0]):
            raise IndexError(f"rows {start}:{stop}:{step}: a packed matrix is sliced at multiples of 32")
        return dequantize_rows(self.parts, self.bits, start, stop)
