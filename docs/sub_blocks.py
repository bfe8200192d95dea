"""Decoding in blocks shorter than the model was trained with: accuracy and tokens per pass on the tiny model's
held-out tasks, and the distinct experts a pass reads.

    PYTHONPATH=. OMP_NUM_THREADS=1 python docs/sub_blocks.py ROWS tiny --n 700 [--threshold T | --reveal-factor F] \
        --json

Why: a pass's cost at 35B is mostly its routed experts' bytes, and their count falls with the rows a pass routes
(uniform routing, top 8 of 256: ≈ 163 distinct a layer for 32 rows, ≈ 102 for 16, ≈ 57 for 8). A block of fewer
rows reads fewer bytes a pass but reveals fewer tokens a pass; which wins depends on how the model decodes a
short block, which only a measurement says. The model's preview operator already takes a block of fewer rows
than `block_size` (the GDN history slot's `ln(n_rows / block_size)` term: clover-model.md), as at a sequence's
last block.

ROWS: the decoder's block length (the tiny model was trained with 16). Blocks stay aligned to multiples of it,
the prompt's whole blocks are prefilled, and each block is previewed, revealed and committed as usual. The other
arguments go to `clover_local.tiny.evaluate`, whose report this prints, then one `sub_blocks:` line on stderr:
the preview passes, the rows and the distinct experts they routed (summed over layers), per pass. Merged commits
are off (`merge_commits=False`: every preview through `forward`, so each is counted once). BENCHMARKS.md
"Blocks shorter than trained".
"""

from __future__ import annotations

import atexit
import sys

import clover_local.generate.block_diffusion as block_diffusion
from clover_local.model.moe import SparseMoe


class Count:
    rows = 0  # the decoder's block length (ROWS)
    layer_passes = 0  # MoE calls in preview passes: one per MoE layer per pass
    routed_rows = 0
    distinct = 0


_route = SparseMoe.route


def route(self, x, limit=None):
    """The router's choice, counted where a preview pass of ROWS rows routes it (a prefill or commit is not)."""
    idx, w, logits = _route(self, x, limit)
    if getattr(self, "_in_preview", False):
        Count.layer_passes += 1
        Count.routed_rows += idx.shape[0]
        Count.distinct += idx.unique().numel()
    return idx, w, logits


class Decoder(block_diffusion.BlockDiffusionDecoder):
    def __init__(self, model, mask_token_id, merge_commits=None):
        super().__init__(model, mask_token_id, merge_commits=False)
        self.block_size = Count.rows
        moes = [m for m in model.modules() if isinstance(m, SparseMoe)]
        forward = model.forward

        def counted(ids, cache, preview=False, **kw):
            for m in moes:
                m._in_preview = preview
            try:
                return forward(ids, cache, preview=preview, **kw)
            finally:
                for m in moes:
                    m._in_preview = False

        model.forward = counted


def report() -> None:
    passes = Count.layer_passes
    print(f"sub_blocks: rows={Count.rows} layer-passes {passes}; per layer-pass: rows routed "
          f"{Count.routed_rows / max(passes, 1):.2f}, distinct experts {Count.distinct / max(passes, 1):.2f}",
          file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        raise SystemExit(__doc__)
    Count.rows = int(sys.argv.pop(1))
    SparseMoe.route = route
    import clover_local.tiny.evaluate as evaluate

    evaluate.BlockDiffusionDecoder = Decoder
    atexit.register(report)
    evaluate.main()
