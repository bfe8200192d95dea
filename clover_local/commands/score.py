"""`clover-local score`: causal-path log-probabilities of a text (the parity check against other engines).

A pack scores through the offloading runtime like `generate` (4-bit weights, experts cached on the device), so
scoring a 35B pack needs no more memory than chatting with it, and reads the text in the runtime's prefill passes
(up to 4,096 rows, each layer over all of them a chunk at a time: a layer's experts cross PCIe once a pass, not
once a 512-row chunk). The scoring itself is `generate.scoring` (the server's `logprobs` use it too).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from clover_local.cli import app
from clover_local.commands._model_options import (context_flag_limit, context_option, dtype_option, load_options,
                                                  load_shown, offload_option, prefill_chunk_option, revision_option,
                                                  stderr_console, vram_budget_option)
from clover_local.commands._paths import path_of
from clover_local.errors import CloverError, out_of_memory_as, what_ran_out
from clover_local.text_files import text_from


@app.command()
def score(
    model: str = typer.Argument(..., help="Pack or checkpoint folder, Hub repo id, or 'tiny' (the shipped model)."),
    text: Optional[str] = typer.Option(None, "--text", help="Text to score (without it or --file: the text piped "
                                       "in on standard input)."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="UTF-8 file to score instead of --text ('-': "
                                        "standard input).", click_type=path_of("--file")),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 … (auto: GPU if present)."),
    dtype: str = dtype_option(),
    as_json: bool = typer.Option(False, "--json", help='Print {"token_ids", "logprobs", "ppl"}.'),
    offload: bool = offload_option(),
    vram_budget: Optional[str] = vram_budget_option(),
    context: Optional[int] = context_option(),
    prefill_chunk: Optional[int] = prefill_chunk_option(),
    revision: Optional[str] = revision_option(),
) -> None:
    """Score a text with the causal pass: per-token log-probabilities and perplexity.

    logprobs\\[i] is log p(token_ids\\[i+1] | token_ids\\[..i]).

    Examples:

      clover-local score tiny --text "add 12+30" --json

      clover-local score ./clover-int4 --file page.txt --vram-budget 14GB --context 8192

      cat page.txt | clover-local score ./clover-int4 --json
    """
    from clover_local.generate.scoring import score_ids

    text = text_from(text, file, "--text")
    options = load_options(offload, vram_budget, context, prefill_chunk=prefill_chunk, revision=revision)
    loaded = load_shown(model, device, dtype, stderr_console(not as_json), **options)
    ids = loaded.tokenizer.encode(text)
    if len(ids) < 2:
        raise CloverError("the text must have at least two tokens to score")
    if len(ids) > loaded.config.max_context:
        over = context_flag_limit(loaded, context)
        if over is not None:
            raise CloverError(f"the text has {len(ids)} tokens, over {over} or score a shorter text")
        raise CloverError(f"the text has {len(ids)} tokens, over the context of {loaded.config.max_context}; "
                          "raise --context or score a shorter text")
    offloaded = loaded.model.runtime is not None
    runtime = ", or with a lower --prefill-chunk, --vram-budget or --context" if offloaded else ""
    with out_of_memory_as(lambda exc: f"ran out of {what_ran_out(exc)} scoring {len(ids):,} tokens; score a "
                          f"shorter text{runtime}"):
        logprobs = score_ids(loaded.model, ids).logprobs
    ppl = math.exp(-sum(logprobs) / len(logprobs))
    if as_json:
        print(json.dumps({"token_ids": ids, "logprobs": logprobs, "ppl": ppl}))
    else:
        print(f"{len(ids)} tokens, mean log-prob {sum(logprobs) / len(logprobs):.4f}, perplexity {ppl:.4f}")
