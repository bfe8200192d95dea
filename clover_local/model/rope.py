"""Partial rotary embeddings: rotate-half on the first `rotary_dim` dims of each head.

The backbone's interleaved mRoPE uses three position streams; for text they are equal, which makes it plain
RoPE on the first 64 of 256 dims.
"""

from __future__ import annotations

import torch


class Rotary:
    def __init__(self, rotary_dim: int, theta: float) -> None:
        self.rotary_dim = rotary_dim
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cpu") / rotary_dim))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of shape [T, rotary_dim] for integer positions [T]."""
        freqs = positions.float()[:, None] * self.inv_freq.to(positions.device)[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, D]; rotates x[..., :rotary_dim] and passes the rest through."""
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated * sin, rest], dim=-1)
