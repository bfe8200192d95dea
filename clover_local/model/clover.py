"""The whole model: decoder layers (GDN or attention mixer + MoE), and the two passes over a block of rows.

- causal pass (`preview=False`): prompt prefill and block commit; appends to the prefix cache.
- preview pass (`preview=True`): a denoising step over the block being generated; reads the cache, writes nothing.
- merged pass (`commit_and_preview`): a block's commit and the next block's first preview as one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from clover_local.checkpoint.names import PREVIEW_EXTRAS
from clover_local.checkpoint.reader import CheckpointReader
from clover_local.config import CloverConfig
from clover_local.model.attention import Attention
from clover_local.model.cache import PrefixCache
from clover_local.model.gdn import GatedDeltaNet
from clover_local.model.moe import SparseMoe
from clover_local.model.norm import ZeroCenteredRMSNorm
from clover_local.model.rope import Rotary


T = TypeVar("T")


def _drain(steps: Generator[object, None, T]) -> T:
    """Run a generator of steps to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


class DecoderLayer(nn.Module):
    def __init__(self, cfg: CloverConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.is_attention = cfg.is_attention(index)
        self.input_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if self.is_attention:
            self.self_attn = Attention(cfg)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        self.mlp = SparseMoe(cfg)

    def mix(self, x, cos, sin, cache, preview: bool, n_prefix: int | torch.Tensor) -> torch.Tensor:
        h = self.input_layernorm(x)
        if self.is_attention:
            return self.self_attn(h, cos, sin, cache, preview)
        return self.linear_attn(h, cache, preview, n_prefix)

    def forward(self, x, cos, sin, cache, preview: bool, n_prefix: int | torch.Tensor) -> torch.Tensor:
        x, h = self.post_attention_layernorm.add_forward(x, self.mix(x, cos, sin, cache, preview, n_prefix))
        return self.mlp(h, residual=x)

    def forward_merged(self, x, cos, sin, cache, n_prefix: int | torch.Tensor, n_commit: int) -> torch.Tensor:
        """A merged pass (`CloverModel.commit_and_preview`): the mixer commits rows [:n_commit] and previews the
        rest against the cache they leave; norms, router and experts are row-wise, so one call serves both."""
        h = self.input_layernorm(x)
        if self.is_attention:
            m = self.self_attn.forward_merged(h, cos, sin, cache, n_commit)
        else:
            m = self.linear_attn.forward_merged(h, cache, n_prefix, n_commit)
        x, h = self.post_attention_layernorm.add_forward(x, m)
        return self.mlp(h, residual=x)

    def mix_all_blocks(
        self, clean, noisy, cos, sin, block_size: int, row=None, blk=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training form of the residual after the mixer: causal over `clean` [B,T,H], a preview of each chosen
        block `noisy` [M,bs,H] (block `blk[m]` of sequence `row[m]`). Without `row`/`blk`, `noisy` is [B,T,H]
        and every block is previewed (the quantizer's layer-by-layer form); the result has `noisy`'s shape."""
        items, row, blk = _block_items(noisy, block_size, row, blk)
        hc, hn = self.input_layernorm(clean), self.input_layernorm(items)
        if self.is_attention:
            mc, mn = self.self_attn.forward_all_blocks(hc, hn, cos, sin, block_size, row, blk)
        else:
            mc, mn = self.linear_attn.forward_all_blocks(hc, hn, block_size, row, blk)
        return clean + mc, noisy + mn.view_as(noisy)

    def forward_all_blocks(
        self, clean, noisy, cos, sin, block_size: int, row=None, blk=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        clean, noisy = self.mix_all_blocks(clean, noisy, cos, sin, block_size, row, blk)
        h = clean.shape[-1]
        both = torch.cat([clean.reshape(-1, h), noisy.reshape(-1, h)], 0)  # the MoE is per row: one call for both
        both = both + self.mlp(self.post_attention_layernorm(both))
        n_clean = clean.shape[0] * clean.shape[1]
        return both[:n_clean].view_as(clean), both[n_clean:].view_as(noisy)


def _block_items(noisy: torch.Tensor, block_size: int, row, blk) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chosen blocks as items [M,bs,H] with their (sequence, block) indices; given [B,T,H] and no indices: all."""
    if row is not None:
        return noisy, row, blk
    b, t, h = noisy.shape
    nb = t // block_size
    idx = torch.arange(b * nb, device=noisy.device)
    return noisy.reshape(b * nb, block_size, h), idx // nb, idx % nb


class CloverModel(nn.Module):
    def __init__(self, cfg: CloverConfig) -> None:
        super().__init__()
        self.config = cfg
        v, h = cfg.vocab_size, cfg.hidden_size
        # built on the meta device to be filled (every load), the table is left uninitialised: nn.Embedding's
        # normal_ init imports torch._dynamo there, ≈ 1.2 s of a CPU command's start (BENCHMARKS.md "Starting up")
        on_meta = torch.get_default_device().type == "meta"
        self.embed_tokens = nn.Embedding(v, h, _weight=torch.empty(v, h)) if on_meta else nn.Embedding(v, h)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = Rotary(cfg.rotary_dim, cfg.rope_theta)
        self.has_preview_params = True
        # Set by clover_local.runtime (offloaded INT4 packs): runs every pass through `run_pass` (the expert
        # cache learns block boundaries from it; it may rerun a preview), supplies preallocated caches, chunks
        # long prefills.
        self.runtime = None

    # ------------------------------------------------------------------ passes
    def new_cache(self) -> PrefixCache:
        if self.runtime is not None:
            return self.runtime.new_cache()
        return PrefixCache.empty(self.config.layer_types)

    def reclaim_cache(self, cache: PrefixCache) -> bool:
        """Whether `cache`, made by `new_cache` earlier, still holds its keys/values and may take more passes.
        A plain cache owns its buffers (always True); the runtime's caches share one preallocated KV arena, so
        only the newest one is intact."""
        return self.runtime is None or self.runtime.reclaim(cache)

    def runtime_stats(self) -> dict | None:
        """Expert-cache counters (hit rate, misses, PCIe bytes, pass times) when loaded with the runtime."""
        return self.runtime.stats() if self.runtime is not None else None

    def hidden(self, ids: torch.Tensor, cache: PrefixCache | None = None, preview: bool = False,
               commit_rows: int = 0) -> torch.Tensor:
        """Final-norm hidden states [B,T,H] for token ids [B,T] placed right after the cached prefix. With
        `commit_rows`, a merged pass (`commit_and_preview`): the first rows commit, the rest preview after them.
        A prompt's pass longer than a prefill chunk goes layer by layer (`layer_chunk`, `_prompt_steps`)."""
        start = cache.length if cache is not None else 0
        n = ids.shape[1]
        if not (preview or commit_rows) and (chunk := self.layer_chunk(n, cache)):
            return _drain(self._prompt_steps(ids, cache, chunk))

        def run(x: torch.Tensor) -> torch.Tensor:
            base, cos, sin = self._rotary_from(cache, start, n, x)
            for i, layer in enumerate(self.layers):
                c = cache.layers[i] if cache is not None else None
                if commit_rows:
                    x = layer.forward_merged(x, cos, sin, c, base, commit_rows)
                else:
                    x = layer(x, cos, sin, c, preview, base)
            return self.norm(x)

        x = self.embed_tokens(ids)  # outside `run`: the runtime's table lives on the host
        if self.runtime is None:
            out = run(x)
        else:
            # the runtime brackets the pass and may run it more than once: an optimistic pass that needed a
            # non-resident expert is discarded and rerun (a preview writes nothing to the cache; a commit writes
            # keys/values at fixed rows and holds its GDN states aside until `settle`, so that is safe too)
            out = self.runtime.run_pass(preview, start, x, cache, run, commit_rows=commit_rows)
        if cache is not None and not preview:
            # outside `run`: a host-side step a CUDA graph of the pass would not replay
            cache.settle(start + (commit_rows or n))
        return out

    def _rotary_from(self, cache: PrefixCache | None, start: int, n: int, x: torch.Tensor):
        """(first position, cos, sin) of n rows after the cache's prefix. Inside a pass: for the runtime's caches
        the position is a device tensor, so one CUDA graph of a preview or a commit (runtime/graphs.py) serves
        every block."""
        base = cache.preview_start() if cache is not None else start
        cos, sin = self.rotary.cos_sin(torch.arange(n, device=x.device) + base, x.dtype)
        return base, cos, sin

    def layer_chunk(self, n: int, cache: PrefixCache | None) -> int:
        """Rows a chunk when a causal pass of n rows into `cache` goes layer by layer, else 0: with the runtime,
        a pass longer than a prefill chunk (and than a block: never a block's commit, a graph replay at
        device-side positions, whatever --prefill-chunk says)."""
        if self.runtime is None or cache is None:
            return 0
        chunk = self.runtime.prefill_chunk
        return chunk if n > max(chunk, self.config.diffusion.block_size) else 0

    def prompt_pass(self, ids: torch.Tensor, cache: PrefixCache, last_logits: bool = True
                    ) -> Generator[int, None, torch.Tensor | None]:
        """One causal pass of a prompt's ids into `cache` (at most `prefill_rows` of them), as a generator: when
        it goes layer by layer (`layer_chunk`) it yields the layers done after each one — seconds of work at 35B
        that a front end can show, and where a consumer may stop (the pass is then abandoned: the cache must not
        be used again). Returns the last row's logits [V] in fp32, or None without running the LM head
        (`last_logits=False`: a prompt's pass before its last)."""
        if chunk := self.layer_chunk(ids.shape[1], cache):
            h = yield from self._prompt_steps(ids, cache, chunk)
        else:
            h = self.hidden(ids, cache)
        logits = self.lm_head(h[:, -1:]).float()[0, -1] if last_logits else None
        self._finish_pass()
        return logits

    def _prompt_steps(self, ids: torch.Tensor, cache: PrefixCache, chunk: int) -> Generator[int, None, torch.Tensor]:
        """`hidden(ids, cache)` of a pass that goes layer by layer, `chunk` rows at a time (`layer_chunk`),
        yielding the layers done after each."""
        start, n = cache.length, ids.shape[1]

        def steps(x: torch.Tensor) -> Generator[int, None, torch.Tensor]:
            base, cos, sin = self._rotary_from(cache, start, n, x)
            return self.norm((yield from self._layer_by_layer(x, cos, sin, cache, base, chunk)))

        out = yield from self.runtime.run_steps(start, self.embed_tokens(ids), cache, steps)
        cache.settle(start + n)
        return out

    def commit_and_preview(self, commit_ids: torch.Tensor, preview_ids: torch.Tensor, cache: PrefixCache
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """Commit a finished block and run the next block's first preview in ONE pass (clover-model.md's "known
        speed-up"): (logits of the commit's last row [B,V], of the preview's rows [B,T,V]), fp32. Exact: per
        layer the commit's rows go first and write the cache, the preview's read it; every row-wise weight
        (projections, router, experts) is read once for both, which is what a pass costs. Equals `forward`
        over `commit_ids` (causal) then `forward(preview_ids, preview=True)`."""
        c = commit_ids.shape[1]
        if cache is None or not 0 < c <= self.config.diffusion.block_size:
            raise ValueError(f"a merged pass commits 1…{self.config.diffusion.block_size} rows to a cache")
        h = self.hidden(torch.cat([commit_ids, preview_ids], 1), cache, commit_rows=c)
        logits = self.lm_head(h[:, c - 1 :]).float()
        self._finish_pass()
        return logits[:, 0], logits[:, 1:]

    def forward(
        self,
        ids: torch.Tensor,
        cache: PrefixCache | None = None,
        preview: bool = False,
        rows: slice | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B,T',V] in fp32; `rows` picks which rows get the LM head (the vocabulary is 248K wide)."""
        chunk = self.prefill_rows if cache is not None and not preview else 0
        if chunk and ids.shape[1] > chunk:
            h = self._chunked_hidden(ids, cache, chunk, rows)
        else:
            h = self.hidden(ids, cache, preview)
            if rows is not None:
                h = h[:, rows]
        logits = self.lm_head(h).float()
        self._finish_pass()
        return logits

    def _layer_by_layer(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: PrefixCache,
                        base: int | torch.Tensor, chunk: int) -> Generator[int, None, torch.Tensor]:
        """A long causal pass (a prompt's span) one layer at a time, each over all the rows, `chunk` rows after
        chunk: activations stay one chunk's, and the layer's experts — nearly all of them at 512 rows — are
        loaded once for the span instead of once a chunk (chunk after chunk through every layer, an offloaded
        cache copies every expert it cannot hold once a chunk). Each layer's chunks advance a cache of its own
        (`chained`), handed back when the layer is done (`adopt`): the runtime's caches hold a pass's GDN
        states aside until it is settled, where the next chunk must read them. Yields the layers done after
        each (`prompt_pass`)."""
        n = x.shape[1]
        bufs = (torch.empty_like(x), torch.empty_like(x))  # a layer reads one and writes the other (x: the plan's
        # third span of hidden states, kept as the pass's input)
        for i, layer in enumerate(self.layers):
            own, out = cache.layers[i].chained(), bufs[i % 2]
            for s in range(0, n, chunk):
                out[:, s : s + chunk] = layer(x[:, s : s + chunk], cos[s : s + chunk], sin[s : s + chunk], own,
                                              False, base)
            cache.layers[i].adopt(own)
            x = out
            yield i + 1
        return x

    @property
    def prefill_rows(self) -> int:
        """Rows per causal pass of a long prompt (the runtime's prefill span: its chunks go layer by layer), 0
        for no limit: a pass's memory grows with its rows, and the cache carries the state from one pass to the
        next exactly."""
        return self.runtime.prefill_span if self.runtime is not None else 0

    def _chunked_hidden(self, ids: torch.Tensor, cache: PrefixCache, chunk: int,
                        rows: slice | torch.Tensor | None) -> torch.Tensor:
        """`hidden(ids, cache)[:, rows]` in causal passes of `chunk` rows, keeping only the rows asked for (a
        whole prompt's hidden states would be 4 KB a token: 128 MiB at 32K, for the one row decoding reads)."""
        n = ids.shape[1]
        every = torch.arange(n)
        wanted = every if rows is None else every[rows.cpu() if torch.is_tensor(rows) else rows]
        order, inverse = wanted.sort()[0], wanted.argsort().argsort()  # chunk by chunk, then as asked
        kept = []
        for s in range(0, n, chunk):
            h = self.hidden(ids[:, s : s + chunk], cache)
            here = order[(order >= s) & (order < s + chunk)] - s
            if here.numel():
                kept.append(h[:, here.to(h.device)])
        return torch.cat(kept, 1)[:, inverse.to(h.device)] if kept else h[:, :0]

    def _finish_pass(self) -> None:
        """With the runtime: book the pass now that the LM head is queued after it, so the host's bookkeeping
        overlaps the LM head on the device (`Runtime.finish_pass`)."""
        if self.runtime is not None:
            self.runtime.finish_pass()

    def forward_all_blocks(
        self, clean_ids: torch.Tensor, noisy_ids: torch.Tensor, blocks: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: hidden states of the causal pass over `clean_ids` and of a preview of every block of
        `noisy_ids` ([B, T], T a multiple of block_size, blocks aligned at 0), each block conditioned on the
        clean prefix before it. Equals running decoding's passes block by block (a test pins this).

        `blocks` [B, T/block_size] bool previews only the chosen blocks (those with a masked position: a
        prompt-only block has no loss, and each preview depends only on the clean prefix and its own rows, so
        skipping it changes nothing else); the previews then come back as [M, block_size, H] in row-major order
        of the chosen blocks. Without it, all blocks, as [B, T, H]."""
        bs = self.config.diffusion.block_size
        b, t = clean_ids.shape
        if t % bs:
            raise ValueError(f"sequence length {t} is not a multiple of block size {bs}")
        if blocks is None:  # every block, [B,T,H] throughout (each layer splits it into blocks)
            row = blk = None
            noisy = self.embed_tokens(noisy_ids)
        else:
            row, blk = blocks.nonzero(as_tuple=True)
            noisy = self.embed_tokens(noisy_ids.view(b, t // bs, bs)[row, blk])  # [M, bs, H]
        clean = self.embed_tokens(clean_ids)
        cos, sin = self.rotary.cos_sin(torch.arange(t, device=clean_ids.device), clean.dtype)
        for layer in self.layers:
            clean, noisy = layer.forward_all_blocks(clean, noisy, cos, sin, bs, row, blk)
        return self.norm(clean), self.norm(noisy)

    # ------------------------------------------------------------------ loading
    @classmethod
    def weight_bytes(cls, cfg: CloverConfig, dtype: torch.dtype) -> int:
        """What the model's parameters take in `dtype`, counted on the meta device (no memory: ≈ 2 s at 35B)."""
        with torch.device("meta"):
            model = cls(cfg)
        if cfg.tie_word_embeddings:  # one tensor, counted once
            model.lm_head.weight = model.embed_tokens.weight
        return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()

    @classmethod
    def from_reader(
        cls, reader, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
        on_layer: Callable[[int, int], None] | None = None,
    ) -> "CloverModel":
        """Build on the meta device, then fill one layer at a time so peak host memory is one layer's tensors.
        `reader` is a CheckpointReader or anything with the same `config`/`global_state`/`layer_state`;
        `on_layer(done, total)` after each layer."""
        cfg = reader.config
        with torch.device("meta"):
            model = cls(cfg)
        for name, tensor in reader.global_state().items():
            set_param(model, name, tensor.to(device=device, dtype=dtype))
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        model.has_preview_params = reader.has_preview_params
        for i in range(cfg.num_hidden_layers):
            fill_layer(model.layers[i], reader.layer_state(i), device, dtype)
            if on_layer is not None:
                on_layer(i + 1, cfg.num_hidden_layers)
        model.rotary.inv_freq = model.rotary.inv_freq.to(device)
        return model.eval()


def set_param(module: nn.Module, name: str, value: torch.Tensor) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    setattr(owner, attr, nn.Parameter(value, requires_grad=False))


def fill_layer(layer: DecoderLayer, state: dict[str, torch.Tensor], device, dtype: torch.dtype) -> DecoderLayer:
    """Put a layer's tensors (names relative to `layers.i.`) into it; a backbone without the block-diffusion
    extras gets neutral ones (no right taps, unit logit scale, no history preference)."""
    for name, tensor in state.items():
        set_param(layer, name, tensor.to(device=device, dtype=dtype))
    if not layer.is_attention:
        gdn = layer.linear_attn
        defaults = {
            "conv_right_weight": torch.zeros(gdn.conv1d.weight.shape[0], gdn.kernel - 1),
            "bd_softmax_logit_scale": torch.ones(gdn.hv),
            "bd_softmax_history_bias": torch.zeros(gdn.hv),
            "bd_softmax_history_c": torch.zeros(gdn.hv),
        }
        for extra in PREVIEW_EXTRAS:
            if f"linear_attn.{extra}" not in state:
                set_param(layer, f"linear_attn.{extra}", defaults[extra].to(device=device, dtype=dtype))
    return layer


def build_layer(
    cfg: CloverConfig, index: int, state: dict[str, torch.Tensor], device, dtype: torch.dtype
) -> DecoderLayer:
    """One decoder layer with its weights, without building the rest of the model (layer streaming)."""
    with torch.device("meta"):
        layer = DecoderLayer(cfg, index)
    return fill_layer(layer, state, device, dtype).eval()


def load_model(
    folder: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16
) -> CloverModel:
    return CloverModel.from_reader(CheckpointReader(folder), device, dtype)
