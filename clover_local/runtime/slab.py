"""One routed expert as one contiguous byte slab: gate_up (gate and up concatenated along N) then down.

Layout of a slab (each part starts on a 256-byte boundary):

| part | dtype | shape |
|---|---|---|
| gu_qweight | int32 | [H·b/32, 2I] |
| gu_scales | fp16 | [H/g, 2I] |
| gu_qzeros | int32 | [H/g, 2I·b/32] |
| d_qweight | int32 | [I·b/32, H] |
| d_scales | fp16 | [I/g', H] |
| d_qzeros | int32 | [I/g', H·b/32] |

(b: the experts' bits.) Concatenating gate and up along N keeps the GPTQ layout valid: qweight/scales are
column-wise, and qzeros pack whole runs of output columns (8 to an int32 at 4-bit, 32 to three at 3-bit) with I a
multiple of the run. With `planes` (3-bit experts where the Triton kernels run: `kernels.expert_planes`) the qweight
parts hold the same words rearranged per 128-input tile into the planes layout the MoE kernel reads field-wise
(`reference.planes3_rows`): same sizes, and scales and zeros as GPTQ's. A buffer of S slabs is a uint8 tensor
[S, nbytes]; `stacks()` gives the kernels' `PackedStack`s as strided views into it (no copy), so host memory (one
slab per expert) and the device cache (one slab per slot) share this code, and a miss is one contiguous copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from clover_local.runtime.kernels import PackedStack
from quantize.gptq_format import packed_length

ALIGN = 256


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class SlabLayout:
    hidden: int
    inter: int
    bits: int
    groups_gu: int  # groups along H (gate_up's K)
    groups_down: int  # groups along I (down's K)
    planes: bool = False  # qweight in the 3-bit planes layout (see the module docstring)

    def words(self, n: int) -> int:
        """int32 words that hold n packed values (n a whole number of runs: else ValueError)."""
        return packed_length(n, self.bits)

    def parts(self) -> list[tuple[str, torch.dtype, tuple[int, int]]]:
        h, i, w = self.hidden, self.inter, self.words
        return [
            ("gu_qweight", torch.int32, (w(h), 2 * i)),
            ("gu_scales", torch.float16, (self.groups_gu, 2 * i)),
            ("gu_qzeros", torch.int32, (self.groups_gu, w(2 * i))),
            ("d_qweight", torch.int32, (w(i), h)),
            ("d_scales", torch.float16, (self.groups_down, h)),
            ("d_qzeros", torch.int32, (self.groups_down, w(h))),
        ]

    def offsets(self) -> dict[str, int]:
        out, off = {}, 0
        for name, dtype, shape in self.parts():
            out[name] = off
            off = _align(off + shape[0] * shape[1] * dtype.itemsize)
        return out

    @property
    def nbytes(self) -> int:
        name, dtype, shape = self.parts()[-1]
        return _align(self.offsets()[name] + shape[0] * shape[1] * dtype.itemsize)

    @property
    def weight_bytes(self) -> int:
        """Bytes the kernels read per expert (the slab without alignment padding)."""
        return sum(s[0] * s[1] * d.itemsize for _, d, s in self.parts())

    def views(self, buf: Tensor) -> dict[str, Tensor]:
        """Per-part strided views [S, *shape] of a uint8 buffer [S, nbytes] (no copy)."""
        if buf.dtype != torch.uint8 or buf.dim() != 2 or buf.shape[1] != self.nbytes:
            raise ValueError(f"slab buffer must be uint8 [S, {self.nbytes}], got {buf.dtype} {tuple(buf.shape)}")
        offs = self.offsets()
        out = {}
        for name, dtype, shape in self.parts():
            n = shape[0] * shape[1] * dtype.itemsize
            part = buf[:, offs[name] : offs[name] + n].view(dtype)
            out[name] = part.view(buf.shape[0], *shape)
        return out

    def stacks(self, buf: Tensor) -> tuple[PackedStack, PackedStack]:
        """(gate_up, down) PackedStacks over every slab of `buf`."""
        v = self.views(buf)
        gu = PackedStack(v["gu_qweight"], v["gu_scales"], v["gu_qzeros"], self.hidden // self.groups_gu, self.bits,
                         self.planes)
        dn = PackedStack(v["d_qweight"], v["d_scales"], v["d_qzeros"], self.inter // self.groups_down, self.bits,
                         self.planes)
        return gu, dn

    def to_planes(self, buf: Tensor) -> None:
        """Rewrite the GPTQ-layout qweights of the slabs of `buf` (uint8 [S, nbytes], where they lie: the device
        cache at load) into the planes layout, in place (one launch a part on a GPU). Why on the device: ≈ 60 ms
        an expert at the real shapes on a 2-core CPU (10,240 experts at 35B: ≈ 10 minutes)."""
        from clover_local.runtime.kernels import planes3_in_place

        if not self.planes:
            raise ValueError("this slab layout is GPTQ's: nothing to rewrite")
        v = self.views(buf)
        for part in ("gu_qweight", "d_qweight"):
            planes3_in_place(v[part])

    def fill(self, views: dict[str, Tensor], slot: int, gate: dict[str, Tensor], up: dict[str, Tensor],
             down: dict[str, Tensor]) -> None:
        """Write one expert's GPTQ tensors (dicts with qweight/scales/qzeros) into slab `slot` of `views`."""
        i, zi = self.inter, self.words(self.inter)
        views["gu_qweight"][slot, :, :i].copy_(gate["qweight"])
        views["gu_qweight"][slot, :, i:].copy_(up["qweight"])
        views["gu_scales"][slot, :, :i].copy_(gate["scales"])
        views["gu_scales"][slot, :, i:].copy_(up["scales"])
        views["gu_qzeros"][slot, :, :zi].copy_(gate["qzeros"])
        views["gu_qzeros"][slot, :, zi:].copy_(up["qzeros"])
        views["d_qweight"][slot].copy_(down["qweight"])
        views["d_scales"][slot].copy_(down["scales"])
        views["d_qzeros"][slot].copy_(down["qzeros"])
