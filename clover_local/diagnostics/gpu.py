"""Device checks: the CUDA GPU (or why torch finds none), its driver and memory, whether torch carries code for
its architecture, and the --vram-budget it gets."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from clover_local.diagnostics.common import (FAIL, GIB, OK, REPORT, WARN, Result, cuda_available, fmt_size,
                                             one_line, version_tuple)

CUDA_WHEELS = "https://download.pytorch.org/whl/cu128"


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
        # a version only from a run that worked: a failed one prints its error on stdout ("Failed to initialize
        # NVML: Driver/library version mismatch"), which is no version
        m = re.fullmatch(r"\d+\.\d+(?:\.\d+)?", (res.stdout.strip().splitlines() or [""])[0].strip())
        return m.group(0) if res.returncode == 0 and m else "installed (nvidia-smi found)"
    except (OSError, subprocess.SubprocessError):
        return "installed (nvidia-smi found)"


def _driver_libraries() -> list[str]:
    if sys.platform == "win32":
        return ["nvcuda.dll"]
    return ["libcuda.so.1", "libcuda.so", *filter(None, [ctypes.util.find_library("cuda")])]


def _cuda_driver_api() -> str | None:
    """The newest CUDA the installed driver supports (e.g. 12.8), else None: asked of the driver's own library
    (cuDriverGetVersion needs no GPU context and no torch; torch has no call for it). Why: a torch wheel built for
    a newer CUDA than the driver supports finds no GPU, and this is the number to compare."""
    for name in _driver_libraries():
        try:
            lib = ctypes.CDLL(name)
            version = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
                return f"{version.value // 1000}.{version.value % 1000 // 10}"
        except (OSError, AttributeError):  # not there, or not a driver
            continue
    return None


_NO_GPU = ("chat, generate and serve run on the CPU (slowly: fine for the tiny demo model, not for 35B); "
           "`clover-local plan MODEL --vram 16GB` still plans for a card")


def _no_cuda(torch_warning: str | None) -> Result:
    """Why torch finds no usable GPU, as far as this machine tells."""
    import torch

    driver = _nvidia_driver()
    api = _cuda_driver_api() if driver else None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts = {"available": False, "driver": driver, "driver_cuda": api, "torch_cuda": torch.version.cuda,
             "warning": torch_warning}
    if cvd is not None and cvd.strip() in ("", "-1"):
        return Result(WARN, f"no CUDA GPU visible: CUDA_VISIBLE_DEVICES={cvd!r} hides them; {_NO_GPU}",
                      "unset CUDA_VISIBLE_DEVICES (or name a GPU: CUDA_VISIBLE_DEVICES=0)", facts)
    build_cuda = torch.version.cuda
    if driver and not build_cuda and not getattr(torch.version, "hip", None):
        return Result(WARN, f"an NVIDIA driver ({driver}) is installed, but this torch ({torch.__version__}) is a "
                            f"CPU-only build: no CUDA GPU for clover-local; {_NO_GPU}",
                      f"install a CUDA build of torch: pip install torch --index-url {CUDA_WHEELS} (RTX 50 cards "
                      "need CUDA 12.8 or newer)", facts)
    if driver and build_cuda and api and version_tuple(api, 2) < version_tuple(build_cuda, 2):  # (major.minor)
        return Result(WARN, f"torch is built for CUDA {build_cuda}, but the NVIDIA driver {driver} supports CUDA "
                            f"{api} at most, so torch finds no GPU; {_NO_GPU}",
                      f"update the NVIDIA driver to one that supports CUDA {build_cuda}, or install a torch built for "
                      f"CUDA {api} or older (RTX 50 cards need CUDA 12.8 or newer)", facts)
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


def check_cuda(say: Callable[[str], None]) -> Result:
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
    detail = (f"{props.name} (compute capability {major}.{minor}, sm_{major}{minor}), {fmt_size(total)}, "
              f"{fmt_size(free)} free; driver {driver or 'version unknown'}"
              + (f", supports CUDA {api}" if api else ""))
    if len(gpus) > 1:
        detail += f"; {len(gpus)} GPUs, clover-local uses cuda:{index} (CUDA_VISIBLE_DEVICES picks another)"
    try:
        ok = float((torch.arange(4, device=f"cuda:{index}", dtype=torch.float32) * 2).sum().item()) == 12.0
        torch.cuda.synchronize(index)
    except Exception as exc:  # noqa: BLE001 - "no kernel image is available", a driver fault
        facts["error"] = one_line(exc)
        return Result(FAIL, f"{detail}; a first CUDA operation fails: {one_line(exc)}",
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
        return Result(WARN, f"{detail}; {fmt_size(held)} is held by other programs (or this one's CUDA context)",
                      "close programs that use the GPU (a browser, another model) for a larger --vram-budget", facts)
    return Result(OK, detail, facts=facts)


def _arch_fix(major: int, minor: int) -> str:
    return (f"install a torch built for sm_{major}{minor}: pip install torch --index-url {CUDA_WHEELS} "
            "(RTX 50 cards need CUDA 12.8 or newer)")


def check_vram_budget(say: Callable[[str], None]) -> Result:
    import torch

    from clover_local.runtime.sizes import default_budget, host_available_bytes

    if not cuda_available():
        budget = default_budget(torch.device("cpu"))
        return Result(OK, f"no GPU: on the CPU --vram-budget defaults to half the available RAM ({fmt_size(budget)})",
                      facts={"device": "cpu", "bytes": budget})
    from clover_local.runtime.placement import make_plan
    from clover_local.runtime.synthetic_pack import synthetic_index

    dev = torch.device("cuda")
    budget = default_budget(dev)
    plan = make_plan(synthetic_index("full"), budget, host_available_bytes(), vram_flag="--vram-budget")
    facts = {"device": "cuda", "bytes": budget, "fits_35b": plan.fits, "slots": plan.slots,
             "experts": plan.experts_total}
    head = f"{fmt_size(budget)} (free memory minus a margin)"
    if plan.fits:
        return Result(OK, f"{head}: the 35B 4-bit pack fits, {plan.slots:,} of {plan.experts_total:,} experts on the "
                          f"GPU ({100 * plan.resident_fraction:.0f}%)", facts=facts)
    return Result(WARN, f"{head}: the 35B 4-bit pack does not fit: {plan.refusal}",
                  "free GPU memory or host RAM as it says; a 3-bit pack (`quantize --bits 3`) needs less; "
                  "`clover-local plan MODEL --vram ... --ram ...` plans other settings", facts)
