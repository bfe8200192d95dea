"""Load a GPTQ pack in packed form: the runtime's model.

- quantized non-expert modules → `PackedLinear` (qweight/scales/qzeros on the device, the W4A16/W8A16 kernel);
- BF16/FP32 tensors → ordinary parameters in the compute dtype; the embedding table → host RAM (`HostEmbedding`);
- routed experts → one slab per expert in (pinned) host memory, served through the device `ExpertCache` whose
  slot count comes from the placement plan (`--vram-budget`, default: free memory minus a margin); when every
  expert fits, they are all installed on the device at load and no host copy is kept; when not, the slots start
  filled with the first layers' experts (`ExpertCache.warm`), and the MoE kernel's reads of host slabs are checked
  (`host_reads.check`: on, optimistic passes read a missing expert in place instead of being replayed).
Packs with act-order (non-sequential g_idx) are refused.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from clover_local.checkpoint.names import global_shapes, layer_shapes, optional
from clover_local.errors import CloverError, host_allocations_as_memory_error
from clover_local.model.clover import CloverModel, set_param, fill_layer
from clover_local.model.attention import Attention
from clover_local.model.gdn import GatedDeltaNet
from clover_local.model.moe import SparseMoe
from clover_local.model.norm import GatedRMSNorm, ZeroCenteredRMSNorm
from clover_local.runtime.cpu_experts import DEFAULT_CPU_CACHE
from clover_local.runtime.expert_cache import CPU_POLICIES, ExpertCache
from clover_local.runtime import host_reads
from clover_local.runtime.expert_store import HostExpertStore
from clover_local.runtime.kernels import (dense_k_tile, expert_planes, fused_layer_ops, gdn_causal_kernel,
                                          gdn_preview_kernel, preview_attention_kernel)
from clover_local.runtime.offload import _OOM, OffloadedExperts, Runtime
from clover_local.runtime.pack_index import EXPERT_PROJS, PackIndex, QuantModule, read_pack_index
from clover_local.runtime.packed_linear import HostEmbedding, PackedLinear, PackedMLP, merge_columns
from clover_local.runtime.placement import DEFAULT_CONTEXT, DEFAULT_PREFILL_CHUNK, DEFAULT_PREFILL_SPAN, Plan, make_plan
from clover_local.runtime.sizes import default_budget, fmt_bytes, host_available_bytes
from clover_local.runtime.slab import SlabLayout


def env_prefill_span() -> int:
    """CLOVER_PREFILL_SPAN, else the default span: what the runtime runs and `plan` prices alike."""
    return _env_int("CLOVER_PREFILL_SPAN", DEFAULT_PREFILL_SPAN)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise CloverError(f"{name} must be a whole number of rows, got {value!r}") from None


@dataclass
class RuntimeOptions:
    vram_budget: int | None = None  # bytes the runtime may place on the device; None: free memory − margin
    ram: int | None = None  # host RAM to plan for; None: what the OS reports available
    context: int = DEFAULT_CONTEXT  # tokens the KV cache is preallocated for
    slots: int | None = None  # force the expert slot count (tests, all-resident runs)
    prefetch: bool = True
    cpu_experts: str = "off"  # off | auto | misses: run missed experts on the CPU instead of copying
    cpu_max_rows: int = 2  # "auto": only experts with at most this many rows in the call
    cpu_cache: int = DEFAULT_CPU_CACHE  # host bytes of experts kept converted for the CPU path (runtime/cpu_experts.py)
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK
    # prompt rows a prefill pass takes layer by layer, prefill_chunk rows at a time (a layer's experts cross PCIe
    # once a span); CLOVER_PREFILL_SPAN=512 (one chunk) runs a prompt chunk by chunk through all layers instead
    prefill_span: int = field(default_factory=env_prefill_span)
    embed_on_host: bool = True
    pin: bool = True  # pinned host slabs (CUDA only)
    time_layers: bool = True  # per-layer expert time (CUDA events on a GPU); not taken in optimistic passes
    optimistic: bool = True  # later passes of a block without per-layer host syncs (runtime/optimistic.py)
    cuda_graphs: bool = True  # ... replayed as one CUDA graph per block (runtime/graphs.py; CUDA only)
    # ... reading non-resident experts in place from pinned host memory (host_reads.py). None: on a GPU (a CPU
    # "device" is the host: nothing to save); True: also on the CPU (tests); either way only if the check passes
    host_reads: bool | None = None
    # ... and copying what they read into slots as they go: one PCIe transfer per missed expert, not two
    # (`Runtime.set_read_through`). None: with host reads, unless CLOVER_READ_THROUGH=0
    read_through: bool | None = None
    # a block's later previews choose only among resident experts (`Runtime.route_limit`): an approximation
    # that makes them copy nothing; off by default (exact routing)
    resident_routing: bool = False

    def validate(self) -> None:
        if self.cpu_experts not in CPU_POLICIES:
            raise CloverError(f"--cpu-experts must be one of {', '.join(CPU_POLICIES)}, got {self.cpu_experts!r}")
        if self.cpu_cache < 0:
            raise CloverError(f"the CPU experts' cache must be at least 0 bytes, got {self.cpu_cache}")
        if self.context < 1:
            raise CloverError(f"--context must be at least 1, got {self.context}")
        if self.prefill_chunk < 1:
            raise CloverError(f"prefill_chunk must be at least 1, got {self.prefill_chunk}")
        if self.prefill_span < 1:
            raise CloverError(f"prefill_span (CLOVER_PREFILL_SPAN) must be at least 1, got {self.prefill_span}")
        if self.slots is not None and self.slots < 1:
            raise CloverError(f"slots must be at least 1, got {self.slots}")


class _Shards:
    """Tensor reads by checkpoint name, one handle per shard, errors as one line."""

    def __init__(self, pack: PackIndex) -> None:
        self.pack = pack
        self.handles: dict[str, object] = {}

    def get(self, name: str) -> torch.Tensor:
        info = self.pack.tensors.get(name)
        if info is None:
            raise CloverError(f"pack has no tensor {name}: the pack is incomplete; re-download or re-quantize it")
        try:
            h = self.handles.get(info.shard)
            if h is None:
                h = self.handles[info.shard] = safe_open(str(self.pack.folder / info.shard), framework="pt",
                                                         device="cpu")
            return h.get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CloverError(f"pack shard {info.shard} is corrupt or truncated ({exc})") from None


_SEQ_CACHE: dict[tuple[int, int], torch.Tensor] = {}


def _check_sequential(name: str, g_idx: torch.Tensor, mod: QuantModule) -> None:
    key = (mod.in_features, mod.group_size)
    expected = _SEQ_CACHE.get(key)
    if expected is None:
        expected = _SEQ_CACHE[key] = torch.arange(mod.in_features, dtype=torch.int32) // mod.group_size
    if g_idx.dtype != torch.int32 or not torch.equal(g_idx, expected):
        if not torch.equal(g_idx.to(torch.int64), expected.to(torch.int64)):
            raise CloverError(f"{name}.g_idx is not sequential (act-order): the runtime needs packs quantized with "
                              "desc_act false; re-quantize with clover-local quantize")


def _quant_tensors(shards: _Shards, mod: QuantModule) -> dict[str, torch.Tensor]:
    _check_sequential(mod.name, shards.get(f"{mod.name}.g_idx"), mod)
    return {"qweight": shards.get(f"{mod.name}.qweight"), "qzeros": shards.get(f"{mod.name}.qzeros"),
            "scales": shards.get(f"{mod.name}.scales").to(torch.float16)}


def _packed_linear(shards: _Shards, mod: QuantModule, device: torch.device) -> PackedLinear:
    t = _quant_tensors(shards, mod)
    linear = PackedLinear(t["qweight"].to(device).contiguous(), t["scales"].to(device).contiguous(),
                          t["qzeros"].to(device).contiguous(), mod.group_size, mod.bits)
    # rows field-major where the Triton kernels run (contiguous, pipelined loads of x), before any merge or view
    return linear.repacked(dense_k_tile(linear.in_features, mod.group_size, mod.bits, device))


def _set_module(root: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = root.get_submodule(owner_name) if owner_name else root
    setattr(owner, attr, module)


def plan_for(pack: PackIndex, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> Plan:
    budget = options.vram_budget if options.vram_budget is not None else default_budget(device)
    ram = options.ram if options.ram is not None else host_available_bytes()
    return make_plan(pack, budget, ram, options.context, dtype, embed_on_host=options.embed_on_host,
                     prefill_chunk=options.prefill_chunk, prefill_span=options.prefill_span, slots=options.slots,
                     cpu_cache=options.cpu_cache if options.cpu_experts != "off" else 0, vram_flag="--vram-budget",
                     pinned=options.pin and torch.cuda.is_available())  # (as HostExpertStore pins)


def load_packed_model(folder: str | Path, device: torch.device, dtype: torch.dtype,
                      options: RuntimeOptions | None = None,
                      on_layer: Callable[[int, int], None] | None = None) -> CloverModel:
    """The model of a pack with the offloading runtime attached (`model.runtime`, `model.runtime_stats()`);
    `on_layer(done, total)` after each decoder layer is in place."""
    options = options or RuntimeOptions()
    options.validate()
    if device.type == "cuda":  # the prefill's causal bias imports torch._dynamo (≈ 2 s): now, not in the first
        importlib.import_module("torch.nn.attention.bias")  # prompt (`attention.causal_mask`)
    pack = read_pack_index(folder)
    plan = plan_for(pack, device, dtype, options).check()
    try:
        with host_allocations_as_memory_error():
            return _build(pack, plan, device, dtype, options, on_layer)
    except _OOM:
        if device.type == "cuda":
            torch.cuda.empty_cache()
        raise CloverError(f"the GPU ran out of memory while loading the pack (--vram-budget "
                          f"{fmt_bytes(plan.vram_budget)}): other programs may be using it; lower --vram-budget") from None
    except MemoryError:  # the plan's room check passed, and then the RAM was not there (taken since, or capped)
        raise CloverError(f"host RAM ran out while loading the pack (the plan counts {fmt_bytes(plan.host_bytes)} of "
                          "it): other programs may be using it; free memory and retry") from None


def _build(pack: PackIndex, plan: Plan, device: torch.device, dtype: torch.dtype, options: RuntimeOptions,
           on_layer: Callable[[int, int], None] | None) -> CloverModel:
    cfg = pack.config
    shards = _Shards(pack)
    with torch.device("meta"):
        model = CloverModel(cfg)

    n_exp = cfg.num_experts
    all_resident = plan.slots >= plan.experts_total
    gu_groups, down_groups = pack.expert["gate_proj"].groups, pack.expert["down_proj"].groups
    # 3-bit slabs rewritten on the device into the layout the MoE kernel reads field-wise (`_planes`)
    planes = expert_planes(pack.expert_bits, cfg.hidden_size, cfg.moe_intermediate_size,
                           cfg.hidden_size // gu_groups, cfg.moe_intermediate_size // down_groups, dtype, device)
    layout = SlabLayout(cfg.hidden_size, cfg.moe_intermediate_size, pack.expert_bits, gu_groups, down_groups,
                        planes)
    host = None if all_resident else HostExpertStore(layout, pack.expert_layers, n_exp, options.pin)
    cache = ExpertCache(layout, plan.slots, pack.expert_layers, n_exp, device, host, options.cpu_experts,
                        options.cpu_max_rows)
    runtime = Runtime(cfg, cache, plan, device, dtype, context=options.context, prefetch=options.prefetch,
                      prefill_chunk=options.prefill_chunk, prefill_span=options.prefill_span,
                      time_layers=options.time_layers,
                      optimistic=options.optimistic, cuda_graphs=options.cuda_graphs,
                      resident_routing=options.resident_routing, cpu_cache=options.cpu_cache)

    _load_globals(model, pack, shards, device, dtype, options)
    staging = None if host is not None else torch.empty(n_exp, layout.nbytes, dtype=torch.uint8)
    staging_views = layout.views(staging) if staging is not None else None
    for i in range(cfg.num_hidden_layers):
        layer = model.layers[i]
        _load_layer_dense(layer, i, pack, shards, device, dtype)
        for e in range(n_exp):
            parts = [_quant_tensors(shards, QuantModule(f"model.layers.{i}.mlp.experts.{e}.{p}", pack.expert[p].bits,
                                                        pack.expert[p].in_features, pack.expert[p].out_features,
                                                        pack.expert[p].groups)) for p in EXPERT_PROJS]
            if host is not None:
                host.fill(i, e, *parts)
            else:
                layout.fill(staging_views, e, *parts)
        if host is None:
            experts = np.arange(n_exp, dtype=np.int64)
            s0 = pack.expert_layers.index(i) * n_exp
            cache.install(i, experts, experts + s0, staging)
            if planes:
                layout.to_planes(cache.buf[s0 : s0 + n_exp])
        elif planes:
            _planes(layout, host.buffers[i], cache.buf)
        layer.mlp.experts = OffloadedExperts(runtime, i)
        if host is not None:  # None unless resident routing is on (`Runtime.set_resident_routing`)
            layer.mlp.route_limit = lambda i=i: runtime.route_limit(i)
        if on_layer is not None:
            on_layer(i + 1, cfg.num_hidden_layers)
    cache.warm()  # offloaded: the slots start with the first layers' experts, not empty
    runtime.set_host_reads(*_host_reads(options, cache, device, dtype, cfg))
    runtime.set_read_through(*_read_through(options, runtime, dtype, cfg))
    model.rotary.inv_freq = model.rotary.inv_freq.to(device)
    install_kernels(model, device)
    model.has_preview_params = all(
        f"model.layers.{i}.linear_attn.conv_right_weight" in pack.tensors
        for i in range(cfg.num_hidden_layers) if not cfg.is_attention(i))
    leftover = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if leftover:
        raise CloverError(f"pack has no tensor for {leftover[0]}")
    cfg.max_position_embeddings = min(cfg.max_position_embeddings, options.context)
    model.runtime = runtime
    return model.eval()


def _planes(layout: SlabLayout, host_buf: torch.Tensor, scratch: torch.Tensor) -> None:
    """A layer's host slabs rewritten into the planes layout through the device: copied into the (still empty)
    expert cache's slots as scratch, rewritten there, copied back. Why: the rewrite takes ≈ 60 ms an expert at the
    real shapes on this project's 2-core machine (10,240 experts: ≈ 10 minutes), on a GPU little beside the slabs'
    way over PCIe and back (≈ 25 GB at 3 bits: ≈ 1 s). Where the device is the CPU the slabs are rewritten where
    they lie."""
    if scratch.device == host_buf.device or not scratch.shape[0]:
        layout.to_planes(host_buf)
        return
    for s0 in range(0, host_buf.shape[0], scratch.shape[0]):
        part = host_buf[s0 : s0 + scratch.shape[0]]
        room = scratch[: part.shape[0]]
        room.copy_(part)
        layout.to_planes(room)
        part.copy_(room)


def reconfigure(model: CloverModel, options: RuntimeOptions) -> None:
    """A loaded runtime set to `options` as if loaded with them, for what does not change what was loaded
    (`bench`'s variants on one load: a 35B load takes ≈ 20 s of a GPU session's minutes): prefetch, optimistic
    passes, CUDA graphs, host reads (the load-time check run again) and read-through installs, resident routing,
    the CPU-experts policy;
    the expert cache emptied and warmed as at load, the counters reset. The budget, context and pin settings are
    the load's: a different one needs a new load."""
    rt = model.runtime
    rt.restart(options.cuda_graphs)
    rt.prefetch, rt.optimistic, rt.time_layers = options.prefetch, options.optimistic, options.time_layers
    cache = rt.cache
    if cache.host is not None:
        if options.cpu_experts not in CPU_POLICIES:
            raise CloverError(f"cpu_experts must be one of {CPU_POLICIES}")
        cache.cpu_experts, cache.cpu_max_rows = options.cpu_experts, options.cpu_max_rows
        cache.empty()
        cache.warm()
    rt.set_resident_routing(options.resident_routing)
    rt.set_host_reads(*_host_reads(options, cache, rt.device, rt.dtype, model.config))  # drops the graphs
    rt.set_read_through(*_read_through(options, rt, rt.dtype, model.config))
    rt.reset_stats()


