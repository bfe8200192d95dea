"""The yardstick: exact-match accuracy on held-out tasks, tokens revealed per pass, and a chat sample.

    python -m clover_local.tiny.evaluate tiny --n 140 --threshold 0.9 --json

Prompts are rendered as the chat template does by default, thinking on (the model may think before answering:
addition and letter counting are trained to work through a scratchpad there); `--no-think` pre-fills an empty
thinking block, `--history` asks each prompt as a chat's second turn.

    python -m clover_local.tiny.evaluate PACK --slots 40 --resident-routing

runs a pack through the offloading runtime with 40 expert slots, twice — exact routing, then resident routing
(a block's later passes choose among resident experts only, `RuntimeOptions.resident_routing`) — and reports
both, the share of prompts whose output is identical, and the expert bytes each copied: what the approximation
costs in answers against what it saves in copies.

Used by the tests (the shipped model must still answer) and by quantization (a pack must keep its accuracy).
Held-out prompts come from `corpus.make_heldout`, which never overlaps training.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import torch

from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
from clover_local.generate.events import Finished, PassDone
from clover_local.tiny import corpus

HELDOUT_SEED = 20261130
CHAT_PROMPTS = ("hi", "你好")


@dataclass
class EvalReport:
    accuracy: float
    per_task: dict[str, float]
    n: int
    answer_tokens_per_pass: float  # decoded answer tokens incl. the stop token that ends it / preview passes
    tokens_per_pass: float  # output tokens (stop token excluded) / preview passes
    revealed_per_pass: float  # positions revealed / preview passes (includes padding after the stop token)
    threshold: float
    factor: float  # > 0: Fast-dLLM's factor rule instead of the threshold (sampling.sure_enough)
    sampling: dict  # temperature, top_p, top_k, seed where it samples ({}: greedy)
    thinking: bool
    history: bool
    seconds: float
    chat: list[dict[str, str]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list, repr=False)  # each held-out prompt's output tokens

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["outputs"]
        return d


@dataclass
class PromptRun:
    ids: list[int]  # output tokens, stop token excluded
    passes: int
    revealed: int  # positions revealed, padding after the stop token included
    stopped: bool  # ended on a stop token (which was decoded like any other token)

    @property
    def decoded(self) -> int:
        """Tokens of the answer the passes decoded: the output plus the stop token that ends it."""
        return len(self.ids) + int(self.stopped)


def run_prompt(decoder: BlockDiffusionDecoder, tok, prompt: str, settings: DecodeSettings) -> PromptRun:
    run = PromptRun([], 0, 0, False)
    for event in decoder.generate(tok.encode(prompt), settings):
        if isinstance(event, PassDone):
            run.passes += 1
            run.revealed += len(event.revealed)
        elif isinstance(event, Finished):
            run.ids, run.stopped = event.token_ids, event.stats.stop_reason == "stop"
    return run


def evaluate(
    model, tok, mask_id: int, n: int = 140, threshold: float = 0.9, max_new_tokens: int = 64,
    enable_thinking: bool = True, seed: int = HELDOUT_SEED, history: bool = False, factor: float = 0.0,
    sampling: dict | None = None,
) -> EvalReport:
    """Block diffusion on `n` held-out prompts, greedy unless `sampling` gives DecodeSettings' temperature, top_p,
    top_k and seed; with `history`, each asked as a chat's second turn."""
    t0 = time.perf_counter()
    decoder = BlockDiffusionDecoder(model, mask_id)
    stops = list(dict.fromkeys(tok.eos_token_ids))
    settings = DecodeSettings(max_new_tokens=max_new_tokens, threshold=threshold, factor=factor, stop_token_ids=stops,
                              **(sampling or {}))
    right: dict[str, list[bool]] = defaultdict(list)
    total_tokens = total_decoded = total_passes = total_revealed = 0
    failures = []
    outputs: list[list[int]] = []
    for ex in corpus.make_heldout(n, seed, history=history):
        run = run_prompt(decoder, tok, corpus.render_prompt(ex, enable_thinking), settings)
        text = tok.decode(run.ids)
        ok = corpus.check_answer(ex, text)
        right[ex.task].append(ok)
        if not ok and len(failures) < 20:
            failures.append({"prompt": ex.prompt, "expected": ex.answer, "got": text})
        outputs.append(run.ids)
        total_tokens += len(run.ids)
        total_decoded += run.decoded
        total_passes += run.passes
        total_revealed += run.revealed
    chat = []
    for prompt in CHAT_PROMPTS:
        rendered = tok.apply_chat_template([{"role": "user", "content": prompt}], enable_thinking=True)
        run = run_prompt(decoder, tok, rendered, settings)
        chat.append({"user": prompt, "assistant": tok.decode(run.ids)})
    flat = [ok for oks in right.values() for ok in oks]
    return EvalReport(
        accuracy=sum(flat) / max(len(flat), 1),
        per_task={task: sum(oks) / len(oks) for task, oks in sorted(right.items())},
        n=len(flat),
        answer_tokens_per_pass=total_decoded / max(total_passes, 1),
        tokens_per_pass=total_tokens / max(total_passes, 1),
        revealed_per_pass=total_revealed / max(total_passes, 1),
        threshold=threshold,
        factor=factor,
        sampling=dict(sampling or {}),
        thinking=enable_thinking,
        history=history,
        seconds=time.perf_counter() - t0,
        chat=chat,
        failures=failures,
        outputs=outputs,
    )


