"""Host reads: the MoE kernel reads a non-resident expert's slab in place from pinned host memory.

Why: an optimistic pass (`optimistic.py`, a CUDA-graph replay) cannot stop to copy an expert it finds missing.
Without host reads such a pass is thrown away, what it lacked is copied, and it is replayed (`ExpertCache.repair`):
with routing that drifts as a block's tokens are revealed that is most later passes (`cache_sim --drift 0.094`:
57 of 60), so decode costs near two replays a pass. Pinned host memory is in the GPU's address space (unified
addressing), so the kernel can read the expert where it lies: a miss costs its ≈ 1.7 MB over PCIe inside the one
replay (the same bytes a copy would move), the result stands, and the expert is copied into a slot afterwards
for the block's later passes (`ExpertCache.install_missed`).

`check` runs at load: the MoE kernel once on a resident expert read from its slot and from the host, at the
preview's shapes (which also compiles the kernels' host-reading variants before any graph capture: a capture
must not compile). Any difference or error switches host reads off with its reason kept (`Runtime.stats()`
`host_reads_error`), and passes repair as before. Off by choice: `bench --no-host-reads`, `CLOVER_HOST_READS=0`
(chat, generate, serve), `RuntimeOptions.host_reads=False`. Not yet measured on a GPU: how fast the kernel reads host
memory (PCIe 4.0 / 5.0 x16: 25–50 GB/s by spec; zero-copy reads of whole 128-byte lines usually reach most of a
copy's bandwidth), which `gpu_check` stage `host_reads` times.

`check_read_through` runs after it: a read-through install (the kernel copying a host expert into a slot as it
reads it, `Runtime.set_read_through`) into another resident expert's slot, whose slab is put back after; a
difference or error switches read-through off (`Runtime.stats()` `read_through_error`) and passes copy their
misses after the pass as before.
"""

from __future__ import annotations

import numpy as np
import torch

from clover_local.runtime.expert_cache import ExpertCache
from clover_local.runtime.kernels import fused_layer_ops, moe_w4a16


