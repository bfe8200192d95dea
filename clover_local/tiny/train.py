"""Train the tiny Clover model shipped with the package (the embedded default and quality yardstick).

The shipped model is one run of the 30-minute recipe (4 layers, Muon, the "short" mix, the letter-count marks
weighted 4x): 28.4 min on one thread of the 2-core VM, 0.936 held out (`evaluate --n 140`; 0.924 at `--n 700`),
3.43 answer tokens per pass; loss curve docs/tiny-loss.png. One thread makes it bit-reproducible (a second run gave
the same weights) and leaves the other core free:

    python -m clover_local.tiny.train --out clover_local/assets/tiny --optimizer muon --muon-lr-scale 2 \
        --ar-weight 1.0 --ar-scope assistant --mix short --scratchpad add,count_match --multi-turn 0.2 \
        --steps 7000 --batch-size 16 --lr 3e-3 --seed 0 --num-hidden-layers 4 --threads 1 --mark-weight 4 \
        --plot docs/tiny-loss.png

Other seeds learn letter counting too (seeds 2 and 3: 1.00) but stop at 0.871 on addition and sorting numbers
(README "Tiny model"). Without `--mark-weight` (2 threads, 21.9 min; docs/tiny-loss-30min.png) seed 0 reached
0.907 and seeds 1 and 2 stalled on letter counting (0.771, 0.764).

The model shipped before (0.957, 309 min) was eight stages, each continuing from the weights (and tokenizer) of
the one before (loss curve docs/tiny-loss-8stage.png):

    python -m clover_local.tiny.train --out /tmp/tiny-stage1
    python -m clover_local.tiny.train --out /tmp/tiny-stage2 --init /tmp/tiny-stage1 \
        --mix hard --steps 3000 --lr 2e-3 --threads 1
    python -m clover_local.tiny.train --out /tmp/tiny-stage3 --init /tmp/tiny-stage2 \
        --mix focus --scratchpad add --steps 1500 --lr 2e-3 --threads 1 --seed 5
    python -m clover_local.tiny.train --out /tmp/tiny-stage4 --init /tmp/tiny-stage3 \
        --mix focus --scratchpad add,count_letter --multi-turn 0.3 --steps 3500 --lr 2e-3 --threads 1 --seed 6
    python -m clover_local.tiny.train --out /tmp/tiny-stage5 --init /tmp/tiny-stage4 \
        --mix count --scratchpad add,count_match --multi-turn 0.2 --steps 2500 --lr 2e-3 --seed 9
    python -m clover_local.tiny.train --out /tmp/tiny-stage6 --init /tmp/tiny-stage5 \
        --mix focus --scratchpad add,count_match --multi-turn 0.3 --steps 1500 --lr 1.5e-3 --seed 10
    python -m clover_local.tiny.train --out /tmp/tiny-stage7 --init /tmp/tiny-stage6 \
        --mix count --scratchpad add,count_match --multi-turn 0.2 --steps 1500 --lr 1.5e-3 --seed 11
    python -m clover_local.tiny.train --out /tmp/tiny-stage8 --init /tmp/tiny-stage7 \
        --mix focus --scratchpad add,count_match --multi-turn 0.3 --steps 1200 --lr 1e-3 --seed 12

Stage 1 spreads the data over every task; stage 2 puts most of it on the copy-and-compare tasks; stages 3 and 4
teach addition and letter counting through worked thinking traces (corpus.SCRATCHPADS) and, in stage 4, chats
where the question is the second turn; stage 5 replaces the letter-counting tally with the match trace
(`b- a1 n- a2`) and gives counting almost half the data; stage 6 rebalances towards addition; stages 7 and 8
repeat that pair at lower learning rates, which is when the letter comparison was learned (0.45 -> 0.95).

From a fixed seed: generate the synthetic corpus, train the byte-level BPE tokenizer, then train a model of the
full Clover architecture (GDN and attention layers 3:1, MoE with shared expert, the preview extras) with the
block-diffusion objective: every block of a conversation is masked at its own random ratio and denoised by a
preview pass that sees the clean blocks before it through the causal pass (`CloverModel.forward_all_blocks`,
which equals decoding's block-by-block passes); the loss is cross-entropy on the masked positions. Prompt
tokens are never masked (decoding knows them); positions after the answer's end are trained to be padding.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer

from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
from clover_local.config import parse_config
from clover_local.model.clover import CloverModel
from clover_local.model.noising import mask_blocks
from clover_local.tiny import corpus
from clover_local.tiny.muon import Muon, split_params
from clover_local.tiny.tokenizer_build import build_tokenizer, write_tokenizer_assets


@dataclass
class TrainSettings:
    seed: int = 0
    n_train: int = 60_000
    vocab_size: int = 512
    steps: int = 2200
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    threads: int = 2
    block_size: int = 16
    hidden_size: int = 128
    num_hidden_layers: int = 8
    head_dim: int = 64
    partial_rotary_factor: float = 0.5
    ar_weight: float = 0.5
    ar_scope: str = "all"  # next-token loss on "all" real tokens or only the "assistant" part
    num_experts: int = 16
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 128
    shared_expert_intermediate_size: int = 128
    threshold: float = 0.9
    mix: str = "base"  # task mix (corpus.MIXES)
    warm_mix: str = ""  # a mix for the first `warm_steps` steps (a curriculum), e.g. "count"
    warm_steps: int = 0
    multi_turn: float = 0.0  # share of examples asked after one earlier exchange (chats re-send history)
    scratchpad: str = ""  # tasks that think through worked traces, comma-separated (corpus.SCRATCHPADS)
    init: str = ""  # continue from this tiny checkpoint folder (its weights and tokenizer) instead of from scratch
    optimizer: str = "adamw"  # "muon": Muon for the hidden matrices, AdamW for the rest (tiny/muon.py)
    muon_lr_scale: float = 2.0  # Muon's learning rate as a multiple of `lr` (2 learned faster than 1 on this model)
    mark_weight: float = 1.0  # loss weight on the letter-count traces' marks (`-` or the match number per letter)


def model_spec(s: TrainSettings, tok) -> TinySpec:
    return TinySpec(
        hidden_size=s.hidden_size,
        num_hidden_layers=s.num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=s.head_dim,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
        num_experts=s.num_experts,
        num_experts_per_tok=s.num_experts_per_tok,
        moe_intermediate_size=s.moe_intermediate_size,
        shared_expert_intermediate_size=s.shared_expert_intermediate_size,
        vocab_size=tok.get_vocab_size(),
        full_attention_interval=4,
        partial_rotary_factor=s.partial_rotary_factor,
        rope_theta=10_000.0,
        block_size=s.block_size,
        mask_token_id=tok.token_to_id("<|mask|>"),
        eos_token_id=tok.token_to_id("<|im_end|>"),
    )


def init_weights(model: CloverModel, seed: int) -> None:
    """Small normal linears, identity norms, the backbone's decay init, neutral preview extras."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        with torch.no_grad():
            if "layernorm" in name or name.endswith(("q_norm.weight", "k_norm.weight")) or name == "norm.weight":
                p.zero_()
            elif name.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)
            elif leaf == "A_log":
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=gen).log())
            elif leaf == "dt_bias":
                # Mamba-style: softplus(dt_bias) = dt, log-uniform in [1e-3, 1e-1], so the per-token decay
                # exp(-A·dt) starts between 0.2 and 0.999 (dt_bias = 1 would forget almost everything each token)
                dt = torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=gen).exp()
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif leaf == "conv_right_weight":
                p.normal_(0.0, 0.1, generator=gen)
            elif leaf == "bd_softmax_logit_scale":
                p.fill_(4.0)
            elif leaf in ("bd_softmax_history_bias", "bd_softmax_history_c"):
                p.zero_()
            elif "conv1d" in name:
                p.normal_(0.0, 0.3, generator=gen)
            else:
                p.normal_(0.0, 0.02, generator=gen)


