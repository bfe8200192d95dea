"""The placement plan: what sits where, how many expert slots the device gets, and whether it fits at all.

Computed from a pack's config and safetensors headers (`pack_index`), never its weights; the loader sizes
the runtime from the same plan, so `clover-local plan` predicts what `load` allocates.

Device: non-expert weights (quantized modules packed as in the pack, minus g_idx; the rest in the compute
dtype), LM head, KV cache for `context` tokens (preallocated), GDN states (fp32) and conv rings, the prompt
snapshot (a second copy of those states, which chat and serve keep to resume a conversation), an activation
workspace, and N expert slots (`SlabLayout.nbytes` each) from what is left. Host: every routed expert as a
pinned slab (none when all of them fit on the device), the embedding table, and the runtime itself.

PCIe traffic: one 32-row pass routes rows × top_k choices per layer; with uniform routing the expected number
of distinct experts per layer is E·(1 − (1 − k/E)^rows) (≈163 of 256 for 32 rows, top 8). A block's passes
reuse one set, so misses concentrate in its first pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from clover_local.errors import CloverError
from clover_local.runtime.pack_index import PackIndex, kind_of
from clover_local.runtime.sizes import (DEFAULT_CONTEXT, DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_SPAN, GIB, MIB,
                                        chunk_layers, fmt_bytes)
from clover_local.runtime.slab import SlabLayout

PCIE_BPS = 50e9  # measured pinned host→device bandwidth for expert-sized copies (targets.md)
TARGET_BPS = 896e9  # RTX 5070 Ti memory bandwidth
HOST_RUNTIME_BYTES = 1 * GIB  # Python, torch, CUDA runtime on the host
WORKSPACE_SLACK = 256 * MIB  # allocator fragmentation and small temporaries
ASSUMED_TOKENS_PER_PASS = 3.0


def _or_lower_context(short: float, kv: float) -> str:
    """" or lower --context" where a shorter KV cache could make up `short` bytes (all of it gone at most):
    advice that cannot work is worse than none."""
    return " or lower --context" if 0 < short <= kv else ""


def expected_distinct(n_experts: int, top_k: int, rows: int) -> float:
    """Expected distinct experts one layer touches when `rows` rows each pick top_k of n uniformly."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** rows)


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def workspace_bytes(cfg, rows: int, lm_rows: int, dtype: torch.dtype) -> int:
    """Rough peak activation memory of one pass over `rows` rows whose LM head sees `lm_rows` rows."""
    a = dtype_bytes(dtype)
    h, conv, val = cfg.hidden_size, cfg.gdn_conv_dim, cfg.gdn_value_dim
    q = 2 * cfg.num_attention_heads * cfg.head_dim
    k, inter, e = cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.num_experts
    per_row = a * (10 * h + 6 * conv + 4 * val + 2 * q + k * (2 * h + 3 * inter)) + 4 * (
        4 * conv + 2 * cfg.linear_num_value_heads * cfg.linear_key_head_dim + 2 * h + 3 * e)
    return rows * per_row + lm_rows * cfg.vocab_size * (a + 4)


def prefill_rows(chunk: int, span: int, context: int) -> int:
    """Prompt rows one prefill pass takes (each layer over all of them, `chunk` rows at a time): `span`, never
    fewer than a chunk nor more than the context."""
    return max(chunk, min(span, context))


@dataclass
class PlanLine:
    what: str
    where: str  # "device" or "host"
    bytes: int
    note: str = ""


