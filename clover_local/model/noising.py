"""Block-diffusion noising: the inputs the preview pass learns from (training) and is calibrated on (GPTQ)."""

from __future__ import annotations

import torch


def mask_blocks(
    clean: torch.Tensor, block_size: int, mask_id: int, gen: torch.Generator, maskable: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask every block of `clean` [B, T] at its own ratio, uniform in [0.05, 1] (a block decoding has just
    started is all masks, one nearly done has few); `maskable` excludes positions (e.g. the prompt).
    Returns (noisy ids, masked positions)."""
    n, length = clean.shape
    ratio = torch.rand(n, length // block_size, generator=gen).clamp(min=0.05).repeat_interleave(block_size, 1)
    masked = torch.rand(n, length, generator=gen) < ratio
    if maskable is not None:
        masked &= maskable
    return clean.masked_fill(masked, mask_id), masked
