"""Lazy reader for BF16 checkpoints: sharded or single-file safetensors, read one tensor (or layer) at a time.

Nothing is read until asked for, so quantization and evaluation can stream a 69 GB checkpoint one decoder
layer at a time. Only safetensors is ever opened (never pickle). Every user-visible failure (missing shard,
truncated file, wrong shape) becomes a one-line `CloverError` naming the file or tensor.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError, safe_open

from clover_local.checkpoint.index import INDEX_NAME, read_weight_map
from clover_local.checkpoint.names import Target, global_shapes, layer_shapes, map_name, optional
from clover_local.config import CloverConfig, load_config
from clover_local.errors import CloverError

if TYPE_CHECKING:
    from clover_local.hub.remote_shards import RemoteShards


class CheckpointReader:
    """Maps our parameter names to tensors in the shards; opens each shard once, on first use. With `remote`,
    the shards are read from the Hub by byte range (`quantize --stream`): `folder` holds the small files only."""

    def __init__(self, folder: str | Path, config: CloverConfig | None = None, *,
                 remote: RemoteShards | None = None) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise CloverError(f"{self.folder} is not a folder")
        self.config = config or load_config(self.folder)
        self.remote = remote
        self._handles: dict[str, object] = {}
        weight_map = self._weight_map()
        # parameter name -> list of (target, checkpoint name, shard file)
        self._sources: dict[str, list[tuple[Target, str, str]]] = defaultdict(list)
        for ckpt_name, shard in weight_map.items():
            target = map_name(ckpt_name)
            if target is not None:
                self._sources[target.name].append((target, ckpt_name, shard))

    # ---------------------------------------------------------------- discovery
    def _weight_map(self) -> dict[str, str]:
        index = self.folder / INDEX_NAME
        if index.exists():
            weight_map = read_weight_map(index)
            for shard in sorted(set(weight_map.values())):
                if self.remote is not None:
                    if shard not in self.remote.sizes:
                        raise CloverError(f"shard {shard} listed in {INDEX_NAME} is missing from "
                                          f"{self.remote.repo_id}")
                elif not (self.folder / shard).is_file():
                    raise CloverError(f"shard {shard} listed in {INDEX_NAME} is missing from {self.folder}")
            return weight_map
        if self.remote is not None:
            shards = sorted(self.remote.sizes)
        else:
            shards = sorted(p.name for p in self.folder.glob("*.safetensors"))
        if not shards:
            raise CloverError(f"no .safetensors weights in {self.folder}")
        weight_map = {}
        for shard in shards:
            for name in self._open(shard).keys():
                weight_map[name] = shard
        return weight_map

    def _open(self, shard: str):
        if self.remote is not None:
            return self.remote.open(shard)
        handle = self._handles.get(shard)
        if handle is None:
            path = self.folder / shard
            try:
                handle = safe_open(str(path), framework="pt", device="cpu")
            except (SafetensorError, OSError, ValueError) as exc:
                raise CloverError(f"shard {shard} is corrupt or truncated ({exc})") from None
            self._handles[shard] = handle
        return handle

    def _read(self, ckpt_name: str, shard: str) -> torch.Tensor:
        try:
            return self._open(shard).get_tensor(ckpt_name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CloverError(f"cannot read {ckpt_name} from {shard} ({exc})") from None

    def _read_slice(self, ckpt_name: str, shard: str, index: int) -> torch.Tensor:
        try:
            return self._open(shard).get_slice(ckpt_name)[index]
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CloverError(f"cannot read {ckpt_name} from {shard} ({exc})") from None

    # ---------------------------------------------------------------- queries
    def has(self, name: str) -> bool:
        return name in self._sources

    @property
    def has_preview_params(self) -> bool:
        return all(
            self.has(f"layers.{i}.linear_attn.conv_right_weight")
            for i in range(self.config.num_hidden_layers)
            if not self.config.is_attention(i)
        )

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """One parameter by our name, assembled from per-expert tensors when the checkpoint splits them."""
        sources = self._sources.get(name)
        if not sources:
            raise CloverError(f"checkpoint {self.folder} has no tensor for {name}")
        if len(sources) == 1 and sources[0][0].expert is None:
            _, ckpt_name, shard = sources[0]
            out = self._read(ckpt_name, shard)
        else:
            out = self._assemble_experts(name, sources)
        if shape is not None and tuple(out.shape) != tuple(shape):
            raise CloverError(
                f"tensor {sources[0][1]} has shape {list(out.shape)}, expected {list(shape)} for this config"
            )
        return out

    def _assemble_experts(self, name: str, sources: list[tuple[Target, str, str]]) -> torch.Tensor:
        n = self.config.num_experts
        fused = name.endswith("gate_up_proj")
        parts: dict[tuple[int, str], tuple[str, str]] = {}
        for target, ckpt_name, shard in sources:
            if target.expert is None:
                raise CloverError(f"checkpoint mixes fused and per-expert tensors for {name}")
            parts[(target.expert, target.part or "")] = (ckpt_name, shard)
        rows = []
        for e in range(n):
            wanted = ("gate", "up") if fused else ("down",)
            pieces = []
            for part in wanted:
                if (e, part) not in parts:
                    raise CloverError(f"checkpoint has no {part}_proj for expert {e} of {name.rsplit('.', 2)[0]}")
                pieces.append(self._read(*parts[(e, part)]))
            rows.append(torch.cat(pieces, 0) if fused else pieces[0])
        return torch.stack(rows, 0)

    def expert(self, layer: int, e: int) -> dict[str, torch.Tensor]:
        """One routed expert's gate/up/down weights, read without materialising the layer's other experts."""
        im = self.config.moe_intermediate_size
        out: dict[str, torch.Tensor] = {}
        for param in ("gate_up_proj", "down_proj"):
            name = f"layers.{layer}.mlp.experts.{param}"
            sources = self._sources.get(name)
            if not sources:
                raise CloverError(f"checkpoint {self.folder} has no tensor for {name}")
            if sources[0][0].expert is None:
                w = self._read_slice(sources[0][1], sources[0][2], e)
                if param == "gate_up_proj":
                    out["gate_proj"], out["up_proj"] = w[:im], w[im:]
                else:
                    out["down_proj"] = w
            else:
                for target, ckpt_name, shard in sources:
                    if target.expert == e:
                        out[f"{target.part}_proj"] = self._read(ckpt_name, shard)
        for part in ("gate_proj", "up_proj", "down_proj"):
            if part not in out:
                raise CloverError(f"checkpoint has no {part} for expert {e} of layer {layer}")
        return out

    def layer_state(self, i: int) -> dict[str, torch.Tensor]:
        """All parameters of decoder layer i, shape-checked, names relative to `layers.i.`."""
        out = {}
        for rel, shape in layer_shapes(self.config, i).items():
            name = f"layers.{i}.{rel}"
            if not self.has(name) and optional(name):
                continue
            out[rel] = self.tensor(name, shape)
        return out

    def logit_weights(self) -> dict[str, torch.Tensor]:
        """The final norm and the LM head (the embeddings where the head is tied): what logits need after the
        last layer, without the 1 GB table otherwise."""
        head = "lm_head.weight" if self.has("lm_head.weight") else "embed_tokens.weight"
        return {"norm.weight": self.tensor("norm.weight"), "lm_head.weight": self.tensor(head)}

    def global_state(self) -> dict[str, torch.Tensor]:
        """Embeddings, final norm and LM head."""
        shapes = global_shapes(self.config)
        return {name: self.tensor(name, shape) for name, shape in shapes.items()}

    def close(self) -> None:
        self._handles.clear()


def layer_states(reader: Any, start: int, stop: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    """Decoder layers start..stop-1 of any reader with `layer_state`, in order. A local reader's shards are
    unmapped after each layer (touched pages of a mapped shard would stay in RSS layer after layer); a streamed
    checkpoint (`reader.remote`) fetches the next layer while the caller works on this one, so the network and
    the quantizer overlap (one layer more in memory: ≈ 1.7 GB at 35B)."""
    remote = getattr(reader, "remote", None)
    if remote is None:
        for i in range(start, stop):
            state = reader.layer_state(i)
            if hasattr(reader, "close"):
                reader.close()
            yield i, state
        return
    ahead: _Ahead | None = None
    try:
        for i in range(start, stop):
            state = ahead.result() if ahead is not None else reader.layer_state(i)
            ahead = _Ahead(reader.layer_state, i + 1) if i + 1 < stop else None
            yield i, state
    finally:
        if ahead is not None:  # the caller stopped early (Ctrl-C, an error): the fetch in flight ends
            remote.stop.set()


class _Ahead:
    """`read(i)` on a daemon thread (a Ctrl-C never waits for a layer's fetch to finish)."""

    def __init__(self, read, i: int) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(read, i), daemon=True, name=f"clover-layer-{i}")
        self._thread.start()

    def _run(self, read, i: int) -> None:
        try:
            self._value = read(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
