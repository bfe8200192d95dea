"""Routed experts run on the CPU (`--cpu-experts auto|misses`): torch's int4 CPU kernel on experts converted once
into its form, kept in a bounded host cache (least recently used out).

Why converted and kept: the host slabs are in the GPU kernels' layout (GPTQ), which torch's CPU kernel does not
read. Measured on 2 cores at a gate/up-sized projection (2048 → 1024, group 128; `docs/cpu_expert_paths.py`):
dequantize-then-matmul 14 ms, torch's int4 kernel 83 µs at 2 rows on converted weights, the conversion ≈ 5 ms.
A copy over PCIe is ≈ 32 µs an expert, so only a converted expert used again (a block's later passes, the next
block's hot experts) can be cheaper on the CPU than the copy; converting per call never is.

The kernel takes bf16 activations (its fp32 and fp16 paths are 30–90× slower on x86), so the scales and the
zero term go to bf16 too: the experts that run here match the dequantize-then-matmul reference within bf16
tolerance, as the fused GPU kernel does. Shapes the kernel cannot take (bits ≠ 4, output features not a
multiple of 16, a group size outside 32/64/128/256) run the reference instead (`kernel` is False).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from clover_local.runtime.expert_store import HostExpertStore
from clover_local.runtime.kernels.reference import PackedStack, moe_w4a16_ref, unpack_cols

GROUPS = (32, 64, 128, 256)
DEFAULT_CPU_CACHE = 2 * 1024**3  # bytes of converted experts kept (RuntimeOptions.cpu_cache); planned only with them on


def int4_kernel_fits(stack: PackedStack) -> bool:
    """Whether torch's int4 CPU kernel takes this stack's matrices (checked again by torch; this keeps the
    fallback a decision, not an exception)."""
    return (stack.bits == 4 and stack.group_size in GROUPS and stack.in_features % stack.group_size == 0
            and stack.out_features % 16 == 0 and hasattr(torch, "_weight_int4pack_mm_for_cpu")
            and hasattr(torch, "_convert_weight_to_int4pack_for_cpu"))


@dataclass(frozen=True)
class Converted:
    """One matrix in the int4 kernel's form: codes [N, K/2] uint8 (the kernel's own order, which depends on the
    CPU's vector width) and scales with zero terms [K/group, N, 2] bf16."""

    codes: Tensor
    scales_zeros: Tensor
    group_size: int

    @property
    def nbytes(self) -> int:
        return self.codes.numel() + self.scales_zeros.numel() * 2

    def __call__(self, x: Tensor) -> Tensor:
        return torch._weight_int4pack_mm_for_cpu(x, self.codes, self.group_size, self.scales_zeros)


def convert(qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int) -> Converted:
    """One GPTQ matrix (qweight int32 [K/8, N], scales fp16 [G, N], qzeros int32 [G, N/8], zero stored minus one)
    into the kernel's form. The kernel computes (q − 8) · s + zero_term per group, so zero_term = (8 − z) · s."""
    kp, n = qweight.shape
    k = kp * 8
    # bytes of the packed rows: byte b of a word holds rows 2b (low nibble) and 2b + 1 (high): little-endian
    b = qweight.contiguous().view(torch.uint8).view(kp, n, 4)
    codes = torch.stack((b & 15, b >> 4), dim=-1).view(kp, n, 8).permute(1, 0, 2).reshape(n, k)
    packed = torch._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
    zeros = unpack_cols(qzeros, 4).float() + 1  # [G, N]
    s = scales.float()
    scales_zeros = torch.stack((s, (8 - zeros) * s), dim=-1).to(torch.bfloat16).contiguous()
    return Converted(packed, scales_zeros, group_size)


@dataclass
class CpuExpertStats:
    runs: int = 0  # (expert, layer call) pairs run here
    rows: int = 0  # token rows they served
    conversions: int = 0  # experts converted (each once until evicted)
    converted_hits: int = 0  # runs that found their expert already converted
    evictions: int = 0
    seconds: float = 0.0


class CpuExperts:
    """The CPU path for missed experts of one runtime: `run` computes what `moe_w4a16` would for choices routed
    to host experts, converting each expert on its first use and keeping at most `budget` bytes of converted
    experts (an expert is ≈ its slab's size: ≈ 1.6 MB at 35B, so the default 2 GiB holds ≈ 1,300)."""

    def __init__(self, host: HostExpertStore, budget: int) -> None:
        self.host, self.budget = host, max(0, int(budget))
        self.kept: OrderedDict[tuple[int, int], tuple[Converted, Converted]] = OrderedDict()
        self.nbytes = 0
        self.stats = CpuExpertStats()
        first = next(iter(host.buffers))
        self.kernel = all(int4_kernel_fits(st) for st in host.stacks(first))

    def reset_stats(self) -> None:
        self.stats = CpuExpertStats()

    def summary(self) -> dict:
        """The counters, what is kept and whether torch's kernel runs (else the reference), for `stats`."""
        return {**asdict(self.stats), "seconds": round(self.stats.seconds, 6), "kernel": self.kernel,
                "kept": len(self.kept), "kept_bytes": self.nbytes, "budget": self.budget}

    def _expert(self, layer: int, e: int) -> tuple[Converted, Converted]:
        key = (layer, e)
        got = self.kept.get(key)
        if got is not None:
            self.kept.move_to_end(key)
            self.stats.converted_hits += 1
            return got
        gate_up, down = self.host.stacks(layer)
        got = (convert(*gate_up.slot(e), gate_up.group_size), convert(*down.slot(e), down.group_size))
        self.stats.conversions += 1
        size = got[0].nbytes + got[1].nbytes
        if size <= self.budget:
            while self.kept and self.nbytes + size > self.budget:
                _, old = self.kept.popitem(last=False)
                self.nbytes -= old[0].nbytes + old[1].nbytes
                self.stats.evictions += 1
            self.kept[key] = got
            self.nbytes += size
        return got

    def run(self, layer: int, x: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """x [n, H] (host), experts int64 [n, 1] (expert ids), weights [n, 1] → Σ weight · expert(x) as fp32
        [n, H]: each row is one (token, choice) pair routed to a host expert."""
        t0 = time.perf_counter()
        n, h = x.shape
        flat = experts.reshape(-1)
        order = torch.argsort(flat, stable=True)
        ids, counts = torch.unique_consecutive(flat[order], return_counts=True)
        self.stats.runs += int(ids.numel())
        self.stats.rows += n
        if not self.kernel:
            gate_up, down = self.host.stacks(layer)
            out = moe_w4a16_ref(x, experts, weights, gate_up, down).float()
            self.stats.seconds += time.perf_counter() - t0
            return out
        out = torch.empty(n, h, dtype=torch.float32)
        xb = x.to(torch.bfloat16)
        w = weights.reshape(-1).float()
        start = 0
        for e, c in zip(ids.tolist(), counts.tolist()):
            rows = order[start : start + c]
            start += c
            gate_up, down = self._expert(layer, e)
            gu = gate_up(xb[rows])
            inter = gu.shape[1] // 2
            act = F.silu(gu[:, :inter].float()) * gu[:, inter:].float()
            y = down(act.to(torch.bfloat16)).float()
            out[rows] = y * w[rows, None]  # each row is one pair: the experts' rows are disjoint
        self.stats.seconds += time.perf_counter() - t0
        return out
