"""The host's share of a steady graphed preview pass at the real counts, timed on a CPU.

    python docs/host_overhead.py [--resident-routing] [--read-through] [--passes 300] [--draw]

Why: a graph replay runs no Python, but around it the runtime books the pass on the host (`Runtime.pass_scope`,
`_settle_optimistic`): counters, the expert cache's LRU ticks and pins, the next pass's slot table, the routing
history. The GPU waits for what comes before the replay, so at a 12 ms pass every 0.1 ms of it is ~1 %; the booking
after the pass waits too, except where the pass stands whatever it used (host reads, or every expert resident):
there it runs while the device computes the LM head (`Runtime.finish_pass`).
This drives the real `ExpertCache` (40 layers × 256 experts, 8,860 slots, tiny slabs as `cache_sim` does),
`OptimisticPass` and `RoutingHistory` with one block's uniform routing (≈ 6,500 experts used a pass, all resident
after its first pass), making the host calls of a steady pass in the runtime's order, and times each. The
device work (the replay, the 40 KB read of the use counts) is not in it: on the CPU those tensors are host ones.

`--draw` also times the decoder's choice of tokens from one pass's logits at the real vocabulary (32 masked rows ×
248,320; `generate.sampling.choose`): greedy, sampled, sampled with top-p. On a GPU that runs on the device; here
it shows what the host pays where it does not.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from clover_local.runtime.cache_sim import SimConfig, _cache, _Router
from clover_local.runtime.optimistic import OptimisticPass, RoutingHistory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resident-routing", action="store_true", help="fill the route table before each pass")
    parser.add_argument("--read-through", action="store_true",
                        help="host reads with read-through installs: each pass is offered slots (`offer_slots`)")
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--draw", action="store_true", help="also time the decoder's token choice (32 × 248,320)")
    args = parser.parse_args()
    cfg = SimConfig()
    ec = _cache(cfg)
    ec.warm()
    opt, history = OptimisticPass(ec), RoutingHistory()
    router = _Router(cfg)
    counts = router.counts(router.rows(cfg.block)).astype(np.int32)
    ec.begin_pass(False)  # the block's first pass loads its set
    ec.repair(counts, False)
    ec.commit_uses(counts)
    ec.end_pass()
    assert ec.missing(counts) == 0
    opt.counts.copy_(torch.from_numpy(counts.reshape(-1)))
    if args.read_through:
        opt.host_reads = True
        ec.set_read_through(True)

    steps = {  # before the replay is launched: the device waits for these
        "totals (before)": ec.totals,
        "begin_pass": lambda: ec.begin_pass(False),
        "route table (resident routing)": (lambda: ec.restricted_choice(cfg.top_k)) if args.resident_routing
        else None,
        "slot table, settle copies, zero counts": opt.begin,
    }
    after_pass = {  # the booking: after the pass, while the LM head runs where the pass stands unseen
        "read counts": opt.finish,
        "missing (only where a pass can be rerun)": lambda: ec.missing(counts),
        "commit_uses": lambda: ec.commit_uses(counts),
        "history": lambda: history.record(counts, opt.row_of),
        "end_pass": ec.end_pass,
        "totals (after)": ec.totals,
    }
    first_after = next(iter(after_pass))
    steps.update(after_pass)
    spent = {name: 0.0 for name, fn in steps.items() if fn is not None}
    for i in range(args.passes + 20):  # the first 20 warm up
        for name in spent:
            t0 = time.perf_counter()
            steps[name]()
            if i >= 20:
                spent[name] += time.perf_counter() - t0
        opt.counts.copy_(torch.from_numpy(counts.reshape(-1)))  # begin zeroed them
    total = before = 0.0
    for name, s in spent.items():
        if name == first_after:
            before = total
            print(f"{'  before the replay':40s} {before:8.1f} µs")
        us = 1e6 * s / args.passes
        total += us
        print(f"{name:40s} {us:8.1f} µs")
    print(f"{'  after the pass (the booking)':40s} {total - before:8.1f} µs")
    print(f"{'host time per steady pass':40s} {total:8.1f} µs  ({len(np.flatnonzero(counts))} experts used)")
    if args.draw:
        draw()


def draw(rows: int = 32, vocab: int = 248_320, reps: int = 5) -> None:
    from clover_local.generate.sampling import choose

    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 4
    for temperature, top_p in ((0.0, 1.0), (1.0, 1.0), (0.7, 0.9)):
        gen = torch.Generator().manual_seed(1)
        choose(logits, temperature, top_p, gen)
        t0 = time.perf_counter()
        for _ in range(reps):
            choose(logits, temperature, top_p, gen)
        ms = 1e3 * (time.perf_counter() - t0) / reps
        print(f"{f'choose {rows}x{vocab}, temperature {temperature}, top-p {top_p}':40s} {ms:8.1f} ms")
    # what the decoder does with the LM head's output of a pass with half the block masked (greedy): before
    # 2026-12-03 every row went through the LM head, was shifted by a concatenation and the masked rows picked;
    # now only the rows that predict a masked position do
    head = (logits / 4).to(torch.bfloat16)
    masked = list(range(1, rows, 2))

    def whole_block():
        full = head.float()
        full = torch.cat([full[:1], full[:-1]], 0)
        full[:, 0] = float("-inf")
        return choose(full[masked], 0.0, 1.0, None)

    def masked_rows():
        part = head[[p - 1 for p in masked]].float()  # the LM head's output for those rows only
        part[:, 0] = float("-inf")
        return choose(part, 0.0, 1.0, None)

    for name, fn in ((f"decoder after the LM head, all {rows} rows", whole_block),
                     (f"... only the {len(masked)} masked rows' rows", masked_rows)):
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        print(f"{name:40s} {1e3 * (time.perf_counter() - t0) / reps:8.1f} ms")


if __name__ == "__main__":
    main()
