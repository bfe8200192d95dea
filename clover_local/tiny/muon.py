"""Muon for the tiny model's matrices: momentum, orthogonalised by a Newton-Schulz iteration, as the update.

Why: on 2 CPU cores the tiny model's training is bounded by compute per conversation (a step costs about the same
whatever is tuned), so what decides a 30-minute recipe is how much each step learns. Muon's orthogonalised update
moves every direction of a weight matrix at the same rate instead of letting a few dominant directions take the
step. On this model a 7-minute run reached about half AdamW's held-out masked-token cross-entropy and a 32-minute
run three times its accuracy (README, "Towards a 30-minute recipe").

Routed experts are stored stacked ([E, out, in]); the iteration is batched over the leading dims, so each
expert's matrix is orthogonalised on its own, as if it were a separate 2-D parameter. The iteration runs in
bfloat16 (its fixed point tolerates the rounding, and on this CPU it is 3x faster than float32). The step size
follows Moonshot's rule (0.2 * sqrt(max(out, in)) * lr) so the update's RMS matches AdamW's and AdamW's learning
rate is the right scale for both (tiny.train's `muon_lr_scale` then runs Muon at 2x it). Embeddings, the LM head,
vectors and thin matrices stay on AdamW (`split_params`).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import Tensor

# Quintic Newton-Schulz coefficients (Keller Jordan's): push every singular value towards ~1 in a few steps.
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: Tensor, steps: int = 5) -> Tensor:
    """An approximately orthogonal matrix with `g`'s singular vectors ([..., m, n], batched over leading dims);
    singular values end up roughly in [0.7, 1.2], which is all the update needs."""
    a, b, c = NS_COEFFS
    shape = g.shape
    x = g.reshape(-1, *shape[-2:])
    x = (x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)).bfloat16()
    wide = x.shape[-2] <= x.shape[-1]
    if not wide:  # iterate on the smaller Gram matrix
        x = x.mT
    for _ in range(steps):
        # baddbmm folds the polynomial's scalings and sums into the matmuls: half the time of separate ops
        gram = x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, poly, x, beta=a)
    if not wide:
        x = x.mT
    return x.to(g.dtype).reshape(shape)


class Muon(torch.optim.Optimizer):
    """Nesterov momentum, orthogonalised, with decoupled weight decay. Parameters: matrices or stacks of them."""

    def __init__(self, params: Iterable[Tensor], lr: float, weight_decay: float = 0.0, momentum: float = 0.95,
                 ns_steps: int = 5) -> None:
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, ns_steps=ns_steps))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim < 2:
                    raise ValueError(f"Muon takes matrices; got a parameter of shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, mu = group["lr"], group["momentum"]
            live = [p for p in group["params"] if p.grad is not None]
            updates = []
            for p in live:
                buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                buf.mul_(mu).add_(p.grad)
                updates.append(p.grad.add(buf, alpha=mu))
            for p, update in zip(live, orthogonalize_all(updates, group["ns_steps"])):
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(update, alpha=-lr * 0.2 * math.sqrt(max(p.shape[-2], p.shape[-1])))
        return None


def orthogonalize_all(updates: list[Tensor], steps: int) -> list[Tensor]:
    """`orthogonalize` of each tensor, computed as one batched iteration per matrix shape (tall matrices
    transposed to wide first). Why: the tiny model has ~30 matrices in 3 shapes, and a 128x128 product is too
    small to keep the CPU's matrix units busy; stacked, the optimizer step takes about half the time."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, u in enumerate(updates):
        m, n = u.shape[-2:]
        groups.setdefault((min(m, n), max(m, n)), []).append(i)
    out: list[Tensor] = [updates[0]] * len(updates)
    for (m, n), members in groups.items():
        flat = [updates[i].reshape(-1, *updates[i].shape[-2:]) for i in members]
        flat = [f if f.shape[-2] == m else f.mT for f in flat]
        done = orthogonalize(torch.cat(flat), steps).split([f.shape[0] for f in flat])
        for i, d in zip(members, done):
            u = updates[i]
            out[i] = (d if u.shape[-2] == m else d.mT).reshape(u.shape)
    return out


def split_params(model: torch.nn.Module, min_dim: int = 32) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """(Muon's matrices, AdamW's decayed tensors, AdamW's undecayed vectors). Muon gets the hidden matrices
    (projections, expert stacks); embeddings and the LM head (a lookup and a classifier, not maps between hidden
    spaces), convolution kernels and thin matrices (router, per-head gates: a dim under `min_dim`) stay on AdamW."""
    muon, decay, no_decay = [], [], []
    for name, p in model.named_parameters():
        if p.ndim < 2:
            no_decay.append(p)
        elif (p.ndim in (2, 3) and min(p.shape[-2:]) >= min_dim
              and not any(part in name for part in ("embed_tokens", "lm_head", "conv"))):
            muon.append(p)
        else:
            decay.append(p)
    return muon, decay, no_decay