def _calls(cache: ExpertCache, dtype: torch.dtype, rows: int, top_k: int, slot: int, expert: int, seed: int):
    """A check's MoE inputs: x [rows, H], weights [rows, top_k] (random), and every choice sent to
    `slot` or to host expert `expert` (slot S + expert)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cache.layout.hidden, generator=gen).to(cache.device, dtype)
    w = torch.rand(rows, top_k, generator=gen).to(cache.device, dtype)
    on_slot = torch.full((rows, top_k), slot, dtype=torch.int32, device=cache.device)
    on_host = torch.full((rows, top_k), cache.n_slots + expert, dtype=torch.int32, device=cache.device)
    return x, w, on_slot, on_host


def slot_holds(stacks, host, slot: int, expert: int) -> bool:
    """Whether slot `slot` of the (gate_up, down) stacks holds host expert `expert`'s parts bit for bit: what a
    read-through install must leave (the slab's padding aside)."""
    return all(torch.equal(getattr(dev, part)[slot].cpu(), getattr(hst, part)[expert].cpu())
               for dev, hst in zip(stacks, host) for part in ("qweight", "scales", "qzeros"))


def _reason(err: Exception) -> str:
    """An error as the one line a check reports."""
    return f"{type(err).__name__}: {err}".splitlines()[0][:300]


def check(cache: ExpertCache, dtype: torch.dtype, rows: int, top_k: int) -> str | None:
    """None when the MoE kernel's host reads give what its slot reads give, else why not (one line)."""
    if cache.host is None:
        return "every expert is resident"
    if cache.device.type == "cuda" and not cache.host.pinned:
        return "the host slabs are not pinned"
    # a resident expert whose slot number is not its expert id, where there is one (warm() puts the first
    # layer's expert e in slot e: a kernel reading slot e for host expert e would look right there)
    table = cache.slot_of[cache.layer_ids]
    at, experts = np.nonzero((table >= 0) & (table != np.arange(cache.n_experts)))
    if at.size == 0:
        at, experts = np.nonzero(table >= 0)
    if at.size == 0:
        return "no expert is resident to compare with"
    layer, expert = int(cache.layer_ids[at[0]]), int(experts[0])
    x, w, on_slot, on_host = _calls(cache, dtype, rows, top_k, int(cache.slot_of[layer, expert]), expert, seed=0)
    try:
        cache.settle_copies()
        want = moe_w4a16(x, on_slot, w, cache.gate_up, cache.down)
        got = moe_w4a16(x, on_host, w, cache.gate_up, cache.down, cache.host.stacks(layer))
        ops = fused_layer_ops(cache.device)
        if ops is not None:  # its host variant compiled now too
            idx = torch.full((rows, top_k), expert, dtype=torch.int64, device=cache.device)
            table = torch.full((cache.n_experts,), -1, dtype=torch.int32, device=cache.device)
            counts = torch.zeros(cache.n_experts, dtype=torch.int32, device=cache.device)
            slots, _ = ops.optimistic_slots(idx, w, table, counts, 0, cache.n_slots)
            if not torch.equal(slots.to(on_host.dtype), on_host):
                return "the slot mapping does not send a non-resident expert to the host"
        same = torch.equal(got, want)
    except Exception as err:  # a driver or compiler refusing host pointers: off, with the reason
        return _reason(err)
    return None if same else "the MoE kernel's host reads differ from its slot reads"


def check_read_through(cache: ExpertCache, dtype: torch.dtype, rows: int, top_k: int) -> str | None:
    """None when the MoE kernel reads a host expert through into a slot right (`_moe_kernel` INSTALL): the same
    output as reading it from its own slot, and the target slot then holding its slab's parts bit for bit; else
    why not (one line). Run at load after `check`, on two resident slots: expert A of a layer read from the host
    into the slot of another resident expert B, whose slab is copied back after. Also compiles the read-through
    variants of the kernels (the MoE's and the slot mapping's) before any graph capture."""
    table = cache.slot_of[cache.layer_ids]
    at, experts = np.nonzero(table >= 0)
    if at.size < 2:
        return "fewer than two experts resident to check with"
    layer, expert = int(cache.layer_ids[at[0]]), int(experts[0])
    target = int(table[at[-1], experts[-1]])  # another resident expert's slot, restored below
    x, w, on_slot, on_host = _calls(cache, dtype, rows, top_k, int(table[at[0], experts[0]]), expert, seed=1)
    install = torch.zeros(cache.n_experts, dtype=torch.int32, device=cache.device)
    install[expert] = target + 1
    host = cache.host.stacks(layer)
    try:
        cache.settle_copies()
        want = moe_w4a16(x, on_slot, w, cache.gate_up, cache.down)
        try:
            got = moe_w4a16(x, on_host, w, cache.gate_up, cache.down, host, install)
            whole = slot_holds((cache.gate_up, cache.down), host, target, expert)
        finally:  # the target's own expert back
            owner = int(cache.owner[target])
            cache.buf[target].copy_(cache.host.slab(owner // cache.n_experts, owner % cache.n_experts))
        ops = fused_layer_ops(cache.device)
        if ops is not None:  # the slot mapping's read-through variant, compiled now (at the real shapes)
            n, e = cache.layer_ids.size * cache.n_experts, cache.n_experts

            def full(k: int, v: int = 0) -> torch.Tensor:
                return torch.full((k,), v, dtype=torch.int32, device=cache.device)

            idx = torch.full((rows, top_k), expert, dtype=torch.int64, device=cache.device)
            ops.optimistic_slots(idx, w, full(n, -1), full(n), 0, cache.n_slots,
                                 ops.ReadThrough(full(n), full(n, -1), full(2 * e), full(1 + e), e))
        same = torch.equal(got, want)
    except Exception as err:  # a compiler or driver refusing it: off, with the reason
        return _reason(err)
    if not same:
        return "the MoE kernel's read-through output differs from its slot reads"
    return None if whole else "the MoE kernel's read-through left the slot's slab incomplete"

