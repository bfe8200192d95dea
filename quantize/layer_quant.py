"""Quantize one decoder layer against calibration activations (the unit of layer streaming).

Order inside a layer, so each part is calibrated on inputs that already went through quantized parts:
1. float forward of the whole layer (reference output; hooks collect the mixer projections' Hessians),
2. quantize the mixer projections, rerun the mixer → MoE inputs,
3. shared expert and routed experts, expert by expert (Hessians from the rows routed to each expert, or from
   every row with `expert_stats="all"`; experts with too few rows fall back to round-to-nearest),
4. the quantized layer's output is the next layer's input.
Calibration rows come from causal passes, and in diffusion mode also from previews of masked blocks
(`forward_all_blocks`: each block sees the clean prefix before it, as in decoding).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from clover_local.config import CloverConfig
from clover_local.errors import CloverError
from clover_local.model.clover import DecoderLayer
from clover_local.model.rope import Rotary
from quantize.gptq import CLIP_STEPS, HessianAccumulator, HessianError, QuantResult, gptq_quantize, rtn_quantize
from quantize.gptq_format import pack_weight
from quantize.profiles import MIXER_LINEARS, SHARED_LINEARS, Profile


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
    group = opts.group_size
    if group != -1 and w.shape[1] % group:
        # the pack's config promises one group size for every module; a silent per-channel fallback would
        # make other GPTQ loaders misread this one
        raise CloverError(f"--group-size {group} does not divide an input width of {w.shape[1]}; "
                          "choose a group size that divides it (or -1 for per-channel)")
    clip = CLIP_STEPS if opts.clip and bits <= 4 else 0
    if opts.method == "rtn" or hessian is None:
        return rtn_quantize(w, bits, group, opts.sym, clip)
    try:
        return gptq_quantize(w, hessian, bits, group, opts.sym, opts.damp, clip=clip, act_order=opts.act_order,
                             static_groups=True)
    except HessianError:
        return rtn_quantize(w, bits, group, opts.sym, clip)


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

    def _run(self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None, moe: bool):
        """Mixer (and MoE) over all sequences in chunks; returns outputs on the host."""
        outs_c, outs_n = [], []
        for sl in _chunks(clean.shape[0], self.opts.batch):
            xc = clean[sl].to(self.device, self.dtype)
            xn = noisy[sl].to(self.device, self.dtype) if noisy is not None else None
            yc, yn = self._mix(layer, xc, xn)
            if moe:
                yc = yc + layer.mlp(layer.post_attention_layernorm(yc))
                if yn is not None:
                    yn = yn + layer.mlp(layer.post_attention_layernorm(yn))
            outs_c.append(yc.float().cpu())
            if yn is not None:
                outs_n.append(yn.float().cpu())
        return torch.cat(outs_c), (torch.cat(outs_n) if outs_n else None)

    @torch.no_grad()
    def quantize(
        self, layer: DecoderLayer, clean: torch.Tensor, noisy: torch.Tensor | None, on_step=lambda msg: None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None, LayerReport]:
        """Quantize `layer` in place (weights replaced by their dequantized values) and return its pack tensors
        (names `model.layers.i.…`), the next layer's inputs and a report."""
        i = layer.index
        prefix = f"model.layers.{i}"
        kind = "full_attention" if layer.is_attention else "linear_attention"
        report = LayerReport(i, kind)
        out: dict[str, torch.Tensor] = {}
        mixer_bits = self.profile.mixer
        mixer_mods = {n: layer.get_submodule(n) for n in MIXER_LINEARS[kind]} if mixer_bits else {}

        on_step("reference forward")
        collector = _Collector(mixer_mods) if self.opts.method == "gptq" else None
        ref_c, ref_n = self._run(layer, clean, noisy, moe=True)
        if collector:
            collector.close()
        on_step("mixer")
        for name, module in mixer_mods.items():
            h = collector.acc[name].H if collector else None
            res = quantize_weight(module.weight, h, mixer_bits, self.opts)
            out.update(packed(f"{prefix}.{name}", res, mixer_bits))
            module.weight.copy_(res.dequantize().to(module.weight.dtype))

        on_step("experts")
        mid_c, mid_n = self._run(layer, clean, noisy, moe=False)
        rows = [mid_c] + ([mid_n] if mid_n is not None else [])
        moe_in = torch.cat([r.reshape(-1, r.shape[-1]) for r in rows])
        self._quantize_moe(layer, moe_in, out, prefix, report, on_step)

        on_step("propagate")
        new_c, new_n = self._run(layer, clean, noisy, moe=True)
        num = (new_c - ref_c).pow(2).sum() + ((new_n - ref_n).pow(2).sum() if new_n is not None else 0)
        den = ref_c.pow(2).sum() + (ref_n.pow(2).sum() if ref_n is not None else 0)
        report.rel_error = float((num / den.clamp(min=1e-30)).sqrt())
        return out, new_c, new_n, report

    def _quantize_moe(self, layer, moe_in: torch.Tensor, out, prefix, report: LayerReport, on_step) -> None:
        mlp = layer.mlp
        gptq = self.opts.method == "gptq"
        # normed MoE inputs, on the device in chunks
        normed = torch.cat([layer.post_attention_layernorm(moe_in[sl].to(self.device, self.dtype))
                            for sl in _chunks(moe_in.shape[0], 65536)])
        # shared expert: Hessians from every row
        if self.profile.shared:
            mods = {n.split(".", 1)[1]: layer.get_submodule(n) for n in SHARED_LINEARS}
            collector = _Collector(mods) if gptq else None
            mlp.shared_expert(normed)
            if collector:
                collector.close()
            # gate/up first, then down on the quantized gate/up's activations
            for name in ("shared_expert.gate_proj", "shared_expert.up_proj"):
                res = quantize_weight(mods[name].weight, collector.acc[name].H if collector else None,
                                      self.profile.shared, self.opts)
                out.update(packed(f"{prefix}.mlp.{name}", res, self.profile.shared))
                mods[name].weight.copy_(res.dequantize().to(mods[name].weight.dtype))
            se = mlp.shared_expert
            act = F.silu(se.gate_proj(normed)) * se.up_proj(normed)
            h = _hessian(act) if gptq else None
            res = quantize_weight(se.down_proj.weight, h, self.profile.shared, self.opts)
            out.update(packed(f"{prefix}.mlp.shared_expert.down_proj", res, self.profile.shared))
            se.down_proj.weight.copy_(res.dequantize().to(se.down_proj.weight.dtype))

        idx, _, _ = mlp.route(normed)
        experts = mlp.experts
        inter = experts.inter
        bits = self.profile.experts
        paths: Counter[str] = Counter()
        h_all = _hessian(normed) if gptq and self.opts.expert_stats == "all" else None
        n_exp = experts.gate_up_proj.shape[0]
        owners = idx.reshape(-1)
        row_of = torch.arange(idx.numel(), device=idx.device) // idx.shape[1]
        order = torch.argsort(owners, stable=True)
        counts = torch.bincount(owners, minlength=n_exp).tolist()
        start = 0
        for e in range(n_exp):
            if e % 16 == 0:
                on_step(f"experts {e}/{n_exp}")
            rows_e = row_of[order[start : start + counts[e]]]
            start += counts[e]
            if not gptq:
                path = "rtn"
            elif self.opts.expert_stats == "all":
                path = "gptq-all"
            elif counts[e] >= self.opts.min_expert_rows:
                path = "gptq-routed"
            else:
                path = "rtn-few-rows"
            paths[path] += 1
            x_e = normed if path == "gptq-all" else normed[rows_e]
            h_gu = None
            if path == "gptq-all":
                h_gu = h_all
            elif path == "gptq-routed":
                h_gu = _hessian(x_e)
            gate_up = experts.gate_up_proj[e]
            res = quantize_weight(gate_up, h_gu, bits, self.opts)
            deq = res.dequantize().to(gate_up.dtype)
            for part, sl in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, 2 * inter))):
                part_res = QuantResult(res.q[sl], res.scales[sl], res.zeros[sl], res.g_idx.clone(), res.loss)
                out.update(packed(f"{prefix}.mlp.experts.{e}.{part}", part_res, bits))
            experts.gate_up_proj[e].copy_(deq)
            h_d = None
            if path.startswith("gptq"):
                hgu = F.linear(x_e, deq)
                h_d = _hessian(F.silu(hgu[:, :inter]) * hgu[:, inter:])
            res = quantize_weight(experts.down_proj[e], h_d, bits, self.opts)
            out.update(packed(f"{prefix}.mlp.experts.{e}.down_proj", res, bits))
            experts.down_proj[e].copy_(res.dequantize().to(experts.down_proj.dtype))
        report.expert_paths = dict(sorted(paths.items()))


def _hessian(x: torch.Tensor) -> torch.Tensor:
    acc = HessianAccumulator(x.shape[-1], device=x.device)
    acc.add_batch(x)
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

