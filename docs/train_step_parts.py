"""Where a tiny-model training step's time goes: batch sampling, forward, backward, clipping, each optimizer.

    python docs/train_step_parts.py [--layers 4] [--batch-size 16] [--steps 30] [--threads 2]

Builds the 30-minute recipe's model and data (Muon, the "short" mix with addition and letter-counting traces;
6,000 examples instead of 60,000, which only changes how long the corpus takes to build), runs 5 warm-up steps,
then prints the mean milliseconds of each part over `--steps` steps. Measure on an otherwise idle machine: two
torch processes on two cores slow each other several-fold.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from clover_local.checkpoint.synthetic import tiny_config_dict
from clover_local.config import parse_config
from clover_local.model.clover import CloverModel
from clover_local.tiny import corpus
from clover_local.tiny import train as T
from clover_local.tiny.tokenizer_build import build_tokenizer

PARTS = ("sample", "forward", "backward", "clip", "adamw", "muon")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    s = T.TrainSettings(optimizer="muon", ar_weight=1.0, ar_scope="assistant", mix="short",
                        scratchpad="add,count_match", multi_turn=0.2, batch_size=args.batch_size,
                        num_hidden_layers=args.layers, n_train=6000)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    examples = corpus.make_train(s.n_train, 0, mix=s.mix, multi_turn=s.multi_turn,
                                 scratchpad=s.scratchpad.split(","))
    tok = build_tokenizer([corpus.render_conversation(e) for e in examples], s.vocab_size)
    model = CloverModel(parse_config(tiny_config_dict(T.model_spec(s, tok))))
    T.init_weights(model, 0)
    model.train()
    data = T.Batches(examples, tok, s.block_size, 0)
    adamw, muon = T.optimizers(model, s)
    gen = torch.Generator().manual_seed(1)

    def step() -> list[float]:
        t = [time.perf_counter()]
        batch = data.sample(s.batch_size, gen)
        t.append(time.perf_counter())
        loss = T.batch_loss(model, batch, s)
        t.append(time.perf_counter())
        adamw.zero_grad(set_to_none=True)
        muon.zero_grad(set_to_none=True)
        loss.backward()
        t.append(time.perf_counter())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t.append(time.perf_counter())
        adamw.step()
        t.append(time.perf_counter())
        muon.step()
        t.append(time.perf_counter())
        return [b - a for a, b in zip(t, t[1:])]

    for _ in range(5):
        step()
    ms = np.array([step() for _ in range(args.steps)]).mean(0) * 1e3
    print("  ".join(f"{name} {v:.1f}" for name, v in zip(PARTS, ms)) + f"  total {ms.sum():.1f} ms")


if __name__ == "__main__":
    main()
