"""Host memory of one layer's MoE step in `quantize` (`LayerQuantizer._quantize_moe`) on a real-size layer, in-process
on the CPU, where the "device" is host memory, so its peak RSS shows what a GPU run holds on the card (a benchmark,
not a test; BENCHMARKS.md "Quantizer memory: the MoE step a slice of rows at a time").

    PYTHONPATH=. python docs/moe_step_memory.py /tmp/clover-scale/real-1 [--rows N] [--min-expert-rows M]

SRC is a checkpoint (quantize/bench_scale.py writes `real-1`: one layer at the real shapes). The MoE inputs are N
random float32 rows (the default calibration on a GPU is 524,288 bf16 rows: 128 × 2,048 tokens, two streams).
--min-expert-rows above N × 8 / 256 sends every routed expert to round-to-nearest, which times the shared expert
and the routing and leaves the GPTQ of 256 experts out. Prints the peak above the step's start when the routing
begins (the shared expert done) and over the whole step, and a digest of the pack tensors the step made.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import time
from pathlib import Path

import torch

from clover_local.checkpoint.reader import CheckpointReader
from clover_local.model.clover import build_layer
from quantize.layer_quant import LayerQuantizer, LayerReport
from quantize.pipeline import QuantizeSettings
from quantize.profiles import get_profile


def _status(key: str) -> float:
    """A /proc/self/status figure in GiB (VmRSS now, VmHWM the peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 2**20
    raise KeyError(key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("--rows", type=int, default=131072)
    ap.add_argument("--min-expert-rows", type=int, default=1_000_000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    reader = CheckpointReader(args.src)
    cfg = reader.config
    options = QuantizeSettings(min_expert_rows=args.min_expert_rows).options()
    quantizer = LayerQuantizer(cfg, get_profile("balanced"), options, torch.device("cpu"), torch.float32)
    layer = build_layer(cfg, 0, reader.layer_state(0), torch.device("cpu"), torch.float32)
    normed = torch.randn(args.rows, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    marks: list[tuple[str, float, float]] = []
    route = layer.mlp.route

    def first_route_marked(x, *rest, **kw):
        if not marks:
            marks.append(("shared expert (until the routing)", _status("VmHWM") - base, time.perf_counter() - t0))
        return route(x, *rest, **kw)

    layer.mlp.route = first_route_marked
    out: dict[str, torch.Tensor] = {}
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    base, t0 = _status("VmRSS"), time.perf_counter()
    with torch.no_grad():
        quantizer._quantize_moe(layer, normed, out, "model.layers.0", LayerReport(0, "linear_attention"),
                                lambda step: None)
    marks.append(("whole MoE step", _status("VmHWM") - base, time.perf_counter() - t0))
    for name, gib, seconds in marks:
        print(f"{name}: peak {gib:.3f} GiB above the start, at {seconds:.1f} s")
    digest = hashlib.sha256()
    for key in sorted(out):
        digest.update(key.encode() + out[key].contiguous().view(torch.uint8).numpy().tobytes())
    print(f"{args.rows} rows; pack tensors sha256 {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
