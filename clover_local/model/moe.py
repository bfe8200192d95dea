"""Sparse MoE with a shared expert: softmax router (fp32) → top-k → renormalise; experts
`down(silu(gate(x)) * up(x))`; plus `sigmoid(shared_expert_gate(x)) * shared_expert(x)`.

`Experts` is the piece the runtime swaps (INT4 kernels, offloaded experts); it takes flattened rows and
the routing decision, so every implementation sees the same call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from clover_local.config import CloverConfig

# grouped matmul over row groups (recent torch releases; on CPU in every dtype, on CUDA only some GPUs and dtypes)
_grouped_mm = getattr(F, "grouped_mm", None)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Experts(nn.Module):
    """All routed experts of a layer in fused storage: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]."""

    def __init__(self, n: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.inter = inter
        self.gate_up_proj = nn.Parameter(torch.empty(n, 2 * inter, hidden))
        self.down_proj = nn.Parameter(torch.empty(n, hidden, inter))

    def forward(self, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x [N,H], idx/weights [N,k] → Σ_k weights·expert_k(x). Rows are grouped by expert: one matmul per
        expert hit, or when training on CPU one grouped matmul per projection (same sums)."""
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        rows = order // idx.shape[1]
        w = weights.reshape(-1)[order, None].to(x.dtype)
        counts = torch.bincount(flat, minlength=self.gate_up_proj.shape[0])
        if _grouped_mm is not None and x.device.type == "cpu" and torch.is_grad_enabled():
            # training's hot spot: 2 kernels instead of 2 per expert (3x faster forward+backward at tiny shapes).
            # Not at inference: it holds every routed row at once, where the loop's peak is one expert's rows
            # (the quantizer runs 256-expert layers over ~16k rows at a time).
            offs = counts.cumsum(0).to(torch.int32)
            h = swiglu(_grouped_mm(x[rows], self.gate_up_proj.transpose(1, 2), offs=offs))
            y = _grouped_mm(h, self.down_proj.transpose(1, 2), offs=offs) * w
            return torch.zeros_like(x).index_add_(0, rows, y)
        out = torch.zeros_like(x)
        # unbind once: indexing the fused parameter per expert would make autograd build (and sum) a full-size
        # zero gradient for every expert hit
        gate_up, down = self.gate_up_proj.unbind(0), self.down_proj.unbind(0)
        start = 0
        for e, c in enumerate(counts.tolist()):
            if c == 0:
                continue
            r = rows[start : start + c]
            h = swiglu(F.linear(x[r], gate_up[e]))
            out.index_add_(0, r, F.linear(h, down[e]) * w[start : start + c])
            start += c
        return out


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) · up of fused [.., 2I] rows (gate first). `chunk`, not slicing: its backward concatenates the
    two gradients where slicing's would zero-fill a full-size buffer twice."""
    gate, up = gate_up.chunk(2, -1)
    return F.silu(gate) * up


def restrict_logits(logits: torch.Tensor, allowed: torch.Tensor, top_k: int,
                    wanted: torch.Tensor | None = None) -> torch.Tensor:
    """Router logits [N,E] with the experts `allowed` [E] does not allow (entries < 0: a slot table's row, -1 = not
    resident) at -inf, so softmax → top-k → renormalise chooses among the others: the weights are then the
    router's own probabilities of the chosen experts renormalised, as unrestricted. Fewer than top_k allowed:
    unchanged (a row must have k experts to choose). `wanted` [E] int32: += 1 per row for each expert of its own
    top-k that the restriction took away (what the runtime copies in for the block's next passes). Device ops
    only, no sync (a CUDA graph captures it)."""
    ok = allowed >= 0
    ok = ok | (ok.sum() < top_k)
    if wanted is not None:
        free = logits.topk(top_k, -1).indices.reshape(-1)
        wanted.index_add_(0, free, (~ok[free]).to(wanted.dtype))
    return logits.masked_fill(~ok, float("-inf"))


class SparseMoe(nn.Module):
    def __init__(self, cfg: CloverConfig) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        self.shared_expert = MLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)
        # (router logits [N,E], k, dtype) -> route()'s ids and weights in one launch: the runtime's Triton kernel
        # on CUDA (kernels/layer_ops.py); None: `route`, the definition
        self.route_kernel: Callable | None = None
        # (routed [N,H], x [N,H], shared_expert_gate weight [1,H], shared [N,H], residual [N,H] | None) -> the
        # last lines of `forward` in one launch (kernels/layer_ops.py `shared_combine`); None: the lines themselves
        self.combine_kernel: Callable | None = None
        # () -> (allowed, wanted) for `restrict_logits`: the experts this layer's router may choose now and where
        # it counts the choices that took away; the runtime's resident routing (`RuntimeOptions.resident_routing`).
        # None: no restriction
        self.route_limit: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None

    def route(self, x: torch.Tensor, limit: tuple[torch.Tensor, torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(top-k expert ids [N,k], renormalised weights [N,k], full router probabilities [N,E] fp32); `limit` =
        (allowed, wanted): choose among the allowed experts only (`restrict_logits`)."""
        logits = self.gate(x).float()
        if limit is not None:
            logits = restrict_logits(logits, limit[0], self.top_k, limit[1])
        probs = torch.softmax(logits, -1)
        top_w, top_i = torch.topk(probs, self.top_k, -1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        return top_i, top_w.to(x.dtype), probs

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The MoE's output for x [..., H]; with `residual` (x's shape) residual + that output (one launch fused)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        limit = self.route_limit() if self.route_limit is not None else None
        if self.route_kernel is not None:
            idx, w = self.route_kernel(self.gate(flat), self.top_k, flat.dtype, limit)
        else:
            idx, w, _ = self.route(flat, limit)
        out = self.experts(flat, idx, w)
        shared = self.shared_expert(flat)
        if self.combine_kernel is not None:
            res = residual.reshape(flat.shape) if residual is not None else None
            return self.combine_kernel(out, flat, self.shared_expert_gate.weight, shared, res).reshape(shape)
        out = (out + torch.sigmoid(self.shared_expert_gate(flat)) * shared).reshape(shape)
        return out if residual is None else residual + out
