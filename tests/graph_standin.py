"""A CPU stand-in for `runtime.graphs.PassGraph` that checks what a CUDA graph would silently get wrong.

A real graph replays the kernels recorded at capture: the Python of the pass does not run again, Python values
(the block's start, shapes) are those of capture time, and every tensor the pass reads from outside itself is
read at the address it had at capture. The stand-in keeps the function it was captured with and, on replay,
runs THAT function again on its static input buffer (so capture-time Python values are what a replay sees),
under a dispatch mode that records, op by op, the storage and offset of every tensor the pass did not create
itself. A replay that reads any outside tensor at another address than the capture did (a tensor rebuilt
between passes, a buffer made outside the pass and freed) fails with the op that read it.

A real capture also EXECUTES nothing: counters the pass bumps, caches it writes, buffers it fills hold after
capture what they held before, and what the pass allocated (the graph's pool) holds garbage until a replay. The
stand-in's capture runs the pass to record it, then undoes every write it made to outside tensors and poisons
what it allocated and left alive, so a runtime that relied on the capture having run (counts doubled, a write
at a length the capture already advanced, a result read before any replay) fails here as on a GPU. And an op
that makes the host wait for the device (`.item()`, `nonzero`, a boolean-mask index, `torch.equal`) is illegal
while capturing: the stand-in refuses it in capture and replay alike (`SyncInGraph`), where on a GPU the capture
would fail and the runtime would fall back to eager passes for good."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


_ACTIVE: list["OutsideReads"] = []

# ops that read a device value on the host (CUDA: a synchronisation, illegal while capturing)
SYNCING = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.nonzero_static.default",
           "aten.equal.default", "aten.is_nonzero.default", "aten.masked_select.default", "aten._unique2.default",
           "aten.unique_consecutive.default", "aten.unique_dim.default", "aten.repeat_interleave.Tensor"}


class SyncInGraph(AssertionError):
    """An op inside a captured pass that would make the host wait for the GPU."""


def _syncs(func, args, kwargs) -> bool:
    name = str(func)
    if name in SYNCING:
        return not (name == "aten.repeat_interleave.Tensor" and kwargs.get("output_size") is not None)
    if name.startswith(("aten.index.", "aten.index_put")):  # a boolean mask becomes nonzero()
        return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in tree_leaves(args[1]))
    return False


class OutsideReads(TorchDispatchMode):
    """Per op: (op name, the outside tensors it read as (storage address, offset, shape)). With `capture`, it
    also keeps the first contents of every outside storage the pass writes (`undo` puts them back) and a weak
    reference to every tensor the pass makes (`poison` fills those still alive)."""

    def __init__(self, capture: bool = False) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple]] = []
        self.made: set[int] = set()  # storages created by the pass itself
        self.paused = 0
        self.capture = capture
        self.saved: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}
        self.allocated: list[weakref.ref] = []

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
                    if self.capture:
                        self.allocated.append(weakref.ref(t))

    def _save_written(self, func, args, kwargs) -> None:
        """Before an op runs: keep the contents of each outside storage it is about to write, once."""
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
            for t in tree_leaves(value):
                if isinstance(t, torch.Tensor) and t.numel():
                    storage = t.untyped_storage()
                    ptr = storage.data_ptr()
                    if ptr not in self.made and ptr not in self.saved:
                        self.saved[ptr] = (storage, storage.clone())

    def undo(self) -> None:
        """Outside tensors back to what they held before the pass: a capture writes nothing."""
        for storage, before in self.saved.values():
            storage.copy_(before)
        self.saved.clear()

    def poison(self) -> None:
        """What the pass allocated and something kept alive: garbage, as a graph pool's memory is until a replay."""
        for ref in self.allocated:
            t = ref()
            if t is not None:
                t.fill_(float("nan") if t.is_floating_point() else -(2**30) if t.dtype != torch.bool else True)
        self.allocated.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.capture:
            self._save_written(func, args, kwargs)
        if self.paused:  # inside an opaque op: not recorded; a view or in-place result of its inputs is not new
            out = func(*args, **kwargs)
            self._mark_made(out, {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                                  if isinstance(t, torch.Tensor)})
            return out
        if _syncs(func, args, kwargs):
            raise SyncInGraph(f"{func} inside a captured pass: on a GPU it syncs, and the capture fails")
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
        rec = OutsideReads(capture=True)
        try:
            with rec:
                fn(self.x)  # what capture records; its result is dropped
        finally:
            rec.undo()  # a real capture runs nothing: every write it made to outside tensors is taken back
        rec.poison()
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

    def run(x, slot_ids, weights, gate_up, down, host=None, install=None):
        stacks = [gate_up.qweight, gate_up.scales, gate_up.qzeros, down.qweight, down.scales, down.qzeros]
        if host is not None:  # the host slabs a graph reads in place
            stacks += [t for st in host for t in (st.qweight, st.scales, st.qzeros)]
        if install is not None:  # where it reads them through to (it writes the cache's stacks, read above)
            stacks.append(install)
        return opaque("moe_w4a16", lambda *_: moe(x, slot_ids, weights, gate_up, down, host, install), x, slot_ids,
                      weights, *stacks)

    return run