def load_weights(model: CloverModel, folder: Path) -> None:
    """Weights of an earlier stage (saved by `save`: `model.` prefix, BF16) into `model`, every tensor required."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    state = {(k if k == "lm_head.weight" else k.removeprefix("model.")): v.float() for k, v in state.items()}
    model.load_state_dict(state, strict=True)


def count_marks(ex: corpus.Example, ids: list[int], tok) -> list[int]:
    """Positions of a letter-count trace's marks in `ids` (the `-` or match number written after each letter,
    between `<think>` and `</think>`): the tokens that carry the letter comparison, ~30 % of them numbers."""
    if ex.task != "count_letter" or not ex.thinking:
        return []
    start, end = tok.token_to_id("<think>"), tok.token_to_id("</think>")
    if start not in ids or end not in ids:
        return []
    lo, hi = ids.index(start), ids.index(end)
    # the last mark may share a token with the trace's closing newline ("-Ċ"), as small tokenizers merge it
    return [i for i in range(lo + 1, hi) if (t := tok.id_to_token(ids[i]).removesuffix("Ċ")) == "-" or t.isdigit()]


class Batches:
    """Tokenised conversations with a per-position 'may be masked' flag (False on the prompt) and loss weight
    (`mark_weight` on the letter-count traces' marks, 1 elsewhere)."""

    def __init__(self, examples: list[corpus.Example], tok, block_size: int, seed: int,
                 mark_weight: float = 1.0) -> None:
        self.rows: list[tuple[list[int], int]] = []
        self.marks: list[list[int]] = []
        for ex in examples:
            full = tok.encode(corpus.render_conversation(ex)).ids
            # the prompt ends at "<|im_start|>assistant\n": everything after it may be masked
            head = tok.encode(corpus.render_prompt(ex, enable_thinking=True)).ids
            self.rows.append((full, len(head)))
            self.marks.append(count_marks(ex, full, tok) if mark_weight != 1.0 else [])
        self.mark_weight = mark_weight
        self.block_size = block_size
        # length buckets (in blocks) so a batch is not padded to the longest conversation of the corpus
        self.buckets: dict[int, list[int]] = {}
        for i, (ids, _) in enumerate(self.rows):
            self.buckets.setdefault(math.ceil(len(ids) / block_size), []).append(i)
        self.bucket_keys = sorted(self.buckets)
        self.bucket_weights = [len(self.buckets[k]) for k in self.bucket_keys]
        self.pad = tok.token_to_id("<|endoftext|>")
        self.mask = tok.token_to_id("<|mask|>")
        self.rng = random.Random(seed)

    def sample(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """(clean ids, noisy ids, masked positions, real-token positions, maskable positions, loss weights) for n
        conversations of one length bucket."""
        bucket = self.buckets[self.rng.choices(self.bucket_keys, self.bucket_weights)[0]]
        picks = [self.rng.choice(bucket) for _ in range(n)]
        clean, real, maskable = self.collate([self.rows[i] for i in picks])
        noisy, masked = mask_blocks(clean, self.block_size, self.mask, gen, maskable)
        weight = None  # every token at weight 1: the plain mean, bit for bit as before the option existed
        if self.mark_weight != 1.0:
            weight = torch.ones(clean.shape)
            for row, i in enumerate(picks):
                weight[row, self.marks[i]] = self.mark_weight
        return clean, noisy, masked, real, maskable, weight

    def collate(self, picks: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids padded to whole blocks, real-token positions, maskable positions) for rows of `self.rows`."""
        bs = self.block_size
        length = max(math.ceil(len(ids) / bs) * bs for ids, _ in picks)
        clean = torch.full((len(picks), length), self.pad, dtype=torch.long)
        maskable = torch.zeros(len(picks), length, dtype=torch.bool)
        real = torch.zeros(len(picks), length, dtype=torch.bool)
        for i, (ids, prompt_len) in enumerate(picks):
            clean[i, : len(ids)] = torch.tensor(ids)
            maskable[i, prompt_len:] = True
            real[i, : len(ids)] = True
        return clean, real, maskable


def optimizers(model: CloverModel, s: TrainSettings) -> list[torch.optim.Optimizer]:
    """AdamW for everything, or Muon for the hidden matrices (at `muon_lr_scale` x lr) and AdamW for the rest;
    the schedule in `train` moves both together."""
    if s.optimizer == "muon":
        matrices, decay, no_decay = split_params(model)
    elif s.optimizer == "adamw":
        matrices = []
        decay = [p for p in model.parameters() if p.ndim >= 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
    else:
        raise ValueError(f"unknown optimizer {s.optimizer!r}; known: adamw, muon")
    adamw = torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=s.lr, betas=(0.9, 0.98), fused=True,
    )
    if not matrices:
        return [adamw]
    muon = Muon(matrices, lr=s.lr * s.muon_lr_scale, weight_decay=s.weight_decay)
    for group in muon.param_groups:
        group["lr_scale"] = s.muon_lr_scale  # the schedule below scales every group's rate by its lr_scale
    return [adamw, muon]


def batch_loss(model: CloverModel, batch: tuple[torch.Tensor, ...], s: TrainSettings) -> torch.Tensor:
    """The training objective of one `Batches.sample` batch: masked-token cross-entropy over the previewed blocks,
    plus `ar_weight` × the causal pass's next-token loss."""
    clean, noisy, masked, real, maskable, weight = batch
    # preview only blocks with a masked position (prompt-only blocks have no loss): same loss, less work
    per_block = masked.view(masked.shape[0], -1, s.block_size)
    blocks = per_block.any(-1)
    clean_h, hidden = model.forward_all_blocks(clean, noisy, blocks)
    chosen = per_block[blocks]
    logits = model.lm_head(hidden[chosen]).float()
    targets = clean.view_as(per_block)[blocks][chosen]
    loss = _weighted_ce(logits, targets, None if weight is None else weight.view_as(per_block)[blocks][chosen])
    if s.ar_weight:
        # auxiliary next-token loss on the causal pass: dense supervision that also gives `score` meaning
        nxt = real[:, 1:] & (maskable[:, 1:] if s.ar_scope == "assistant" else True)
        ar_logits = model.lm_head(clean_h[:, :-1][nxt]).float()
        next_weight = None if weight is None else weight[:, 1:][nxt]
        loss = loss + s.ar_weight * _weighted_ce(ar_logits, clean[:, 1:][nxt], next_weight)
    return loss


def _weighted_ce(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy summed with per-token weights over the token count (the plain mean without weights), so
    up-weighting a few tokens leaves the others' scale alone."""
    if weight is None:
        return F.cross_entropy(logits, target)
    return (F.cross_entropy(logits, target, reduction="none") * weight).sum() / max(target.numel(), 1)


def train(out: Path, s: TrainSettings, log_every: int = 50, save_every: int = 500) -> dict:
    torch.manual_seed(s.seed)
    torch.set_num_threads(s.threads)
    t0 = time.time()
    traces = [t for t in s.scratchpad.split(",") if t]
    examples = corpus.make_train(s.n_train, s.seed, mix=s.mix, multi_turn=s.multi_turn, scratchpad=traces)
    if s.init:  # a later stage keeps the earlier stage's tokenizer (rebuilding it from this mix could differ)
        tok = Tokenizer.from_file(str(Path(s.init) / "tokenizer.json"))
    else:
        tok = build_tokenizer([corpus.render_conversation(e) for e in examples[:20_000]], s.vocab_size)
    spec = model_spec(s, tok)
    raw = tiny_config_dict(spec)
    raw["threshold"] = s.threshold
    cfg = parse_config(raw)
    model = CloverModel(cfg)
    init_weights(model, s.seed)
    if s.init:
        load_weights(model, Path(s.init))
    model.train()
    data = Batches(examples, tok, s.block_size, s.seed, s.mark_weight)
    warm = None
    if s.warm_mix and s.warm_steps > 0:  # same seed, same traces, another task mix
        warm = Batches(corpus.make_train(s.n_train, s.seed, mix=s.warm_mix, multi_turn=s.multi_turn,
                                         scratchpad=traces), tok, s.block_size, s.seed, s.mark_weight)
    opts = optimizers(model, s)
    gen = torch.Generator().manual_seed(s.seed + 1)
    curve: list[tuple[int, float]] = []
    running = None
    for step in range(1, s.steps + 1):
        lr = s.lr * min(1.0, step / s.warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / s.steps)))
        for group in (g for opt in opts for g in opt.param_groups):
            group["lr"] = max(lr, s.lr * 0.02) * group.get("lr_scale", 1.0)
        source = warm if warm is not None and step <= s.warm_steps else data
        loss = batch_loss(model, source.sample(s.batch_size, gen), s)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in opts:
            opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % log_every == 0 or step == 1:
            curve.append((step, running))
            print(f"step {step:5d}  loss {running:.4f}  lr {lr:.2e}  {time.time() - t0:6.0f}s", flush=True)
        if step % save_every == 0 and step < s.steps:
            save(out, model, tok, raw, spec, s, curve, time.time() - t0)
    save(out, model, tok, raw, spec, s, curve, time.time() - t0)
    return {"seconds": time.time() - t0, "final_loss": running}


def save(out: Path, model: CloverModel, tok, raw: dict, spec: TinySpec, s: TrainSettings, curve, seconds) -> None:
    """Write a checkpoint folder in the real Clover layout (`model.` prefix, fused experts), BF16 weights."""
    out.mkdir(parents=True, exist_ok=True)
    state = {
        ("lm_head.weight" if name == "lm_head.weight" else f"model.{name}"): p.detach().to(torch.bfloat16).contiguous()
        for name, p in model.state_dict().items()
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    generation = {
        "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
        "pad_token_id": tok.token_to_id("<|endoftext|>"),
        "mask_token_id": spec.mask_token_id,
        "block_size": spec.block_size,
        "threshold": s.threshold,
        "temperature": 0.0,
        "max_new_tokens": 64,
    }
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    write_tokenizer_assets(tok, out)
    record = {"settings": asdict(s), "seconds": round(seconds, 1), "curve": curve,
              "earlier_stages": earlier_stages(Path(s.init)) if s.init else []}
    (out / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    write_calibration(out / "calibration.jsonl")


def earlier_stages(init: Path) -> list[dict]:
    """The stages a continued run stands on (from the init folder's training.json), oldest first, so the
    shipped record says how the model was made from scratch."""
    path = init / "training.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    return data.get("earlier_stages", []) + [{k: data[k] for k in ("settings", "seconds", "curve")}]


# The calibration set does not follow a stage's seed: every stage writes the same file (the one quantization
# numbers in the README were measured with), so continuing training does not move the quantizer's yardstick.
CALIBRATION_SEED = 13


def write_calibration(path: Path, seed: int = CALIBRATION_SEED, n: int = 400) -> None:
    """The tiny model's own calibration set (quantize uses a checkpoint's `calibration.jsonl` when present):
    training-split conversations as chat messages, with thinking traces where they have them."""
    lines = []
    for i, ex in enumerate(corpus.make_train(n, seed)):  # the base mix: every task, as a user would ask
        assistant = {"role": "assistant", "content": ex.answer}
        if ex.thinking:
            assistant["reasoning_content"] = ex.thinking
        lines.append(json.dumps({"id": f"tiny-{i:04d}", "category": ex.task,
                                 "messages": [{"role": "user", "content": ex.prompt}, assistant]},
                                ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot_curve(training_json: Path, png: Path) -> None:
    """Loss curve of a run as a PNG (needs matplotlib, a development-only dependency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(training_json.read_text())
    stages = data.get("earlier_stages", []) + [data]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    offset = 0
    for i, stage in enumerate(stages):
        steps, losses = zip(*stage["curve"])
        st = stage["settings"]
        extras = "".join([f", traces: {st['scratchpad']}" if st.get("scratchpad") else "",
                          f", {st['multi_turn']:.0%} 2-turn" if st.get("multi_turn") else ""])
        ax.plot([offset + x for x in steps], losses,
                label=f"stage {i + 1}: {st.get('mix', 'base')} mix{extras}, {steps[-1]} steps")
        offset += stage["settings"]["steps"]
    if len(stages) > 1:
        ax.legend(fontsize=7)
    ax.set_xlabel("step")
    ar = stages[-1]["settings"].get("ar_weight", 0.5)
    ax.set_ylabel(f"masked CE + {ar:g} x next-token CE (EMA)" if ar else "masked CE (EMA)")
    ax.set_yscale("log")
    minutes = sum(stage["seconds"] for stage in stages) / 60
    ax.set_title(f"tiny Clover, block-diffusion objective ({minutes:.0f} min on CPU)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None, help="also write the loss curve PNG here")
    for field, value in asdict(TrainSettings()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args()
    settings = TrainSettings(**{k: getattr(args, k) for k in asdict(TrainSettings())})
    # checked before training: the first save comes minutes in, and a missing --init would end in a traceback
    if args.out.exists() and not args.out.is_dir():
        raise SystemExit(f"error: --out {args.out} is a file, not a folder")
    for need in ("model.safetensors", "tokenizer.json") if settings.init else ():
        if not (Path(settings.init) / need).is_file():
            raise SystemExit(f"error: --init {settings.init} is not a tiny checkpoint folder: it has no {need}")
    print(json.dumps(train(args.out, settings)))
    if args.plot:
        plot_curve(args.out / "training.json", args.plot)


if __name__ == "__main__":
    main()