def _host_reads_default(device: torch.device) -> bool:
    """Host reads unless told: on a GPU (on a CPU "device" the host slabs already are device memory)."""
    return device.type == "cuda"


def _host_reads(options: RuntimeOptions, cache: ExpertCache, device: torch.device, dtype: torch.dtype,
                cfg) -> tuple[bool, str | None]:
    """(on, why not) for `Runtime.set_host_reads`: the option, then the load-time check (`host_reads.check`)."""
    if cache.host is None:
        return False, "every expert is resident"
    if options.host_reads is False:
        return False, "off (--no-host-reads)"
    if options.host_reads is None and os.environ.get("CLOVER_HOST_READS") == "0":  # chat, generate, serve
        return False, "off (CLOVER_HOST_READS=0)"
    if not options.optimistic:
        return False, "off (no optimistic passes)"
    if options.host_reads is None and not _host_reads_default(device):
        return False, "off on a CPU device (its host memory is its device memory)"
    error = host_reads.check(cache, dtype, cfg.diffusion.block_size, cfg.num_experts_per_tok)
    return error is None, error


def _read_through(options: RuntimeOptions, runtime: Runtime, dtype: torch.dtype, cfg) -> tuple[bool, str | None]:
    """(on, why not) for `Runtime.set_read_through`: with host reads, unless told not to, if the load-time check
    (`host_reads.check_read_through`) passes."""
    if not runtime.host_reads:
        return False, "no host reads"
    if options.read_through is False or (options.read_through is None
                                         and os.environ.get("CLOVER_READ_THROUGH") == "0"):
        return False, "off (--no-read-through)" if options.read_through is False else "off (CLOVER_READ_THROUGH=0)"
    error = host_reads.check_read_through(runtime.cache, dtype, cfg.diffusion.block_size, cfg.num_experts_per_tok)
    return error is None, error


