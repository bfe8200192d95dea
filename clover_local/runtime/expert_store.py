"""Routed experts in host RAM: per layer one uint8 buffer [E, slab] (pinned when CUDA is available), so each
expert is one contiguous slab and a cache miss is one host→device copy, or a read in place by the MoE kernel.
Filled once at load; never copied again on the host (peak pinned memory ≈ the expert bytes)."""

from __future__ import annotations

import torch
from torch import Tensor

from clover_local.runtime.kernels import PackedStack
from clover_local.runtime.slab import SlabLayout


class HostExpertStore:
    def __init__(self, layout: SlabLayout, layers: list[int], n_experts: int, pin: bool) -> None:
        self.layout, self.n_experts = layout, n_experts
        self.pinned = pin and torch.cuda.is_available()
        self.buffers: dict[int, Tensor] = {}
        self._views: dict[int, dict[str, Tensor]] = {}
        self._stacks: dict[int, tuple[PackedStack, PackedStack]] = {}
        for i in layers:
            buf = torch.empty(n_experts, layout.nbytes, dtype=torch.uint8, pin_memory=self.pinned)
            self.buffers[i] = buf
            self._views[i] = layout.views(buf)
            self._stacks[i] = layout.stacks(buf)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() for b in self.buffers.values())

    def fill(self, layer: int, expert: int, gate: dict[str, Tensor], up: dict[str, Tensor],
             down: dict[str, Tensor]) -> None:
        self.layout.fill(self._views[layer], expert, gate, up, down)

    def slab(self, layer: int, expert: int) -> Tensor:
        return self.buffers[layer][expert]

    def stacks(self, layer: int) -> tuple[PackedStack, PackedStack]:
        """Host PackedStacks of a layer, indexed by expert id: the CPU path's weights, and what the MoE kernel
        reads in place for non-resident experts (pinned memory is in the GPU's address space)."""
        return self._stacks[layer]
