"""Host memory through one `quantize` run, step by step (a benchmark, not a test): VmRSS and VmHWM at each
progress step of `quantize_checkpoint`, in-process, one torch thread (BENCHMARKS.md "Quality measured as the
layers go").

    PYTHONPATH=. python docs/quantize_memory.py /tmp/clover-scale/real-1 [--no-eval] [--samples N --seq-len T]

SRC is a checkpoint folder with a calibration.jsonl (quantize/bench_scale.py writes `real-1` with the real
shapes); the pack goes to SRC-pack-memory. 4 × 256 calibration tokens unless --samples / --seq-len say otherwise;
with the measure, KL on 4 × 256 held-out tokens, as `clover-local quantize --seq-len 256` takes them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from quantize.pipeline import QuantizeSettings, quantize_checkpoint
from quantize.quality import QualityCheck


def _memory() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            key, value = line.split(":")
            out[key] = round(int(value.split()[0]) / 2**20, 2)  # GiB
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--samples", type=int, default=4, help="calibration sequences (quantize's default: 128)")
    ap.add_argument("--seq-len", type=int, default=256, help="tokens per calibration sequence (default 2048)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    calib = str(args.src / "calibration.jsonl")
    measure = None if args.no_eval else QualityCheck(samples=4, seq_len=256, calib=calib)

    def on_layer(i: int, n: int, step: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} layer {min(i, n - 1)} {step:28s} {_memory()}", flush=True)

    result = quantize_checkpoint(args.src, Path(f"{args.src}-pack-memory"),
                                 QuantizeSettings(samples=args.samples, seq_len=args.seq_len, calib=calib),
                                 torch.device("cpu"),
                                 overwrite=True, on_layer=on_layer, measure=measure)
    print(f"done in {result.seconds:.1f} s, {_memory()}, quality {result.quality}")


if __name__ == "__main__":
    main()