def masked_ce(model, tok, n: int = 420, seed: int = HELDOUT_SEED, traces: tuple[str, ...] = (),
              draws: int = 2, block_size: int | None = None) -> tuple[float, int]:
    """Held-out masked-token cross-entropy: the training objective's diffusion term on `n` held-out
    conversations (rendered as training renders them, the worked `traces` included), each answer block masked at
    random ratios by a fixed generator, `draws` times. Smooth where accuracy is coarse: it tells two short
    training runs apart long before either answers many prompts right. Returns (mean CE, masked tokens)."""
    import torch.nn.functional as F

    from clover_local.model.noising import mask_blocks
    from clover_local.tiny.train import Batches

    if set(traces) - set(corpus.SCRATCHPADS):
        raise ValueError(f"unknown traces {sorted(set(traces) - set(corpus.SCRATCHPADS))}; known: "
                         f"{', '.join(corpus.SCRATCHPADS)}")
    traced = {corpus.SCRATCHPADS[name][0]: name for name in traces}
    examples = [corpus.with_scratchpad(ex, traced[ex.task]) if ex.task in traced else ex
                for ex in corpus.make_heldout(n, seed)]
    bs = block_size or model.config.diffusion.block_size
    data = Batches(examples, getattr(tok, "tokenizer", tok), bs, seed)  # the raw tokenizer, as training encodes
    gen = torch.Generator().manual_seed(seed)
    total, count = 0.0, 0
    with torch.no_grad():
        for key in data.bucket_keys:  # one batch per length bucket, in a fixed order
            clean, _, maskable = data.collate([data.rows[i] for i in data.buckets[key]])
            for _ in range(draws):
                noisy, masked = mask_blocks(clean, bs, data.mask, gen, maskable)
                per_block = masked.view(clean.shape[0], -1, bs)
                blocks = per_block.any(-1)
                _, hidden = model.forward_all_blocks(clean, noisy, blocks)
                chosen = per_block[blocks]
                logits = model.lm_head(hidden[chosen]).float()
                total += F.cross_entropy(logits, clean.view_as(per_block)[blocks][chosen], reduction="sum").item()
                count += int(chosen.sum())
    return total / max(count, 1), count


def trained_traces(folder) -> tuple[str, ...]:
    """The worked traces a tiny checkpoint was trained with (its training.json), so the held-out
    conversations are rendered the way it learned them."""
    from pathlib import Path

    record = Path(folder) / "training.json"
    if not record.is_file():
        return ()
    names = json.loads(record.read_text()).get("settings", {}).get("scratchpad", "")
    return tuple(t for t in names.split(",") if t)


def main() -> None:
    """`python -m clover_local.tiny.evaluate`: what a user can get wrong (no such model folder, a broken pack) is
    one `error:` line and a non-zero exit, as `clover-local` gives it, never a traceback."""
    from clover_local.errors import run_reporting

    run_reporting(_main)


def _sampling(args) -> dict:
    """The flags' sampling settings ({} when greedy)."""
    if args.temperature <= 0:
        return {}
    return {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "seed": args.seed}