def install_kernels(model: CloverModel, device: torch.device) -> None:
    """The fused kernels on the model's hooks where they run (CUDA): GDN preview and causal pass (a commit, a
    prefill chunk) with its output norm, preview attention, norms (with the rotary embedding for attention's q and
    k), router, the shared expert's silu · up and its combine.
    Every hook is set: None keeps that module's PyTorch path (CPU, or CLOVER_DISABLE_FUSED=1), so installing
    again with the fused kernels off takes them out (`gpu_check`'s finite stage)."""
    ops = fused_layer_ops(device)
    for mod in model.modules():
        if isinstance(mod, GatedDeltaNet):
            mod.preview_kernel = gdn_preview_kernel(mod, device)
            mod.causal_kernel = gdn_causal_kernel(mod, device)
        elif isinstance(mod, Attention):
            mod.preview_kernel = preview_attention_kernel(mod.head_dim, device)
            d = mod.head_dim
            mod.norm_rope_kernel = ops.norm_rope if ops is not None and d & (d - 1) == 0 else None
        elif isinstance(mod, ZeroCenteredRMSNorm):
            mod.kernel, mod.add_kernel = (ops.rms_norm_zc, ops.add_rms_norm_zc) if ops is not None else (None, None)
        elif isinstance(mod, GatedRMSNorm):
            d = mod.weight.numel()
            mod.kernel = ops.gated_rms_norm if ops is not None and d & (d - 1) == 0 else None
        elif isinstance(mod, SparseMoe):
            mod.route_kernel, mod.combine_kernel = (ops.route_topk, ops.shared_combine) if ops is not None else (
                None, None)
        elif isinstance(mod, PackedMLP):
            mod.silu_mul_kernel = ops.silu_mul if ops is not None else None


