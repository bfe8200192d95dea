"""Gated full attention with partial RoPE and GQA.

The q projection holds, per head, `head_dim` query rows then `head_dim` gate rows; the output is
`o * sigmoid(gate)` before `o_proj`. A causal pass appends its keys/values to the cache and masks causally; a
preview pass attends to the cached prefix and to every row of its block (no mask) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from clover_local.config import CloverConfig
from clover_local.model.cache import AttentionCache
from clover_local.model.norm import ZeroCenteredRMSNorm
from clover_local.model.rope import apply_rotary


def causal_mask(t: int, s: int, device: torch.device) -> torch.Tensor:
    """Rows that are the last t of s keys, each seeing the keys up to its own (a causal pass after a cached
    prefix). On CUDA torch's lower-right causal bias, so no [t, s] mask exists and SDPA keeps its flash kernel
    (with a mask and grouped heads it may take its math path instead: heads × t × s fp32 scores, 1 GiB for a
    512-row chunk at 32K); imported here because it imports torch._dynamo (≈ 2 s; the runtime does it while
    loading on CUDA). Elsewhere the bool mask [t, s] (True = may attend)."""
    if device.type == "cuda":
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(t, s)
    return torch.arange(s, device=device)[None, :] <= torch.arange(s - t, s, device=device)[:, None]


class Attention(nn.Module):
    def __init__(self, cfg: CloverConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=False)
        # the runtime's packed merge computing [q_proj(x), k_proj(x), v_proj(x)] in one call (the three modules are
        # then views of its columns: `load._merge_attention_inputs`); None: three calls
        self.qkv_proj: nn.Module | None = None
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, cfg.rms_norm_eps)
        # (q, block k, block v, window k, window v, window mask | None, scale, gate=) -> softmax attention
        # [B,H,T,D] of a preview times sigmoid(gate), without concatenating the window: the runtime's Triton kernel
        # on CUDA (runtime/kernels/preview_attention.py); None: the PyTorch path below, the definition
        self.preview_kernel: Callable | None = None
        # (x [B,T,H,D], norm weight, eps, cos, sin) -> the head norm and rotary embedding, [B,H,T,D], in one
        # launch (runtime/kernels/layer_ops.py `norm_rope`); None: the norm module and `apply_rotary`
        self.norm_rope_kernel: Callable | None = None

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B,H,T,D], k/v [B,Hkv,T,D] (normed, rotated), gate [B,T,H,D] (a view of the q projection)."""
        b, t, _ = x.shape
        if self.qkv_proj is not None:
            nq, nk = self.q_proj.out_features, self.k_proj.out_features
            qkv = self.qkv_proj(x)
            qg, k, v = qkv[..., :nq], qkv[..., nq : nq + nk], qkv[..., nq + nk :]
        else:
            qg, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        qg = qg.view(b, t, self.n_heads, 2 * self.head_dim)
        q, gate = qg[..., : self.head_dim], qg[..., self.head_dim :]
        k = k.view(b, t, self.n_kv, self.head_dim)
        v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        if self.norm_rope_kernel is not None:
            q = self.norm_rope_kernel(q, self.q_norm.weight, self.q_norm.eps, cos, sin)
            k = self.norm_rope_kernel(k, self.k_norm.weight, self.k_norm.eps, cos, sin)
            return q, k, v, gate
        q, k = self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v, gate

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Softmax attention of q over k/v (bool mask: True = may attend; or `causal_mask`'s bias), then the
        output gate and o_proj."""
        return self.finish(self.softmax_attention(q, k, v, mask), gate)

    def softmax_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.head_dim**-0.5, enable_gqa=self.n_heads != self.n_kv
        )

    def grouped_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`softmax_attention` with a mask [1, S] (every query row alike) or [T, S]: the query heads sharing a key
        head become more rows of that head ([B, Hkv, G·T, D], the mask repeated per head), so no kernel path
        expands the keys G times (with a mask, SDPA's GQA may fall back to one that does: 8× a 32K window)."""
        b, h, t, d = q.shape
        g = h // self.n_kv
        if mask.shape[0] > 1:
            mask = mask.repeat(g, 1)
        out = F.scaled_dot_product_attention(q.reshape(b, self.n_kv, g * t, d), k, v, attn_mask=mask,
                                             scale=self.head_dim**-0.5)
        return out.reshape(b, h, t, d)

    def window_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None], causal: bool,
    ) -> torch.Tensor:
        """The block's rows (q, and its own k/v) over the keys before it, `past` = (k, v [B,Hkv,W,D], mask [W]
        over them or None = all), and over its own keys: all of them (a preview) or each row up to itself
        (`causal`: a commit written in place). Output gate and o_proj included."""
        return self.o_proj(self.window_heads(q, k, v, gate, past, causal))

    def window_heads(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None], causal: bool,
    ) -> torch.Tensor:
        """`window_attention` before o_proj: the gated heads [B,T,H·D]."""
        b, _, t, _ = q.shape
        if self.preview_kernel is not None:  # the output gate inside the kernel
            out = self.preview_kernel(q, k, v, *past, self.head_dim**-0.5, gate=gate, causal=causal)
            return out.transpose(1, 2).reshape(b, t, -1)
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        if past[2] is None and not causal:
            return self.gated_heads(self.softmax_attention(q, k, v, None), gate)
        window = past[2] if past[2] is not None else q.new_ones(past[0].shape[2], dtype=torch.bool)
        if causal:  # [T, S]: the window's committed keys, then the block's up to the row's own
            own = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
            mask = torch.cat([window[None, :].expand(t, -1), own], 1)
        else:  # [1, S]: every row alike
            mask = torch.cat([window, window.new_ones(t)])[None, :]
        return self.gated_heads(self.grouped_attention(q, k, v, mask), gate)

    def gated_heads(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Heads [B,H,T,D] times the output gate (gate [B,T,H,D]) → [B,T,H·D], o_proj's input."""
        b, _, t, _ = out.shape
        return (out.transpose(1, 2) * torch.sigmoid(gate)).reshape(b, t, -1)

    def finish(self, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Heads [B,H,T,D] → output gate (gate [B,T,H,D]) → o_proj."""
        return self.o_proj(self.gated_heads(out, gate))

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: AttentionCache | None, preview: bool
    ) -> torch.Tensor:
        q, k, v, gate = self.project(x, cos, sin)
        t = x.shape[1]
        if preview:  # over the cached prefix (none: the block alone), every row over every row of the block
            past = cache.preview_keys_values() if cache is not None else None
            if past is not None:
                return self.window_attention(q, k, v, gate, past, causal=False)
            return self.attend(q, k, v, gate, None)
        if cache is not None and cache.writes_in_place(t):
            # the runtime's arena: the block's keys/values go to the rows at the cache's device-side length, and
            # the block attends to the committed window before it and causally to itself (no host-side length
            # in the pass: a CUDA graph of a commit replays for every block)
            return self.window_attention(q, k, v, gate, cache.write_block(k, v), causal=True)
        if cache is None:
            k_all, v_all = k, v
        else:  # appended first, then read back: no concatenated copy of the window
            cache.append(k, v)
            k_all, v_all = cache.keys_values()
        mask = causal_mask(t, k_all.shape[2], x.device) if t > 1 else None
        return self.attend(q, k_all, v_all, gate, mask)

    def forward_merged(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: AttentionCache, n_commit: int
    ) -> torch.Tensor:
        """A merged pass (`CloverModel.commit_and_preview`): rows [:n_commit] commit a block (causal, their keys
        and values go to the cache), the rest preview the next block against the cache with them in it. The
        projections and o_proj run once over both; the attention itself once per part."""
        q, k, v, gate = self.project(x, cos, sin)
        c = n_commit
        past_c, past_p = cache.write_merged(k[:, :, :c], v[:, :, :c])
        heads_c = self.window_heads(q[:, :, :c], k[:, :, :c], v[:, :, :c], gate[:, :c], past_c, causal=True)
        heads_p = self.window_heads(q[:, :, c:], k[:, :, c:], v[:, :, c:], gate[:, c:], past_p, causal=False)
        return self.o_proj(torch.cat([heads_c, heads_p], 1))

    def forward_all_blocks(
        self, clean: torch.Tensor, noisy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, block_size: int,
        row: torch.Tensor, blk: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training form: the causal pass over `clean` [B,T,H] and, at once, a preview of each block `noisy`
        [M,bs,H] (block `blk[m]` of sequence `row[m]`), each seeing the clean prefix before it plus its own rows
        (what decoding does one block at a time).

        The previewed rows go back to their positions in a [B,T] layout, so each sequence runs one attention
        over its clean keys then its noisy keys, with a block mask: memory O(B·T) in keys, where gathering the
        clean keys once per block would cost O(M·T) (the quantizer previews every block of 2,048-token rows)."""
        b, t = clean.shape[:2]
        nb = t // block_size
        q_c, k_c, v_c, g_c = self.project(clean, cos, sin)
        pos = torch.arange(t, device=clean.device)
        own = blk[:, None] * block_size + torch.arange(block_size, device=clean.device)  # [M, bs] positions
        q_n, k_n, v_n, g_n = self.project(noisy, cos[own][:, None], sin[own][:, None])
        out_c = self.attend(q_c, k_c, v_c, g_c, pos[None, :] <= pos[:, None])

        def place(x: torch.Tensor) -> torch.Tensor:  # [M, heads, bs, D] → [B, heads, T, D] (zeros elsewhere)
            full = x.new_zeros(b, nb, x.shape[1], block_size, x.shape[-1])
            full[row, blk] = x
            return full.transpose(1, 2).reshape(b, x.shape[1], t, x.shape[-1])

        block_of = pos // block_size
        sees_clean = pos[None, :] < (block_of * block_size)[:, None]  # the clean prefix before the row's block
        sees_own = block_of[:, None] == block_of[None, :]  # every noisy row of the row's own block
        out = self.softmax_attention(
            place(q_n), torch.cat([k_c, place(k_n)], 2), torch.cat([v_c, place(v_n)], 2),
            torch.cat([sees_clean, sees_own], -1),
        )
        out_n = out.reshape(b, -1, nb, block_size, self.head_dim).transpose(1, 2)[row, blk]  # [M, H, bs, D]
        return out_c, self.finish(out_n, g_n)
