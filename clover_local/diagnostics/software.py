"""Software checks: clover-local and its tiny model, Python, torch, triton, flash-linear-attention, the packages
clover-local requires, and the environment variables that change what it runs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clover_local.diagnostics.common import (FAIL, OK, WARN, Result, cuda_available, fmt_size, one_line,
                                             version_tuple)

# environment variables worth showing in a report (values, never a token: HF_TOKEN is not among them)
ENV_NAMES = ("TRITON_INTERPRET", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "HF_HOME",
             "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE", "XDG_CACHE_HOME", "OMP_NUM_THREADS")
# ... and those that put a GPU on a slow or test-only path
SLOW_ON_GPU = {"CLOVER_DISABLE_TRITON": "the W4A16 kernels off (PyTorch reference)",
               "CLOVER_DISABLE_FUSED": "the fused GDN preview, preview attention and layer ops off",
               "TRITON_INTERPRET": "Triton kernels interpreted on the CPU (tests only: very slow)",
               "CLOVER_EMULATE_SMS": "tile heuristics for another GPU's SM count (tests only)"}


def _dist_version(*names: str) -> str | None:
    """The installed version of the first distribution found among names (e.g. triton, or Windows' triton-windows)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> dict[str, str]:
    """clover-local's declared runtime requirements (no extras): normalized name -> specifier; {} where unknown
    (run from source without `pip install`, or `packaging` missing)."""
    try:
        from packaging.requirements import Requirement

        reqs = importlib.metadata.requires("clover-local") or []
    except Exception:  # noqa: BLE001 - no metadata or no packaging: nothing to compare with
        return {}
    out = {}
    for line in reqs:
        try:
            req = Requirement(line)
        except Exception:  # noqa: BLE001
            continue
        if req.marker is None or "extra" not in str(req.marker):
            out[_norm(req.name)] = str(req.specifier)
    return out


def _outside(name: str, version: str | None, reqs: dict[str, str]) -> str | None:
    """"X is outside clover-local's X<spec>" where the installed version does not meet the requirement, else None."""
    spec = reqs.get(_norm(name))
    if not spec or version is None:
        return None
    try:
        from packaging.specifiers import SpecifierSet

        if SpecifierSet(spec).contains(version, prereleases=True):
            return None
    except Exception:  # noqa: BLE001 - an unparsable local version: not judged
        return None
    return f"{name} {version} is outside clover-local's {name}{spec}"


def check_clover_local(say: Callable[[str], None]) -> Result:
    import clover_local
    from clover_local import __version__

    where = Path(clover_local.__file__).resolve().parent
    installed = _dist_version("clover-local")
    facts = {"version": __version__, "path": str(where), "installed_version": installed}
    if installed is None:
        return Result(OK, f"{__version__} ({where}; run from source, not pip-installed)", facts=facts)
    if installed != __version__:
        return Result(WARN, f"{__version__} ({where}), but the installed metadata says {installed}",
                      "reinstall from the repo: pip install -e .", facts)
    return Result(OK, f"{__version__} ({where})", facts=facts)


def check_tiny_model(say: Callable[[str], None]) -> Result:
    from clover_local.loader import SHORT_NAMES

    folder = SHORT_NAMES["tiny"]
    weights = folder / "model.safetensors"
    facts: dict[str, Any] = {"path": str(folder)}
    missing = [n for n in ("config.json", "model.safetensors", "tokenizer.json") if not (folder / n).is_file()]
    if missing:
        return Result(FAIL, f"{folder} lacks {', '.join(missing)}: `clover-local demo` and `chat tiny` cannot run",
                      "reinstall clover-local (pip install -e . in the repo)", facts)
    with open(weights, "rb") as f:
        head = f.read(64)
    if head.startswith(b"version https://git-lfs"):
        return Result(FAIL, f"{weights} is a Git LFS pointer, not the weights", "in the repo: git lfs pull", facts)
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        tensors = len(list(f.keys()))
    facts.update(bytes=weights.stat().st_size, tensors=tensors)
    return Result(OK, f"shipped ({fmt_size(weights.stat().st_size)}, {tensors} tensors): `clover-local demo` and "
                      "`chat tiny` use it", facts=facts)


def check_python(say: Callable[[str], None]) -> Result:
    v = platform.python_version()
    facts = {"version": v, "executable": sys.executable, "platform": platform.platform()}
    detail = f"{v} ({sys.executable}) on {platform.system()} {platform.machine()}"
    if sys.version_info < (3, 10):
        return Result(FAIL, detail, "clover-local needs Python 3.10 or newer", facts)
    return Result(OK, detail, facts=facts)


def check_torch(say: Callable[[str], None]) -> Result:
    import torch

    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    build = f"built for CUDA {cuda}" if cuda else f"built for ROCm {hip}" if hip else "a CPU-only build"
    facts = {"version": torch.__version__, "cuda": cuda, "hip": hip, "threads": torch.get_num_threads()}
    detail = f"{torch.__version__}, {build}"
    problem = _outside("torch", torch.__version__.split("+")[0], _requirements())
    if problem:
        return Result(WARN, f"{detail}; {problem}", "pip install -e . (or a torch in that range)", facts)
    return Result(OK, detail, facts=facts)


def _triton_error() -> str | None:
    """Why triton or clover-local's Triton kernels do not import, in one line (None when they do)."""
    try:
        import triton  # noqa: F401

        importlib.import_module("clover_local.runtime.kernels.w4a16")
    except Exception as exc:  # noqa: BLE001 - ImportError, or triton finding no backend
        return one_line(exc)
    return None


def check_triton(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.kernels import triton_on, triton_available

    version = _dist_version("triton", "pytorch-triton", "triton-windows")
    cuda = cuda_available()
    loads = triton_available()
    runs = triton_on(torch.device("cuda" if cuda else "cpu"))
    facts: dict[str, Any] = {"version": version, "kernels_import": loads, "kernels_run": runs}
    fallback = ("the INT4 matmuls run the PyTorch reference (dequantize then matmul: runtime/kernels/reference.py) "
                "and the fused GDN preview, preview attention and layer ops the model's own PyTorch path")
    named = f"triton {version}" if version else "triton"
    install = "pip install triton-windows" if sys.platform == "win32" else "pip install 'triton>=3.3'"
    if not cuda:
        if runs:
            return Result(OK, f"{version}: the kernels run through Triton's interpreter on the CPU "
                              "(CLOVER_FORCE_TRITON=1, TRITON_INTERPRET=1: for tests, slow)", facts=facts)
        have = f"{version} installed" if version else "not installed"
        return Result(OK, f"{have}; the Triton kernels need a CUDA GPU: here {fallback} (the tests run the kernels "
                          "under TRITON_INTERPRET=1)", facts=facts)
    if os.environ.get("CLOVER_DISABLE_TRITON") == "1":
        return Result(WARN, f"{named} is switched off by CLOVER_DISABLE_TRITON=1: {fallback} (correct, far slower)",
                      "unset CLOVER_DISABLE_TRITON", facts)
    if not loads:
        why = _triton_error() or "the kernels do not load"
        facts["error"] = why
        have = f"{named} does not load ({why})" if version else "triton is not installed"
        return Result(WARN, f"{have}: on the GPU {fallback} (correct, far slower)", install, facts)
    major, _minor = torch.cuda.get_device_capability()
    if major >= 10 and version_tuple(version) < (3, 3):
        return Result(WARN, f"{version} predates Blackwell support (triton 3.3): the kernels may fail to compile "
                            "for this GPU", install, facts)
    return Result(OK, f"{version}: the INT4 matmuls, the fused MoE and the fused layer ops run as Triton kernels "
                      "on the GPU", facts=facts)


def _fla_installed() -> bool:
    """Whether `fla` (flash-linear-attention) is importable, found without importing it (it imports triton)."""
    if "fla" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("fla") is not None
    except (ImportError, ValueError):
        return False


def check_fla(say: Callable[[str], None]) -> Result:
    installed = _fla_installed()
    version = _dist_version("flash-linear-attention", "fla-core") if installed else None
    cuda = cuda_available()
    facts = {"installed": installed, "version": version}
    if installed and not cuda:
        return Result(WARN, f"installed ({version or 'version unknown'}) on a machine without CUDA: transformers "
                            "(which the tests compare against) then picks its GPU kernels and crashes",
                      "pip uninstall flash-linear-attention (it is the GPU extra: pip install -e \".[gpu]\" on a GPU "
                      "machine)", facts)
    if installed:
        return Result(OK, f"{version or 'installed'}: the GDN prefill uses its chunked kernels on the GPU",
                      facts=facts)
    if cuda:
        return Result(OK, "not installed: the GDN prefill uses the PyTorch chunked form (pip install "
                          "flash-linear-attention for faster long prompts; previews never use it)", facts=facts)
    return Result(OK, "not installed (right for a machine without CUDA)", facts=facts)


PACKAGES = ("transformers", "huggingface_hub", "safetensors", "tokenizers", "rich", "typer", "numpy", "jinja2")


def check_packages(say: Callable[[str], None]) -> Result:
    reqs = _requirements()
    required = set(reqs) or {_norm(p) for p in PACKAGES if p != "transformers"}
    versions = {p: _dist_version(p) for p in PACKAGES}
    facts = {"versions": versions, "requirements": reqs}
    parts = []
    for p, v in versions.items():
        if p == "transformers":
            parts.append(f"transformers {v} (tests only)" if v else "transformers not installed (only the tests "
                                                                    "need it)")
        else:
            parts.append(f"{p} {v}" if v else f"{p} MISSING")
    detail = ", ".join(parts)
    missing = [p for p, v in versions.items() if v is None and _norm(p) in required]
    if missing:
        return Result(FAIL, detail, f"pip install -e . in the repo (installs {', '.join(missing)})", facts)
    problems = [m for p, v in versions.items() if (m := _outside(p, v, reqs))]
    if problems:
        return Result(WARN, f"{detail}; {'; '.join(problems)}", "pip install -e . (puts each in its range)", facts)
    return Result(OK, detail, facts=facts)


def check_environment(say: Callable[[str], None]) -> Result:
    shown = {k: v[:200] for k, v in sorted(os.environ.items()) if k.startswith("CLOVER_") or k in ENV_NAMES}
    facts = {"variables": shown}
    if not shown:
        return Result(OK, "no CLOVER_*, TRITON_*, CUDA or Hugging Face Hub variables set", facts=facts)
    detail = " ".join(f"{k}={v}" for k, v in shown.items())
    slow = [f"{k} ({what})" for k, what in SLOW_ON_GPU.items() if os.environ.get(k, "0") not in ("", "0")]
    if slow and cuda_available():
        return Result(WARN, f"{detail}; on this GPU: {'; '.join(slow)}",
                      f"unset {' '.join(k.split()[0] for k in slow)} unless you are comparing or debugging", facts)
    return Result(OK, detail, facts=facts)
