"""What one routed-expert projection costs on the CPU, three ways: `python docs/cpu_expert_paths.py`.

Why: the runtime can run a missed expert on the CPU instead of copying it (`--cpu-experts auto|misses`), which
only pays if it costs about what the copy does (32 µs an expert at 50 GB/s, targets.md). Today that path is the
dequantizing reference (`kernels.reference.moe_w4a16_ref`). This times, for a gate/up-sized projection (2048 →
1024, group 128, 2 rows, random codes): dequantize-then-matmul in fp32; torch's int4 CPU kernel
(`torch._weight_int4pack_mm_for_cpu`, bf16) on weights already in its packed form; and the conversion into
that form (`torch._convert_weight_to_int4pack_for_cpu`), which a per-call use would pay every time. It also
checks the int4 kernel against the dequantized weights (GPTQ's zero z becomes torch's (8 − z) · scale).

Then the runtime's CPU path as built (`runtime/cpu_experts.py`) on one whole 35B-shaped expert (H 2048, I 512,
random host slab): converting it from its slab (gate/up and down), and `CpuExperts.run` on it kept converted at
1, 2 and 8 rows.
"""

from __future__ import annotations

import time

import torch


def timed(fn, n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.manual_seed(0)
    n_out, k, g = 1024, 2048, 128
    q = torch.randint(0, 16, (n_out, k), dtype=torch.int32)
    scale = torch.rand(k // g, n_out) * 0.01 + 0.001
    zero = torch.randint(0, 16, (k // g, n_out)).float()
    x = torch.randn(2, k)

    def dequantized_matmul() -> torch.Tensor:
        w = (q.float() - zero.repeat_interleave(g, 0).T) * scale.repeat_interleave(g, 0).T
        return x @ w.T

    packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)
    scales_zeros = torch.stack([scale, (8 - zero) * scale], dim=2).to(torch.bfloat16).contiguous()
    xb = x.to(torch.bfloat16)
    got = torch._weight_int4pack_mm_for_cpu(xb, packed, g, scales_zeros).float()
    want = dequantized_matmul()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 2 rows, {k} → {n_out}, group {g}")
    print(f"int4 kernel vs dequantized: relative error {((got - want).norm() / want.norm()).item():.1e} (bf16)")
    print(f"dequantize + matmul (fp32, the runtime's CPU path today): {timed(dequantized_matmul, 5):,.0f} µs")
    print(f"torch int4 kernel on converted weights (bf16): "
          f"{timed(lambda: torch._weight_int4pack_mm_for_cpu(xb, packed, g, scales_zeros), 50):,.0f} µs")
    print(f"converting the weights into its form: "
          f"{timed(lambda: torch._convert_weight_to_int4pack_for_cpu(q, 1), 5):,.0f} µs")


def runtime_path() -> None:
    from clover_local.runtime.cpu_experts import CpuExperts, convert
    from clover_local.runtime.expert_store import HostExpertStore
    from clover_local.runtime.slab import SlabLayout

    layout = SlabLayout(2048, 512, 4, 2048 // 128, 512 // 128)
    store = HostExpertStore(layout, [0], 1, pin=False)
    for name, part in layout.views(store.buffers[0]).items():
        if name.endswith("scales"):
            part.copy_((torch.rand(part.shape) * 0.02 + 0.002).half())
        else:
            part.copy_(torch.randint(-2**31, 2**31 - 1, part.shape, dtype=torch.int64).int())
    gate_up, down = store.stacks(0)
    conv = timed(lambda: (convert(*gate_up.slot(0), 128), convert(*down.slot(0), 128)), 5)
    print(f"runtime: converting one expert from its slab (gate/up 2048 → 1024 and down 512 → 2048): {conv:,.0f} µs")
    cpu = CpuExperts(store, budget=1 << 30)
    for rows in (1, 2, 8):
        x, e, w = torch.randn(rows, 2048).bfloat16(), torch.zeros(rows, 1, dtype=torch.long), torch.rand(rows, 1)
        print(f"runtime: one kept expert at {rows} row(s) (`CpuExperts.run`): "
              f"{timed(lambda: cpu.run(0, x, e, w), 50):,.0f} µs")


if __name__ == "__main__":
    main()
    runtime_path()