@dataclass
class Plan:
    vram_budget: int
    ram_budget: int | None
    context: int
    dtype: str
    lines: list[PlanLine] = field(default_factory=list)
    device_fixed: int = 0  # everything on the device except expert slots and workspace
    workspace: int = 0
    slab_bytes: int = 0
    expert_weight_bytes: int = 0  # per expert, without padding
    experts_total: int = 0
    slots: int = 0
    min_slots: int = 0
    # with 4-bit experts partly on the host: the slots the same budget would give 3-bit experts (`quantize
    # --bits 3`), else None
    slots_3bit: int | None = None
    host_bytes: int = 0
    host_expert_bytes: int = 0
    rows: int = 32
    distinct_per_layer: float = 0.0
    block_set: float = 0.0
    device_read_per_pass: int = 0
    pcie_first_pass: float = 0.0
    pcie_later_pass: float = 0.0
    prefill_chunk: int = 0
    prefill_span: int = 0  # prompt rows a prefill pass takes layer by layer (in prefill_chunk pieces)
    pcie_prefill_chunk: float = 0.0  # what a prefill pass's sweep copies: the experts it needs beyond the slots
    fits: bool = True
    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def device_predicted(self) -> int:
        """Bytes the runtime places on the device (weights, caches, slots), workspace excluded."""
        return self.device_fixed + self.slots * self.slab_bytes

    @property
    def device_peak(self) -> int:
        return self.device_predicted + self.workspace

    @property
    def resident_fraction(self) -> float:
        return self.slots / self.experts_total if self.experts_total else 1.0

    def check(self) -> "Plan":
        if self.refusal:
            raise CloverError(self.refusal)
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(device_predicted=self.device_predicted, device_peak=self.device_peak,
                 resident_fraction=round(self.resident_fraction, 4),
                 roofline_ms_5070ti=round(1e3 * self.device_read_per_pass / TARGET_BPS, 3),
                 pcie_ms_first_pass=round(1e3 * self.pcie_first_pass / PCIE_BPS, 3),
                 pcie_ms_later_pass=round(1e3 * self.pcie_later_pass / PCIE_BPS, 3),
                 pcie_ms_prefill_chunk=round(1e3 * self.pcie_prefill_chunk / PCIE_BPS, 3))
        return d


def make_plan(
    pack: PackIndex,
    vram: int,
    ram: int | None = None,
    context: int = DEFAULT_CONTEXT,
    dtype: torch.dtype = torch.bfloat16,
    *,
    embed_on_host: bool = True,
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
    prefill_span: int = DEFAULT_PREFILL_SPAN,
    slots: int | None = None,
    cpu_cache: int = 0,
    parked: int = 0,
    vram_flag: str = "--vram",
    ram_flag: str = "--ram",
    pinned: bool = True,
) -> Plan:
    """The placement for a device budget of `vram` bytes and `ram` bytes of host memory (None: unchecked).
    `slots` forces the expert slot count (tests, all-resident runs); the refusal is then about that count.
    `cpu_cache`: host bytes of experts kept converted for the CPU path (`--cpu-experts`; 0 when it is off).
    `parked`: host bytes `serve` may keep for conversations set aside (`--park-prompts`; chat and generate: 0).
    `pinned`: the host experts pinned, as the runtime pins them where CUDA is (else the chunks as they are, pageable:
    no power-of-two rounding).

    Built in the order the device is filled — weights, caches and states, workspace, expert slots from what is
    left — then the host's side, a pass's traffic, and the first refusal that applies."""
    cfg = pack.config
    a = dtype_bytes(dtype)
    plan = Plan(vram, ram, context, str(dtype).replace("torch.", ""), rows=cfg.diffusion.block_size)
    cfg.check_context(context)
    parts = _weights(plan, pack, a, host_embed=embed_on_host and not cfg.tie_word_embeddings)
    _states(plan, parts, cfg, context, a)
    chunk = min(prefill_chunk, context)
    span = prefill_rows(chunk, prefill_span, context)
    _workspace(plan, cfg, chunk, span, dtype, parts.weights)
    plan.device_fixed = parts.weights + parts.kv + parts.states
    _expert_slots(plan, pack, slots)
    _host(plan, parts, pack, cpu_cache, parked, pinned)
    _traffic(plan, parts, pack, chunk, span, vram_flag)
    plan.refusal = _refusal(plan, parts, slots, pinned, vram_flag, ram_flag)
    if plan.refusal:
        plan.fits, plan.warnings = False, []  # notes are moot then
    return plan


@dataclass
class _Parts:
    """A plan's sums beside its lines, bytes: what its traffic and refusals name."""
    weights: int = 0  # the non-expert weights on the device
    read: int = 0  # ... of them, what a pass reads (all but an embedding table there)
    host: int = 0  # weights on the host: the embedding table
    kv: int = 0
    gdn: int = 0  # the GDN states and conv rings, once
    snapshot: int = 0
    cpu_kept: int = 0
    parked: int = 0

    @property
    def states(self) -> int:
        """The GDN states twice (a causal pass's pending copy) and the prompt snapshot."""
        return 2 * self.gdn + self.snapshot


_WEIGHT_NOTES = {
    "attention": "q/k/v/o projections",
    "GDN": "in_proj_qkv/z, out_proj, gates, conv, decays",
    "shared experts": "one per layer, with its gate",
}
_WEIGHT_ORDER = ("attention", "GDN", "shared experts", "routers", "norms", "lm_head", "embeddings")


