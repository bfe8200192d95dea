"""User-facing errors.

Anything a person can cause (missing file, bad flag value, corrupt pack, not enough memory) raises
`CloverError` with one clear sentence; the CLI prints that sentence on stderr and exits non-zero, never a
traceback. Internal bugs stay ordinary exceptions so they are not mistaken for user errors.
"""

from __future__ import annotations


class CloverError(Exception):
    """An error the user can fix; its message is shown as one line."""

    exit_code = 2


def torch_out_of_memory() -> type[BaseException]:
    """torch's out-of-memory exception (device or host allocator): `torch.OutOfMemoryError`, or
    `torch.cuda.OutOfMemoryError` before torch 2.5. A function so that importing this module stays torch-free."""
    import torch

    return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