def _load_globals(model: CloverModel, pack: PackIndex, shards: _Shards, device, dtype, options) -> None:
    cfg = pack.config
    for name, shape in global_shapes(cfg).items():
        key = name if name.startswith("lm_head") else f"model.{name}"
        module = key[: -len(".weight")]
        if module in pack.modules:
            mod = pack.modules[module]
            if (mod.out_features, mod.in_features) != tuple(shape):
                raise CloverError(f"pack tensor {module} is [{mod.out_features}, {mod.in_features}], expected "
                                  f"{list(shape)}")
            _set_module(model, name[: -len(".weight")], _packed_linear(shards, mod, device))
            continue
        t = shards.get(key)
        if tuple(t.shape) != tuple(shape):
            raise CloverError(f"pack tensor {key} has shape {list(t.shape)}, expected {list(shape)}")
        if name == "embed_tokens.weight" and options.embed_on_host and not cfg.tie_word_embeddings:
            model.embed_tokens = HostEmbedding(t.to(dtype).contiguous(), device)
        else:
            set_param(model, name, t.to(device=device, dtype=dtype))
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight


def _load_layer_dense(layer, i: int, pack: PackIndex, shards: _Shards, device, dtype) -> None:
    prefix = f"model.layers.{i}."
    state: dict[str, torch.Tensor] = {}
    for rel, shape in layer_shapes(pack.config, i).items():
        if rel.startswith("mlp.experts."):
            continue
        module = prefix + rel[: -len(".weight")] if rel.endswith(".weight") else None
        if module is not None and module in pack.modules:
            mod = pack.modules[module]
            if (mod.out_features, mod.in_features) != tuple(shape):
                raise CloverError(f"pack tensor {module} is [{mod.out_features}, {mod.in_features}], expected "
                                  f"{list(shape)}")
            _set_module(layer, rel[: -len(".weight")], _packed_linear(shards, mod, device))
            continue
        if prefix + rel not in pack.tensors:
            if optional(rel):
                continue
            raise CloverError(f"pack has no tensor for {prefix}{rel}")
        t = shards.get(prefix + rel)
        if tuple(t.shape) != tuple(shape):
            raise CloverError(f"pack tensor {prefix}{rel} has shape {list(t.shape)}, expected {list(shape)}")
        state[rel] = t
    fill_layer(layer, state, device, dtype)
    _merge_shared_expert(layer)
    _merge_gdn_inputs(layer)
    _merge_attention_inputs(layer)


