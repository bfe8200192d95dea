"""What this machine has, and whether clover-local's pieces work on it: the checks behind `clover-local doctor`.

Why: when chat is slow or a command fails, the cause is usually the machine rather than the model: a CPU-only torch
beside an NVIDIA driver, a torch built without the GPU's architecture (an RTX 50 card with a CUDA 12.4 torch), no
triton (the INT4 kernels then fall back to dequantize-then-matmul), flash-linear-attention on a machine without
CUDA, a full disk, HF_HUB_OFFLINE left on. Every check runs on its own (one that breaks is one ✗ line naming the
exception, never a traceback), reads only this machine (no network, no model loaded) and says what to do.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clover_local.diagnostics import gpu, host, kernels, software, storage
from clover_local.diagnostics.common import FAIL, OK, REPORT, WARN, Result, one_line

__all__ = ["FAIL", "OK", "WARN", "Check", "Result", "counts", "report", "run_checks", "scrub", "secrets_to_scrub"]


@dataclass
class Check:
    """One line of the report."""

    name: str
    section: str
    status: str
    detail: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "section": self.section, "status": self.status, "detail": self.detail,
                "fix": self.fix}


def secrets_to_scrub() -> list[str]:
    """The configured Hub token (to scrub from anything printed); [] without one."""
    try:
        from clover_local.hub.transfer import token_and_source as found

        token = found()[0]
    except Exception:  # noqa: BLE001
        return []
    return [token] if token else []


def scrub(text: str, secrets: list[str]) -> str:
    """text with each secret, and anything shaped like a Hub token, replaced: what doctor prints never holds one."""
    for s in secrets:
        text = text.replace(s, "***")
    return re.sub(r"hf_[A-Za-z0-9]{20,}", "[a token]", text)


def _checks() -> list[tuple[str, str, Callable[[Callable[[str], None]], Result]]]:
    """(section, name, function) in report order; looked up in their modules when run, so a test can replace one."""
    return [
        ("software", "clover-local", software.check_clover_local),
        ("software", "tiny-model", software.check_tiny_model),
        ("software", "python", software.check_python),
        ("software", "torch", software.check_torch),
        ("software", "triton", software.check_triton),
        ("software", "flash-linear-attention", software.check_fla),
        ("software", "packages", software.check_packages),
        ("software", "environment", software.check_environment),
        ("device", "cuda", gpu.check_cuda),
        ("device", "vram-budget", gpu.check_vram_budget),
        ("host", "host", host.check_host),
        ("host", "pinned-memory", host.check_pinned),
        ("kernels", "kernel-dense", kernels.check_kernel_dense),
        ("kernels", "kernel-moe", kernels.check_kernel_moe),
        ("kernels", "tuning-table", kernels.check_tuning),
        ("disk", "cache-dir", storage.check_cache_dir),
        ("disk", "hub-cache", storage.check_hub_cache),
        ("disk", "hf-token", storage.check_hf_token),
        ("disk", "hf-offline", storage.check_hf_offline),
    ]


def run_checks(say: Callable[[str], None] = lambda msg: None) -> list[Check]:
    """Every check, each on its own: an exception in one becomes its ✗ line (class and message), the rest run."""
    out = []
    for section, name, fn in _checks():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's and triton's warnings would break the report's lines
                r = fn(say)
        except Exception as exc:  # noqa: BLE001 - the point of doctor: a broken piece is a line, not a traceback
            r = Result(FAIL, f"the check itself failed: {one_line(exc)}", REPORT, {"error": one_line(exc)})
        out.append(Check(name, section, r.status, r.detail, r.fix, r.facts))
    secrets = secrets_to_scrub()
    for c in out:
        c.detail = scrub(c.detail, secrets)
        c.fix = scrub(c.fix, secrets) if c.fix else c.fix
    return out


def _jsonable(value: Any) -> Any:
    """Facts as strict JSON: a non-finite float (an error of inf: the output had NaN) becomes None, a path a
    string (json.dumps would write Infinity, which jq and most parsers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def counts(checks: list[Check]) -> dict[str, int]:
    """How many checks have each status (the report's tally)."""
    return {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}


def report(checks: list[Check]) -> dict[str, Any]:
    """The --json object: every check, then the raw facts by check name."""
    from clover_local import __version__

    n = counts(checks)
    return {"clover_local": __version__, "ok": n[FAIL] == 0, "counts": n,
            "checks": [c.to_dict() for c in checks], "facts": _jsonable({c.name: c.facts for c in checks})}
