"""Modules the runtime swaps into the model: a linear kept in its GPTQ form, the shared expert with its gate and
up projections merged into one, and an embedding table in host RAM."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from clover_local.runtime.kernels import field_major_rows, linear_w4a16


class PackedLinear(nn.Module):
    """A GPTQ linear (4- or 8-bit, sequential groups) whose packed tensors stay on the device; forward runs the
    W4A16/W8A16 kernel. Same call as nn.Linear without bias: x [..., K] → [..., N] in x's dtype."""

    def __init__(self, qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int,
                 owns: bool = True, k_tile: int = 0) -> None:
        super().__init__()
        for name, t in (("qweight", qweight), ("scales", scales), ("qzeros", qzeros)):
            if owns:
                self.register_buffer(name, t, persistent=False)
            else:  # a view of another module's tensors (`columns`): not a buffer, so no byte is counted twice
                setattr(self, name, t)
        self.group_size, self.bits = group_size, bits
        # 0: qweight in the GPTQ row order; else its rows repacked field-major per tile of k_tile inputs at load
        # (`field_major_rows`, `repacked`), which the kernels read with contiguous loads of x
        self.k_tile = k_tile
        self.in_features = qweight.shape[0] * (32 // bits)
        self.out_features = qweight.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.qzeros))

    def columns(self, start: int, stop: int) -> PackedLinear:
        """Output columns start … stop as a PackedLinear viewing this one's tensors (no copy, no buffers: the
        runtime places its model once, at load; a `.to()` of the owner afterwards would leave the view behind)."""
        per = 32 // self.bits
        if start % per or stop % per:
            raise ValueError(f"columns {start}:{stop} must be multiples of {per} (packed zero words)")
        return PackedLinear(self.qweight[:, start:stop], self.scales[:, start:stop],
                            self.qzeros[:, start // per : stop // per], self.group_size, self.bits, owns=False,
                            k_tile=self.k_tile)

    def repacked(self, k_tile: int) -> PackedLinear:
        """This linear with qweight's rows repacked field-major per tile of k_tile inputs (0: as it is), the same
        function of x. On CUDA in place, chunk by chunk (no second copy of the weight: at load the expert cache
        already fills the device): the module then owns it alone, so call it on a freshly loaded one."""
        if not k_tile or self.k_tile:
            return self
        qw = self.qweight
        repacked = field_major_rows(qw, k_tile, self.bits, out=qw if qw.is_cuda else None)
        return PackedLinear(repacked, self.scales, self.qzeros, self.group_size, self.bits, k_tile=k_tile)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        y = linear_w4a16(x.reshape(-1, x.shape[-1]), self.qweight, self.scales, self.qzeros, self.group_size,
                         self.bits, k_tile=self.k_tile)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        tile = f", rows field-major per {self.k_tile}" if self.k_tile else ""
        return f"in={self.in_features}, out={self.out_features}, bits={self.bits}, group={self.group_size}{tile}"


def merge_columns(*parts: PackedLinear) -> PackedLinear | None:
    """One PackedLinear computing [a(x), b(x), …] (the parts' columns in order), or None where they cannot share a
    kernel call (different bits or groups, inputs, or a part before the last not a whole number of packed zero
    words). GPTQ keeps every column's weights, scales and zeros apart, so the merge is concatenation along the
    columns."""
    a = parts[0]
    per = 32 // a.bits
    if any((p.bits, p.group_size, p.in_features, p.k_tile) != (a.bits, a.group_size, a.in_features, a.k_tile)
           for p in parts) or any(p.out_features % per for p in parts[:-1]):
        return None
    return PackedLinear(torch.cat([p.qweight for p in parts], 1), torch.cat([p.scales for p in parts], 1),
                        torch.cat([p.qzeros for p in parts], 1), a.group_size, a.bits, k_tile=a.k_tile)


class PackedMLP(nn.Module):
    """`MLP` (down(silu(gate(x)) · up(x))) with gate and up as one packed projection: one W4A16/W8A16 call
    instead of two, and silu · up in one launch where `silu_mul_kernel` is installed (CUDA). Why: at 32 rows each
    call is latency-bound (≈ 10 µs of GPU time for 2048→1024 on an H200, BENCHMARKS.md), and the shared expert
    runs in every layer of every pass."""

    def __init__(self, gate_up: PackedLinear, down_proj: PackedLinear) -> None:
        super().__init__()
        self.gate_up_proj, self.down_proj = gate_up, down_proj
        self.inter = gate_up.out_features // 2
        # h [..., 2I] -> silu(h[..., :I]) * h[..., I:] in one launch (kernels/layer_ops.py `silu_mul`); None: torch
        self.silu_mul_kernel: Callable | None = None

    def forward(self, x: Tensor) -> Tensor:
        h = self.gate_up_proj(x)
        if self.silu_mul_kernel is not None:
            return self.down_proj(self.silu_mul_kernel(h))
        return self.down_proj(F.silu(h[..., : self.inter]) * h[..., self.inter :])


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
