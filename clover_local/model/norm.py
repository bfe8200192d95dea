"""The two RMSNorms of the model, both computed in fp32."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class ZeroCenteredRMSNorm(nn.Module):
    """`x / rms(x) * (1 + w)`: the weight is stored as an offset from 1, so a zero tensor is the identity scale."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))
        # (x, weight, eps) -> the same in one launch: the runtime's Triton kernel on CUDA (kernels/layer_ops.py)
        self.kernel: Callable | None = None
        # (x, r, weight, eps) -> (x + r, the norm of it) in one launch (`add_forward`); None: the two steps
        self.add_kernel: Callable | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.weight, self.eps)
        return (rms_normalize(x, self.eps) * (1.0 + self.weight.float())).to(x.dtype)

    def add_forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + r, forward(x + r)): a residual sum and the norm after it."""
        if self.add_kernel is not None:
            return self.add_kernel(x, r, self.weight, self.eps)
        total = x + r
        return total, self(total)


class GatedRMSNorm(nn.Module):
    """GDN output norm: plain weight, `w * rmsnorm(o) * silu(z)` (norm before gate)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        # (x, gate, weight, eps) -> the same in one launch: the runtime's Triton kernel on CUDA
        # (kernels/layer_ops.py); None: the steps below
        self.kernel: Callable | None = None

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """In gate's dtype; x (a GDN layer's fp32 mix) is rounded to it first."""
        if self.kernel is not None:
            return self.kernel(x, gate, self.weight, self.eps)
        dtype = gate.dtype
        x = x.to(dtype)
        normed = self.weight * rms_normalize(x, self.eps).to(dtype)
        return (normed * torch.nn.functional.silu(gate.float())).to(dtype)
