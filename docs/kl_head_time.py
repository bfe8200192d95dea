"""Time the KL step at the end of `quantize` and `eval` at the real LM head (a benchmark, not a test): today's
`_kl_top1` (one pass over the heads, the causal and the preview rows in one call) against the form it replaced
on 2026-12-06 (two passes — log-normalizers, then the KL — called once for the causal rows and once for the
preview rows), same inputs, with the largest difference in their figures (BENCHMARKS.md "Quality measured as
the layers go").

    PYTHONPATH=. python docs/kl_head_time.py [--rows-causal 2044] [--rows-preview 1024]

Random weights with the 35B head's shape (248,320 × 2048): the source's in BF16 and the pack's packed 8-bit
(group 128, the balanced profile's head), read a slice of rows at a time as the pack reader gives them. Default
rows: quantize's quick check (4 × 512 held-out tokens: 4 × 511 causal rows) and about half a block masked in
each preview.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from clover_local.pack.reader import QuantizedRows
from quantize.gptq_format import default_g_idx, pack_weight
from quantize.quality import _kl_top1

VOCAB, HIDDEN, GROUP = 248_320, 2048, 128


def two_pass_kl_top1(ref_h, ref_head, q_h, q_head, vocab: int = 16384):
    """The baseline: the form `_kl_top1` had up to 2026-12-06 (each logit made twice)."""
    n, slices = ref_h.shape[0], range(0, ref_head.shape[0], vocab)

    def logits(v):
        return ref_h @ ref_head[v:v + vocab].float().T, q_h @ q_head[v:v + vocab].float().T

    lse = [torch.full((n,), -math.inf), torch.full((n,), -math.inf)]
    best = [torch.full((n,), -math.inf), torch.full((n,), -math.inf)]
    arg = [torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)]
    for v in slices:
        for k, x in enumerate(logits(v)):
            lse[k] = torch.logaddexp(lse[k], x.logsumexp(-1))
            top, at = x.max(-1)
            higher = top > best[k]
            best[k], arg[k] = torch.where(higher, top, best[k]), torch.where(higher, at + v, arg[k])
    kl = torch.zeros(n)
    for v in slices:
        a, b = logits(v)
        lp, lq = a - lse[0][:, None], b - lse[1][:, None]
        kl += (lp.exp() * (lp - lq)).sum(-1)
    return kl.clamp(min=0), (arg[0] == arg[1]).float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows-causal", type=int, default=4 * 511)
    ap.add_argument("--rows-preview", type=int, default=1024)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    ref_head = (torch.randn(VOCAB, HIDDEN, generator=gen) * 0.02).bfloat16()
    codes = torch.randint(0, 256, (VOCAB, HIDDEN), generator=gen, dtype=torch.int32)
    groups = HIDDEN // GROUP
    packed = pack_weight(codes, torch.full((VOCAB, groups), 2e-4, dtype=torch.float16),
                         torch.full((VOCAB, groups), 128, dtype=torch.int32), default_g_idx(HIDDEN, GROUP), 8)
    del codes
    q_head = QuantizedRows(packed)
    c, n = args.rows_causal, args.rows_causal + args.rows_preview
    ref_h, q_h = torch.randn(n, HIDDEN, generator=gen), torch.randn(n, HIDDEN, generator=gen)
    t0 = time.perf_counter()
    parts = [two_pass_kl_top1(ref_h[:c], ref_head, q_h[:c], q_head),
             two_pass_kl_top1(ref_h[c:], ref_head, q_h[c:], q_head)]
    t1 = time.perf_counter()
    kl, top = _kl_top1(ref_h, ref_head, q_h, q_head)
    t2 = time.perf_counter()
    kl_was, top_was = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    print(f"rows {c} causal + {args.rows_preview} preview, {torch.get_num_threads()} torch threads; "
          f"mean KL {kl.mean().item():.6f}")
    print(f"two passes, two calls {t1 - t0:.1f} s · one pass, one call {t2 - t1:.1f} s · largest KL difference "
          f"{(kl_was - kl).abs().max().item():.2e} (relative {((kl_was - kl).abs() / kl_was).max().item():.1e}) · "
          f"top-1 the same: {torch.equal(top_was, top)}")


if __name__ == "__main__":
    main()
