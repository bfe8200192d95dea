"""How many device launches one steady preview pass makes, counted on a CPU: the launch-bound part of a pass.

    python docs/launch_count.py [--dtype bf16] [--by-line] [--pass preview|commit|merged|prefill]

Why: in a CUDA-graphed pass every launch costs a few µs of GPU time however little it computes (BENCHMARKS.md:
"the rest of each layer" took 4.0 ms of 26.8), so launches per layer are a figure a machine without a GPU can
track. Loads the synthetic small pack (`bench --synthetic small`: 4 layers) with the runtime's Triton kernels
installed and interpreted (CLOVER_FORCE_TRITON=1, TRITON_INTERPRET=1), runs a 64-token prefill and one preview,
then counts the second preview's aten ops that would launch a kernel on a GPU (views, allocations and scalar reads
excluded, and casts to the tensor's own dtype) plus its Triton launches. Approximate: interpreted, the partial
sums of `w4a16._sum_parts` round through a torch cast that a GPU does not launch, and the dense kernels' split-K
heuristic (which adds that partial-sum launch) sees one SM, so it rarely splits.
"""

from __future__ import annotations

import argparse
import collections
import os
import traceback

os.environ["TRITON_INTERPRET"] = "1"  # before triton defines the kernels
os.environ["CLOVER_FORCE_TRITON"] = "1"

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from clover_local.runtime.load import RuntimeOptions, load_packed_model  # noqa: E402
from clover_local.runtime.synthetic_pack import ensure_synthetic  # noqa: E402

NO_KERNEL = {"view", "_unsafe_view", "reshape", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze",
             "select", "slice", "as_strided", "alias", "detach", "unbind", "split", "split_with_sizes", "chunk",
             "narrow", "lift_fresh", "empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like",
             "is_nonzero", "_local_scalar_dense", "sym_size", "sym_stride", "numel", "dim", "size", "stride",
             "item"}


class _Count(TorchDispatchMode):
    def __init__(self, by_line: bool) -> None:
        super().__init__()
        self.by_line, self.inside_triton = by_line, 0
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        no_op = (name == "to" and torch.is_tensor(out) and torch.is_tensor(args[0])
                 and out.data_ptr() == args[0].data_ptr() and out.dtype == args[0].dtype)  # a cast to itself
        # a reshape (seen whole under inference_mode) launches a copy when its input's strides do not allow a view
        copied = (name == "reshape" and torch.is_tensor(out) and torch.is_tensor(args[0])
                  and out.untyped_storage().data_ptr() != args[0].untyped_storage().data_ptr())
        if (name not in NO_KERNEL or copied) and not no_op and not self.inside_triton:  # the interpreter's work: no launch
            where = ""
            if self.by_line:
                frames = [f for f in traceback.extract_stack() if "clover_local" in f.filename]
                where = f" @ {frames[-1].filename.split('clover_local/')[1]}:{frames[-1].lineno}" if frames else ""
            self.ops[f"aten.{name}{where}"] += 1
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--by-line", action="store_true", help="name the source line of each aten op")
    ap.add_argument("--pass", dest="kind", choices=("preview", "commit", "merged", "prefill"), default="preview",
                    help="count a steady preview pass (default), the block's commit (its causal pass), the "
                         "commit merged with the next block's first preview (`commit_and_preview`), or one "
                         "prompt prefill chunk (the runtime's 512 rows: the second of a 1,024-token prompt, "
                         "over the first's keys and states)")
    args = ap.parse_args()
    counter = _Count(args.by_line)
    run = InterpretedFunction.run

    def counted_run(self, *a, **k):
        counter.ops[f"triton.{self.fn.__name__}"] += 1
        counter.inside_triton += 1
        try:
            return run(self, *a, **k)
        finally:
            counter.inside_triton -= 1

    InterpretedFunction.run = counted_run
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    context = 1152 if args.kind == "prefill" else 640  # room for two prefill chunks
    model = load_packed_model(ensure_synthetic("small"), torch.device("cpu"), dtype, RuntimeOptions(context=context))
    cfg = model.config
    mask = cfg.diffusion.mask_token_id if cfg.diffusion.mask_token_id is not None else cfg.vocab_size - 1
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        cache = model.new_cache()
        model(torch.randint(0, mask, (1, 64), generator=gen), cache, rows=slice(-1, None))
        block = torch.full((1, cfg.diffusion.block_size), mask, dtype=torch.long)
        model(block, cache, preview=True)
        chunk = model.runtime.prefill_chunk
        if args.kind == "prefill":  # a prompt's first chunk, not counted (the cache and its buffers are new)
            prompt_cache = model.new_cache()
            model(torch.randint(0, mask, (1, chunk), generator=gen), prompt_cache, rows=slice(-1, None))
        counter.ops.clear()
        with counter:
            if args.kind == "preview":
                model(block, cache, preview=True)
            elif args.kind == "commit":  # the LM head on the last row, as the decoder asks; settle copies included
                model(block, cache, rows=slice(-1, None))
            elif args.kind == "merged":  # the commit's rows, then the next block's masks
                model.commit_and_preview(torch.randint(0, mask, block.shape, generator=gen), block, cache)
            else:  # the prompt's next chunk, LM head on its last row (every expert of this pack is resident, so
                # it runs optimistically; with experts offloaded it is a syncing pass)
                model(torch.randint(0, mask, (1, chunk), generator=gen), prompt_cache, rows=slice(-1, None))
    n_layers = cfg.num_hidden_layers
    total = sum(counter.ops.values())
    aten = sum(v for k, v in counter.ops.items() if k.startswith("aten."))
    print(f"{total} launches in one {args.kind} pass ({aten} aten ops, {total - aten} Triton launches), "
          f"{total / n_layers:.1f} a layer over {n_layers} layers ({', '.join(cfg.layer_types)})")
    for name, n in counter.ops.most_common():
        print(f"{n:5}  {name}")


if __name__ == "__main__":
    main()