def _main() -> None:
    from clover_local.commands._sampling_options import check_decoding
    from clover_local.loader import load

    parser = argparse.ArgumentParser(description="Evaluate a tiny Clover model on held-out tasks.")
    parser.add_argument("model", nargs="?", default="tiny")
    parser.add_argument("--n", type=int, default=140)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--reveal-factor", type=float, default=0.0,
                        help="reveal by Fast-dLLM's factor rule instead of the threshold (0: the threshold rule)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sample at this temperature (0: greedy)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed when sampling (each prompt's the same)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-think", dest="think", action="store_false",
                        help="pre-fill an empty thinking block (answer directly)")
    parser.add_argument("--history", action="store_true", help="ask each prompt as a chat's second turn")
    parser.add_argument("--masked-ce", action="store_true",
                        help="also report the held-out masked-token cross-entropy (traces as the model was trained)")
    parser.add_argument("--traces", default=None,
                        help="worked traces for --masked-ce, comma-separated (default: the model folder's "
                             "training.json; a pack has none, so give its source's, e.g. add,count_match)")
    parser.add_argument("--slots", type=int, default=None,
                        help="run a pack through the offloading runtime with this many expert slots")
    parser.add_argument("--resident-routing", action="store_true",
                        help="with --slots: evaluate exact and resident routing and compare them")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # the decoding flags against the ranges chat and generate hold them to (the threshold only where it is the rule)
    check_decoding(args.temperature, args.top_p, args.top_k, 0.0, None if args.reveal_factor else args.threshold,
                   args.reveal_factor)
    if args.resident_routing and args.slots is None:
        parser.error("--resident-routing needs --slots (the runtime's expert cache decides what is resident)")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.slots is not None:
        _compare_routing(parser, args)
        return
    loaded = load(args.model, "cpu", args.dtype)
    ce = None
    traces = trained_traces(loaded.path) if args.traces is None else tuple(t for t in args.traces.split(",") if t)
    if args.masked_ce:
        try:
            ce, _ = masked_ce(loaded.model, loaded.tokenizer, traces=traces)
        except ValueError as exc:
            parser.error(str(exc))
    report = evaluate(loaded.model, loaded.tokenizer, loaded.mask_token_id, args.n, args.threshold,
                      enable_thinking=args.think, history=args.history, factor=args.reveal_factor,
                      sampling=_sampling(args))
    if args.json:
        extra = {"masked_ce": ce, "traces": list(traces)} if ce is not None else {}
        print(json.dumps(report.to_dict() | extra, ensure_ascii=False, indent=2))
    else:
        if ce is not None:
            print(f"held-out masked-token cross-entropy {ce:.4f} (traces: {','.join(traces) or 'none'})")
        print(_summary(report))
        for task, acc in report.per_task.items():
            print(f"  {task:14s} {acc:.3f}")
        for c in report.chat:
            print(f"  chat {c['user']!r} -> {c['assistant']!r}")


def _summary(report: EvalReport) -> str:
    mode = (("thinking on" if report.thinking else "no thinking") + (", second turn" if report.history else "")
            + (f", reveal factor {report.factor:g}" if report.factor else f", threshold {report.threshold:g}"))
    return (f"accuracy {report.accuracy:.3f} on {report.n} held-out prompts ({mode}), "
            f"{report.answer_tokens_per_pass:.2f} answer tokens/pass incl. the stop token "
            f"({report.tokens_per_pass:.2f} without it, {report.revealed_per_pass:.2f} positions incl. padding), "
            f"{report.seconds:.1f}s")


def _compare_routing(parser: argparse.ArgumentParser, args) -> None:
    """`--slots N [--resident-routing]`: the pack through the runtime, exact routing and (asked) resident."""
    from clover_local.errors import CloverError
    from clover_local.loader import load
    from clover_local.runtime.load import RuntimeOptions

    runs = {}

    def name_of(resident: bool) -> str:
        return "resident" if resident else "exact"

    for resident in (False, True) if args.resident_routing else (False,):
        options = RuntimeOptions(slots=args.slots, context=4096, resident_routing=resident)
        try:
            loaded = load(args.model, "cpu", args.dtype, options)
        except ValueError as exc:  # options the runtime cannot take: one line, like a CloverError (main)
            raise CloverError(str(exc)) from None
        report = evaluate(loaded.model, loaded.tokenizer, loaded.mask_token_id, args.n, args.threshold,
                          enable_thinking=args.think, history=args.history, factor=args.reveal_factor,
                          sampling=_sampling(args))
        st = loaded.model.runtime.stats()
        runs[name_of(resident)] = (report, {
            "slots": st["slots"], "experts_total": st["experts_total"], "bytes_h2d": st["bytes_h2d"],
            "later_pass_hit_rate": st["later_pass_hit_rate"], "resident_routing": st["resident_routing"],
            "substituted": st["substituted"], "background_installs": st["background_installs"],
            "restricted_passes": st["restricted_passes"]})
        cfg = loaded.model.config
        choices = st["restricted_passes"] * cfg.diffusion.block_size * cfg.num_experts_per_tok * len(st["layers"])
        runs[name_of(resident)][1]["substituted_share"] = round(st["substituted"] / choices, 5) if choices else 0.0
    out = {name: r.to_dict() | {"runtime": rt} for name, (r, rt) in runs.items()}
    if "resident" in runs:
        a, b = runs["exact"][0].outputs, runs["resident"][0].outputs
        out["identical_outputs"] = sum(x == y for x, y in zip(a, b)) / max(len(a), 1)
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return
    for name, (report, rt) in runs.items():
        print(f"{name} routing, {rt['slots']} of {rt['experts_total']} expert slots: {_summary(report)}; "
              f"later-pass hit rate {rt['later_pass_hit_rate']}, {rt['bytes_h2d']:,} bytes copied"
              + (f", {rt['substituted']} routing choices substituted ({100 * rt['substituted_share']:.2f} % of "
                 f"those of its {rt['restricted_passes']} restricted passes)" if rt["resident_routing"] else ""))
    if "identical_outputs" in out:
        print(f"identical outputs: {out['identical_outputs']:.3f} of {runs['exact'][0].n} prompts")


if __name__ == "__main__":
    main()
