"""Host checks: CPU cores and RAM against what the 35B pack keeps in host memory, and a timed pinned host→GPU copy
(the path every expert miss takes)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from clover_local.diagnostics.common import FAIL, GIB, MIB, OK, WARN, Result, cuda_available, fmt_size, one_line

# host RAM the 35B 4-bit pack keeps beside a 16 GB card: the routed experts, pinned, and more (tests/test_doctor.py
# holds it to what make_plan computes at a 16 GiB budget)
HOST_BYTES_35B = int(17.9 * GIB)
PINNED_BYTES = 256 * MIB  # the pinned host→device copy test: ≈ 10–30 ms over PCIe 4/5 x16
SLOW_PCIE_GBPS = 10.0  # below this a copy runs like PCIe 3.0 x8 or a x4 slot: every expert miss costs more


def check_host(say: Callable[[str], None]) -> Result:
    from clover_local.runtime.sizes import cpu_count, host_available_bytes, host_total_bytes

    usable, cores = cpu_count(), os.cpu_count()
    total, avail = host_total_bytes(), host_available_bytes()
    facts = {"cpu_cores": cores, "cpu_usable": usable, "ram_total_bytes": total, "ram_available_bytes": avail}
    cpus = f"{usable} CPU cores" + (f" (of {cores}: the others are not this process's)" if cores and cores != usable
                                    else "")
    detail = f"{cpus}; RAM {fmt_size(total)}, {fmt_size(avail)} available"
    if avail is not None and avail < HOST_BYTES_35B:
        return Result(WARN, f"{detail}: less than the {fmt_size(HOST_BYTES_35B)} of host RAM the 35B 4-bit pack keeps "
                            "beside a 16 GB card (the tiny demo model needs little)",
                      "free memory; or use a 3-bit pack (`quantize --bits 3`: every expert fits a 16 GB card); "
                      "`clover-local plan MODEL --vram 16GB --ram ...` gives the figure for other settings", facts)
    return Result(OK, detail, facts=facts)


def check_pinned(say: Callable[[str], None]) -> Result:
    if not cuda_available():
        return Result(OK, "skipped: no GPU (pinned memory is what experts are copied to a GPU from)",
                      facts={"skipped": True})
    import torch

    dev = torch.device("cuda")
    free = int(torch.cuda.mem_get_info(dev)[0])
    if free < PINNED_BYTES + 256 * MIB:
        return Result(WARN, f"skipped: only {fmt_size(free)} of GPU memory free", "free GPU memory",
                      {"skipped": True, "free_bytes": free})
    t0 = time.perf_counter()
    try:
        host = torch.empty(PINNED_BYTES, dtype=torch.uint8, pin_memory=True)
    except Exception as exc:  # noqa: BLE001 - cudaHostAlloc refused
        return Result(FAIL, f"pinning {fmt_size(PINNED_BYTES)} of host memory fails: {one_line(exc)}",
                      "the runtime pins the experts in host RAM to copy them: free host memory (in WSL2 or a "
                      "container the limit on pinned memory may be lower)", {"error": one_line(exc)})
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
    detail = f"{fmt_size(PINNED_BYTES)} pinned in {alloc_s * 1e3:.0f} ms; host→GPU copy {gbps:.1f} GB/s"
    if gbps < SLOW_PCIE_GBPS:
        return Result(WARN, f"{detail}: slow for the expert cache's copies (PCIe 4.0 x16 gives ≈ 25 GB/s)",
                      "check the card sits in a x16 slot at full PCIe speed (BIOS, riser); `clover-local plan` "
                      "assumes 50 GB/s for its PCIe figures", facts)
    return Result(OK, detail, facts=facts)
