"""The runtime's GPU check, one script for a CUDA session (< 10 minutes on an H200):

    python -m clover_local.runtime.gpu_check --out "$OUT"

1. kernels at real shapes through the runtime's own data structures: experts copied host(pinned) → device cache
   slots on the copy stream (one at the last slot of a real-size cache, past 2^31 int32 elements), the fused MoE
   on the slot views vs the dequantize-then-matmul reference, and reading experts in place from the pinned host
   slabs (`host_reads_check`); PackedLinear 4/8-bit at Clover's dense shapes and the 8-bit LM head; timings with
   their GB/s;
2. the synthetic full pack (written once to ~/.cache/clover-local/synthetic): an offloaded runtime at a 16 GiB
   budget against an all-resident one: logits of a prefill, previews and a commit agree (bf16 tolerance), the
   offloaded one misses, the later passes of a block do not, counters add up, peak memory within the budget;
   then, on the offloaded one, the same block's preview passes through the syncing path, optimistically
   (`runtime/optimistic.py`) and as CUDA graph replays (`runtime/graphs.py`): ms per pass of each, logits
   agree, and the eager optimistic layer calls run under `torch.cuda.set_sync_debug_mode("error")`;
3. `bench --synthetic full --vram-budget 16GB --prefix 4096 --passes 8` (its JSON is saved);
4. (`--stages decode`) a real decode loop on the synthetic full pack as chat runs it (`stage_decode`);
5. (`--stages routings`) bench's four routing variants on one load of that pack (`stage_routings`).
Each stage prints one JSON line; everything lands in OUT/gpu_check.json. Exit code 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch


def _ev():
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def _timed_ms(dev: torch.device, fn, reps: int = 20) -> float:
    """Mean GPU milliseconds of `fn()` over `reps` back-to-back calls (CUDA events around the loop)."""
    a = _ev()
    for _ in range(reps):
        fn()
    b = _ev()
    torch.cuda.synchronize(dev)
    return a.elapsed_time(b) / reps


def _graph_us(fn) -> float | None:
    """GPU µs of one `fn()` from CUDA-graph replays with L2 flushed (`bench_kernels.graph_time_us`: how a
    graphed pass runs it, where `_timed_ms`'s back-to-back eager calls mostly time the host's launches at these
    sizes); None where the call cannot be captured."""
    from clover_local.runtime.kernels.bench_kernels import graph_time_us

    try:
        return round(graph_time_us(fn), 2)
    except Exception:  # a call that syncs or allocates in a way capture refuses: the eager figure stands alone
        return None


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30))


def _sane_scales(views: dict[str, torch.Tensor], g: torch.Generator) -> None:
    """Positive fp16 scales in slabs of random bytes (random bytes would give inf/NaN scales)."""
    for part in ("gu_scales", "d_scales"):
        views[part].copy_((0.002 + 0.004 * torch.rand(views[part].shape, generator=g)).half())


def moe3_check(dev: torch.device, g: torch.Generator, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor,
               inter: int = 512, experts: int = 64) -> dict:
    """The fused MoE on random 3-bit experts (slots = expert ids; the real shapes by default: H from x) against
    the reference: error, ms at x's rows, GB/s on the distinct experts' bytes, beside the 4-bit default's figures
    in the stage."""
    from clover_local.runtime.kernels import moe_w4a16, moe_w4a16_ref
    from clover_local.runtime.slab import SlabLayout

    h = x.shape[1]
    lay = SlabLayout(h, inter, 3, h // min(128, h), inter // min(128, inter))  # group 128 (smaller shapes: one)
    buf = torch.randint(0, 256, (experts, lay.nbytes), dtype=torch.uint8, generator=g)
    _sane_scales(lay.views(buf), g)  # random codes and zeros
    gu, dn = lay.stacks(buf.to(dev))
    slot_ids = idx.to(dev)
    ref = moe_w4a16_ref(x, slot_ids, w, gu, dn)
    got = moe_w4a16(x, slot_ids, w, gu, dn)
    ms = _timed_ms(dev, lambda: moe_w4a16(x, slot_ids, w, gu, dn))
    err = _rel(got, ref)
    distinct = int(idx.unique().numel()) * lay.weight_bytes
    out = {"ok": err < 2e-2, "rel_err": round(err, 5), "ms_32rows": round(ms, 4), "gbps": round(distinct / ms / 1e6, 1),
           "slab_bytes": lay.nbytes}
    if h % 128 == 0 and inter % 128 == 0:  # the same experts rewritten into the planes layout (resident experts)
        planar = replace(lay, planes=True)
        pbuf = buf.to(dev)
        planar.to_planes(pbuf)
        pgu, pdn = planar.stacks(pbuf)
        perr = _rel(moe_w4a16(x, slot_ids, w, pgu, pdn), ref)
        pms = _timed_ms(dev, lambda: moe_w4a16(x, slot_ids, w, pgu, pdn))
        out.update(ok=out["ok"] and perr < 2e-2, planes_rel_err=round(perr, 5), planes_ms_32rows=round(pms, 4),
                   planes_gbps=round(distinct / pms / 1e6, 1))
    return out


def stage_kernels(dev: torch.device, n_slots: int = 8515, vocab: int = 248320) -> dict:
    from clover_local.runtime.expert_cache import SlotCopier
    from clover_local.runtime.kernels import linear_w4a16, linear_w4a16_ref, moe_w4a16, moe_w4a16_ref, triton_available
    from clover_local.runtime.slab import SlabLayout

    out: dict = {"triton": triton_available()}
    g = torch.Generator(device="cpu").manual_seed(0)
    h, inter, e_num = 2048, 512, 64
    lay = SlabLayout(h, inter, 4, h // 128, inter // 128)
    host = torch.randint(0, 256, (e_num, lay.nbytes), dtype=torch.uint8, generator=g).pin_memory()
    hv = lay.views(host)  # sane scales and zeros
    _sane_scales(hv, g)
    hv["gu_qzeros"].fill_(0x77777777)
    hv["d_qzeros"].fill_(0x77777777)
    # n_slots 8515: what a 16 GiB budget gives the real model: 13 GiB, offsets past 2^31 int32 elements
    cache = torch.empty(n_slots, lay.nbytes, dtype=torch.uint8, device=dev)
    slots = torch.randperm(n_slots - 1, generator=g)[: e_num - 1].tolist() + [n_slots - 1]
    copier = SlotCopier(dev)
    t0 = time.perf_counter()
    ev = copier.copy([(cache[s], host[i]) for i, s in enumerate(slots)])
    copier.wait([ev])
    torch.cuda.synchronize(dev)
    dt = time.perf_counter() - t0
    out["h2d_gbps_64_experts"] = round(e_num * lay.nbytes / dt / 1e9, 2)
    out["slabs_equal"] = all(torch.equal(cache[s].cpu(), host[i]) for i, s in list(enumerate(slots))[-4:])
    gu, dn = lay.stacks(cache)
    x = (torch.randn(32, h, generator=g) * 0.5).to(dev, torch.bfloat16)
    idx = torch.stack([torch.randperm(e_num, generator=g)[:8] for _ in range(32)])
    slot_ids = torch.tensor(slots)[idx].to(dev)
    w = torch.softmax(torch.randn(32, 8, generator=g), -1).to(dev, torch.bfloat16)
    ref = moe_w4a16_ref(x, slot_ids, w, gu, dn)
    got = moe_w4a16(x, slot_ids, w, gu, dn)
    torch.cuda.synchronize(dev)
    out["moe_rel_err"] = round(_rel(got, ref), 5)
    from clover_local.runtime.kernels.w4a16 import moe_align_torch, moe_align_triton

    for bm in (16, 32):  # the two-launch align against the torch sort, exactly (256 pairs over the cache's slots)
        want, have = moe_align_torch(slot_ids, n_slots, bm), moe_align_triton(slot_ids, n_slots, bm)
        n = int(want[2])
        out[f"moe_align_equal_bm{bm}"] = bool(int(have[2]) == n and torch.equal(have[0], want[0])
                                              and torch.equal(have[1][: n // bm], want[1][: n // bm]))
    ms = _timed_ms(dev, lambda: moe_w4a16(x, slot_ids, w, gu, dn))
    distinct = int(idx.unique().numel())
    out["moe_ms_32rows"] = round(ms, 4)
    out["moe_graph_us_32rows"] = _graph_us(lambda: moe_w4a16(x, slot_ids, w, gu, dn))
    out["moe_gbps"] = round(distinct * lay.weight_bytes / ms / 1e6, 1)
    # the other tile form: unpacked into K order (`w4a16._weight_tile`), the default until the field-wise dots
    # (`_fields_dot`, now the default, chosen from instruction counts): which one is faster here
    from functools import partial

    from clover_local.runtime.kernels.reference import field_major_rows
    from clover_local.runtime.kernels.w4a16 import linear_config, linear_w4a16_triton, moe_config, moe_w4a16_triton

    base = moe_config(32, 8, n_slots, dev)
    other = "unswapped" if base.swap else "swapped"  # the MoE's folded dots the other way round
    # the field-wise form before the zero was folded into a's row sums (MoeConfig.folded), a register cap that
    # fits a 4th program an SM (MoeConfig.maxnreg), and the folded dots the other way round (MoeConfig.swap)
    for tag, cfg in (("unpacked", replace(base, fields=False)), ("unfolded", replace(base, folded=False)),
                     ("maxnreg128", replace(base, maxnreg=128)),
                     (other, replace(base, swap=not base.swap))):
        call = partial(moe_w4a16_triton, x, slot_ids, w, gu, dn, config=cfg)
        try:  # a failure here is a finding about one option: keep the rest of the stage
            out[f"moe_{tag}_rel_err"] = round(_rel(call(), ref), 5)
            out[f"moe_{tag}_ms_32rows"] = round(_timed_ms(dev, call), 4)
            out[f"moe_{tag}_graph_us_32rows"] = _graph_us(call)
        except Exception:
            out[f"moe_{tag}_rel_err"], out[f"moe_{tag}_error"] = 1.0, traceback.format_exc()[-2000:]
    try:
        out["host_reads"] = host_reads_check(dev, x, idx, w, slots, gu, dn, lay.stacks(host), n_slots,
                                             lay.weight_bytes, got)
    except Exception:
        out["host_reads"] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    try:  # 3-bit experts (`quantize --bits 3`): the unpacking form on GPTQ's straddled runs, and the planes layout
        out["moe3"] = moe3_check(dev, g, x, idx, w)
    except Exception:
        out["moe3"] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    lin = {}
    for name, k, n, bits in (("in_proj_qkv", 2048, 8192, 8), ("out_proj", 4096, 2048, 8), ("q_proj 4-bit", 2048, 8192, 4),
                             ("lm_head", 2048, vocab, 8)):
        qw, sc, qz = _random_dense(k, n, bits, g, dev)
        xx = torch.randn(32, k, generator=g).to(dev, torch.bfloat16)
        r = linear_w4a16_ref(xx, qw, sc, qz, 128, bits)
        y = linear_w4a16(xx, qw, sc, qz, 128, bits)
        ms = _timed_ms(dev, partial(linear_w4a16, xx, qw, sc, qz, 128, bits))
        nbytes = qw.numel() * 4 + sc.numel() * 2 + qz.numel() * 4
        lin[name] = {"rel_err": round(_rel(y, r), 5), "ms": round(ms, 4), "gbps": round(nbytes / ms / 1e6, 1),
                     "graph_us": _graph_us(partial(linear_w4a16, xx, qw, sc, qz, 128, bits))}
        ul = replace(linear_config(32, n, k, 128, bits, dev), fields=False)
        # the unpacking form, and the rows repacked field-major as the runtime loads them (`dense_k_tile`)
        for tag in ("unpacked", "repacked"):
            try:
                if tag == "unpacked":
                    call = partial(linear_w4a16_triton, xx, qw, sc, qz, 128, bits, config=ul)
                else:
                    call = partial(linear_w4a16_triton, xx, field_major_rows(qw, 128, bits), sc, qz, 128, bits,
                                   k_tile=128)
                lin[name][f"{tag}_rel_err"] = round(_rel(call(), r), 5)
                lin[name][f"{tag}_ms"] = round(_timed_ms(dev, call), 4)
                lin[name][f"{tag}_graph_us"] = _graph_us(call)
            except Exception:
                lin[name][f"{tag}_rel_err"], lin[name][f"{tag}_error"] = 1.0, traceback.format_exc()[-2000:]
        del qw, sc, qz
    out["linear"] = lin
    try:
        out["dense_shapes"] = dense_shapes_check(dev, g)
    except Exception:
        out["dense_shapes"] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    del cache
    torch.cuda.empty_cache()
    for key, causal, rows in (("gdn_preview", False, None), ("gdn_causal", True, None), ("gdn_prefill", True, 512)):
        for decays, suffix in (("model", ""), ("synthetic", "_synthetic_decays")):
            try:  # the prefill: a 512-row chunk, launched as the runtime launches it (not a graph)
                reps = 2 if suffix else 20 if rows else 50  # (the second: a finiteness check, not a timing)
                out[key + suffix] = gdn_preview_check(dev, reps=reps, causal=causal, rows=rows, eager=rows is not None,
                                                      decays=decays)
            except Exception:  # report, keep the rest of the stage
                out[key + suffix] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    try:
        out["preview_attention"] = preview_attention_check(dev)
    except Exception:
        out["preview_attention"] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    try:
        out["layer_ops"] = layer_ops_check(dev)
    except Exception:
        out["layer_ops"] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    out["ok"] = bool(out["slabs_equal"] and out["moe_rel_err"] < 2e-2 and out["moe_unpacked_rel_err"] < 2e-2
                     and out["host_reads"]["ok"]
                     and out["moe_unfolded_rel_err"] < 2e-2
                     and out[f"moe_{other}_rel_err"] < 2e-2
                     and out["layer_ops"]["ok"] and out["preview_attention"]["ok"] and out["dense_shapes"]["ok"]
                     and all(v["rel_err"] < 2e-2 and v["unpacked_rel_err"] < 2e-2 and v["repacked_rel_err"] < 2e-2
                             for v in lin.values())
                     and out["moe_align_equal_bm16"] and out["moe_align_equal_bm32"] and out["gdn_preview"]["ok"]
                     and out["gdn_causal"]["ok"] and out["gdn_prefill"]["ok"]
                     and all(out[f"{k}_synthetic_decays"]["ok"] for k in ("gdn_preview", "gdn_causal", "gdn_prefill")))
    return out


def _random_dense(k: int, n: int, bits: int, g: torch.Generator, dev: torch.device):
    """(qweight, scales, qzeros) of a random GPTQ [K → N] linear, group 128: random codes, zero at mid-range,
    small positive scales (outputs of order one for x ~ N(0, 1))."""
    p = 32 // bits
    qw = torch.randint(-(1 << 31), (1 << 31) - 1, (k // p, n), dtype=torch.int32, generator=g).to(dev)
    sc = (0.0003 + 0.0002 * torch.rand(k // 128, n, generator=g)).half().to(dev)
    qz = torch.full((k // 128, n // p), 0x7F7F7F7F if bits == 8 else 0x77777777, dtype=torch.int32, device=dev)
    return qw, sc, qz


def model_dense_shapes(kind: str = "full") -> dict[str, tuple[int, int]]:
    """Every packed dense projection's (K, N) as the runtime calls it on a `kind` synthetic pack, after the load's
    merges (`load._merge_*`): GDN q/k/v+z, attention q/k/v, the shared expert's gate+up. Derived from the spec,
    so a merge's shape is checked where a hand-written list had only the parts (the attention merge 2048 → 9216
    read past K on an H200 while q_proj alone, 2048 → 8192, passed)."""
    from clover_local.runtime.synthetic_pack import spec_of

    sp = spec_of(kind)
    h = sp.hidden_size
    key, value = sp.linear_num_key_heads * sp.linear_key_head_dim, sp.linear_num_value_heads * sp.linear_value_head_dim
    heads = sp.num_attention_heads * sp.head_dim
    return {"gdn in_proj_qkvz": (h, 2 * key + 2 * value), "gdn out_proj": (value, h),
            "attention qkv": (h, 2 * heads + 2 * sp.num_key_value_heads * sp.head_dim), "attention o_proj": (heads, h),
            "shared gate_up": (h, 2 * sp.shared_expert_intermediate_size),
            "shared down": (sp.shared_expert_intermediate_size, h), "lm_head": (h, sp.vocab_size)}


def dense_shapes_check(dev: torch.device, g: torch.Generator, rows=(1, 32, 64, 512), kind: str = "full",
                       timed: tuple[int, int] | None = (32, 8)) -> dict:
    """Each of the model's dense shapes (`model_dense_shapes`) at 8 and 4 bits (the balanced and compact
    profiles' mixers) and the row counts a pass has (a decode step, a preview, a merged commit + preview, a prefill
    chunk), called as the runtime calls it (rows repacked at load where `dense_k_tile` says so), against the
    reference on random codes and x: correctness and finiteness. The configs at these shapes depend on the GPU's
    SM count, so CPU runs do not reach them. `timed` (rows, bits): those calls also timed (eager, 20 back-to-back
    calls, and as graph replays with L2 flushed: the preview pass's real dense calls, where the `linear` rows above
    time hand-picked shapes)."""
    from functools import partial

    from clover_local.runtime.kernels import dense_k_tile, linear_w4a16
    from clover_local.runtime.kernels.reference import field_major_rows, linear_w4a16_ref
    from clover_local.runtime.kernels.w4a16 import linear_config

    res: dict = {}
    for name, (k, n) in model_dense_shapes(kind).items():
        for bits in (8, 4):
            qw, sc, qz = _random_dense(k, n, bits, g, dev)
            tile = dense_k_tile(k, 128, bits, dev)
            loaded = field_major_rows(qw, tile, bits) if tile else qw
            for m in rows:
                xx = torch.randn(m, k, generator=g).to(dev, torch.bfloat16)
                key = f"{name} {k}->{n} {bits}-bit {m} rows"
                call = partial(linear_w4a16, xx, loaded, sc, qz, 128, bits, k_tile=tile)
                try:
                    y, r = call(), linear_w4a16_ref(xx, qw, sc, qz, 128, bits)
                    cfg = linear_config(m, n, k, 128, bits, dev, tile)
                    res[key] = {"rel_err": round(_rel(y, r), 5), "finite": bool(torch.isfinite(y).all()),
                                "split_k": cfg.split_k, "block_n": cfg.block_n}
                    if timed == (m, bits):
                        res[key]["ms"] = round(_timed_ms(dev, call), 4)
                        res[key]["graph_us"] = us = _graph_us(call)
                        nbytes = sum(t.numel() * t.element_size() for t in (loaded, sc, qz))
                        res[key]["gbps"] = round(nbytes / us / 1e3, 1) if us else None  # of the weight's bytes
                except Exception:
                    res[key] = {"rel_err": 1.0, "finite": False, "error": traceback.format_exc()[-1500:]}
            del qw, sc, qz, loaded
    return {"ok": all(v["finite"] and v["rel_err"] < 2e-2 for v in res.values()), "shapes": res}


def _flushed_ms(dev: torch.device, fn, reps: int = 10) -> float:
    """Mean GPU ms of `fn()` with L2 emptied before each call (a 256 MiB write): weights read cold, from device
    memory or over PCIe, as a pass finds them."""
    scratch = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    total = 0.0
    for _ in range(reps):
        scratch.zero_()
        a = _ev()
        fn()
        b = _ev()
        torch.cuda.synchronize(dev)
        total += a.elapsed_time(b)
    return total / reps


def host_reads_check(dev: torch.device, x, idx, w, slots: list[int], gu, dn, host_stacks, n_slots: int,
                     weight_bytes: int, want: torch.Tensor) -> dict:
    """The MoE kernel reading experts in place from pinned host memory (`runtime/host_reads.py`): the 32-row
    call with 8 of its experts on the host, then all of them, must equal the all-resident call bit for bit (a
    pair's sums do not depend on where its weights lie); timed cold (L2 flushed) beside the resident call. The
    all-host call's rate is the zero-copy read rate a miss pays (vs `h2d_gbps_64_experts`, a copy's); and the
    all-host call reading its experts through into slots (a read-through install)."""
    from clover_local.runtime.host_reads import slot_holds
    from clover_local.runtime.kernels import moe_w4a16

    e = torch.arange(len(slots))
    where = torch.tensor(slots)
    mixed = torch.where(e < 8, n_slots + e, where)[idx].to(dev)
    every = (n_slots + idx).to(dev)
    res: dict = {}
    calls = {"resident": lambda: moe_w4a16(x, where[idx].to(dev), w, gu, dn),
             "8_on_host": lambda: moe_w4a16(x, mixed, w, gu, dn, host_stacks),
             "all_on_host": lambda: moe_w4a16(x, every, w, gu, dn, host_stacks)}
    for name, call in calls.items():
        got = call()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        res[f"{name}_equal"] = bool(torch.equal(got, want))
        res[f"{name}_ms_cold"] = round(_flushed_ms(dev, call), 4)
    distinct = int(idx.unique().numel())
    res["experts"] = distinct
    res["all_on_host_gbps"] = round(distinct * weight_bytes / res["all_on_host_ms_cold"] / 1e6, 1)
    per_miss = (res["8_on_host_ms_cold"] - res["resident_ms_cold"]) / max(1, int((idx.unique() < 8).sum()))
    res["ms_per_host_expert"] = round(per_miss, 4)
    # read through (`_moe_kernel` INSTALL): all on the host, each expert copied as it is read into the slot of
    # the next one (no slot the call reads): the same output, whole slabs in their new slots, and its cold time
    # beside `all_on_host` (the copies' cost); then every slot gets its own expert back
    n = len(slots)
    install = torch.tensor([1 + slots[(i + 1) % n] for i in range(n)], dtype=torch.int32, device=dev)
    parts = [(st, hst, part) for st, hst in zip((gu, dn), host_stacks) for part in ("qweight", "scales", "qzeros")]
    try:
        got = moe_w4a16(x, every, w, gu, dn, host_stacks, install)
        used = idx.unique().tolist()
        res["read_through_equal"] = bool(torch.equal(got, want))
        res["read_through_slabs_equal"] = all(slot_holds((gu, dn), host_stacks, slots[(i + 1) % n], i) for i in used)
        res["read_through_ms_cold"] = round(_flushed_ms(dev, lambda: moe_w4a16(x, every, w, gu, dn, host_stacks,
                                                                               install)), 4)
    finally:
        for i, slot in enumerate(slots):
            for st, hst, part in parts:
                getattr(st, part)[slot].copy_(getattr(hst, part)[i])
    res["ok"] = all(res[f"{n}_equal"] for n in calls) and res["read_through_equal"] and res["read_through_slabs_equal"]
    return res


def preview_attention_check(dev: torch.device, window: int = 5120, committed: int = 4096, reps: int = 50) -> dict:
    """The split-window preview attention (`kernels/preview_attention.py`) against the model's path (concatenate
    window and block, mask, regrouped SDPA: `Attention.grouped_attention`) at the real layer's shapes: 16 query
    heads over 2 key heads of 256, 32 block rows, a 5,120-row arena window with 4,096 committed, bf16. On CUDA
    both are timed (µs per layer): eager back to back (`*_us`: at these sizes mostly the host's launches) and as
    graph replays with L2 flushed (`*_graph_us`: the GPU's time, as a graphed pass runs them)."""
    import torch.nn.functional as F

    from clover_local.runtime.kernels.preview_attention import preview_attention

    g = torch.Generator().manual_seed(5)
    h, hkv, d, t = 16, 2, 256, 32
    rnd = lambda *s: torch.randn(*s, generator=g).to(dev, torch.bfloat16)  # noqa: E731
    q, k, v = rnd(1, t, h, d).transpose(1, 2), rnd(1, hkv, t, d), rnd(1, hkv, t, d)
    arena_k, arena_v = rnd(1, hkv, window + 512, d), rnd(1, hkv, window + 512, d)
    k_win, v_win = arena_k[:, :, :window], arena_v[:, :, :window]
    length = torch.tensor(committed, device=dev)
    scale = d**-0.5

    def torch_path():
        mask = torch.arange(window, device=dev) < length
        mask = torch.cat([mask, mask.new_ones(t)])[None, :]
        kk, vv = torch.cat([k_win, k], 2), torch.cat([v_win, v], 2)
        out = F.scaled_dot_product_attention(q.reshape(1, hkv, h // hkv * t, d), kk, vv, attn_mask=mask, scale=scale)
        return out.reshape(1, h, t, d)

    def fused(causal: bool = False):
        return preview_attention(q, k, v, k_win, v_win, torch.arange(window, device=dev) < length, scale,
                                 causal=causal)

    def torch_commit():  # a commit written in place: each block row up to its own key
        committed = torch.arange(window, device=dev) < length
        own = torch.ones(t, t, dtype=torch.bool, device=dev).tril()
        mask = torch.cat([committed[None, :].expand(t, -1), own], 1).repeat(h // hkv, 1)
        kk, vv = torch.cat([k_win, k], 2), torch.cat([v_win, v], 2)
        out = F.scaled_dot_product_attention(q.reshape(1, hkv, h // hkv * t, d), kk, vv, attn_mask=mask, scale=scale)
        return out.reshape(1, h, t, d)

    with torch.inference_mode():
        res: dict = {"rel_err": round(_rel(fused(), torch_path()), 5),
                     "causal_rel_err": round(_rel(fused(True), torch_commit()), 5)}
        if dev.type == "cuda":
            for name, fn in (("torch_us", torch_path), ("fused_us", fused)):
                fn()
                res[name] = round(_timed_ms(dev, fn, reps) * 1000, 1)
                res[name.replace("_us", "_graph_us")] = _graph_us(fn)
    res["ok"] = bool(res["rel_err"] < 2e-2 and res["causal_rel_err"] < 2e-2)
    return res


def layer_ops_check(dev: torch.device) -> dict:
    """The fused small ops (`kernels/layer_ops.py`) against their definitions at the real shapes: the hidden
    norm (2048, bf16, 32 rows), the router (32 rows × 256 experts, top-8: the same ids, close weights), the
    shared expert's silu · up (2 × 512) and its combine with the routed output, attention's q norm + rotary."""
    from clover_local.model.moe import SparseMoe
    from clover_local.model.norm import ZeroCenteredRMSNorm
    from clover_local.runtime.kernels import fused_layer_ops
    from clover_local.runtime.synthetic_pack import synthetic_config
    from clover_local.config import parse_config

    ops = fused_layer_ops(dev)
    if ops is None:
        return {"ok": False, "error": "fused layer ops not available on this device"}
    cfg = parse_config(synthetic_config("full"))
    g = torch.Generator().manual_seed(4)
    x = torch.randn(32, cfg.hidden_size, generator=g).to(dev, torch.bfloat16)
    norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(cfg.hidden_size, generator=g) * 0.3)
    norm = norm.to(dev, torch.bfloat16)
    moe = SparseMoe.__new__(SparseMoe)  # only its router: the experts' [E, 2I, H] storage is not needed here
    torch.nn.Module.__init__(moe)
    moe.top_k = cfg.num_experts_per_tok
    moe.gate = torch.nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
    with torch.no_grad():
        moe.gate.weight.copy_(torch.randn(moe.gate.weight.shape, generator=g) * 0.05)
    moe.gate = moe.gate.to(dev, torch.bfloat16)
    with torch.inference_mode():
        want_norm = norm(x)
        got_norm = ops.rms_norm_zc(x, norm.weight, norm.eps)
        resid = torch.randn(32, cfg.hidden_size, generator=g).to(dev, torch.bfloat16)
        got_sum, got_add_norm = ops.add_rms_norm_zc(x, resid, norm.weight, norm.eps)
        want_sum = x + resid
        want_add_norm = norm(want_sum)
        want_idx, want_w, probs = moe.route(x)
        idx, w = ops.route_topk(moe.gate(x), moe.top_k, x.dtype)
    res = {"norm_rel_err": round(_rel(got_norm, want_norm), 5), "route_w_rel_err": round(_rel(w, want_w), 5),
           "add_norm_sum_equal": bool(torch.equal(got_sum, want_sum)),
           "add_norm_rel_err": round(_rel(got_add_norm, want_add_norm), 5),
           "route_ids_equal": float((idx == want_idx).float().mean())}
    # bf16 router logits tie often (256 of them at ~3 significant digits): where torch.topk and the kernel break
    # a tie differently the ids differ but the chosen probabilities do not — that is what must be equal
    res["route_probs_equal"] = bool(torch.equal(probs.gather(1, idx), probs.gather(1, want_idx)))
    # the shared expert's fused silu · up and its combine with the routed output
    inter = cfg.shared_expert_intermediate_size
    both = torch.randn(32, 2 * inter, generator=g).to(dev, torch.bfloat16)
    routed, shared = (torch.randn(32, cfg.hidden_size, generator=g).to(dev, torch.bfloat16) for _ in range(2))
    gate_w = (torch.randn(1, cfg.hidden_size, generator=g) * 0.05).to(dev, torch.bfloat16)
    with torch.inference_mode():
        res["silu_mul_rel_err"] = round(_rel(ops.silu_mul(both), torch.nn.functional.silu(both[:, :inter])
                                             * both[:, inter:]), 5)
        moe_out = routed + torch.sigmoid(x @ gate_w.T) * shared
        res["shared_combine_rel_err"] = round(_rel(ops.shared_combine(routed, x, gate_w, shared, routed),
                                                   routed + moe_out), 5)  # with a residual (here: routed)
    # an attention layer's q head norm and partial rotary embedding (16 heads × 256, rotary dims of the config)
    from clover_local.model.rope import Rotary, apply_rotary

    hd, nh = cfg.head_dim, cfg.num_attention_heads
    qg = torch.randn(1, 32, nh, 2 * hd, generator=g).to(dev, torch.bfloat16)[..., :hd]
    qw = (torch.randn(hd, generator=g) * 0.3).to(dev, torch.bfloat16)
    cos, sin = Rotary(cfg.rotary_dim, cfg.rope_theta).cos_sin(torch.arange(4096, 4128, device=dev), torch.bfloat16)
    qnorm = ZeroCenteredRMSNorm(hd, cfg.rms_norm_eps).to(dev, torch.bfloat16)
    with torch.no_grad():
        qnorm.weight.copy_(qw)
    with torch.inference_mode():
        want_q = apply_rotary(qnorm(qg).transpose(1, 2), cos, sin)
        res["norm_rope_rel_err"] = round(_rel(ops.norm_rope(qg, qw, qnorm.eps, cos, sin), want_q), 5)
    res["slot_mapping"] = slot_mapping_check(dev, ops)
    res["ok"] = bool(res["norm_rel_err"] < 1e-2 and res["route_w_rel_err"] < 1e-2 and res["route_probs_equal"]
                     and res["silu_mul_rel_err"] < 1e-2 and res["shared_combine_rel_err"] < 1e-2
                     and res["norm_rope_rel_err"] < 1e-2 and res["add_norm_rel_err"] < 1e-2
                     and (res["add_norm_sum_equal"] or dev.type != "cuda")  # interpreted casts truncate
                     and res["slot_mapping"]["ok"])
    return res


def slot_mapping_check(dev: torch.device, ops) -> dict:
    """The optimistic slot mapping with read-through (`layer_ops.optimistic_slots`, one program a layer: atomic
    counts, a barrier, compactions, the carry from layer to layer) over a whole pass at the real counts — 40
    layers × 256 experts, 8,860 slots warm-filled, 70 % of them pinned, 32 rows × top-8 a layer, some layers
    routing to few experts (slots to spare, carried on) and some to many (the candidates run out) — against
    `ExpertCache.read_through_targets` and the slot table. Compiled, the kernel's barriers and volatile reads are
    what the interpreter cannot check."""
    import numpy as np

    from clover_local.runtime.cache_sim import SimConfig, _cache

    sim = SimConfig()
    ec = _cache(sim)
    ec.warm()
    ec.set_read_through(True)
    rng = np.random.default_rng(5)
    ec.pin_gen[rng.random(ec.n_slots) < 0.7] = ec.gen
    e, n_layers = sim.experts, sim.layers
    offers = ec.offer_slots().to(dev)
    table = torch.from_numpy(ec.slot_of[ec.layer_ids].reshape(-1).astype(np.int32)).to(dev)
    g = torch.Generator().manual_seed(5)
    counts, install = (torch.zeros(n_layers * e, dtype=torch.int32, device=dev) for _ in range(2))
    rt = ops.ReadThrough(install, offers, torch.zeros(2 * e, dtype=torch.int32, device=dev),
                         torch.zeros(1 + e, dtype=torch.int32, device=dev), e)
    w = torch.rand(32, sim.top_k, generator=g).to(dev, torch.bfloat16)
    slots_equal = True
    for row in range(n_layers):
        used = 12 if row % 3 == 0 else 200  # experts this layer routes to
        idx = torch.randperm(e, generator=g)[:used][torch.randint(0, used, (32, sim.top_k), generator=g)].to(dev)
        slots, w_out = ops.optimistic_slots(idx, w, table, counts, row * e, ec.n_slots, rt)
        want = table[idx + row * e]
        slots_equal &= bool(torch.equal(slots, torch.where(want < 0, ec.n_slots + idx.to(table.dtype), want))
                            and torch.equal(w_out, w))
    c = counts.cpu().numpy().reshape(n_layers, e)
    want = ec.read_through_targets(c)
    got = install.cpu().numpy().reshape(n_layers, e)
    missing = (c > 0) & (ec.slot_of[ec.layer_ids] < 0)
    res = {"slots_equal": slots_equal, "install_equal": bool(np.array_equal(got, want)),
           "missing": int(missing.sum()), "read_through": int((want > 0).sum()),
           "pinned_taken": int(np.isin(want[want > 0] - 1, -2 - ec.offers[ec.offers <= -2]).sum())}
    res["ok"] = bool(slots_equal and res["install_equal"])
    return res


def gdn_preview_check(dev: torch.device, reps: int = 50, causal: bool = False, rows: int | None = None,
                      eager: bool = False, decays: str = "model") -> dict:
    """The fused GDN preview (`kernels/gdn_preview.py`), or with `causal` the fused causal pass of a commit
    (`kernels/gdn_causal.py`: output and new state; more than 32 `rows`, a prefill chunk: `kernels/gdn_chunked.py`),
    against the model's PyTorch path (`fla`'s kernels where installed) at the real layer's shapes (Hk 16, Hv 32,
    Dk = Dv = 128, 32 block rows, bf16, random weights and state), and on CUDA both timed as a CUDA graph of one
    layer's pass (in_proj_qkv, in_proj_z and out_proj included, as bf16 nn.Linear), or with `eager` as the
    runtime runs a prefill chunk: launched one by one (`*_layer_ms`, launches included).
    Runs on CPU too (no timing; tests, with the kernel interpreted, and fewer `rows`: the causal kernel's
    recurrence is sequential over them, slow in the interpreter). `decays`: "model", A = exp(A_log) ≈ 0.2–0.8
    (slow decays); "synthetic", A_log and dt_bias drawn as the synthetic packs draw them (A = 1…16: a row's
    decay down to e^-30 and a 64-row chunk's cumulative one far below fp32's range), what the model-level
    stages ran on when they went non-finite (2026-12-04)."""
    from clover_local.model.cache import GDNCache
    from clover_local.model.gdn import GatedDeltaNet
    from clover_local.runtime.kernels import gdn_causal_kernel, gdn_preview_kernel
    from clover_local.runtime.synthetic_pack import synthetic_config
    from clover_local.config import parse_config

    cfg = parse_config(synthetic_config("full"))
    g = torch.Generator().manual_seed(3)
    gdn = GatedDeltaNet(cfg)
    with torch.no_grad():
        for p in gdn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.02 if p.dim() > 1 else 0.3) + (1.0 if p.dim() == 1 else 0))
        if decays == "synthetic":  # as `synthetic_pack._plain` draws them
            gdn.A_log.copy_(torch.empty(gdn.hv).uniform_(1.0, 16.0, generator=g).log())
            gdn.dt_bias.copy_(1.0 + 0.2 * torch.randn(gdn.hv, generator=g))
        else:
            gdn.A_log.copy_(torch.randn(gdn.hv, generator=g) * 0.5 - 1)  # decays in the model's range
    gdn = gdn.to(dev, torch.bfloat16)
    t = rows or cfg.diffusion.block_size
    x = torch.randn(1, t, cfg.hidden_size, generator=g).to(dev, torch.bfloat16)
    ring = torch.randn(1, gdn.kernel - 1, cfg.gdn_conv_dim, generator=g).to(dev, torch.bfloat16)
    state = torch.randn(1, gdn.hv, gdn.dk, gdn.dv, generator=g).to(dev)
    n = torch.tensor(4096, device=dev)
    kernel = (gdn_causal_kernel if causal else gdn_preview_kernel)(gdn, dev)
    res: dict = {"installed": kernel is not None, "rows": t}
    if causal:
        from clover_local.model import gdn as gdn_mod

        res["torch_path"] = "fla" if dev.type == "cuda" and gdn_mod._fla_chunk is not None else "torch"
    times = {}
    states = {}

    def layer_pass() -> torch.Tensor:
        cache = GDNCache(ring, state)  # a causal pass hands its new state to the cache (not in place)
        out = gdn(x, cache, not causal, n)
        states[name] = cache.state
        return out

    forms = [("torch", None), ("fused", kernel)]
    if not causal and kernel is not None:  # the two-launch form (CLOVER_GDN_PREVIEW=split), value slices 64 and 16
        from functools import partial

        from clover_local.runtime.kernels.gdn_preview import split_gdn_preview

        forms += [("split", split_gdn_preview), ("split16", partial(split_gdn_preview, block_dv=16))]
    with torch.inference_mode():
        for name, impl in forms:
            setattr(gdn, "causal_kernel" if causal else "preview_kernel", impl)
            res[name] = layer_pass().float()
            if causal:
                res[f"{name}_state"] = states[name].float().clone()
            if dev.type != "cuda":
                continue
            if eager:
                layer_pass()
                times[f"{name}_layer_ms"] = round(_timed_ms(dev, layer_pass, reps), 3)
                continue
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream(dev)
            s.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(s):
                layer_pass()
            torch.cuda.current_stream(dev).wait_stream(s)
            with torch.cuda.graph(graph):
                layer_pass()
            graph.replay()
            times[f"{name}_layer_us"] = round(_timed_ms(dev, graph.replay, reps) * 1000, 1)
    for name, _ in forms[2:]:
        res[f"{name}_rel_err"] = round(_rel(res.pop(name), res["torch"]), 5)
    res["rel_err"] = round(_rel(res.pop("fused"), res.pop("torch")), 5)
    ok = res["installed"] and res["rel_err"] < 2e-2 and all(res[f"{n}_rel_err"] < 2e-2 for n, _ in forms[2:])
    if causal:
        res["state_rel_err"] = round(_rel(res.pop("fused_state"), res.pop("torch_state")), 6)
        ok = ok and res["state_rel_err"] < 2e-2  # bf16: the eager path rounds the conv output
    res.update(times)
    res["ok"] = bool(ok)
    return res


def stage_model(dev: torch.device, kind: str = "full", budget_gib: float = 16, vocab: int = 248000) -> dict:
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.sizes import GIB
    from clover_local.runtime.synthetic_pack import ensure_synthetic
    from clover_local.generate.prompt_cache import PromptCache

    t0 = time.perf_counter()
    folder = ensure_synthetic(kind, on_shard=lambda i, n: None)
    out: dict = {"pack_ready_s": round(time.perf_counter() - t0, 1)}
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, vocab, (1, 544), generator=g).to(dev)
    block = torch.randint(0, vocab, (1, 32), generator=g).to(dev)
    results = {}
    for name, opts in (("offloaded", RuntimeOptions(vram_budget=int(budget_gib * GIB), context=1024)),
                       ("resident", RuntimeOptions(vram_budget=40 * GIB, context=1024, slots=1 << 20))):
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        # the resident run takes the model's own PyTorch path for the fused pieces (GDN preview, preview attention,
        # norms, router): the logit comparison below is also fused vs unfused at the real shapes
        unfused = name == "resident" and os.environ.get("CLOVER_DISABLE_FUSED") != "1"
        if unfused:
            os.environ["CLOVER_DISABLE_FUSED"] = "1"
        try:
            model = load_packed_model(folder, dev, torch.bfloat16, opts)
        finally:
            if unfused:
                del os.environ["CLOVER_DISABLE_FUSED"]
        load_s = time.perf_counter() - t0
        rt = model.runtime
        logits = []
        with torch.inference_mode():
            cache = model.new_cache()
            logits.append(model(prefix, cache, rows=slice(-1, None))[0, -1])
            held = PromptCache()  # what chat keeps between turns (the plan counts it)
            held.save(model, cache, prefix[0].tolist(), logits[-1])
            for _ in range(3):
                logits.append(model(block, cache, preview=True)[0])
            logits.append(model(block, cache)[0, -1])
        torch.cuda.synchronize(dev)
        s = model.runtime_stats()
        recs = [r for r in rt.records if r.kind == "preview"]
        results[name] = [t.float().cpu() for t in logits]
        out[name] = {
            "load_s": round(load_s, 1), "slots": rt.cache.n_slots, "fused": not unfused,
            "peak_allocated": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0,
            "budget": rt.plan.vram_budget, "plan_peak": rt.plan.device_peak,
            "placed": rt.placed_bytes(model, cache, held)["total"], "plan_predicted": rt.plan.device_predicted,
            "misses": s["misses"], "later_pass_misses": sum(r.misses for r in recs[1:]),
            "counters_add_up": s["hits"] + s["misses"] == s["expert_uses"]
            and s["bytes_h2d"] == ((s["copied"] + s["prefetched"]) * rt.cache.layout.nbytes
                                   + s["host_reads"] * rt.cache.layout.weight_bytes),
            "host_reads": {"on": rt.host_reads, "error": rt.host_reads_error, "count": s["host_reads"]},
            "preview_ms": [round(r.ms, 2) for r in recs], "finite": all(bool(torch.isfinite(t).all()) for t in logits),
            "host_pinned": bool(rt.cache.host is not None and rt.cache.host.pinned),
        }
        if name == "offloaded":
            for key, check in (("optimistic_vs_syncing", optimistic_vs_syncing),
                               ("commit_graph_vs_eager", commit_graph_vs_eager),
                               ("merged_vs_separate", merged_vs_separate)):
                try:
                    out[key] = check(model, cache, block)
                except Exception:  # report, keep the rest of the stage
                    out[key] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        del model, rt, cache, held
        import gc

        gc.collect()  # frees the pinned host slabs before the next load
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    errs = [_rel(a, b) for a, b in zip(results["offloaded"], results["resident"])]
    top1 = [float((a.argmax(-1) == b.argmax(-1)).float().mean()) for a, b in zip(results["offloaded"], results["resident"])]
    out["logit_rel_err"] = [round(e, 5) for e in errs]
    out["top1_agreement"] = [round(t, 3) for t in top1]
    off = out["offloaded"]
    out["ok"] = bool(max(errs) < 3e-2 and off["misses"] > 0 and off["later_pass_misses"] == 0 and off["counters_add_up"]
                     and off["finite"] and off["peak_allocated"] <= off["budget"]
                     and abs(off["placed"] / off["plan_predicted"] - 1) < 0.05
                     and out["optimistic_vs_syncing"]["ok"] and out["commit_graph_vs_eager"]["ok"]
                     and out["merged_vs_separate"]["ok"])
    return out


def commit_graph_vs_eager(model, cache, block: torch.Tensor, previews: int = 2) -> dict:
    """A block's commit through the syncing path, then (the cache rewound to before the block each time) as
    CUDA graph replays (`Runtime.commit_graphs`: keys/values written at the device-side length, GDN states
    held aside until settled), twice (the first may capture), and once more with the experts the syncing
    commit used in a quarter of the layers evicted before it, so its replay misses and is repaired. Each
    followed by the next block's first preview: its logits say whether the commit left the cache as the
    syncing path does. Reports the commit's ms and flags per mode."""
    rt = model.runtime
    snap = cache.snapshot()  # GDN copies; keys/values are cut back to its length on restore
    nxt = block.roll(1, 1)
    res: dict = {}
    commit_used: dict = {}
    last = {}
    saved = rt.commit_graphs.enabled
    reads = rt.host_reads, rt.host_reads_error
    modes = ("syncing", "graphed", "graphed_again", "repaired") + (("host_read",) if reads[0] else ())
    try:
        for mode in modes:
            rt.commit_graphs.enabled = mode != "syncing"
            if mode in ("syncing", "host_read"):  # repairs without host reads; read in place with (recaptured)
                rt.set_host_reads(mode == "host_read" and reads[0], reads[1])
            cache.restore(snap)  # the runtime's caches copy the snapshot in: it can be restored again
            rt.reclaim(cache)
            with torch.inference_mode():
                for _ in range(previews):
                    model(block, cache, preview=True)
                if mode in ("repaired", "host_read"):  # the syncing commit's experts in a quarter of the layers
                    for layer, used in commit_used.items():
                        rt.cache.evict(layer, used)
                commit = model(block, cache, rows=slice(-1, None))[0, -1]
                rec = rt.records[-1]
                if mode == "syncing":
                    commit_used = {layer: rt.history[layer] for layer in rt.layers[::4] if layer in rt.history}
                after = model(nxt, cache, preview=True)[0]
            torch.cuda.synchronize()
            last[mode] = (commit.float().cpu(), after.float().cpu())
            res[mode] = {"commit_ms": round(rec.ms, 2), "kind": rec.kind, "optimistic": rec.optimistic,
                         "graphed": rec.graphed, "captured": rec.captured, "repairs": rec.repairs,
                         "synced": rec.synced, "misses": rec.misses, "host_reads": rec.host_reads}
    finally:
        rt.commit_graphs.enabled = saved
        rt.set_host_reads(*reads)
    res["commit_graphs"] = rt.commit_graphs.stats()
    ok = res["commit_graphs"]["error"] is None
    for mode in modes[1:]:
        res[f"{mode}_commit_rel_err"] = round(_rel(last[mode][0], last["syncing"][0]), 6)
        res[f"{mode}_next_preview_rel_err"] = round(_rel(last[mode][1], last["syncing"][1]), 6)
        ok = ok and res[mode]["graphed"] and res[f"{mode}_commit_rel_err"] < 1e-3 \
            and res[f"{mode}_next_preview_rel_err"] < 1e-3
    r, h = res["repaired"], res.get("host_read")
    res["ok"] = bool(ok and res["syncing"]["kind"] == "commit" and not res["graphed_again"]["captured"]
                     and r["repairs"] >= 1 and not r["synced"]
                     and (h is None or (h["host_reads"] >= 1 and h["repairs"] == 0 and not h["synced"])))
    return res


def merged_vs_separate(model, cache, block: torch.Tensor, previews: int = 2) -> dict:
    """A block's commit and the next block's first preview as two passes, then (the cache rewound to before the
    block each time) as one merged pass (`CloverModel.commit_and_preview`) three times: eager (the runtime's
    first merged pass is an eager attempt: it compiles the 64-row kernels), captured, replayed
    (`Runtime.merged_graphs`).
    Their logits must agree (the commit's last row, the preview's rows: merged vs apart within bf16 rounding, as
    64-row calls may take other tiles; the merged modes among themselves exactly), and so must one more preview
    after each, which says the merged pass left the cache as the two passes do. Reports ms and flags per mode."""
    rt = model.runtime
    snap = cache.snapshot()
    nxt = block.roll(1, 1)
    modes = ("separate", "merged_eager", "merged_graphed", "merged_again")
    res: dict = {}
    got = {}
    for mode in modes:
        cache.restore(snap)
        rt.reclaim(cache)
        with torch.inference_mode():
            for _ in range(previews):
                model(block, cache, preview=True)
            n0 = len(rt.records)
            if mode == "separate":
                last = model(block, cache, rows=slice(-1, None))[0, -1]
                first = model(nxt, cache, preview=True)[0]
            else:
                last, first = model.commit_and_preview(block, nxt, cache)
                last, first = last[0], first[0]
            recs = list(rt.records)[n0:]
            after = model(nxt.roll(1, 1), cache, preview=True)[0]
        torch.cuda.synchronize()
        got[mode] = [t.float().cpu() for t in (last, first, after)]
        r = recs[-1]
        res[mode] = {"ms": round(sum(x.ms for x in recs), 2), "kinds": [x.kind for x in recs],
                     "optimistic": r.optimistic, "graphed": r.graphed, "captured": r.captured, "repairs": r.repairs,
                     "synced": r.synced, "uses": sum(x.uses for x in recs), "misses": sum(x.misses for x in recs),
                     "host_reads": sum(x.host_reads for x in recs)}
    res["merged_graphs"] = rt.merged_graphs.stats()
    ok = res["merged_graphs"]["error"] is None
    for mode in modes[1:]:
        for i, part in enumerate(("commit", "first_preview", "next_preview")):
            err = _rel(got[mode][i], got["separate"][i])
            res[f"{mode}_{part}_rel_err"] = round(err, 6)
            res[f"{mode}_{part}_vs_eager_rel_err"] = round(_rel(got[mode][i], got["merged_eager"][i]), 6)
            ok = ok and err < 3e-2 and res[f"{mode}_{part}_vs_eager_rel_err"] < 1e-3
    res["ok"] = bool(ok and res["separate"]["kinds"] == ["commit", "preview"]
                     and res["merged_eager"]["kinds"] == ["merged"] and res["merged_again"]["graphed"]
                     and not res["merged_again"]["captured"])
    return res


def _evict_quarter(rt, keep: int) -> int:
    """Evict a quarter (at least one) of what every 4th layer used in the last pass, where the layer keeps `keep`
    resident experts (resident routing's restriction needs top-k to choose from); returns how many."""
    n = 0
    for layer in rt.layers[::4]:
        used = rt.history.get(layer)
        if used is None:
            continue
        drop = used[: max(1, used.size // 4)]
        if int((rt.cache.slot_of[layer] >= 0).sum()) - drop.size >= keep:
            rt.cache.evict(layer, drop)
            n += int(drop.size)
    return n


def optimistic_vs_syncing(model, cache, block: torch.Tensor, passes: int = 6) -> dict:
    """One block's preview passes through the syncing path, then (a fresh block at the same place each time)
    through eager optimistic passes, through optimistic passes replayed as a CUDA graph (`runtime/graphs.py`), and
    once more with part of the set evicted first, so that the block's first pass is a replay that misses and is
    repaired (`ExpertCache.repair`).
    The rows do not change, so after the first pass every optimistic one should be accepted. Reports ms per pass
    of each, how many were optimistic/retried/graphed, and whether the last logits agree; the eager optimistic
    layer calls run with CUDA's sync debug mode at "error", so a host sync in them fails the check (a graph
    capture fails on one by itself). On an H200, 2026-11-30 (graphs per block then): all three agree exactly."""
    from clover_local.runtime import optimistic

    rt = model.runtime
    run = optimistic.OptimisticPass.run

    def strict(self, *args):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return run(self, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    res: dict = {}
    last = {}
    saved = rt.optimistic, rt.graphs.enabled
    reads = rt.host_reads, rt.host_reads_error
    modes = ("syncing", "optimistic", "graphed", "repaired") + (("host_read",) if reads[0] else ()) + (
        ("resident",) if rt.cache.host is not None else ())
    try:
        rt.set_host_reads(False, reads[1])  # the first four: misses repaired (the path without host reads)
        for mode in modes:
            rt.optimistic = mode != "syncing"
            rt.graphs.enabled = mode in ("graphed", "repaired", "host_read", "resident")
            if mode == "resident":  # graphed, restricted to resident experts, host reads off
                rt.set_host_reads(False, reads[1])
                rt.set_resident_routing(True)
            optimistic.OptimisticPass.run = strict if mode == "optimistic" else run
            if mode == "host_read":  # a graph of the host-reading kernels first (two passes: the 2nd captures)
                rt.set_host_reads(True, None)
                rt.reclaim(cache)
                with torch.inference_mode():
                    for _ in range(2):
                        model(block, cache, preview=True)
            if mode in ("repaired", "host_read"):  # the graph exists: evict part of the block's set, so its
                for layer in rt.layers[::4]:       # first replay misses
                    used = rt.history.get(layer)
                    if used is not None:
                        rt.cache.evict(layer, used[: max(1, used.size // 2)])
            rt.reclaim(cache)  # a new block: its first pass loads the set (syncing, or a replay repaired / read)
            n0 = len(rt.records)
            with torch.inference_mode():
                for i in range(passes):
                    logits = model(block, cache, preview=True)
                    if mode == "resident" and i == 0:  # later passes substitute these, copied in behind them
                        evicted = _evict_quarter(rt, keep=model.config.num_experts_per_tok)
            torch.cuda.synchronize()
            recs = list(rt.records)[n0:]
            last[mode] = logits[0].float().cpu()
            res[mode] = {
                "preview_ms": [round(r.ms, 2) for r in recs],
                "steady_ms": round(sum(r.ms for r in recs[1:]) / max(1, len(recs) - 1), 3),
                "optimistic": sum(r.optimistic for r in recs), "retried": sum(r.retried for r in recs),
                "graphed": sum(r.graphed for r in recs), "misses_after_first": sum(r.misses for r in recs[1:]),
                "first": {"graphed": recs[0].graphed, "repairs": recs[0].repairs, "synced": recs[0].synced,
                          "misses": recs[0].misses, "host_reads": recs[0].host_reads},
                "substituted": [r.substituted for r in recs],
            }
            if mode == "resident":
                res[mode]["evicted"] = evicted
    finally:
        optimistic.OptimisticPass.run = run
        rt.optimistic, rt.graphs.enabled = saved
        rt.set_resident_routing(False)
        rt.set_host_reads(*reads)
    res["graphs"] = rt.graphs.stats()
    for mode in modes[1:]:
        res[f"{mode}_logit_rel_err"] = round(_rel(last[mode], last["syncing"]), 6)
        res[f"{mode}_logits_equal"] = bool(torch.equal(last[mode], last["syncing"]))
        o = res[mode]
        speedup = res["syncing"]["steady_ms"] / o["steady_ms"] if o["steady_ms"] else None
        res[f"{mode}_steady_speedup"] = None if speedup is None else round(speedup, 3)
    o, g, r = res["optimistic"], res["graphed"], res["repaired"]
    res["ok"] = bool(res["optimistic_logit_rel_err"] < 1e-3 and o["retried"] == 0 and o["optimistic"] >= passes - 1
                     and res["graphed_logit_rel_err"] < 1e-3 and g["retried"] == 0 and g["graphed"] >= passes - 1
                     and res["repaired_logit_rel_err"] < 1e-3 and r["graphed"] == passes
                     and r["first"]["repairs"] >= 1 and not r["first"]["synced"])
    h = res.get("host_read")  # the first replay read what it lacked in place: no repair, one replay
    if h is not None:
        res["ok"] = bool(res["ok"] and res["host_read_logit_rel_err"] < 1e-3 and h["graphed"] == passes
                         and h["retried"] == 0 and h["first"]["host_reads"] >= 1 and h["first"]["repairs"] == 0)
    z = res.get("resident")  # substituted after the eviction, never missed, exact again once the copies landed
    if z is not None:
        sub = z["substituted"]
        res["ok"] = bool(res["ok"] and res["resident_logit_rel_err"] < 1e-3 and z["misses_after_first"] == 0
                         and z["retried"] == 0 and sub[0] == 0 and (sub[1] > 0 or not z["evicted"])
                         and sub[-1] == 0)
    return res


def stage_decode(dev: torch.device, kind: str = "full", budget_gib: float = 16, prompt_len: int = 1040,
                 new_tokens: int = 96) -> dict:
    """A real decode loop on the synthetic pack, run as chat runs it: `BlockDiffusionDecoder` on chat's worker
    thread (`chat.turn.DecodeThread`: the graph captures happen there), merged commits, host reads where the
    load-time check passes, the booking behind the LM head, token ids made on the host, the LM head over the
    masked rows. Checks: greedy tokens with CUDA graphs equal the eager runtime's; a seeded temperature-1 decode
    repeats (the CUDA generator) and differs from greedy; every pass finite; peak memory within the budget.
    Times: the loop's wall ms between two passes of a block (host work, LM head and draw included) beside the
    runtime's own ms for the same passes. Random weights reveal about one token a pass, so tok/s here is the
    pass rate, not a decoding speed."""
    from clover_local.chat.turn import DecodeThread
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished, PassDone
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.sizes import GIB
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    t0 = time.perf_counter()
    folder = ensure_synthetic(kind, on_shard=lambda i, n: None)
    out: dict = {"pack_ready_s": round(time.perf_counter() - t0, 1)}
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    context = -(-(prompt_len + new_tokens + 64) // 1024) * 1024
    model = load_packed_model(folder, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32,
                              RuntimeOptions(vram_budget=int(budget_gib * GIB), context=context))
    out["load_s"] = round(time.perf_counter() - t0, 1)
    rt, cfg = model.runtime, model.config
    mask = cfg.diffusion.mask_token_id
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, min(mask, cfg.vocab_size), (prompt_len,), generator=g).tolist()

    def decode(settings: DecodeSettings) -> dict:
        """One decode on a worker thread: tokens, and the loop's wall ms per steady pass vs the records'."""
        dec = BlockDiffusionDecoder(model, mask)
        stamps: list[tuple[float, PassDone]] = []
        n0 = len(rt.records)

        def events(stop):
            for e in dec.generate(prompt, settings):
                if isinstance(e, PassDone):
                    stamps.append((time.perf_counter(), e))
                yield e
                if stop():
                    return

        t = time.perf_counter()
        worker = DecodeThread(events)
        try:
            fin = [e for e in worker if isinstance(e, Finished)][-1]
        finally:
            worker.close()
        wall = time.perf_counter() - t
        loop = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])
                if b[1].block == a[1].block and b[1].pass_index >= 2]
        recs = [r.ms for r in list(rt.records)[n0:] if r.kind == "preview" and r.pass_in_block >= 2]

        def median(xs):
            return round(sorted(xs)[len(xs) // 2], 3) if xs else None

        return {"token_ids": fin.token_ids, "seconds": round(wall, 3), "passes": fin.stats.passes,
                "prefill_s": round(fin.stats.prefill_seconds, 3), "steady_passes": len(loop),
                "loop_ms_median": median([1e3 * x for x in loop]), "record_ms_median": median(recs),
                "passes_per_s_after_prefill": round(fin.stats.passes / max(wall - fin.stats.prefill_seconds, 1e-9), 2)}

    greedy = DecodeSettings(max_new_tokens=new_tokens, stop_token_ids=[])
    with torch.inference_mode():
        out["first_greedy"] = decode(greedy)  # compiles the kernels, captures the graphs
        out["greedy"] = decode(greedy)
        out["graphs"] = {k: rt.stats()[k] for k in ("graphs", "merged_graphs", "commit_graphs")}
        sampled = DecodeSettings(max_new_tokens=new_tokens, stop_token_ids=[], temperature=1.0, seed=7)
        a, b = decode(sampled), decode(sampled)
        out["sampled"] = {k: v for k, v in a.items() if k != "token_ids"}
        rt.restart(cuda_graphs=False)  # the eager runtime for the stage's last decode
        out["eager"] = decode(greedy)
    toks = out["greedy"]["token_ids"]
    out["checks"] = {
        "lengths": all(len(d["token_ids"]) == new_tokens for d in (out["greedy"], out["eager"], a, b)),
        "first_equals_second": out["first_greedy"]["token_ids"] == toks,
        "graphed_equals_eager": out["eager"]["token_ids"] == toks,
        "eager_agreement": round(sum(x == y for x, y in zip(toks, out["eager"]["token_ids"])) / len(toks), 4),
        "sampled_repeats": a["token_ids"] == b["token_ids"],
        "sampled_differs_from_greedy": a["token_ids"] != toks,
    }
    for d in (out["first_greedy"], out["greedy"], out["eager"]):
        d.pop("token_ids")
    s = rt.stats()
    out["host_reads"] = {"on": s["host_reads_on"], "error": s["host_reads_error"], "count": s["host_reads"]}
    out["peak_allocated"] = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    out["budget"] = rt.plan.vram_budget
    graphs_ok = dev.type != "cuda" or (out["graphs"]["graphs"]["error"] is None
                                        and out["graphs"]["graphs"]["replays"] > 0)
    out["ok"] = bool(all(v for k, v in out["checks"].items() if k != "eager_agreement") and graphs_ok
                     and out["peak_allocated"] <= out["budget"])
    return out


ROUTING_VARIANTS = {  # gpu_session.sh's uniform, reveal, repair and resident stages (and one more), on one load
    "bench_uniform": {"routing": "uniform"},
    "bench_uniform_reveal": {"routing": "uniform-reveal"},
    "bench_uniform_reveal_repair": {"routing": "uniform-reveal", "host_reads": False},
    # host reads without read-through installs: each miss read in place, then copied after the pass
    "bench_uniform_reveal_copy": {"routing": "uniform-reveal", "read_through": False},
    "bench_uniform_reveal_resident": {"routing": "uniform-reveal", "resident_routing": True},
}


def stage_routings(dev: torch.device, out_dir: Path, kind: str = "full", budget_gib: float = 16,
                   prefix: int = 4096, passes: int = 8) -> dict:
    """`bench --synthetic full --vram-budget 16GB --prefix 4096 --passes 8` with each of ROUTING_VARIANTS, on one
    load (`bench.run_variants`); each variant's JSON as the bench stage of that name writes it, as soon as that
    variant is done."""
    from clover_local.runtime.bench import run_variants
    from clover_local.runtime.sizes import GIB
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    folder = ensure_synthetic(kind, on_shard=lambda i, n: None)
    res = run_variants(folder, ROUTING_VARIANTS, label=f"synthetic:{kind}", synthetic=True,
                       vram_budget=int(budget_gib * GIB), prefix=prefix, passes=passes, device=dev,
                       dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32,
                       on_result=lambda name, r: (out_dir / f"{name}.json").write_text(json.dumps(r, indent=2)))
    out: dict = {"ok": True}
    for name, r in res.items():  # each JSON written as its variant finished (the stage has a time limit)
        peak = r["memory"]["peak_allocated"]
        out[name] = {k: r.get(k) for k in ("ms_per_pass", "ms_per_call", "tokens_per_s", "misses_per_steady_pass",
                                           "host_reads_per_steady_pass", "repairs_per_steady_pass", "pcie_bytes",
                                           "substituted_per_steady_pass", "reconfigure_s")}
        out["ok"] &= bool(peak is None or peak <= r["vram_budget"])
    out["load_s"] = next(iter(res.values()))["load_s"]
    return out


class _FiniteTrace:
    """Forward hooks on every module that note, without a sync, whether its output is finite, in the order the
    outputs appear (a module's hook runs when it returns, so the first non-finite output is the innermost module
    that made it); and each decoder layer's largest finite magnitude (how far the residual stream grows)."""

    def __init__(self, model) -> None:
        self.calls: list[tuple[str, torch.Tensor]] = []
        self.layer_max: list[torch.Tensor] = []
        layers = {id(m) for m in model.layers}
        self.handles = [m.register_forward_hook(self._hook(name, id(m) in layers))
                        for name, m in model.named_modules() if name]

    def _hook(self, name: str, is_layer: bool):
        def hook(mod, inp, out):
            t = out[0] if isinstance(out, (tuple, list)) and out else out
            if torch.is_tensor(t) and t.is_floating_point() and t.numel():
                self.calls.append((name, ~torch.isfinite(t).all()))
                if is_layer:
                    self.layer_max.append(t.detach().float().nan_to_num(0.0, 0.0, 0.0).abs().amax())
        return hook

    def report(self) -> dict:
        bad = torch.stack([f for _, f in self.calls]).cpu().tolist() if self.calls else []
        first = next((i for i, b in enumerate(bad) if b), None)
        out = {"outputs": len(bad), "non_finite": int(sum(bad)),
               "first_non_finite": None if first is None else self.calls[first][0],
               "layer_max": [round(float(v), 1) for v in torch.stack(self.layer_max).cpu()] if self.layer_max else []}
        self.calls.clear()
        self.layer_max.clear()
        return out

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def stage_finite(dev: torch.device, kind: str = "full", budget_gib: float = 16, vocab: int | None = None,
                 prompt: int = 544, variants: bool | None = None, out_dir: Path | None = None) -> dict:
    """Every module's output finite through what chat runs — a prompt of `prompt` tokens (at the default prefill
    chunk a 512-row chunk layer by layer, then a 32-row tail), two previews of a block, its commit — on the
    synthetic pack offloaded at `budget_gib`; each pass's first non-finite module and the decoder layers' largest
    magnitudes. Where a pass is not finite, the same passes again with one piece switched off at a time (the fused
    kernel hooks; the W4A16 tiles' unpacking form; the MoE's dots either way round; optimistic passes, prefetch
    and host reads) to say which piece does it (`variants`: True always, False never). With `out_dir`, what is
    known so far is written to its finite_partial.json after every pass (the stage has a time limit).
    Why: on 2026-12-04 every model-level stage failed on the H200 with an expert id of 256 (the fused router's
    top-k over NaN logits) while every kernel passed its own check at the real shapes."""
    from unittest import mock

    from clover_local.runtime.load import RuntimeOptions, install_kernels, load_packed_model
    from clover_local.runtime.sizes import GIB
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    folder = ensure_synthetic(kind, on_shard=lambda i, n: None)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = load_packed_model(folder, dev, dtype, RuntimeOptions(vram_budget=int(budget_gib * GIB) if dev.type ==
                                                                 "cuda" else None, context=1024, cuda_graphs=False))
    rt = model.runtime
    vocab = vocab or model.config.vocab_size - 8
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, vocab, (1, prompt), generator=g).to(dev)
    block = torch.randint(0, vocab, (1, model.config.diffusion.block_size), generator=g).to(dev)
    trace = _FiniteTrace(model)

    out: dict = {}

    def passes() -> dict:
        res: dict = {}
        cache = model.new_cache()
        steps = (("prompt", lambda: model(ids, cache, rows=slice(-1, None))),
                 ("preview", lambda: model(block, cache, preview=True)),
                 ("preview_again", lambda: model(block, cache, preview=True)),
                 ("commit", lambda: model(block, cache)))
        for name, step in steps:
            try:
                with torch.inference_mode():
                    step()
                err = None
            except Exception as e:  # the pass stopped (a router fed NaN, say): what ran before it still counts
                err = f"{type(e).__name__}: {e}"[:300]
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            res[name] = trace.report() | ({"error": err} if err else {})
            if out_dir is not None:
                (out_dir / "finite_partial.json").write_text(json.dumps(
                    {"device": str(dev), "finite": out | {"partial": res}}, indent=1))
            if err:
                break
        return res

    def finite(res: dict) -> bool:
        return all(r["non_finite"] == 0 and "error" not in r for r in res.values()) and len(res) == 4

    out["default"] = passes()
    out["ok"] = finite(out["default"])
    if variants or (variants is None and not out["ok"]):
        with mock.patch.dict(os.environ, {"CLOVER_DISABLE_FUSED": "1"}):
            install_kernels(model, dev)  # every fused hook None: the model's PyTorch path
            out["unfused"] = passes()
        install_kernels(model, dev)
        for name, env in (("unpacked", {"CLOVER_W4A16_FORM": "unpacked"}), ("unswapped", {"CLOVER_W4A16_SWAP": "0"}),
                          ("swapped", {"CLOVER_W4A16_SWAP": "1"})):
            with mock.patch.dict(os.environ, env):  # read at every call
                out[name] = passes()
        opt, pre, reads = rt.optimistic, rt.prefetch, (rt.host_reads, rt.host_reads_error)
        rt.optimistic, rt.prefetch = False, False
        rt.set_host_reads(False, None)
        out["syncing"] = passes()
        rt.optimistic, rt.prefetch = opt, pre
        rt.set_host_reads(*reads)
        out["finite_variants"] = [k for k, v in out.items() if isinstance(v, dict) and finite(v)]
    trace.close()
    return out


def stage_bench(out_dir: Path) -> dict:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "clover_local", "bench", "--synthetic", "full", "--vram-budget", "16GB",
           "--prefix", "4096", "--passes", "8", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    (out_dir / "bench_full_16GiB.json").write_text(res.stdout)
    if res.returncode != 0:
        return {"ok": False, "stderr": res.stderr[-3000:]}
    r = json.loads(res.stdout)
    keep = ("ms_per_pass", "ms_per_pass_first", "tokens_per_s", "hit_rate", "misses_first_pass", "pcie_gbps",
            "device_bytes_per_pass", "roofline_ms", "roofline_ratio", "projection_5070ti", "prefill_ms", "load_s",
            "slots", "memory")
    out = {k: r[k] for k in keep}
    out["components"] = [{k: c[k] for k in ("component", "calls", "ms", "floor_ms", "projected_ms_5070ti")}
                         for c in r["components"]]
    m = r["memory"]
    out["ok"] = bool(m["peak_allocated"] is None or m["peak_allocated"] <= r["vram_budget"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--stages", default="kernels,model,bench")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check is for a GPU session")
    dev = torch.device("cuda")
    report: dict = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    print(json.dumps(report), flush=True)
    ok = True
    for stage in args.stages.split(","):
        t0 = time.perf_counter()
        try:
            res = {"kernels": lambda: stage_kernels(dev), "model": lambda: stage_model(dev),
                   "decode": lambda: stage_decode(dev), "routings": lambda: stage_routings(dev, out_dir),
                   "bench": lambda: stage_bench(out_dir), "finite": lambda: stage_finite(dev, out_dir=out_dir)}[stage]()
        except Exception:  # report and go on: a later stage may still say something useful
            res = {"ok": False, "error": traceback.format_exc()[-3000:]}
        res["seconds"] = round(time.perf_counter() - t0, 1)
        report[stage] = res
        ok &= bool(res.get("ok"))
        print(json.dumps({stage: res}, default=str), flush=True)
        (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
