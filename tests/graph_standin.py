"""A CPU stand-in for `runtime.graphs.PassGraph` that checks what a CUDA graph would silently get wrong.

A real graph replays the kernels recorded at capture: the Python of the pass does not run again, Python values
(the block's start, shapes) are those of capture time, and every tensor the pass reads from outside itself is
read at the address it had at capture. The stand-in keeps the function it was captured with and, on replay,
runs THAT function again on its static input buffer (so capture-time Python values are what a replay sees),
under a dispatch mode that records, op by op, the storage and offset of every tensor the pass did not create
itself. A replay that reads any outside tensor at another address than the capture did (a tensor rebuilt
between passes, a buffer made outside the pass and freed) fails with the op that read it."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


_ACTIVE: list["OutsideReads"] = []


class OutsideReads(TorchDispatchMode):
    """Per op: (op name, the outside tensors it read as (storage address, offset, shape))."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []
        self.made: set[int] = set()  # storages created by the pass itself
        self.paused = 0

    def __enter__(self):
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return super().__exit__(*exc)

    def _outside(self, tensors) -> list[tuple]:
        return [(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)) for t in tensors
                if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() not in self.made]

    def _mark_made(self, out, read: set[int]) -> None:
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel():
                ptr = t.untyped_storage().data_ptr()
                if ptr not in read:  # a new tensor (an in-place op or a view returns one it read)
                    self.made.add(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            out = func(*args, **kwargs)
            self._mark_made(out, set())
            return out
        outside = self._outside(tree_leaves((args, kwargs)))
        out = func(*args, **kwargs)
        self._mark_made(out, {p for p, _, _ in outside})
        self.ops.append((str(func), tuple(outside)))
        return out


def opaque(name: str, fn, *tensors):
    """Run fn(*tensors) as ONE recorded op: its outside reads are `tensors` (flattened), its inner ops are not
    recorded. For the CPU reference MoE kernel, whose op sequence follows the routing (it loops over the slots in
    use) where the CUDA kernel is one static launch."""
    rec = _ACTIVE[-1] if _ACTIVE else None
    if rec is None:
        return fn(*tensors)
    leaves = tree_leaves(tensors)
    outside = rec._outside(leaves)
    rec.paused += 1
    try:
        out = fn(*tensors)
    finally:
        rec.paused -= 1
    rec._mark_made(out, {p for p, _, _ in outside})
    rec.ops.append((name, tuple(outside)))
    return out


class CheckingGraph:
    """`PassGraph`'s contract on the CPU, with the address check described above."""

    made = 0
    replays = 0

    def __init__(self, key, x: torch.Tensor, fn, stream) -> None:
        self.key, self.x, self.fn = key, x.clone(), fn
        rec = OutsideReads()
        with rec:
            fn(self.x)  # what capture records (a real capture runs nothing; this run's result is dropped)
        self.reads = rec.ops
        CheckingGraph.made += 1

    def replay(self, x: torch.Tensor) -> torch.Tensor:
        self.x.copy_(x)
        rec = OutsideReads()
        with rec:
            out = self.fn(self.x)
        CheckingGraph.replays += 1
        assert len(rec.ops) == len(self.reads), f"replay ran {len(rec.ops)} ops, capture {len(self.reads)}"
        for i, (now, then) in enumerate(zip(rec.ops, self.reads)):
            assert now == then, f"op {i} ({now[0]}) reads outside tensors {now[1]} where capture read {then[1]}"
        return out.clone()


def opaque_moe(moe):
    """`moe_w4a16` as one recorded op that reads its inputs and the two expert stacks (and the host's, if given)."""

    def run(x, slot_ids, weights, gate_up, down, host=None):
        stacks = [gate_up.qweight, gate_up.scales, gate_up.qzeros, down.qweight, down.scales, down.qzeros]
        if host is not None:  # the host slabs a graph reads in place
            stacks += [t for st in host for t in (st.qweight, st.scales, st.qzeros)]
        return opaque("moe_w4a16", lambda *_: moe(x, slot_ids, weights, gate_up, down, host), x, slot_ids,
                      weights, *stacks)

    return run
