"""Routed experts in host RAM: per layer one uint8 buffer [E, slab] (pinned when CUDA is available), so each
expert is one contiguous slab and a cache miss is one host→device copy, or a read in place by the MoE kernel.
Filled once at load; never copied again on the host (peak pinned memory ≈ the expert bytes).

Why the layers share chunks: torch's pinned allocator (CachingHostAllocator) rounds every allocation up to a power
of two and pins all of it. One buffer a layer — 399 MiB at 35B — would pin 512 MiB each: 21.5 GB for 16.7 GB of
experts, 4.7 GB of a 32 GB machine's RAM for nothing. The layers' buffers are views into chunks of k layers, k
chosen so the chunks' rounded sizes waste the least (`sizes.chunk_layers`: 5 layers in 2 GiB at 35B, 2.6 % over).
"""

from __future__ import annotations

import torch
from torch import Tensor

from clover_local.runtime.kernels import PackedStack
from clover_local.runtime.sizes import chunk_layers
from clover_local.runtime.slab import SlabLayout


class HostExpertStore:
    def __init__(self, layout: SlabLayout, layers: list[int], n_experts: int, pin: bool) -> None:
        self.layout, self.n_experts = layout, n_experts
        self.pinned = pin and torch.cuda.is_available()
        self.buffers: dict[int, Tensor] = {}
        self._views: dict[int, dict[str, Tensor]] = {}
        self._stacks: dict[int, tuple[PackedStack, PackedStack]] = {}
        per_layer = n_experts * layout.nbytes
        k, pinned = chunk_layers(per_layer, len(layers))
        self.pinned_bytes = pinned if self.pinned else 0  # what the pinned allocator holds for them
        self.chunks: list[Tensor] = []
        for start in range(0, len(layers), k):
            group = layers[start:start + k]
            chunk = torch.empty(len(group) * per_layer, dtype=torch.uint8, pin_memory=self.pinned)
            self.chunks.append(chunk)
            for j, i in enumerate(group):  # (a layer starts at a multiple of the slab size: slab-aligned)
                buf = chunk[j * per_layer:(j + 1) * per_layer].view(n_experts, layout.nbytes)
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
