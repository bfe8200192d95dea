"""The CPU path for missed experts (`runtime/cpu_experts.py`): torch's int4 CPU kernel on converted host slabs
against the dequantize-then-matmul reference, the bounded cache of converted experts, the fallback."""

from __future__ import annotations

import pytest
import torch

from clover_local.runtime.cpu_experts import CpuExperts, convert, int4_kernel_fits
from clover_local.runtime.expert_store import HostExpertStore
from clover_local.runtime.kernels.reference import dequantize_w, moe_w4a16_ref
from clover_local.runtime.slab import SlabLayout

H, INTER, EXPERTS = 256, 64, 6


def random_store(layout: SlabLayout, layers: list[int], seed: int = 0) -> HostExpertStore:
    """Host slabs with random codes (every nibble, sign bit included), zeros and positive scales."""
    g = torch.Generator().manual_seed(seed)
    store = HostExpertStore(layout, layers, EXPERTS, pin=False)
    for layer in layers:
        views = layout.views(store.buffers[layer])
        for name, part in views.items():
            if name.endswith("scales"):
                part.copy_((torch.rand(part.shape, generator=g) * 0.02 + 0.002).half())
            else:
                part.copy_(torch.randint(-2**31, 2**31 - 1, part.shape, generator=g, dtype=torch.int64).int())
    return store


def routed(n_tokens: int, top_k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows as the runtime hands them over: one (token, choice) pair per row, expert ids [n, 1]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, H, generator=g).repeat_interleave(top_k, 0)
    experts = torch.stack([torch.randperm(EXPERTS, generator=g)[:top_k] for _ in range(n_tokens)]).reshape(-1, 1)
    weights = torch.rand(n_tokens * top_k, 1, generator=g)
    return x, experts, weights


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_converted_matrix_matches_dequantized(rows):
    layout = SlabLayout(H, INTER, 4, H // 128, INTER // 32)
    store = random_store(layout, [0])
    gate_up, down = store.stacks(0)
    for stack in (gate_up, down):
        assert int4_kernel_fits(stack)
        for e in (0, EXPERTS - 1):
            w = dequantize_w(*stack.slot(e), stack.group_size)
            x = torch.randn(rows, stack.in_features)
            want = x.bfloat16().float() @ w  # the kernel's activations are bf16; scales too (checked below)
            got = convert(*stack.slot(e), stack.group_size)(x.bfloat16()).float()
            err = ((got - want).norm() / want.norm()).item()
            assert err < 5e-3, err  # bf16 scales and zero terms: ≈ 2⁻⁹ relative each


def test_cpu_experts_match_the_reference_and_keep_what_they_converted():
    layout = SlabLayout(H, INTER, 4, H // 128, INTER // 32)
    store = random_store(layout, [3, 7], seed=1)
    cpu = CpuExperts(store, budget=1 << 30)
    assert cpu.kernel
    for call, layer in enumerate((3, 7, 3)):
        x, experts, weights = routed(4, 2, seed=call)
        want = moe_w4a16_ref(x, experts, weights, *store.stacks(layer)).float()
        got = cpu.run(layer, x, experts, weights)
        assert got.dtype == torch.float32 and got.shape == (8, H)
        err = ((got - want).norm() / want.norm()).item()
        assert err < 1e-2, err
    s = cpu.stats
    assert s.rows == 24 and s.conversions + s.converted_hits == s.runs
    assert s.conversions == len(cpu.kept) and s.converted_hits > 0  # layer 3's second call reuses its experts
    assert cpu.nbytes == sum(a.nbytes + b.nbytes for a, b in cpu.kept.values())


def test_the_budget_bounds_what_is_kept_least_recently_used_out():
    layout = SlabLayout(H, INTER, 4, H // 128, INTER // 32)
    store = random_store(layout, [0], seed=2)
    probe = CpuExperts(store, budget=1 << 30)
    x = torch.randn(1, H)
    one = torch.ones(1, 1)
    probe.run(0, x, torch.tensor([[0]]), one)
    size = probe.nbytes
    cpu = CpuExperts(store, budget=2 * size)  # room for two experts
    for e in (0, 1, 0, 2):  # 0 is used again before 2 comes: 1 goes
        cpu.run(0, x, torch.tensor([[e]]), one)
    assert list(cpu.kept) == [(0, 0), (0, 2)] and cpu.nbytes == 2 * size
    assert cpu.stats.evictions == 1 and cpu.stats.conversions == 3 and cpu.stats.converted_hits == 1
    none = CpuExperts(store, budget=0)  # keeps nothing, still right
    want = cpu.run(0, x, torch.tensor([[1]]), one)
    torch.testing.assert_close(none.run(0, x, torch.tensor([[1]]), one), want)
    assert not none.kept and none.stats.conversions == 1


def test_shapes_the_kernel_cannot_take_run_the_reference():
    layout = SlabLayout(H, 8 * 3, 4, H // 128, 1)  # down's K = 24: group 24 is not one torch's kernel takes
    store = random_store(layout, [0], seed=3)
    cpu = CpuExperts(store, budget=1 << 30)
    assert not cpu.kernel
    x, experts, weights = routed(3, 2, seed=4)
    want = moe_w4a16_ref(x, experts, weights, *store.stacks(0)).float()
    torch.testing.assert_close(cpu.run(0, x, experts, weights), want)
    assert cpu.stats.conversions == 0 and cpu.stats.runs > 0
