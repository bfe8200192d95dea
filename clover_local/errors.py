"""User-facing errors.

Anything a person can cause (missing file, bad flag value, corrupt pack, not enough memory) raises
`CloverError` with one clear sentence; the CLI prints that sentence on stderr and exits non-zero, never a
traceback. Internal bugs stay ordinary exceptions so they are not mistaken for user errors.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
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
    CloverError as one `error:` line with its exit code, Ctrl-C as one `interrupted` line and 130, and running
    out of memory where the command had no line of its own for it as one `error:` line too (`out_of_memory_line`)."""
    try:
        return entry()
    except CloverError as exc:
        _traceback_if_asked()
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:
        line = out_of_memory_line(exc)
        if line is None:  # a bug: its traceback is what a report needs
            raise
        _traceback_if_asked()
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(CloverError.exit_code) from None


def _traceback_if_asked() -> None:
    """CLOVER_TRACEBACK=1: the one-line error's traceback too, above it (where it came from: for a bug report,
    or a GPU session's log, docs/gpu_session.sh)."""
    if os.environ.get("CLOVER_TRACEBACK", "") not in ("", "0"):
        traceback.print_exc(file=sys.stderr)


def out_of_memory_line(exc: BaseException) -> str | None:
    """The last resort's line for running out of memory (None for any other exception): what ran out, the size
    asked for, and what to change. The commands that can run out in a long step (chat, serve, generate, score,
    quantize, eval, pack loading) say it first, with the step and their own flags; this covers the rest."""
    torch = sys.modules.get("torch")  # (not loaded: no torch allocator raised it)
    if isinstance(exc, MemoryError) or _host_allocator_refused(exc):
        what, fix = "host RAM", "close other programs or ask for less"
    elif torch is not None and isinstance(exc, torch_out_of_memory()):
        gpu = "CUDA" in str(exc)
        what = "GPU memory" if gpu else "memory"
        fix = "close other programs that use the GPU or ask for less" if gpu else "ask for less"
    else:
        return None
    asked = re.search(r"tried to allocate ([\d.]+ ?[KMGT]i?B|\d+ bytes)", str(exc), re.IGNORECASE)
    size = f" (asked for {_size_text(asked.group(1))} more)" if asked else ""
    return f"ran out of {what}{size}; {fix} (the command's --help names the sizes it takes)"


def _size_text(text: str) -> str:
    """torch's `20.00 MiB` as it is; the CPU allocator's `123456789 bytes` in binary units."""
    if not text.endswith("bytes"):
        return text
    from clover_local.runtime.sizes import fmt_bytes

    return fmt_bytes(int(text.split()[0]))


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
        if not _host_allocator_refused(exc):
            raise
        raise MemoryError(str(exc).strip().splitlines()[0]) from exc


def _host_allocator_refused(exc: BaseException) -> bool:
    """torch's CPU allocator could not have the host RAM it asked for (its RuntimeError's text names it)."""
    return isinstance(exc, RuntimeError) and "DefaultCPUAllocator" in str(exc)


@contextmanager
def out_of_memory_as(line: Callable[[BaseException], str]) -> Iterator[None]:
    """Running out of memory inside (`out_of_memory_errors`, and a host allocation torch's CPU allocator refused)
    ends in CloverError(line(exc)): the step that ran out and what to change, in the caller's words."""
    try:
        with host_allocations_as_memory_error():
            yield
    except out_of_memory_errors() as exc:
        raise CloverError(line(exc)) from None
