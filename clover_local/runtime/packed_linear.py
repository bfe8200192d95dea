"""Modules the runtime swaps into the model: a linear kept in its GPTQ form, and an embedding table in host RAM."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from clover_local.runtime.kernels import linear_w4a16


class PackedLinear(nn.Module):
    """A GPTQ linear (4- or 8-bit, sequential groups) whose packed tensors stay on the device; forward runs the
    W4A16/W8A16 kernel. Same call as nn.Linear without bias: x [..., K] → [..., N] in x's dtype."""

    def __init__(self, qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int) -> None:
        super().__init__()
        self.register_buffer("qweight", qweight, persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.register_buffer("qzeros", qzeros, persistent=False)
        self.group_size, self.bits = group_size, bits
        self.in_features = qweight.shape[0] * (32 // bits)
        self.out_features = qweight.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.qzeros))

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        y = linear_w4a16(x.reshape(-1, x.shape[-1]), self.qweight, self.scales, self.qzeros, self.group_size,
                         self.bits)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bits={self.bits}, group={self.group_size}"


class HostEmbedding(nn.Module):
    """The token embedding table in host RAM (1 GB at BF16 for Clover): a lookup gathers the rows on the host
    and copies them to the compute device.

    `weight` is an empty [0, H] tensor on the compute device with the table's dtype, so code that asks
    `embed_tokens.weight.device` / `.dtype` (the decoder, score) sees where activations live; the table itself
    is `table`. Anything that tried to use `weight` as a table would fail loudly (it has no rows)."""

    def __init__(self, table: Tensor, device: torch.device) -> None:
        super().__init__()
        self.table = table
        self.num_embeddings, self.embedding_dim = table.shape
        self.register_buffer("weight", torch.empty(0, table.shape[1], dtype=table.dtype, device=device),
                             persistent=False)

    def forward(self, ids: Tensor) -> Tensor:
        rows = self.table[ids.to("cpu")]
        if self.weight.is_cuda:
            rows = rows.pin_memory().to(self.weight.device, non_blocking=True)
        return rows.to(self.weight.device)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, on host"
