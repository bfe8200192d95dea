"""`clover-local generate`: one answer on stdout, streamed as blocks commit; `--json` for scripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import (context_option, load_options, offload_option,
                                                  prefill_chunk_option, resident_routing_option,
                                                  vram_budget_option)
from clover_local.errors import CloverError
from clover_local.text_files import text_from


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise CloverError(f"{name} must be between {low} and {high}, got {value}")


@app.command()
def generate(
    model: str = typer.Argument(..., help="Pack or checkpoint folder, Hub repo id, or 'tiny' (the shipped model)."),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="The user message."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Read the user message from a UTF-8 file "
                                        "instead ('-': standard input), e.g. a document to ask about."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", help="Stop after this many new tokens."),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", help="Reveal every position at least this confident per pass (default: model's)."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy; above 0 samples."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass when sampling."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for sampling (same seed, same answer)."),
    think: bool = typer.Option(True, "--think/--no-think", help="Let the model think before answering."),
    system: Optional[str] = typer.Option(None, "--system", help="Optional system message."),
    raw: bool = typer.Option(False, "--raw", help="Use the prompt as is, without the chat template."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = typer.Option("auto", "--dtype", help="float32 or bfloat16 (auto: bf16 on GPU, fp32 on CPU)."),
    as_json: bool = typer.Option(
        False, "--json", help='Print one object {"text", "token_ids", "stats"} instead of streaming.'
    ),
    offload: bool = offload_option(),
    vram_budget: Optional[str] = vram_budget_option(),
    context: Optional[int] = context_option(),
    resident_routing: bool = resident_routing_option(),
    prefill_chunk: Optional[int] = prefill_chunk_option(),
) -> None:
    """Generate one answer by block diffusion: each block of masks is denoised in a few parallel passes.

    Examples:

      clover-local generate tiny --prompt "reverse a b c d"

      clover-local generate ./my-checkpoint -p "Hello" --no-think --json

      clover-local generate ./clover-int4 -p "Hello" --vram-budget 14GB --context 4096

      clover-local generate ./clover-int4 -f question-about-report.txt --context 16384
    """
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import BlockCommitted, Finished, PrefillProgress
    from clover_local.loader import load

    prompt = text_from(prompt, file, "--prompt")
    _check_range("--temperature", temperature, 0.0, 10.0)
    _check_range("--top-p", top_p, 0.0, 1.0)
    if threshold is not None:
        _check_range("--threshold", threshold, 0.0, 1.0)
    if max_new_tokens < 1:
        raise CloverError("--max-new-tokens must be at least 1")
    loaded = load(model, device, dtype, **load_options(offload, vram_budget, context, resident_routing, prefill_chunk))
    tok = loaded.tokenizer
    if raw:
        text = prompt
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        text = tok.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=think)
    settings = DecodeSettings(
        max_new_tokens=max_new_tokens,
        threshold=loaded.config.diffusion.threshold if threshold is None else threshold,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop_token_ids=loaded.stop_token_ids,
    )
    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    ids: list[int] = []
    shown = ""
    show_prefill = not as_json and sys.stderr.isatty()  # a long prompt's progress, on one line that goes away
    for event in decoder.generate(tok.encode(text), settings):
        if isinstance(event, PrefillProgress) and show_prefill:
            done = event.done == event.total
            sys.stderr.write("\r\033[K" if done else f"\rreading the prompt: {event.done:,}/{event.total:,} tokens")
            sys.stderr.flush()
        elif isinstance(event, BlockCommitted) and not as_json:
            ids.extend(event.token_ids)
            full = tok.decode(ids)
            if full.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                continue
            sys.stdout.write(full[len(shown) :])
            sys.stdout.flush()
            shown = full
        elif isinstance(event, Finished):
            final = tok.decode(event.token_ids)
            if as_json:
                print(json.dumps({"text": final, "token_ids": event.token_ids, "stats": event.stats.to_dict()},
                                 ensure_ascii=False))
            else:
                sys.stdout.write(final[len(shown) :] + "\n")
                s = event.stats
                print(
                    f"[{s.tokens} tokens, {s.passes} passes, {s.tokens_per_pass:.2f} tokens/pass, "
                    f"{s.tokens_per_second:.1f} tok/s]",
                    file=sys.stderr,
                )
