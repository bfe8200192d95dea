"""Quantize one decoder layer against calibration activations (the unit of layer streaming).

Order inside a layer, so each part is calibrated on inputs that already went through quantized parts:
1. float forward of the whole layer (the reference output, kept for a sample of sequences; hooks collect the mixer
   projections' Hessians),
2. quantize the mixer projections, rerun the mixer → MoE inputs,
3. shared expert and routed experts, expert by expert (Hessians from the rows routed to each expert, or from
   every row with `expert_stats="all"`; experts with too few rows fall back to round-to-nearest),
4. the quantized layer's output is the next layer's input.
Calibration rows come from causal passes, and in diffusion mode also from previews of masked blocks
(`forward_all_blocks`: each block sees the clean prefix before it, as in decoding).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from clover_local.config import CloverConfig
from clover_local.model.clover import DecoderLayer
from clover_local.model.moe import swiglu
from clover_local.model.rope import Rotary
from quantize.gptq import (CAST_ROWS, CLIP_STEPS, HessianAccumulator, HessianError, QuantResult, gptq_quantize,
                           gptq_quantize_batch, rtn_quantize)
from quantize.gptq_format import check_group_size, pack_weight
from quantize.profiles import MIXER_LINEARS, Profile


@dataclass
class QuantOptions:
    bits: int = 4
    group_size: int = 128
    method: str = "gptq"  # or "rtn"
    sym: bool = True
    damp: float = 0.01
    calib_mode: str = "diffusion"  # or "causal"
    expert_stats: str = "routed"  # or "all"
    min_expert_rows: int = 16
    batch: int = 4  # sequences per forward chunk
    clip: bool = True  # search each group's range (quantize.gptq.compute_scale_zero) instead of min/max
    act_order: bool = True  # GPTQ's columns most-activated first, groups static (the pack's g_idx stays trivial)
    # routed experts GPTQ'd together (one column loop for all: fewer, larger ops); 0 = by device: 8 on a GPU,
    # where the loop is launch-bound (expected, unmeasured), 1 on a CPU (one core: 287 s a real-size layer at 8,
    # 245 s at 1)
    expert_batch: int = 0


@dataclass
class LayerReport:
    index: int
    kind: str
    rel_error: float = 0.0  # ‖y_q − y_f‖ / ‖y_f‖ of the layer output on calibration rows
    expert_paths: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def quantize_weight(weight: torch.Tensor, hessian: torch.Tensor | None, bits: int, opts: QuantOptions) -> QuantResult:
    """GPTQ with the given Hessian, or round-to-nearest when there is none (or method rtn); either with the clip
    search for each group's range when `opts.clip` (Hessian-weighted under GPTQ) at ≤ 4 bits: at 8 bits the
    tiny model's KL did not move with it, and the LM head and mixer projections would pay its time. With
    `opts.act_order` GPTQ takes the columns most-activated first while each keeps its own contiguous group (static
    groups), so the pack needs no desc_act support from any reader."""
    w = weight.float()
    group = _checked_group(opts, w.shape[1])
    clip = _clip_steps(opts, bits)
    if opts.method == "rtn" or hessian is None:
        return rtn_quantize(w, bits, group, opts.sym, clip)
    try:
        return gptq_quantize(w, hessian, bits, group, opts.sym, opts.damp, clip=clip, act_order=opts.act_order,
                             static_groups=True)
    except HessianError:
        return rtn_quantize(w, bits, group, opts.sym, clip)


def quantize_weights(weights: torch.Tensor, hessians: torch.Tensor, bits: int, opts: QuantOptions) -> list[QuantResult]:
    """GPTQ for same-shape weights [B, out, in] with their own Hessians [B, in, in] in one column loop (a layer's
    experts: on a GPU that loop is expected to be bound by launches, so B experts would cost about one; unmeasured,
    and on a CPU it is slower than one at a time). Same rules as
    `quantize_weight`; a batch whose Hessians cannot all be inverted goes one at a time (RTN for those)."""
    group = _checked_group(opts, weights.shape[-1])
    try:
        return gptq_quantize_batch(weights.float(), hessians, bits, group, opts.sym, opts.damp,
                                   clip=_clip_steps(opts, bits), act_order=opts.act_order,
                                   static_groups=True)
    except HessianError:
        return [quantize_weight(w, h, bits, opts) for w, h in zip(weights, hessians)]


def _clip_steps(opts: QuantOptions, bits: int) -> int:
    return CLIP_STEPS if opts.clip and bits <= 4 else 0


def _checked_group(opts: QuantOptions, in_features: int) -> int:
    return check_group_size(opts.group_size, in_features)


def packed(prefix: str, result: QuantResult, bits: int) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{k}": v.clone().contiguous() for k, v in pack_weight(result.q, result.scales, result.zeros,
                                                                     result.g_idx, bits).items()}


class _Collector:
    """Forward pre-hooks that accumulate each hooked linear's input Hessian."""

    def __init__(self, modules: dict[str, nn.Linear]) -> None:
        self.acc = {name: HessianAccumulator(m.in_features, device=m.weight.device) for name, m in modules.items()}
        self.handles = [m.register_forward_pre_hook(self._hook(name)) for name, m in modules.items()]

    def _hook(self, name: str):
        def hook(_module, args):
            self.acc[name].add_batch(args[0].detach().reshape(-1, args[0].shape[-1]))
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


