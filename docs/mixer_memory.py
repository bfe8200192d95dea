"""Time and peak-RSS growth of one training-form call of a mixer at the quantizer's shape (BENCHMARKS.md).

Hidden 2048, 4 sequences × 2,048 tokens, every 32-token block previewed, BF16, no grad: what `quantize` runs per
layer. Attention: 16 query heads × 256, 2 KV heads; GDN: 16 key heads, 32 value heads, 128 × 128. Random weights
and inputs. Usage: python docs/mixer_memory.py attention|gdn (one mixer per process: peak RSS is per process)
"""

from __future__ import annotations

import resource
import sys
import time

import torch

from clover_local.checkpoint.synthetic import tiny_config_dict
from clover_local.config import parse_config
from clover_local.model.attention import Attention
from clover_local.model.gdn import GatedDeltaNet
from clover_local.model.rope import Rotary
from clover_local.runtime.synthetic_pack import spec_of


def main(mixer: str, batch: int = 4, seq: int = 2048) -> None:
    torch.manual_seed(0)
    cfg = parse_config(tiny_config_dict(spec_of("full")))  # the real shapes
    block = cfg.diffusion.block_size
    module = (Attention(cfg) if mixer == "attention" else GatedDeltaNet(cfg)).to(torch.bfloat16)
    for p in module.parameters():
        torch.nn.init.normal_(p, 0.0, 0.02)
    clean = torch.randn(batch, seq, cfg.hidden_size, dtype=torch.bfloat16)
    noisy = torch.randn(batch * seq // block, block, cfg.hidden_size, dtype=torch.bfloat16)
    items = torch.arange(batch * seq // block)
    row, blk = items // (seq // block), items % (seq // block)
    if mixer == "attention":
        cos, sin = Rotary(cfg.rotary_dim, cfg.rope_theta).cos_sin(torch.arange(seq), torch.bfloat16)
        run = lambda: module.forward_all_blocks(clean, noisy, cos, sin, block, row, blk)  # noqa: E731
    else:
        run = lambda: module.forward_all_blocks(clean, noisy, block, row, blk)  # noqa: E731
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.no_grad():
        run()
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20  # KiB on Linux
    print(f"{mixer}: {seconds:.1f} s, peak RSS +{grown:.2f} GiB ({torch.get_num_threads()} threads)")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("attention", "gdn"):
        raise SystemExit("usage: python docs/mixer_memory.py attention|gdn")
    main(sys.argv[1])
