"""How long a pack takes to load, layer by layer, at the real shapes: `PYTHONPATH=. python docs/load_time.py`.

Writes a synthetic pack with the 35B model's shapes but `--layers` decoder layers (default 4: ≈ 3.2 GB; the full
pack is 40 layers, ≈ 19.6 GB) into a scratch folder, loads it through the offloading runtime on the CPU with
`--budget` GiB of "device" memory (default 2: part of the experts in the slot cache, the rest in host slabs, as on a
16 GB card), and prints the time before the first layer is in (config, index, globals: the 1 GB embedding table,
the LM head; and the first process's torch imports) and each later layer's (reading its shard: 256 experts × 3
projections; filling the slabs). Run it twice to see the page cache's effect; `--keep DIR` keeps the pack there.
BENCHMARKS.md "Starting up"."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import replace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--budget", type=float, default=2.0, help="GiB for the runtime's device side")
    parser.add_argument("--keep", default=None, help="write (or reuse) the pack under this folder")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="clover-load-")
    os.environ["CLOVER_LOCAL_CACHE"] = root
    import torch

    import clover_local.runtime.synthetic_pack as synthetic
    from clover_local.runtime.load import RuntimeOptions, load_packed_model

    real = synthetic.spec_of
    synthetic.spec_of = lambda kind: (replace(real(kind), num_hidden_layers=args.layers) if kind == "full"
                                      else real(kind))
    try:
        t = time.perf_counter()
        folder = synthetic.ensure_synthetic("full")
        print(f"pack: {args.layers} layers at the real shapes in {folder} ({time.perf_counter() - t:.1f} s to write)")
        stamps: list[float] = []
        t0 = time.perf_counter()
        model = load_packed_model(folder, torch.device("cpu"), torch.bfloat16,
                                  RuntimeOptions(vram_budget=int(args.budget * 2**30), context=4096),
                                  on_layer=lambda done, total: stamps.append(time.perf_counter() - t0))
        total = time.perf_counter() - t0
        per = [b - a for a, b in zip(stamps, stamps[1:])]
        plan = model.runtime.plan
        print(f"load {total:.2f} s: first layer in after {stamps[0]:.2f} s, each later one "
              f"{', '.join(f'{p:.2f}' for p in per)} s; {plan.slots} of {plan.experts_total} experts in slots")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
