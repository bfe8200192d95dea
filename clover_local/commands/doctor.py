"""`clover-local doctor`: what this machine has, and whether clover-local's pieces work on it, one line each.

Why: when chat is slow or a command fails, the cause is usually the machine rather than the model: a CPU-only torch
beside an NVIDIA driver, a torch built without the GPU's architecture (an RTX 50 card with a CUDA 12.4 torch), no
triton (the INT4 kernels then fall back to dequantize-then-matmul), flash-linear-attention on a machine without
CUDA, a full disk, HF_HUB_OFFLINE left on. Every check runs on its own (one that breaks is one ✗ line naming the
exception, never a traceback), reads only this machine (no network, no model loaded) and says what to do.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from clover_local.cli import app

OK, WARN, FAIL = "ok", "warn", "fail"
SYMBOLS = {OK: "✓", WARN: "!", FAIL: "✗"}
COLORS = {OK: "green", WARN: "yellow", FAIL: "red"}
SECTIONS = {"software": "Software", "device": "Device", "host": "Host", "kernels": "Kernels",
            "disk": "Disk and Hub"}

GIB, MIB = 1 << 30, 1 << 20
# The 35B model's sizes, for the disk and RAM checks (tests/test_doctor.py holds the first two to what the code
# computes: synthetic_index("full") and make_plan at a 16 GiB budget).
PACK_BYTES = int(18.6 * GIB)  # the 4-bit pack on disk (≈ 20 GB)
HOST_BYTES_35B = int(17.5 * GIB)  # host RAM it keeps beside a 16 GB card: the routed experts, pinned, and more
BF16_BYTES = int(64.6 * GIB)  # the BF16 release (≈ 69 GB), what `quantize` starts from
PINNED_BYTES = 256 * MIB  # the pinned host→device copy test: ≈ 10–30 ms over PCIe 4/5 x16
SLOW_PCIE_GBPS = 10.0  # below this a copy runs like PCIe 3.0 x8 or a x4 slot: every expert miss costs more
CUDA_WHEELS = "https://download.pytorch.org/whl/cu128"
REPORT = "report it with the output of `clover-local doctor --json`"
# environment variables worth showing in a report (values, never a token: HF_TOKEN is not among them)
ENV_NAMES = ("TRITON_INTERPRET", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "HF_HOME",
             "HF_HUB_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE", "XDG_CACHE_HOME", "OMP_NUM_THREADS")
# ... and those that put a GPU on a slow or test-only path
SLOW_ON_GPU = {"CLOVER_DISABLE_TRITON": "the W4A16 kernels off (PyTorch reference)",
               "CLOVER_DISABLE_FUSED": "the fused GDN preview, preview attention and layer ops off",
               "TRITON_INTERPRET": "Triton kernels interpreted on the CPU (tests only: very slow)",
               "CLOVER_EMULATE_SMS": "tile heuristics for another GPU's SM count (tests only)"}


@dataclass
class Result:
    """What one check function finds: its status, one line of detail, what to do (where not ok), raw facts."""

    status: str
    detail: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


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


# ----------------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------------
def _fmt(n: float | None) -> str:
    """`runtime.sizes.fmt_bytes` (imported when used: it imports torch)."""
    from clover_local.runtime.sizes import fmt_bytes

    return "unknown" if n is None else fmt_bytes(n)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def _dist_version(*names: str) -> str | None:
    """The installed version of the first distribution found among names (e.g. triton, or Windows' triton-windows)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _version_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version or "")[:3])


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


def _cuda_available() -> bool:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(torch.cuda.is_available())


def _nvidia_driver() -> str | None:
    """The NVIDIA driver's version where one is installed (Linux: /proc/driver/nvidia/version; else nvidia-smi,
    which also answers on WSL and Windows), else None. Local only: a file read or one bounded subprocess."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")
        m = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
        if m:
            return m.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        res = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=5)
        first = res.stdout.strip().splitlines()[0].strip() if res.stdout.strip() else ""
        return first or "installed (nvidia-smi found)"
    except (OSError, subprocess.SubprocessError):
        return "installed (nvidia-smi found)"


def _cuda_driver_api() -> str | None:
    """The CUDA version the driver supports, as torch's CUDA build reports it (e.g. 12.8), else None."""
    try:
        import torch

        v = int(torch._C._cuda_getDriverVersion())  # noqa: SLF001 - the one place torch exposes it
        return f"{v // 1000}.{v % 1000 // 10}" if v > 0 else None
    except Exception:  # noqa: BLE001 - a CPU build has no such function
        return None


def _existing(path: Path) -> Path:
    """path, or its nearest ancestor that exists (where a folder not made yet will be)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _token_set() -> tuple[bool, str]:
    """Whether a Hub token is configured and where from, found as the download code finds it (no network).
    The token itself is dropped here, never returned."""
    from clover_local.hub.transfer import token_and_source as found

    token, source = found()
    return bool(token), source


def _secrets() -> list[str]:
    """The configured Hub token (to scrub from anything printed); [] without one."""
    try:
        from clover_local.hub.transfer import token_and_source as found

        token = found()[0]
    except Exception:  # noqa: BLE001
        return []
    return [token] if token else []


def _scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return re.sub(r"hf_[A-Za-z0-9]{20,}", "[a token]", text)


# ----------------------------------------------------------------------------------------------------
# software
# ----------------------------------------------------------------------------------------------------
def _check_clover_local(say: Callable[[str], None]) -> Result:
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


def _check_tiny_model(say: Callable[[str], None]) -> Result:
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
    return Result(OK, f"shipped ({_fmt(weights.stat().st_size)}, {tensors} tensors): `clover-local demo` and "
                      "`chat tiny` use it", facts=facts)


def _check_python(say: Callable[[str], None]) -> Result:
    v = platform.python_version()
    facts = {"version": v, "executable": sys.executable, "platform": platform.platform()}
    detail = f"{v} ({sys.executable}) on {platform.system()} {platform.machine()}"
    if sys.version_info < (3, 10):
        return Result(FAIL, detail, "clover-local needs Python 3.10 or newer", facts)
    return Result(OK, detail, facts=facts)


def _check_torch(say: Callable[[str], None]) -> Result:
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
        return _one_line(exc)
    return None


def _check_triton(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.kernels import triton_on, triton_available

    version = _dist_version("triton", "pytorch-triton", "triton-windows")
    cuda = _cuda_available()
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
    if major >= 10 and _version_tuple(version) < (3, 3):
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


def _check_fla(say: Callable[[str], None]) -> Result:
    installed = _fla_installed()
    version = _dist_version("flash-linear-attention", "fla-core") if installed else None
    cuda = _cuda_available()
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


def _check_packages(say: Callable[[str], None]) -> Result:
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


def _check_environment(say: Callable[[str], None]) -> Result:
    shown = {k: v[:200] for k, v in sorted(os.environ.items()) if k.startswith("CLOVER_") or k in ENV_NAMES}
    facts = {"variables": shown}
    if not shown:
        return Result(OK, "no CLOVER_*, TRITON_*, CUDA or Hugging Face Hub variables set", facts=facts)
    detail = " ".join(f"{k}={v}" for k, v in shown.items())
    slow = [f"{k} ({what})" for k, what in SLOW_ON_GPU.items() if os.environ.get(k, "0") not in ("", "0")]
    if slow and _cuda_available():
        return Result(WARN, f"{detail}; on this GPU: {'; '.join(slow)}",
                      f"unset {' '.join(k.split()[0] for k in slow)} unless you are comparing or debugging", facts)
    return Result(OK, detail, facts=facts)


# ----------------------------------------------------------------------------------------------------
# device
# ----------------------------------------------------------------------------------------------------
_NO_GPU = ("chat, generate and serve run on the CPU (slowly: fine for the tiny demo model, not for 35B); "
           "`clover-local plan MODEL --vram 16GB` still plans for a card")


def _no_cuda(torch_warning: str | None) -> Result:
    """Why torch finds no usable GPU, as far as this machine tells."""
    import torch

    driver = _nvidia_driver()
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts = {"available": False, "driver": driver, "torch_cuda": torch.version.cuda, "warning": torch_warning}
    if cvd is not None and cvd.strip() in ("", "-1"):
        return Result(WARN, f"no CUDA GPU visible: CUDA_VISIBLE_DEVICES={cvd!r} hides them; {_NO_GPU}",
                      "unset CUDA_VISIBLE_DEVICES (or name a GPU: CUDA_VISIBLE_DEVICES=0)", facts)
    build_cuda = torch.version.cuda
    if driver and not build_cuda and not getattr(torch.version, "hip", None):
        return Result(WARN, f"an NVIDIA driver ({driver}) is installed, but this torch ({torch.__version__}) is a "
                            f"CPU-only build: no CUDA GPU for clover-local; {_NO_GPU}",
                      f"install a CUDA build of torch: pip install torch --index-url {CUDA_WHEELS} (RTX 50 cards "
                      "need CUDA 12.8 or newer)", facts)
    if driver and build_cuda:
        why = f" ({torch_warning})" if torch_warning else ""
        return Result(WARN, f"torch is built for CUDA {build_cuda} and the NVIDIA driver {driver} is installed, but "
                            f"CUDA is not available{why}; {_NO_GPU}",
                      f"update the NVIDIA driver to one that supports CUDA {build_cuda}, or install a torch built for "
                      "the CUDA the driver supports (nvidia-smi shows it)", facts)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return Result(WARN, f"no CUDA GPU (an Apple GPU is there, but clover-local runs on CUDA or the CPU); "
                            f"{_NO_GPU}", facts=facts)
    return Result(WARN, f"no CUDA GPU (no NVIDIA driver found); {_NO_GPU}", facts=facts)


def _arch_supported(major: int, minor: int, arch_list: list[str]) -> bool:
    """Whether torch carries code for sm_XY: a cubin of the same major at or below this minor, or PTX at or below
    it (compiled on first use). An empty list (some builds do not say) counts as supported."""
    if not arch_list:
        return True
    cap = major * 10 + minor
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)[a-z]?", arch)
        if not m:
            continue
        v = int(m.group(2))
        if m.group(1) == "sm" and v // 10 == major and v <= cap:
            return True
        if m.group(1) == "compute" and v <= cap:
            return True
    return False


def _check_cuda(say: Callable[[str], None]) -> Result:
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    if not available:
        first = next((str(w.message).splitlines()[0][:200] for w in caught if str(w.message).strip()), None)
        return _no_cuda(first)
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    major, minor = props.major, props.minor
    free, total = (int(v) for v in torch.cuda.mem_get_info(index))
    driver, api = _nvidia_driver(), _cuda_driver_api()
    arch_list = list(torch.cuda.get_arch_list())
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    facts = {"available": True, "device_count": len(gpus), "gpus": gpus, "index": index, "name": props.name,
             "capability": f"{major}.{minor}", "total_bytes": total, "free_bytes": free, "driver": driver,
             "driver_cuda": api, "torch_arch_list": arch_list}
    detail = (f"{props.name} (compute capability {major}.{minor}, sm_{major}{minor}), {_fmt(total)}, "
              f"{_fmt(free)} free; driver {driver or 'version unknown'}"
              + (f", supports CUDA {api}" if api else ""))
    if len(gpus) > 1:
        detail += f"; {len(gpus)} GPUs, clover-local uses cuda:{index} (CUDA_VISIBLE_DEVICES picks another)"
    try:
        ok = float((torch.arange(4, device=f"cuda:{index}", dtype=torch.float32) * 2).sum().item()) == 12.0
        torch.cuda.synchronize(index)
    except Exception as exc:  # noqa: BLE001 - "no kernel image is available", a driver fault
        facts["error"] = _one_line(exc)
        return Result(FAIL, f"{detail}; a first CUDA operation fails: {_one_line(exc)}",
                      _arch_fix(major, minor) if not _arch_supported(major, minor, arch_list)
                      and not getattr(torch.version, "hip", None) else
                      "update the NVIDIA driver and reinstall a CUDA build of torch; " + REPORT, facts)
    if not ok:
        return Result(FAIL, f"{detail}; a first CUDA operation gives a wrong result", REPORT, facts)
    if not getattr(torch.version, "hip", None) and not _arch_supported(major, minor, arch_list):
        return Result(WARN, f"{detail}; this torch carries no code for sm_{major}{minor} "
                            f"({' '.join(arch_list)})", _arch_fix(major, minor), facts)
    if (major, minor) < (8, 0):
        return Result(WARN, f"{detail}; older than Ampere (8.0): the runtime computes in bfloat16, which this GPU "
                            "lacks natively, and the Triton kernels are not tested there",
                      "use an RTX 30 / A100 or newer GPU", facts)
    held = total - free
    if held > 2 * GIB:
        return Result(WARN, f"{detail}; {_fmt(held)} is held by other programs (or this one's CUDA context)",
                      "close programs that use the GPU (a browser, another model) for a larger --vram-budget", facts)
    return Result(OK, detail, facts=facts)


def _arch_fix(major: int, minor: int) -> str:
    return (f"install a torch built for sm_{major}{minor}: pip install torch --index-url {CUDA_WHEELS} "
            "(RTX 50 cards need CUDA 12.8 or newer)")


def _check_vram_budget(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.sizes import default_budget, host_available_bytes

    if not _cuda_available():
        budget = default_budget(torch.device("cpu"))
        return Result(OK, f"no GPU: on the CPU --vram-budget defaults to half the available RAM ({_fmt(budget)})",
                      facts={"device": "cpu", "bytes": budget})
    from clover_local.runtime.placement import make_plan
    from clover_local.runtime.synthetic_pack import synthetic_index

    dev = torch.device("cuda")
    budget = default_budget(dev)
    plan = make_plan(synthetic_index("full"), budget, host_available_bytes(), vram_flag="--vram-budget")
    facts = {"device": "cuda", "bytes": budget, "fits_35b": plan.fits, "slots": plan.slots,
             "experts": plan.experts_total}
    head = f"{_fmt(budget)} (free memory minus a margin)"
    if plan.fits:
        return Result(OK, f"{head}: the 35B 4-bit pack fits, {plan.slots:,} of {plan.experts_total:,} experts on the "
                          f"GPU ({100 * plan.resident_fraction:.0f}%)", facts=facts)
    return Result(WARN, f"{head}: the 35B 4-bit pack does not fit: {plan.refusal}",
                  "free GPU memory or host RAM as it says; a 3-bit pack (`quantize --bits 3`) needs less; "
                  "`clover-local plan MODEL --vram ... --ram ...` plans other settings", facts)


# ----------------------------------------------------------------------------------------------------
# host
# ----------------------------------------------------------------------------------------------------
def _check_host(say: Callable[[str], None]) -> Result:
    from clover_local.runtime.sizes import cpu_count, host_available_bytes, host_total_bytes

    usable, cores = cpu_count(), os.cpu_count()
    total, avail = host_total_bytes(), host_available_bytes()
    facts = {"cpu_cores": cores, "cpu_usable": usable, "ram_total_bytes": total, "ram_available_bytes": avail}
    cpus = f"{usable} CPU cores" + (f" (of {cores}: the others are not this process's)" if cores and cores != usable
                                    else "")
    detail = f"{cpus}; RAM {_fmt(total)}, {_fmt(avail)} available"
    if avail is not None and avail < HOST_BYTES_35B:
        return Result(WARN, f"{detail}: less than the {_fmt(HOST_BYTES_35B)} of host RAM the 35B 4-bit pack keeps "
                            "beside a 16 GB card (the tiny demo model needs little)",
                      "free memory; or use a 3-bit pack (`quantize --bits 3`: every expert fits a 16 GB card); "
                      "`clover-local plan MODEL --vram 16GB --ram ...` gives the figure for other settings", facts)
    return Result(OK, detail, facts=facts)


def _check_pinned(say: Callable[[str], None]) -> Result:
    if not _cuda_available():
        return Result(OK, "skipped: no GPU (pinned memory is what experts are copied to a GPU from)",
                      facts={"skipped": True})
    import torch

    dev = torch.device("cuda")
    free = int(torch.cuda.mem_get_info(dev)[0])
    if free < PINNED_BYTES + 256 * MIB:
        return Result(WARN, f"skipped: only {_fmt(free)} of GPU memory free", "free GPU memory",
                      {"skipped": True, "free_bytes": free})
    t0 = time.perf_counter()
    try:
        host = torch.empty(PINNED_BYTES, dtype=torch.uint8, pin_memory=True)
    except Exception as exc:  # noqa: BLE001 - cudaHostAlloc refused
        return Result(FAIL, f"pinning {_fmt(PINNED_BYTES)} of host memory fails: {_one_line(exc)}",
                      "the runtime pins the experts in host RAM to copy them: free host memory (in WSL2 or a "
                      "container the limit on pinned memory may be lower)", {"error": _one_line(exc)})
    alloc_s = time.perf_counter() - t0
    target = torch.empty(PINNED_BYTES, dtype=torch.uint8, device=dev)
    target[:MIB].copy_(host[:MIB], non_blocking=True)  # the copy engine's first use out of the timing
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    target.copy_(host, non_blocking=True)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    del host, target
    torch.cuda.empty_cache()
    gbps = PINNED_BYTES / (ms / 1e3) / 1e9 if ms > 0 else float("inf")
    facts = {"bytes": PINNED_BYTES, "copy_ms": round(ms, 3), "h2d_gbps": round(gbps, 2), "alloc_s": round(alloc_s, 3)}
    detail = f"{_fmt(PINNED_BYTES)} pinned in {alloc_s * 1e3:.0f} ms; host→GPU copy {gbps:.1f} GB/s"
    if gbps < SLOW_PCIE_GBPS:
        return Result(WARN, f"{detail}: slow for the expert cache's copies (PCIe 4.0 x16 gives ≈ 25 GB/s)",
                      "check the card sits in a x16 slot at full PCIe speed (BIOS, riser); `clover-local plan` "
                      "assumes 50 GB/s for its PCIe figures", facts)
    return Result(OK, detail, facts=facts)


# ----------------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------------
@dataclass
class _KernelCase:
    """Where the smoke test runs and what it compares: the Triton kernels against the reference where they run
    (a CUDA GPU), else the PyTorch reference against the weights the pack was made from."""

    device: Any
    dtype: Any
    triton: bool
    tol: float

    @property
    def label(self) -> str:
        dt = str(self.dtype).replace("torch.", "")
        if self.triton:
            how = "interpreted " if self.device.type == "cpu" else ""
            return f"{how}Triton kernel ({self.device.type}, {dt}) vs the dequantize-then-matmul reference"
        return f"PyTorch reference ({self.device.type}, {dt}) vs the weights it was packed from"


def _kernel_case() -> _KernelCase:
    import torch

    from clover_local.loader import pick_dtype
    from clover_local.runtime.kernels import triton_on

    dev = torch.device("cuda" if _cuda_available() else "cpu")
    dtype = pick_dtype(None, dev)  # what chat runs in: bfloat16 on CUDA, float32 on the CPU
    return _KernelCase(dev, dtype, triton_on(dev), 2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-3)


def _random_weight(out_f: int, in_f: int, group: int, gen: Any) -> tuple[dict, Any]:
    """A GPTQ-packed random 4-bit weight [out, in] (codes over the full range, zeros in [1, 15], scales > 0) and
    the dense fp32 weight it encodes, computed from the codes, not from the pack."""
    import torch

    from quantize.gptq_format import default_g_idx, pack_weight

    q = torch.randint(0, 16, (out_f, in_f), generator=gen)
    zeros = torch.randint(1, 16, (out_f, in_f // group), generator=gen)
    scales = (torch.rand(out_f, in_f // group, generator=gen) * 0.02 + 0.005).half().float()
    g_idx = default_g_idx(in_f, group)
    dense = (q - zeros[:, g_idx.long()]).float() * scales[:, g_idx.long()]
    return pack_weight(q, scales, zeros, g_idx, 4), dense


def _random_x(m: int, k: int, gen: Any) -> Any:
    import torch

    x = torch.randn(m, k, generator=gen)
    return torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)  # never zeros


def _max_rel(got: Any, want: Any) -> float:
    """max |got − want| / max |want| (NaN or inf anywhere: inf)."""
    import torch

    g, w = got.float().cpu(), want.float().cpu()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float((g - w).abs().max() / w.abs().max().clamp_min(1e-12))


def _kernel_result(kind: str, case: _KernelCase, err: float, seconds: float) -> Result:
    facts = {"path": "triton" if case.triton else "reference", "device": case.device.type,
             "dtype": str(case.dtype).replace("torch.", ""), "max_rel_err": err, "tolerance": case.tol,
             "seconds": round(seconds, 3)}
    detail = f"{case.label}: max rel. error {err:.2g} (tolerance {case.tol:g})"
    if not case.triton and case.device.type == "cpu":
        detail += "; the Triton kernel needs a CUDA GPU (the tests run it under TRITON_INTERPRET=1)"
    if err <= case.tol:
        return Result(OK, detail, facts=facts)
    what = "the Triton kernel's" if case.triton else "the PyTorch reference's"
    fix = ("CLOVER_DISABLE_TRITON=1 runs the PyTorch reference instead; " if case.triton else "") + REPORT
    return Result(FAIL, f"{detail}: {what} {kind} output is wrong on this machine", fix, facts)


def _compiling_note(case: _KernelCase, kind: str, say: Callable[[str], None]) -> None:
    if case.triton and case.device.type == "cuda":
        say(f"compiling the {kind} Triton kernel for this GPU (the first run only: Triton caches it)")


def _check_kernel_dense(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime import kernels

    case = _kernel_case()
    gen = torch.Generator().manual_seed(0)
    k, n, group, m = 512, 256, 128, 32
    pack, dense = _random_weight(n, k, group, gen)
    x = _random_x(m, k, gen)
    args = [pack["qweight"], pack["scales"], pack["qzeros"]]
    xd, qw, sc, qz = (t.to(case.device) for t in (x.to(case.dtype), *args))
    _compiling_note(case, "dense", say)
    t0 = time.perf_counter()
    got = kernels.linear_w4a16(xd, qw, sc, qz, group, 4)
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    seconds = time.perf_counter() - t0
    if case.triton:
        want = kernels.linear_w4a16_ref(xd, qw, sc, qz, group, 4)
    else:
        want = (x.to(case.dtype).float() @ dense.t()).to(case.dtype)
    return _kernel_result("dense", case, _max_rel(got, want), seconds)


def _check_kernel_moe(say: Callable[[str], None]) -> Result:
    import torch
    import torch.nn.functional as F

    from clover_local.runtime import kernels
    from clover_local.runtime.slab import SlabLayout

    case = _kernel_case()
    gen = torch.Generator().manual_seed(1)
    hidden, inter, experts, topk, m, group = 256, 128, 8, 2, 32, 128
    lay = SlabLayout(hidden, inter, 4, hidden // group, inter // group)  # the runtime's expert slab layout
    buf = torch.zeros(experts, lay.nbytes, dtype=torch.uint8)
    views = lay.views(buf)
    dense = []
    for e in range(experts):
        (gate, wg), (up, wu), (down, wd) = (_random_weight(inter, hidden, group, gen),
                                            _random_weight(inter, hidden, group, gen),
                                            _random_weight(hidden, inter, group, gen))
        lay.fill(views, e, gate, up, down)
        dense.append((wg, wu, wd))
    x = _random_x(m, hidden, gen).to(case.dtype)
    slot_ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(m)])
    weights = (torch.softmax(torch.randn(m, topk, generator=gen), -1) + 0.05).to(case.dtype)
    gate_up, down_stack = lay.stacks(buf.to(case.device))
    xd, sd, wd_ = x.to(case.device), slot_ids.to(case.device), weights.to(case.device)
    _compiling_note(case, "MoE", say)
    t0 = time.perf_counter()
    got = kernels.moe_w4a16(xd, sd, wd_, gate_up, down_stack)
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    seconds = time.perf_counter() - t0
    if case.triton:
        want = kernels.moe_w4a16_ref(xd, sd, wd_, gate_up, down_stack)
    else:  # token by token from the dense weights (the activation rounded to x's dtype, as the spec says)
        want = torch.zeros(m, hidden)
        for i in range(m):
            for j in range(topk):
                wg, wu, wdn = dense[int(slot_ids[i, j])]
                xi = x[i].float()
                act = (F.silu(xi @ wg.t()) * (xi @ wu.t())).to(case.dtype).float()
                want[i] += weights[i, j].float() * (act @ wdn.t())
        want = want.to(case.dtype)
    return _kernel_result("MoE", case, _max_rel(got, want), seconds)


def _check_tuning(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.kernels import triton_on
    from clover_local.runtime.kernels.tuning import device_identity, read_table, table_path, tuning_enabled

    if not _cuda_available():
        return Result(OK, "no GPU: tuning tables are made per GPU (`clover-local tune` on one)", facts={"gpu": False})
    dev = torch.device("cuda")
    if not triton_on(dev):
        return Result(OK, "not used: the Triton kernels do not run here (see triton above)", facts={"gpu": True})
    identity = device_identity(dev)
    path = table_path(identity)
    facts: dict[str, Any] = {"gpu": True, "identity": identity, "path": str(path), "enabled": tuning_enabled()}
    if not tuning_enabled():
        return Result(OK, f"off (CLOVER_TUNING={os.environ.get('CLOVER_TUNING')}): the default tiles run", facts=facts)
    table, why = read_table(path, identity)
    tune = "clover-local tune --synthetic full --quick (a few minutes, once per GPU; or tune YOUR_PACK)"
    if why:
        facts["problem"] = why
        return Result(WARN, f"ignored: {why}", tune, facts)
    if table is None:
        return Result(WARN, f"no tuning table for {identity['device']} with triton {identity['triton']} ({path}): "
                            "the default tiles run", tune, facts)
    facts["entries"] = len(table.entries)
    return Result(OK, f"{path} ({len(table.entries)} calls tuned{', ' + table.date if table.date else ''})",
                  facts=facts)


# ----------------------------------------------------------------------------------------------------
# disk and Hub
# ----------------------------------------------------------------------------------------------------
def _folder_facts(path: Path) -> tuple[dict[str, Any], Result | None]:
    """Free space and writability of a folder (or where it will be made); a Result when it cannot be used."""
    base = _existing(path)
    usage = shutil.disk_usage(base)
    facts = {"path": str(path), "exists": path.exists(), "free_bytes": int(usage.free),
             "total_bytes": int(usage.total), "writable": os.access(base, os.W_OK), "device": os.stat(base).st_dev}
    if path.exists() and not path.is_dir():
        return facts, Result(FAIL, f"{path} is not a folder", None, facts)
    if not facts["writable"]:
        return facts, Result(FAIL, f"{base} is not writable: nothing can be saved in {path}", None, facts)
    return facts, None


def _check_cache_dir(say: Callable[[str], None]) -> Result:
    from clover_local.paths import cache_root

    root = cache_root()
    facts, bad = _folder_facts(root)
    if bad:
        bad.fix = "set CLOVER_LOCAL_CACHE to a writable folder (on a disk with room)"
        return bad
    made = "" if facts["exists"] else " (not made yet)"
    detail = f"{root}{made}: {_fmt(facts['free_bytes'])} free"
    if facts["free_bytes"] < PACK_BYTES:
        return Result(WARN, f"{detail}: `bench --synthetic full` and `tune --synthetic full` write a "
                            f"{_fmt(PACK_BYTES)} pack here", "free space (`clover-local cache` lists what is "
                            "there), or set CLOVER_LOCAL_CACHE to a folder on a larger disk", facts)
    return Result(OK, detail + " (`clover-local cache` lists what is there)", facts=facts)


def _check_hub_cache(say: Callable[[str], None]) -> Result:
    from clover_local.commands.cache import hub_cache_dir
    from clover_local.paths import cache_root

    hub = hub_cache_dir()
    facts, bad = _folder_facts(hub)
    if bad:
        bad.fix = "set HF_HUB_CACHE (or HF_HOME) to a writable folder, or download with --dir DIR"
        return bad
    try:
        same = os.stat(_existing(cache_root())).st_dev == facts["device"]
    except OSError:
        same = False
    made = "" if facts["exists"] else " (not made yet)"
    disk = "; the same disk as the clover-local cache" if same else ""
    detail = f"{hub}{made}: {_fmt(facts['free_bytes'])} free{disk}"
    free = facts["free_bytes"]
    fix = ("free space (models already there need none: `clover-local cache`), or download elsewhere: "
           "clover-local download REPO_ID --dir /a/larger/disk (or set HF_HUB_CACHE)")
    if free < PACK_BYTES:
        return Result(WARN, f"{detail}: not enough for the 35B 4-bit pack ({_fmt(PACK_BYTES)})", fix, facts)
    if free < BF16_BYTES:
        return Result(WARN, f"{detail}: enough for the 35B 4-bit pack ({_fmt(PACK_BYTES)}), not for the BF16 "
                            f"release ({_fmt(BF16_BYTES)}) that `quantize` starts from", fix, facts)
    return Result(OK, f"{detail}: room for the 4-bit pack and the BF16 release", facts=facts)


def _check_hf_token(say: Callable[[str], None]) -> Result:
    from clover_local.errors import CloverError
    from clover_local.hub.transfer import check_token_text

    is_set, source = _token_set()
    oidc = bool(os.environ.get("HF_OIDC_RESOURCE"))
    facts = {"set": is_set, "source": source if is_set else None, "oidc": oidc}
    if not is_set:
        if oidc:
            return Result(OK, "no stored token; HF_OIDC_RESOURCE is set: one is exchanged when needed", facts=facts)
        return Result(OK, "no token: public repos only (private repos and `upload` need one: `hf auth login` or "
                          "HF_TOKEN)", facts=facts)
    try:
        check_token_text()
    except CloverError:  # a character no HTTP header can carry: the Hub client would fail on it
        return Result(WARN, f"a token is set (from {source}), but it holds a character a token cannot have (a space "
                            "or an invisible character pasted with it)", "set it again: hf auth login, or HF_TOKEN",
                      facts)
    return Result(OK, f"a token is set (from {source}); it is not shown, and doctor does not contact the Hub",
                  facts=facts)


def _check_hf_offline(say: Callable[[str], None]) -> Result:
    from clover_local.hub.transfer import endpoint, offline_mode

    offline, url = offline_mode(), endpoint()
    facts = {"offline": offline, "endpoint": url}
    where = "" if url == "https://huggingface.co" else f"; endpoint {url} (HF_ENDPOINT)"
    if offline:
        return Result(WARN, f"HF_HUB_OFFLINE is on: download, plan and chat of a repo id use the local Hub cache "
                            f"only{where}", "unset HF_HUB_OFFLINE to reach the Hub", facts)
    return Result(OK, f"online mode (HF_HUB_OFFLINE not set){where}", facts=facts)


# ----------------------------------------------------------------------------------------------------
# running and printing
# ----------------------------------------------------------------------------------------------------
def _checks() -> list[tuple[str, str, Callable[[Callable[[str], None]], Result]]]:
    """(section, name, function) in report order; read when run, so a test can replace one function."""
    return [
        ("software", "clover-local", _check_clover_local),
        ("software", "tiny-model", _check_tiny_model),
        ("software", "python", _check_python),
        ("software", "torch", _check_torch),
        ("software", "triton", _check_triton),
        ("software", "flash-linear-attention", _check_fla),
        ("software", "packages", _check_packages),
        ("software", "environment", _check_environment),
        ("device", "cuda", _check_cuda),
        ("device", "vram-budget", _check_vram_budget),
        ("host", "host", _check_host),
        ("host", "pinned-memory", _check_pinned),
        ("kernels", "kernel-dense", _check_kernel_dense),
        ("kernels", "kernel-moe", _check_kernel_moe),
        ("kernels", "tuning-table", _check_tuning),
        ("disk", "cache-dir", _check_cache_dir),
        ("disk", "hub-cache", _check_hub_cache),
        ("disk", "hf-token", _check_hf_token),
        ("disk", "hf-offline", _check_hf_offline),
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
            r = Result(FAIL, f"the check itself failed: {_one_line(exc)}", REPORT, {"error": _one_line(exc)})
        out.append(Check(name, section, r.status, r.detail, r.fix, r.facts))
    secrets = _secrets()
    for c in out:
        c.detail = _scrub(c.detail, secrets)
        c.fix = _scrub(c.fix, secrets) if c.fix else c.fix
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


def _counts(checks: list[Check]) -> dict[str, int]:
    return {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}


def report(checks: list[Check]) -> dict[str, Any]:
    """The --json object: every check, then the raw facts by check name."""
    from clover_local import __version__

    counts = _counts(checks)
    return {"clover_local": __version__, "ok": counts[FAIL] == 0, "counts": counts,
            "checks": [c.to_dict() for c in checks], "facts": _jsonable({c.name: c.facts for c in checks})}


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, max(width, 30), break_on_hyphens=False, break_long_words=False) or [""]


def _print(checks: list[Check]) -> None:
    """One line per check (its detail wrapped under itself), sections in order, then the tally. Wrapped here rather
    than by a rich table, which pads every line to the width with spaces."""
    from rich.console import Console
    from rich.markup import escape

    out = Console(highlight=False, soft_wrap=True)
    width = out.width if sys.stdout.isatty() else 120
    name_w = max(len(c.name) for c in checks)
    indent = " " * (4 + name_w + 1)
    out.print("[b]clover-local doctor[/b]: what this machine has, and whether clover-local works on it")
    for key, title in SECTIONS.items():
        rows = [c for c in checks if c.section == key]
        if rows:
            out.print(f"\n[b]{title}[/b]")
        for c in rows:
            color = COLORS[c.status]
            lines = _wrapped(c.detail, width - len(indent))
            out.print(f"  [{color}]{SYMBOLS[c.status]}[/{color}] {escape(c.name.ljust(name_w))} {escape(lines[0])}")
            for line in lines[1:]:
                out.print(indent + escape(line))
            if c.fix:
                fix = _wrapped(c.fix, width - len(indent) - 2)
                out.print(f"{indent}[cyan]→[/cyan] {escape(fix[0])}")
                for line in fix[1:]:
                    out.print(f"{indent}  {escape(line)}")
    n = _counts(checks)
    verdict = (f"[red]{n[FAIL]} failed[/red]: fix the ✗ lines first (exit status 1)" if n[FAIL] else
               "nothing failed" + (" (the ! lines are worth a look)" if n[WARN] else ""))
    out.print(f"\n{n[OK]} ✓, {n[WARN]} !, {n[FAIL]} ✗: {verdict}")


@app.command(short_help="Check this machine for clover-local: versions, GPU, memory, kernels, disk, and what to fix.")
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: every check (name, section, status "
                                 "ok/warn/fail, detail, fix) and the raw facts."),
) -> None:
    """Check this machine for clover-local and say what to fix: one line per check, ✓ fine, ! worth a look, ✗
    broken, each with a short reason and, where something is wrong, what to do.

    Run it when something goes wrong, and paste its output (or --json) into a bug report. It reads only this
    machine: no network, no model loaded, a few seconds (on a GPU the first run also compiles two Triton kernels,
    up to a minute). A Hub token is only ever said to be set or not, never shown.

    What it checks:

      Software  clover-local, its tiny model, Python, torch, triton, packages
      Device    the CUDA GPU, its memory and driver; the --vram-budget default
      Host      CPU cores, RAM; a 256 MiB pinned host-to-GPU copy, in GB/s
      Kernels   the INT4 dense and MoE kernels vs the reference; tuning table
      Disk      free space for both caches; Hub token (never shown); offline

    Without a CUDA GPU or without triton the INT4 kernels fall back to the PyTorch reference (dequantize, then
    matmul: correct, far slower); the kernel check then runs that reference against the weights it was packed
    from. flash-linear-attention on a machine without CUDA is flagged (transformers picks its GPU kernels there
    and crashes). Free space is compared with the 35B pack (18.6 GiB) and the BF16 release (64.6 GiB).

    The exit status is 1 when a check fails (✗), else 0 (warnings included), so a script can test it.

    Examples:

      clover-local doctor

      clover-local doctor --json > doctor.json   # attach to a bug report

      clover-local doctor --json | jq '.checks[] | select(.status != "ok")'
    """
    say = (lambda msg: None) if as_json else (lambda msg: print(f"… {msg}", file=sys.stderr, flush=True))
    checks = run_checks(say)
    if as_json:
        print(_scrub(json.dumps(report(checks), indent=2, allow_nan=False), _secrets()))
    else:
        _print(checks)
    if any(c.status == FAIL for c in checks):
        raise typer.Exit(1)