def _weights(plan: Plan, pack: PackIndex, a: int, host_embed: bool) -> _Parts:
    """The device's non-expert weights by kind: quantized modules at their packed size, the rest at `a` bytes a
    value; the embedding table kept on the host where `host_embed` (its line comes with the host's)."""
    by_kind: dict[str, int] = {}
    for mod in pack.modules.values():
        kind = kind_of(mod.name)
        by_kind[kind] = by_kind.get(kind, 0) + mod.packed_bytes
    host = 0
    for info in pack.plain.values():
        kind = kind_of(info.name)
        if kind == "embeddings" and host_embed:
            host += info.numel * a
        else:
            by_kind[kind] = by_kind.get(kind, 0) + info.numel * a
    notes = {**_WEIGHT_NOTES, "lm_head": "packed" if "lm_head" in pack.modules else "BF16"}
    for kind in _WEIGHT_ORDER:
        if kind in by_kind:
            plan.lines.append(PlanLine(kind, "device", by_kind[kind], notes.get(kind, "")))
    weights = sum(by_kind.values())
    return _Parts(weights=weights, read=weights - by_kind.get("embeddings", 0), host=host)


def _states(plan: Plan, parts: _Parts, cfg, context: int, a: int) -> None:
    """The KV cache for `context` tokens, the GDN states and the prompt snapshot."""
    n_attn = sum(1 for i in range(cfg.num_hidden_layers) if cfg.is_attention(i))
    n_gdn = cfg.num_hidden_layers - n_attn
    parts.kv = n_attn * 2 * cfg.num_key_value_heads * cfg.head_dim * context * a
    parts.gdn = n_gdn * (cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
                         + (cfg.linear_conv_kernel_dim - 1) * cfg.gdn_conv_dim * a)
    plan.lines.append(PlanLine("KV cache", "device", parts.kv,
                               f"{n_attn} attention layer{'s' * (n_attn != 1)} × {context} tokens"))
    # twice: the states, and where a causal pass writes its new ones until it is settled (runtime/offload.py:
    # ArenaGDNCache, so an optimistic commit can be rerun)
    plan.lines.append(PlanLine("GDN states", "device", 2 * parts.gdn,
                               f"{n_gdn} layer{'s' * (n_gdn != 1)}, fp32 state + conv ring; and a causal pass's "
                               "pending copy"))
    # chat and serve keep a copy of the GDN states (and the last prompt row's logits) where the last prompt's
    # prefill ended, to resume the next turn there (generate/prompt_cache.py)
    parts.snapshot = parts.gdn + cfg.vocab_size * 4
    plan.lines.append(PlanLine("prompt snapshot", "device", parts.snapshot,
                               "GDN states + one logits row kept to resume the next turn's prompt"))


