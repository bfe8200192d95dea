"""What TF32 dots cost the chunked GDN prefill (`runtime/kernels/gdn_chunked.py`) in accuracy, at the real
layer's shapes, on a CPU: the kernels' algorithm (forward substitution for (I + A)^-1, then U₀, W, P and the
scan over chunks) in PyTorch with every dot's operands rounded to TF32 (10 mantissa bits, as the tensor cores
read them), against the model's fp32 path (`GatedDeltaNet.delta_rule`). The interpreter that runs the kernels in
the tests computes in fp32, so this is where the TF32 choice is checked before a GPU sees it.

    python docs/gdn_tf32_error.py [--rows 512]

Two inputs: random rows, and runs of one repeated row (keys repeat: the hard case for the substitution).
"""

from __future__ import annotations

import argparse

import torch

from clover_local.config import parse_config
from clover_local.model.gdn import GatedDeltaNet
from clover_local.runtime.synthetic_pack import synthetic_config


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to TF32: nearest, ties away from zero (cvt.rna.tf32.f32)."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def chunked(q, k, v, g, beta, state, chunk: int, round_dots: bool):
    """The kernels' algorithm over heads at once: q (scaled), k [H,T,Dk], v [H,T,Dv], g, beta [H,T], state
    [H,Dk,Dv] → (o [H,T,Dv], new state)."""
    dot = (lambda a, b: tf32(a) @ tf32(b)) if round_dots else (lambda a, b: a @ b)
    t = torch.arange(chunk)
    causal, lower = t[:, None] >= t[None, :], t[:, None] > t[None, :]
    o = torch.empty(*v.shape)
    for c0 in range(0, k.shape[1], chunk):
        kc, qc, vc, bc = k[:, c0:c0 + chunk], q[:, c0:c0 + chunk], v[:, c0:c0 + chunk], beta[:, c0:c0 + chunk]
        gam = g[:, c0:c0 + chunk].cumsum(-1)
        last = gam[:, -1:]
        decay = torch.where(causal, (gam[:, :, None] - gam[:, None, :]).clamp(max=0).exp(), 0.0)
        a = torch.where(lower, bc[:, :, None] * dot(kc, kc.transpose(1, 2)) * decay, 0.0)
        inv = torch.eye(chunk).repeat(k.shape[0], 1, 1)
        for i in range(1, chunk):
            inv[:, i] -= (a[:, i, :, None] * inv).sum(1)
        u = dot(inv, vc * bc[..., None]) - dot(dot(inv, kc * (bc * gam.exp())[..., None]), state)
        p = torch.where(causal, dot(qc, kc.transpose(1, 2)) * decay, 0.0)
        o[:, c0:c0 + chunk] = dot(qc * gam.exp()[..., None], state) + dot(p, u)
        state = state * last.exp()[..., None] + dot((kc * (last - gam).exp()[..., None]).transpose(1, 2), u)
    return o, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512, help="prompt rows (a multiple of 64)")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(3)
    gdn = GatedDeltaNet(parse_config(synthetic_config("full")))
    with torch.no_grad():  # gpu_check's random layer: small weights, decays in the model's range
        for p in gdn.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.02 if p.dim() > 1 else 0.3) + (1.0 if p.dim() == 1 else 0))
        gdn.A_log.copy_(torch.randn(gdn.hv, generator=gen) * 0.5 - 1)
    heads = lambda x: x[0].transpose(0, 1).contiguous()  # noqa: E731 [1,T,H,…] → [H,T,…]
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    for case in ("random", "repeated"):
        x = torch.randn(1, args.rows, gdn.in_proj_qkv.in_features, generator=gen)
        if case == "repeated":
            x = x[:, torch.arange(args.rows) // 64 * 64]
        with torch.no_grad():
            q, k, v = gdn.split_heads(gdn.conv(gdn.in_proj_qkv(x), None, right=False))
            g, beta = gdn.gates(x)
            s0 = torch.randn(1, gdn.hv, gdn.dk, gdn.dv, generator=gen)
            want, want_s = gdn.delta_rule(q, k, v, g, beta, s0)
            for round_dots in (False, True):
                o, s = chunked(heads(q) * gdn.dk**-0.5, heads(k), heads(v), heads(g), heads(beta), s0[0], 64,
                               round_dots)
                print(f"{case:8} {'tf32' if round_dots else 'fp32'} dots: output rel. error "
                      f"{rel(o.transpose(0, 1)[None], want):.1e}, state {rel(s, want_s[0]):.1e}")


if __name__ == "__main__":
    main()
