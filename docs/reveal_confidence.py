"""Which confidence the reveal rule reads: the top token's probability (ours), its margin over the second
(p1 − p2), or exp(−entropy) of the position's distribution — on the tiny model's held-out tasks, greedy.

    PYTHONPATH=. OMP_NUM_THREADS=1 python docs/reveal_confidence.py (prob|margin|entropy) tiny --n 700 \
        (--threshold T | --reveal-factor F) --json

The decoder's `choose` is replaced for the run (greedy only: the ids stay the argmax; only the confidence the rule
reads changes) and `clover_local.tiny.evaluate` runs with the remaining arguments. BENCHMARKS.md "Reveal rules"."""

from __future__ import annotations

import sys

import torch

import clover_local.generate.block_diffusion as block_diffusion


def confidence_by(kind: str):
    def choose(logits: torch.Tensor, temperature: float, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if temperature > 0:
            raise SystemExit("greedy only: leave --temperature out")
        p = torch.softmax(logits.float(), -1)
        top2, ids = p.topk(2, -1)
        if kind == "margin":
            conf = top2[:, 0] - top2[:, 1]
        elif kind == "entropy":
            conf = torch.exp((p * torch.log(p.clamp_min(1e-30))).sum(-1))
        else:
            conf = top2[:, 0]
        return ids[:, 0], conf

    return choose


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("prob", "margin", "entropy"):
        raise SystemExit(__doc__)
    block_diffusion.choose = confidence_by(sys.argv.pop(1))
    from clover_local.tiny.evaluate import main

    main()