def _merge_gdn_inputs(layer) -> None:
    """A GDN layer's in_proj_qkv and in_proj_z as one packed projection for the fused preview and short causal
    pass (one call where there were two, each latency-bound at 32 rows); the two modules become views of its
    columns, for the other passes, so no weight is held twice."""
    gdn = getattr(layer, "linear_attn", None)
    if gdn is None or not all(isinstance(getattr(gdn, n, None), PackedLinear) for n in ("in_proj_qkv", "in_proj_z")):
        return
    qkv, z = gdn.in_proj_qkv, gdn.in_proj_z
    merged = merge_columns(qkv, z)
    if merged is None:
        return
    n = qkv.out_features
    gdn.in_proj_qkvz = merged
    gdn.in_proj_qkv, gdn.in_proj_z = merged.columns(0, n), merged.columns(n, n + z.out_features)


def _merge_attention_inputs(layer) -> None:
    """An attention layer's packed q_proj, k_proj and v_proj as one projection (`Attention.qkv_proj`): one call
    where there were three, each latency-bound at 32 rows (two launches fewer an attention layer, every pass); the
    three modules become views of its columns, so no weight is held twice."""
    attn = getattr(layer, "self_attn", None)
    names = ("q_proj", "k_proj", "v_proj")
    if attn is None or not all(isinstance(getattr(attn, n, None), PackedLinear) for n in names):
        return
    parts = [getattr(attn, n) for n in names]
    merged = merge_columns(*parts)
    if merged is None:
        return
    attn.qkv_proj = merged
    start = 0
    for name, part in zip(names, parts):
        setattr(attn, name, merged.columns(start, start + part.out_features))
        start += part.out_features


def _merge_shared_expert(layer) -> None:
    """The shared expert as a `PackedMLP` (gate and up in one packed call) where both are packed alike."""
    mlp = getattr(layer.mlp, "shared_expert", None)
    if mlp is None or not all(isinstance(getattr(mlp, n, None), PackedLinear)
                              for n in ("gate_proj", "up_proj", "down_proj")):
        return
    merged = merge_columns(mlp.gate_proj, mlp.up_proj)
    if merged is not None:
        layer.mlp.shared_expert = PackedMLP(merged, mlp.down_proj)  # the two halves are freed with `mlp`
