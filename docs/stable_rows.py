"""What a preview pass loses if rows whose token was already there in the block's previous pass skip the routed
experts (their routed-MoE output reused from the last pass that computed it, per layer), and what it would save:
the distinct experts a pass reads. On the tiny model's held-out tasks, greedy.

    PYTHONPATH=. OMP_NUM_THREADS=1 python docs/stable_rows.py (exact|stable) tiny --n 700 [--min-age A] --json

Why: the routed experts are most of a 32-row pass's bytes (targets.md), and their count grows with the rows a pass
routes (at 35B, uniform routing: ≈ 163 distinct experts of 256 for 32 rows, ≈ 102 for 16, ≈ 57 for 8). A row
revealed earlier in the block is there only as context for the masked ones; its hidden states still move as other
positions are revealed, so skipping its experts is an approximation, whose cost this measures.

`stable`: in a block's preview passes after its first, a row is *stable* once its input token (not the mask) has
stood unchanged for A passes before this one (`--min-age`, default 1: it was there in the previous pass); its
routed output at each layer is the one computed for it in the last pass that computed it (its attention, GDN
mixing, shared expert and router still run every pass). Commit passes are exact. `exact` runs the same
instrumented path with nothing reused (the baseline and its expert counts). The other arguments go to
`clover_local.tiny.evaluate`, whose report this prints, then one `stable_rows:` line on stderr: the share of rows
routed and of distinct experts read in the later passes. Merged commits are off both ways (`merge_commits=False`:
the same tokens, every preview through `forward`). BENCHMARKS.md "Reveal rules"."""

from __future__ import annotations

import sys

import torch

import clover_local.generate.block_diffusion as block_diffusion
from clover_local.model.clover import CloverModel
from clover_local.model.moe import SparseMoe


class State:
    reuse = False
    min_age = 1  # passes a row's token must have stood unchanged before its experts are skipped (--min-age)
    age: torch.Tensor | None = None
    key: tuple | None = None  # (cache length, block ids) of the last preview pass
    stable: torch.Tensor | None = None  # [N] rows to reuse in this pass
    kept: dict[int, torch.Tensor] = {}  # layer (module id) → routed output [N, H] of the last pass
    later_passes = 0
    rows_routed = 0
    rows_all = 0
    experts_routed = 0
    experts_all = 0


S = State()
_forward = CloverModel.forward
_moe_forward = SparseMoe.forward


def forward(self, ids, cache=None, preview=False, rows=None):
    if not preview:
        S.key, S.stable = None, None
        return _forward(self, ids, cache, preview, rows)
    key = (cache.length if cache is not None else 0, ids.shape[1])
    if S.key is not None and S.key[:2] == key and S.key[2].shape == ids.shape:
        prev = S.key[2]
        same = ((ids == prev) & (ids != self._mask_id))[0]
        S.age = torch.where(same, S.age + 1, torch.zeros_like(S.age))
        stable = S.age >= S.min_age
        S.later_passes += 1
    else:
        stable = None
        S.kept = {}
        S.age = torch.zeros(ids.shape[1], dtype=torch.long)
    S.stable = stable
    S.key = (*key, ids.clone())
    return _forward(self, ids, cache, preview, rows)


def moe_forward(self, x, residual=None):
    if S.key is None:  # a causal pass: exact
        return _moe_forward(self, x, residual)
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    idx, w, _ = self.route(flat)
    stable = S.stable
    kept = S.kept.get(id(self))
    if stable is not None:
        S.rows_all += flat.shape[0]
        S.experts_all += idx.unique().numel()
        live = ~stable if S.reuse and kept is not None else torch.ones_like(stable)
        S.rows_routed += int(live.sum())
        S.experts_routed += idx[live].unique().numel()
    if stable is not None and S.reuse and kept is not None and bool(stable.any()):
        out = kept.clone()
        live = ~stable
        if bool(live.any()):
            out[live] = self.experts(flat[live], idx[live], w[live])
    else:
        out = self.experts(flat, idx, w)
    S.kept[id(self)] = out
    shared = self.shared_expert(flat)
    out = (out + torch.sigmoid(self.shared_expert_gate(flat)) * shared).reshape(shape)
    return out if residual is None else residual + out


class Decoder(block_diffusion.BlockDiffusionDecoder):
    def __init__(self, model, mask_token_id, merge_commits=None):
        super().__init__(model, mask_token_id, merge_commits=False)
        model._mask_id = mask_token_id


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("exact", "stable"):
        raise SystemExit(__doc__)
    S.reuse = sys.argv.pop(1) == "stable"
    if "--min-age" in sys.argv:
        i = sys.argv.index("--min-age")
        S.min_age = int(sys.argv[i + 1])
        del sys.argv[i : i + 2]
    CloverModel.forward = forward
    SparseMoe.forward = moe_forward
    import clover_local.tiny.evaluate as evaluate

    evaluate.BlockDiffusionDecoder = Decoder
    import atexit

    def report() -> None:
        n = max(S.later_passes, 1)
        print(f"stable_rows: reuse={S.reuse} min_age={S.min_age} later passes {S.later_passes}; per layer-pass: "
              f"rows routed "
              f"{S.rows_routed / max(S.rows_all, 1):.3f} of all; distinct experts "
              f"{S.experts_routed / max(S.experts_all, 1):.3f} of all ({S.experts_all / n:.1f} per pass, summed "
              f"over layers)", file=sys.stderr)

    atexit.register(report)
    evaluate.main()
