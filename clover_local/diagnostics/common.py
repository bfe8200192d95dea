"""What every check shares: the Result it returns, the status names, and the small helpers several sections use."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
GIB, MIB = 1 << 30, 1 << 20
REPORT = "report it with the output of `clover-local doctor --json`"


@dataclass
class Result:
    """What one check function finds: its status, one line of detail, what to do (where not ok), raw facts."""

    status: str
    detail: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def fmt_size(n: float | None) -> str:
    """`runtime.sizes.fmt_bytes` (imported when used: it imports torch)."""
    from clover_local.runtime.sizes import fmt_bytes

    return "unknown" if n is None else fmt_bytes(n)


def version_tuple(version: str | None, parts: int = 3) -> tuple[int, ...]:
    """A version's first `parts` numbers, for comparing ("12.8" → (12, 8); None → ())."""
    return tuple(int(p) for p in re.findall(r"\d+", version or "")[:parts])


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def cuda_available() -> bool:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(torch.cuda.is_available())
