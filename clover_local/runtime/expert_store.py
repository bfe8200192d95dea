"""Routed experts in host RAM: per layer one uint8 buffer [E, slab] (pinned when CUDA is available), so each
expert is one contiguous slab and a cache miss is one host→device copy, or a read in place by the MoE kernel.
Filled once at load; never copied again on the host (peak pinned memory ≈ the expert bytes).

Why the layers share chunks: torch's pinned allocator (CachingHostAllocator) rounds every allocation up to a power
of two and pins all of it. One buffer a layer — 399 MiB at 35B — would pin 512 MiB each: 21.5 GB for 16.7 GB of
experts, 4.7 GB of a 32 GB machine's RAM for nothing. The layers' buffers are views into chunks of k layers, k
chosen so the chunks' rounded sizes waste the least (`sizes.chunk_layers`: 5 layers in 2 GiB at 35B, 2.6 % over).
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor

from clover_local.runtime.kernels import PackedStack
from clover_local.runtime.sizes import chunk_layers, fmt_bytes
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
        sizes = [len(layers[s:s + k]) * per_layer for s in range(0, len(layers), k)]
        try:
            self.chunks = [torch.empty(n, dtype=torch.uint8, pin_memory=self.pinned) for n in sizes]
        except (RuntimeError, MemoryError) as exc:
            if not self.pinned:
                raise
            self.chunks = self._unpinned(sizes, exc)
        for c, chunk in enumerate(self.chunks):
            for j, i in enumerate(layers[c * k:(c + 1) * k]):  # (each layer at a multiple of the slab size)
                buf = chunk[j * per_layer:(j + 1) * per_layer].view(n_experts, layout.nbytes)
                self.buffers[i] = buf
                self._views[i] = layout.views(buf)
                self._stacks[i] = layout.stacks(buf)

    def _unpinned(self, sizes: list[int], exc: BaseException) -> list[Tensor]:
        """Pageable chunks where the pinned ones could not be had (Windows caps page-locked memory, and so may a
        container): the experts still load and run — each copy to the GPU is slower and the GPU cannot read them in
        place (host_reads.py turns that off) — rather than the load failing. What was pinned is handed back."""
        print(f"warning: could not pin {fmt_bytes(self.pinned_bytes)} of host memory for the experts "
              f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); they stay in pageable memory: "
              "each expert copy is slower and the GPU cannot read them in place", file=sys.stderr, flush=True)
        self.pinned, self.pinned_bytes = False, 0
        try:  # (best effort: an older torch has no such call)
            torch.accelerator.empty_host_cache()
        except (AttributeError, RuntimeError):
            pass
        return [torch.empty(n, dtype=torch.uint8) for n in sizes]

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