def _workspace(plan: Plan, cfg, chunk: int, span: int, dtype: torch.dtype, weights: int) -> None:
    """The activations of the larger of a prefill chunk and a preview, and the allocator's slack."""
    rows = plan.rows
    # a span's hidden states three times (its embeddings, a layer's input and output), beside one chunk's
    # activations
    act = max(workspace_bytes(cfg, chunk, 1, dtype)
              + (3 * span * cfg.hidden_size * dtype_bytes(dtype) if span > chunk else 0),
              workspace_bytes(cfg, rows, rows, dtype))
    # allocator fragmentation and small temporaries: a tenth of what the pass touches, at most WORKSPACE_SLACK
    plan.workspace = act + min(WORKSPACE_SLACK, (weights + act) // 10)
    plan.lines.append(PlanLine("workspace", "device", plan.workspace,
                               f"activations of a {chunk}-row prefill chunk (layer by layer over {span} rows) "
                               "or a preview"))


def _expert_slots(plan: Plan, pack: PackIndex, slots: int | None) -> None:
    """Expert slots from what the budget leaves (or `slots`), and what 3-bit experts would get there."""
    cfg = pack.config
    h, inter = cfg.hidden_size, cfg.moe_intermediate_size
    gate_groups, down_groups = pack.expert["gate_proj"].groups, pack.expert["down_proj"].groups
    layout = SlabLayout(h, inter, pack.expert_bits, gate_groups, down_groups)
    plan.slab_bytes, plan.expert_weight_bytes = layout.nbytes, layout.weight_bytes
    plan.experts_total = pack.n_experts_total
    plan.min_slots = min(cfg.num_experts, plan.rows * cfg.num_experts_per_tok)
    left = plan.vram_budget - plan.device_fixed - plan.workspace
    plan.slots = min(plan.experts_total, max(0, left // plan.slab_bytes) if slots is None else slots)
    if (plan.slots < plan.experts_total and slots is None and pack.expert_bits == 4 and h % 32 == 0
            and inter % 32 == 0):
        three = SlabLayout(h, inter, 3, gate_groups, down_groups)
        plan.slots_3bit = min(plan.experts_total, max(0, left // three.nbytes))
    plan.lines.append(PlanLine(
        "expert slots", "device", plan.slots * plan.slab_bytes,
        f"{plan.slots} of {plan.experts_total} experts ({100 * plan.resident_fraction:.0f}%), "
        f"{fmt_bytes(plan.slab_bytes)} each"))


def _host(plan: Plan, parts: _Parts, pack: PackIndex, cpu_cache: int, parked: int, pinned: bool) -> None:
    """The host's lines: the experts the device does not hold all of, the embedding table, what the CPU path
    and parked prompts may keep, and the runtime."""
    all_resident = plan.slots >= plan.experts_total
    # (what the pinned allocator holds: the layers in chunks rounded up to powers of two; expert_store.py)
    per_layer = pack.config.num_experts * plan.slab_bytes
    n_layers = len(pack.expert_layers)
    plan.host_expert_bytes = (0 if all_resident else chunk_layers(per_layer, n_layers)[1] if pinned
                              else per_layer * n_layers)
    plan.lines.append(PlanLine("routed experts", "host", plan.host_expert_bytes,
                               "all on the device: no host copy" if all_resident else
                               "pinned, one contiguous slab per expert (in power-of-two chunks)" if pinned else
                               "one contiguous slab per expert, pageable (no CUDA here to pin it)"))
    if parts.host:
        plan.lines.append(PlanLine("embeddings", "host", parts.host, "one row per token, copied on lookup"))
    parts.cpu_kept = min(cpu_cache, plan.host_expert_bytes)  # never more than every expert converted
    if parts.cpu_kept:
        plan.lines.append(PlanLine("CPU-run experts", "host", parts.cpu_kept,
                                   "at most; converted for torch's int4 CPU kernel (--cpu-experts)"))
    parts.parked = parked
    if parked:
        plan.lines.append(PlanLine("parked prompts", "host", parked,
                                   "at most; serve's conversations set aside (--park-prompts)"))
    plan.lines.append(PlanLine("runtime", "host", HOST_RUNTIME_BYTES, "Python, torch, CUDA (estimate)"))
    plan.host_bytes = plan.host_expert_bytes + parts.cpu_kept + parked + parts.host + HOST_RUNTIME_BYTES


def _traffic(plan: Plan, parts: _Parts, pack: PackIndex, chunk: int, span: int, vram_flag: str) -> None:
    """What a 32-row pass reads from device memory and copies over PCIe (first and later passes of a block, a
    prefill pass), with a warning where the slots cannot hold a block's experts."""
    cfg = pack.config
    e, k = cfg.num_experts, cfg.num_experts_per_tok
    n_layers = len(pack.expert_layers)
    plan.distinct_per_layer = expected_distinct(e, k, plan.rows)
    plan.block_set = plan.distinct_per_layer * n_layers
    plan.device_read_per_pass = int(parts.read + parts.gdn + parts.kv + plan.block_set * plan.expert_weight_bytes)
    plan.prefill_chunk, plan.prefill_span = chunk, span  # (every expert resident too: what the runtime runs)
    if plan.slots >= plan.experts_total:
        plan.pcie_first_pass = plan.pcie_later_pass = 0.0
        return
    plan.pcie_first_pass = plan.block_set * (1 - plan.resident_fraction) * plan.slab_bytes
    # the block's set overflowing the slots, plus the rows a pass reveals: they route anew, and those of their
    # experts not on the device are read from host memory once (read through into a slot: `host_reads`);
    # uniform routing, ASSUMED_TOKENS_PER_PASS rows a pass (cache_sim, 35B, 16 GiB: within 7 %, BENCHMARKS.md)
    revealed = ASSUMED_TOKENS_PER_PASS * k * n_layers * (1 - plan.resident_fraction)
    plan.pcie_later_pass = (max(0.0, plan.block_set - plan.slots) + revealed) * plan.slab_bytes
    # a prefill pass needs ≈ every expert; the cache's sweep-order eviction copies only those beyond the
    # slots (runtime/cache_sim.py reaches this bound at 35B), once a pass: each layer takes the pass's rows
    # chunk after chunk with its experts resident
    pass_set = expected_distinct(e, k, span) * n_layers
    plan.pcie_prefill_chunk = max(0.0, pass_set - plan.slots) * plan.slab_bytes
    if plan.slots < plan.block_set:
        short = (plan.block_set - plan.slots) * plan.slab_bytes
        plan.warnings.append(
            f"the {plan.slots} slots cannot hold a block's ≈{plan.block_set:.0f} experts: every pass will "
            f"reload ≈{plan.block_set - plan.slots:.0f} of them; give {vram_flag} {fmt_bytes(short, up=True)} more"
            + _or_lower_context(short, parts.kv))


def _refusal(plan: Plan, parts: _Parts, slots: int | None, pinned: bool, vram_flag: str,
             ram_flag: str) -> str | None:
    """The first reason the plan cannot run, most basic first, as one line with the setting to change."""
    vram, kv = plan.vram_budget, parts.kv
    need_fixed = plan.device_fixed + plan.workspace
    with_min_slots = need_fixed + plan.min_slots * plan.slab_bytes
    if need_fixed > vram:
        return (
            f"{vram_flag} {fmt_bytes(vram)} is too small: the non-expert weights ({fmt_bytes(parts.weights)}), KV "
            f"cache at --context {plan.context} ({fmt_bytes(kv)}), GDN states and their prompt snapshot "
            f"({fmt_bytes(parts.states)}) and workspace ({fmt_bytes(plan.workspace)}) alone need "
            f"{fmt_bytes(need_fixed, up=True)}; raise {vram_flag} to at least {fmt_bytes(with_min_slots, up=True)}"
            + _or_lower_context(with_min_slots - vram, kv))
    if slots is not None and need_fixed + plan.slots * plan.slab_bytes > vram:
        return (f"{slots} expert slots need {fmt_bytes(need_fixed + slots * plan.slab_bytes, up=True)} with the rest, "
                f"over {vram_flag} {fmt_bytes(vram)}; ask for fewer slots or raise {vram_flag}")
    if slots is None and plan.slots < plan.min_slots:
        return (
            f"{vram_flag} {fmt_bytes(vram)} leaves room for {plan.slots} expert slots after "
            f"{fmt_bytes(need_fixed)} of weights, caches and workspace; a pass needs at least {plan.min_slots} "
            f"(one layer's experts): raise {vram_flag} to at least {fmt_bytes(with_min_slots, up=True)}"
            + _or_lower_context(with_min_slots - vram, kv))
    if plan.ram_budget is not None and plan.host_bytes > plan.ram_budget:
        return (
            "not enough host RAM: "
            # (every expert on the device: none on the host to name)
            + (f"the routed experts need {fmt_bytes(plan.host_expert_bytes)}{' pinned' if pinned else ''}, plus "
               if plan.host_expert_bytes else "")
            + f"{fmt_bytes(parts.host)} of embeddings"
            + (f", {fmt_bytes(parts.cpu_kept)} of experts converted for the CPU" if parts.cpu_kept else "")
            + (f", {fmt_bytes(parts.parked)} of parked prompts (--park-prompts)" if parts.parked else "")
            + f" and {fmt_bytes(HOST_RUNTIME_BYTES)} for the runtime ({fmt_bytes(plan.host_bytes, up=True)} in all), "
            f"but {ram_flag} is {fmt_bytes(plan.ram_budget)}; free memory"
            + (", lower --park-prompts" if parts.parked else "")
            + f" or use a machine with at least {fmt_bytes(plan.host_bytes, up=True)}"
            # the host holds every expert's slab until all of them fit on the device: only then does VRAM help
            + (f" (a larger {vram_flag} helps only once every expert fits on the device: "
               f"{fmt_bytes(need_fixed + plan.experts_total * plan.slab_bytes, up=True)})"
               if plan.host_expert_bytes else "")
            + ("; or a pack with 3-bit experts (`quantize --bits 3`): at this budget every one of them fits on the "
               "device, with no host copy" if (plan.slots_3bit or 0) >= plan.experts_total else ""))
    return None
