"""Every memory access of an interpreted Triton kernel checked against the tensors it was given (and, optionally,
its programs run last to first).

Why: on a GPU a load past a tensor reads whatever the caching allocator put next to it — other tensors' bytes,
NaN when random weights are read as fp16 scales — while Triton's interpreter on the CPU reads neighbouring heap
memory that is usually finite, so a kernel that runs past its data passes every CPU test and poisons a GPU run.
That happened: the dense kernel's split-K ran its last split 2 K tiles past the weight (2026-12-04, H200, every
32-row pass NaN; `w4a16.k_split`). With `checked_accesses()` active, a launch records the byte ranges of its tensor
arguments' storages, and every load, store and atomic of its programs must fall, element whole, inside one of
them (masked-off lanes excepted); the first that does not raises, naming the kernel and the address.

`checked_accesses(reverse_programs=True)` also runs each grid backwards: the interpreter otherwise always runs
program 0 first, which a GPU does not promise, so a launch whose programs depend on one another's writes passes
on the CPU in the one order it sees.

`skip_discarded_overflow_checks()` spares the interpreter work whose result it throws away (see there).

It patches the interpreter's builder (`triton.runtime.interpreter`, triton 3.x): a test aid, never product code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

import numpy as np

_state = threading.local()


class OutOfBounds(AssertionError):
    pass


def _ranges_of(args) -> tuple[np.ndarray, np.ndarray]:
    spans = {}

    def visit(a) -> None:
        if isinstance(a, (tuple, list)):
            for x in a:
                visit(x)
            return
        storage = getattr(a, "untyped_storage", None)
        if storage is None:
            base = getattr(a, "base", None)  # a TensorDescriptor
            if base is not None and hasattr(base, "untyped_storage"):
                visit(base)
            return
        st = storage()
        lo = st.data_ptr()
        spans[lo] = max(spans.get(lo, lo), lo + st.nbytes())

    visit(args)
    los = np.array(sorted(spans), dtype=np.uint64)
    return los, np.array([spans[int(lo)] for lo in los], dtype=np.uint64)


def _check(ptrs, mask, what: str) -> None:
    ranges = getattr(_state, "ranges", None)
    if ranges is None:
        return
    addr = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
        addr = addr[m]
    else:
        addr = addr.reshape(-1)
    if addr.size == 0:
        return
    size = np.uint64(max(1, ptrs.get_element_ty().primitive_bitwidth // 8))
    los, his = ranges
    lo, hi = addr.min(), addr.max() + size
    at = int(np.searchsorted(los, lo, side="right")) - 1
    if at >= 0 and hi <= his[at]:  # the usual case: the whole access inside one tensor
        return
    idx = np.searchsorted(los, addr, side="right").astype(np.int64) - 1
    ok = idx >= 0
    ok[ok] = addr[ok] + size <= his[idx[ok]]
    if not ok.all():
        bad = addr[~ok]
        near = ", ".join(f"[{int(lo):#x}, {int(hi):#x})" for lo, hi in zip(los, his))
        raise OutOfBounds(f"{_state.kernel}: {what} of {bad.size} element(s) outside every tensor argument, first at "
                          f"{int(bad[0]):#x} ({int(size)} bytes); arguments span {near}")


def skip_discarded_overflow_checks() -> bool:
    """Turn off the interpreter's integer-overflow checks where it discards their result; True if it did.

    Why: the interpreter's options say `sanitize_overflow=True`, so every integer +, - and * of a program is also
    done in int64, compared with the type's bounds and handed to `device_assert` — which returns without looking
    unless the options say `debug` (they do not: a GPU compile drops the same assert). That is a third of the time
    of an interpreted MoE launch (cProfile of the runtime test's passes), for nothing. With `debug` on (someone
    debugging a kernel) the checks are kept."""
    from triton.runtime import interpreter as itp

    builder = getattr(itp, "interpreter_builder", None)
    opts = getattr(builder, "options", None)
    if not dataclasses.is_dataclass(opts) or opts.debug or not getattr(opts, "sanitize_overflow", False):
        return False
    builder.options = dataclasses.replace(opts, sanitize_overflow=False)
    return True


@contextlib.contextmanager
def checked_accesses(reverse_programs: bool = False) -> Iterator[None]:
    """Within: every interpreted launch's loads, stores and atomics bounds-checked (see the module docstring).
    reverse_programs: the interpreter runs each grid's programs last to first instead of first to last — a GPU
    promises no order, so a kernel whose result depends on it (one program reading what another writes in the same
    launch) gives a different answer one way or the other."""
    from triton.runtime import interpreter as itp

    builder = itp.InterpreterBuilder
    saved = {name: getattr(builder, name) for name in ("create_masked_load", "create_masked_store",
                                                        "create_atomic_rmw", "create_atomic_cas", "set_grid_idx")}
    call, to_host = itp.GridExecutor.__call__, itp.GridExecutor._init_args_hst

    def load(self, ptrs, mask, other, *rest):
        _check(ptrs, mask, "load")
        return saved["create_masked_load"](self, ptrs, mask, other, *rest)

    def store(self, ptrs, value, mask, *rest):
        _check(ptrs, mask, "store")
        return saved["create_masked_store"](self, ptrs, value, mask, *rest)

    def rmw(self, op, ptr, val, mask, *rest):
        _check(ptr, mask, "atomic")
        return saved["create_atomic_rmw"](self, op, ptr, val, mask, *rest)

    def cas(self, ptr, cmp, val, *rest):
        _check(ptr, None, "atomic")
        return saved["create_atomic_cas"](self, ptr, cmp, val, *rest)

    def grid_idx(self, x, y, z):
        if reverse_programs:
            gx, gy, gz = self.grid_dim
            x, y, z = gx - 1 - x, gy - 1 - y, gz - 1 - z
        return saved["set_grid_idx"](self, x, y, z)

    def host_args(self, args, kwargs):  # the tensors the programs address (on the CPU: the callers' own)
        args_hst, kwargs_hst = to_host(self, args, kwargs)
        _state.ranges = _ranges_of((args_hst, tuple(kwargs_hst.values())))
        _state.kernel = getattr(self.fn, "__name__", str(self.fn))
        return args_hst, kwargs_hst

    def launch(self, *args, **kwargs):
        outer = getattr(_state, "ranges", None), getattr(_state, "kernel", None)
        try:
            return call(self, *args, **kwargs)
        finally:
            _state.ranges, _state.kernel = outer

    builder.create_masked_load, builder.create_masked_store = load, store
    builder.create_atomic_rmw, builder.create_atomic_cas, builder.set_grid_idx = rmw, cas, grid_idx
    itp.GridExecutor.__call__, itp.GridExecutor._init_args_hst = launch, host_args
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(builder, name, fn)
        itp.GridExecutor.__call__, itp.GridExecutor._init_args_hst = call, to_host
