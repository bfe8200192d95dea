"""Time and peak-RSS growth of one attention training-form call at the quantizer's shape (BENCHMARKS.md).

Hidden 2048, 16 query heads × 256, 2 KV heads, 4 sequences × 2,048 tokens, every 32-token block previewed, BF16,
no grad: what `quantize` runs per attention layer. Random weights and inputs. Usage: python docs/attention_memory.py
"""

from __future__ import annotations

import resource
import time

import torch

from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
from clover_local.config import parse_config
from clover_local.model.attention import Attention
from clover_local.model.rope import Rotary


def main(batch: int = 4, seq: int = 2048, block: int = 32) -> None:
    torch.manual_seed(0)
    spec = TinySpec(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                    block_size=block, partial_rotary_factor=0.25)
    cfg = parse_config(tiny_config_dict(spec))
    attention = Attention(cfg).to(torch.bfloat16)
    for p in attention.parameters():
        torch.nn.init.normal_(p, 0.0, 0.02)
    clean = torch.randn(batch, seq, cfg.hidden_size, dtype=torch.bfloat16)
    noisy = torch.randn(batch * seq // block, block, cfg.hidden_size, dtype=torch.bfloat16)
    cos, sin = Rotary(cfg.rotary_dim, cfg.rope_theta).cos_sin(torch.arange(seq), torch.bfloat16)
    items = torch.arange(batch * seq // block)
    row, blk = items // (seq // block), items % (seq // block)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.no_grad():
        attention.forward_all_blocks(clean, noisy, cos, sin, block, row, blk)
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20  # KiB on Linux
    print(f"{seconds:.1f} s, peak RSS +{grown:.2f} GiB ({torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