# Sequences whose float outputs are kept to measure a layer's error: 16 of the default 128 (an even stride) is
# 32K tokens a stream, a sample far past what the figure's two significant digits need: 512 MiB, not 4 GiB, in
# float32 (half that in a GPU's bf16).
REF_SEQUENCES = 16


def ref_sequences(n: int) -> range:
    """The calibration sequences (of n) the layer error is measured on: every ⌈n / REF_SEQUENCES⌉-th."""
    return range(0, n, -(-n // REF_SEQUENCES))


def _picked(sample: range, sl: slice, yc: torch.Tensor, yn: torch.Tensor | None) -> torch.Tensor:
    """The rows of a chunk's outputs that belong to sampled sequences, both streams, in the compute dtype."""
    idx = [i - sl.start for i in sample if sl.start <= i < sl.stop]
    return torch.cat([y[idx] for y in (yc, yn) if y is not None])


def _chunks(n: int, size: int):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


class LayerQuantizer:
    def __init__(self, cfg: CloverConfig, profile: Profile, opts: QuantOptions, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.cfg, self.profile, self.opts = cfg, profile, opts
        self.device, self.dtype = device, dtype
        self.rotary = Rotary(cfg.rotary_dim, cfg.rope_theta)

    def _mix(self, layer: DecoderLayer, xc: torch.Tensor, xn: torch.Tensor | None):
        """Residual stream after the mixer, for the clean (causal) and noisy (preview) streams."""
        cos, sin = self.rotary.cos_sin(torch.arange(xc.shape[1], device=xc.device), xc.dtype)
        if xn is None:
            return xc + layer.mix(xc, cos, sin, None, False, 0), None
        return layer.mix_all_blocks(xc, xn, cos, sin, self.cfg.diffusion.block_size)

    def _outputs(self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None):
        """The whole layer over all sequences, a chunk at a time: yields (sequences, clean out, noisy out)."""
        for sl in _chunks(clean.shape[0], self.opts.batch):
            xc = clean[sl].to(self.device, self.dtype)
            xn = noisy[sl].to(self.device, self.dtype) if noisy is not None else None
            yc, yn = self._mix(layer, xc, xn)
            yc = yc + layer.mlp(layer.post_attention_layernorm(yc))
            if yn is not None:
                yn = yn + layer.mlp(layer.post_attention_layernorm(yn))
            yield sl, yc, yn

    def _reference(self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None) -> list[torch.Tensor]:
        """The float layer's outputs on the sampled sequences (`ref_sequences`), on the host, a tensor per chunk:
        all the error measure needs (every sequence's would be 4 GiB at the default 128 × 2048 tokens)."""
        sample = ref_sequences(clean.shape[0])
        return [_picked(sample, sl, yc, yn).cpu() for sl, yc, yn in self._outputs(layer, clean, noisy)]

    def _propagate(self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None,
                   reference: list[torch.Tensor]) -> float:
        """Write the (quantized) layer's outputs over its inputs — they are the next layer's, and a copy of both
        streams would be 4 GiB at the default — and return ‖y_q − y_f‖ / ‖y_f‖ on the sampled sequences.
        Sequences are independent, so a chunk's inputs are read before its outputs are written."""
        sample = ref_sequences(clean.shape[0])
        num = den = 0.0
        for (sl, yc, yn), ref in zip(self._outputs(layer, clean, noisy), reference, strict=True):
            got = _picked(sample, sl, yc, yn).cpu()
            num += float((got.double() - ref.double()).pow(2).sum())
            den += float(ref.double().pow(2).sum())
            clean[sl] = yc
            if yn is not None:
                noisy[sl] = yn
        return (num / max(den, 1e-30)) ** 0.5

    @torch.no_grad()
    def quantize(
        self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None, on_step=lambda msg: None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None, LayerReport]:
        """Quantize `layer` in place (weights replaced by their dequantized values) and return its pack tensors
        (names `model.layers.i.…`), the next layer's inputs (written over `clean` and `noisy`) and a report."""
        i = layer.index
        prefix = f"model.layers.{i}"
        kind = "full_attention" if layer.is_attention else "linear_attention"
        report = LayerReport(i, kind)
        out: dict[str, torch.Tensor] = {}
        mixer_bits = self.profile.mixer
        mixer_mods = {n: layer.get_submodule(n) for n in MIXER_LINEARS[kind]} if mixer_bits else {}

        on_step("reference forward")
        collector = _Collector(mixer_mods) if self.opts.method == "gptq" else None
        reference = self._reference(layer, clean, noisy)
        if collector:
            collector.close()
        on_step("mixer")
        for name, module in mixer_mods.items():
            h = collector.acc[name].H if collector else None
            res = quantize_weight(module.weight, h, mixer_bits, self.opts)
            out.update(packed(f"{prefix}.{name}", res, mixer_bits))
            module.weight.copy_(res.dequantize().to(module.weight.dtype))

        on_step("experts")
        self._quantize_moe(layer, self._moe_inputs(layer, clean, noisy), out, prefix, report, on_step)

        on_step("propagate")
        report.rel_error = self._propagate(layer, clean, noisy, reference)
        return out, clean, noisy, report

    def _moe_inputs(self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None) -> torch.Tensor:
        """The MoE's normed inputs, every clean row and then every noisy one, on the device: written a chunk of
        sequences at a time as the mixer makes them, so the mixer's outputs are never held whole on the host (at
        the default 128 × 2048 calibration tokens, 4 GiB in float32 for the two streams, and as much again for
        their concatenation)."""
        seqs, length, hidden = clean.shape
        streams = 1 if noisy is None else 2
        normed = torch.empty(streams * seqs * length, hidden, device=self.device, dtype=self.dtype)
        for sl in _chunks(seqs, self.opts.batch):
            xn = noisy[sl].to(self.device, self.dtype) if noisy is not None else None
            for k, y in enumerate(self._mix(layer, clean[sl].to(self.device, self.dtype), xn)[:streams]):
                start = (k * seqs + sl.start) * length
                normed[start:start + y.shape[0] * length] = layer.post_attention_layernorm(y).reshape(-1, hidden)
        return normed

    def _quantize_moe(self, layer, normed: torch.Tensor, out, prefix, report: LayerReport, on_step) -> None:
        """The shared and routed experts of `layer`, from `normed` (`_moe_inputs`), quantized in place."""
        mlp = layer.mlp
        gptq = self.opts.method == "gptq"
        # every row's Hessian: the shared expert's gate and up read these rows, and so does every routed expert
        # under --expert-stats all
        h_all = _hessian(normed) if gptq and (self.profile.shared or self.opts.expert_stats == "all") else None
        if self.profile.shared:
            se, bits = mlp.shared_expert, self.profile.shared
            for name in ("gate_proj", "up_proj"):
                module = getattr(se, name)
                res = quantize_weight(module.weight, h_all, bits, self.opts)
                out.update(packed(f"{prefix}.mlp.shared_expert.{name}", res, bits))
                module.weight.copy_(res.dequantize().to(module.weight.dtype))
            # down on the quantized gate/up's activations, a slice of rows at a time: the shared expert run whole
            # for its Hessians held ≈ 2.5 GiB beside the 2 GiB of `normed` at the default calibration on a GPU
            # (BENCHMARKS.md "the MoE step a slice of rows at a time")
            h = _hessian_of(lambda x: F.silu(se.gate_proj(x)) * se.up_proj(x), normed,
                            se.down_proj.in_features) if gptq else None
            res = quantize_weight(se.down_proj.weight, h, bits, self.opts)
            out.update(packed(f"{prefix}.mlp.shared_expert.down_proj", res, bits))
            se.down_proj.weight.copy_(res.dequantize().to(se.down_proj.weight.dtype))

        # routed a slice at a time, too: the router's fp32 probabilities of every row would be 512 MiB at 35B
        idx = torch.cat([mlp.route(normed[s:s + CAST_ROWS])[0] for s in range(0, normed.shape[0], CAST_ROWS)])
        experts = mlp.experts
        inter = experts.inter
        bits = self.profile.experts
        n_exp = experts.gate_up_proj.shape[0]
        owners = idx.reshape(-1)
        row_of = torch.arange(idx.numel(), device=idx.device) // idx.shape[1]
        order = torch.argsort(owners, stable=True)
        counts = torch.bincount(owners, minlength=n_exp).tolist()
        starts = [0, *itertools.accumulate(counts)]

        def rows_of(e: int) -> torch.Tensor:
            return row_of[order[starts[e] : starts[e + 1]]]

        def path(e: int) -> str:
            if not gptq:
                return "rtn"
            if self.opts.expert_stats == "all":
                return "gptq-all"
            return "gptq-routed" if counts[e] >= self.opts.min_expert_rows else "rtn-few-rows"

        path_of = [path(e) for e in range(n_exp)]

        def install(e: int, gate_up: QuantResult, down: QuantResult) -> None:
            for part, sl in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, 2 * inter))):
                part_res = QuantResult(gate_up.q[sl], gate_up.scales[sl], gate_up.zeros[sl], gate_up.g_idx.clone(),
                                       gate_up.loss)
                out.update(packed(f"{prefix}.mlp.experts.{e}.{part}", part_res, bits))
            experts.gate_up_proj[e].copy_(gate_up.dequantize().to(experts.gate_up_proj.dtype))
            out.update(packed(f"{prefix}.mlp.experts.{e}.down_proj", down, bits))
            experts.down_proj[e].copy_(down.dequantize().to(experts.down_proj.dtype))

        def install_through(last: int) -> None:
            """Install experts up to `last` in order: calibrated ones from `results`, the others rounded here."""
            nonlocal next_e
            for e in range(next_e, last + 1):
                if e % 16 == 0:
                    on_step(f"experts {e}/{n_exp}")
                if e in results:
                    install(e, *results.pop(e))
                else:
                    install(e, quantize_weight(experts.gate_up_proj[e], None, bits, self.opts),
                            quantize_weight(experts.down_proj[e], None, bits, self.opts))
            next_e = last + 1

        calibrated = [e for e in range(n_exp) if path_of[e].startswith("gptq")]
        results: dict[int, tuple[QuantResult, QuantResult]] = {}
        next_e = 0
        batch = self.opts.expert_batch or (8 if normed.device.type == "cuda" else 1)
        for chunk in _chunks(len(calibrated), batch):
            es = calibrated[chunk]
            xs = [normed if path_of[e] == "gptq-all" else normed[rows_of(e)] for e in es]
            h_gu = torch.stack([h_all if path_of[e] == "gptq-all" else _hessian(x) for e, x in zip(es, xs)])
            gate_ups = quantize_weights(experts.gate_up_proj[es], h_gu, bits, self.opts)
            del h_gu
            h_d = []
            for x, res in zip(xs, gate_ups):  # down sees the quantized gate/up's activations, a slice of rows at
                w = res.dequantize().to(x.dtype)  # a time (--expert-stats all: every row, GiBs at once on a GPU)
                h_d.append(_hessian_of(lambda r: swiglu(F.linear(r, w)), x, inter))
            downs = quantize_weights(experts.down_proj[es], torch.stack(h_d), bits, self.opts)
            del h_d
            results.update({e: (gu, d) for e, gu, d in zip(es, gate_ups, downs)})
            install_through(es[-1])  # memory: one batch of results at a time
        install_through(n_exp - 1)
        report.expert_paths = dict(sorted(Counter(path_of).items()))


