"""User-facing errors.

Anything a person can cause (missing file, bad flag value, corrupt pack, not enough memory) raises
`CloverError` with one clear sentence; the CLI prints that sentence on stderr and exits non-zero, never a
traceback. Internal bugs stay ordinary exceptions so they are not mistaken for user errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class CloverError(Exception):
    """An error the user can fix; its message is shown as one line."""

    exit_code = 2


class Interrupted(CloverError):
    """Ctrl-C where the command has something to say (how to resume, what was kept): exits like an interrupted
    program (130)."""

    exit_code = 130


def run_reporting(entry: Callable[[], Any]) -> Any:
    """Run a program's entry point (`clover-local`, a `python -m` tool) the way a user should see it end: a
    CloverError as one `error:` line with its exit code, Ctrl-C as one `interrupted` line and 130."""
    try:
        return entry()
    except CloverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def torch_out_of_memory() -> type[BaseException]:
    """torch's out-of-memory exception (device or host allocator): `torch.OutOfMemoryError`, or
    `torch.cuda.OutOfMemoryError` before torch 2.5. A function so that importing this module stays torch-free."""
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def out_of_memory_errors() -> tuple[type[BaseException], ...]:
    """What running out of memory raises: torch's allocators (device or host) and Python's own. Not a bug: the
    same work with less on the card, or smaller, may fit, so commands turn these into one line of what to change."""
    return (torch_out_of_memory(), MemoryError)


def what_ran_out(exc: BaseException) -> str:
    """`host RAM` (Python's MemoryError) or `memory` (torch's allocator: on a GPU, the card's)."""
    return "host RAM" if isinstance(exc, MemoryError) else "memory"


@contextmanager
def host_allocations_as_memory_error() -> Iterator[None]:
    """torch's CPU allocator reports host RAM running out as a plain RuntimeError ("DefaultCPUAllocator: can't
    allocate memory" on Linux, "not enough memory" on Windows, where RAM runs out this way rather than by the
    OOM killer): raised here as MemoryError, which the out-of-memory handling (`out_of_memory_errors`) catches."""
    try:
        yield
    except RuntimeError as exc:
        if "DefaultCPUAllocator" not in str(exc):
            raise
        raise MemoryError(str(exc).strip().splitlines()[0]) from exc


@contextmanager
def out_of_memory_as(line: Callable[[BaseException], str]) -> Iterator[None]:
    """Running out of memory inside (`out_of_memory_errors`, and a host allocation torch's CPU allocator refused)
    ends in CloverError(line(exc)): the step that ran out and what to change, in the caller's words."""
    try:
        with host_allocations_as_memory_error():
            yield
    except out_of_memory_errors() as exc:
        raise CloverError(line(exc)) from None
