"""Host memory of `quantize`'s last step alone — the pack's globals shard: the embedding table copied, the 8-bit LM
head GPTQ'd in slices and packed — on a real-size checkpoint (a benchmark, not a test; BENCHMARKS.md "The LM head's
packing in slices"). VmHWM before and after `_write_globals`, one torch thread, 2 × 4 × 256 random calibration rows.

    PYTHONPATH=. python docs/lm_head_memory.py /tmp/clover-scale/real-1 /tmp/globals.safetensors

SRC is a checkpoint folder with the real vocabulary (quantize/bench_scale.py writes `real-1`); OUT the shard to write.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from clover_local.checkpoint.reader import CheckpointReader
from quantize.pipeline import QuantizeSettings, _write_globals
from quantize.profiles import get_profile


def _memory() -> str:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            key, value = line.split(":")
            fields[key] = f"{int(value.split()[0]) / 2**20:.2f} GiB"
    return ", ".join(f"{k} {v}" for k, v in fields.items())


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    reader = CheckpointReader(src)
    gen = torch.Generator().manual_seed(0)
    clean, noisy = (torch.randn(4, 256, reader.config.hidden_size, generator=gen) for _ in range(2))
    print(f"before: {_memory()}", flush=True)
    t0 = time.perf_counter()
    _write_globals(reader, out, clean, noisy, get_profile("balanced"), QuantizeSettings(samples=4, seq_len=256),
                   torch.device("cpu"))
    print(f"after {time.perf_counter() - t0:.1f} s: {_memory()}")


if __name__ == "__main__":
    main()