def _hessian(x: torch.Tensor) -> torch.Tensor:
    acc = HessianAccumulator(x.shape[-1], device=x.device)
    acc.add_batch(x)
    return acc.H


def _hessian_of(fn, x: torch.Tensor, width: int) -> torch.Tensor:
    """The Hessian of fn's outputs (`width` wide) for the rows of x, fn taking CAST_ROWS rows at a time: its
    outputs are never whole on the device."""
    acc = HessianAccumulator(width, device=x.device)
    for s in range(0, x.shape[0], CAST_ROWS):
        acc.add_batch(fn(x[s:s + CAST_ROWS]))
    return acc.H


def bf16_tensors(prefix: str, state: dict[str, torch.Tensor], quantized: set[str]) -> dict[str, torch.Tensor]:
    """The tensors of a layer that stay unquantized, in BF16 (fp32 for the GDN decay and bias: they are
    used in fp32 and are tiny)."""
    out = {}
    for rel, t in state.items():
        module = rel[: -len(".weight")] if rel.endswith(".weight") else rel
        if module in quantized or rel.startswith("mlp.experts."):
            continue
        keep32 = rel.endswith(("A_log", "dt_bias"))
        out[f"{prefix}.{rel}"] = t.to(torch.float32 if keep32 else torch.bfloat16).contiguous()
    return out

