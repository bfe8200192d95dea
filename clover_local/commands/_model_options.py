"""The loading options chat, generate, serve and score share: `--offload/--no-offload`, `--vram-budget`,
`--context`, `--prefill-chunk` (and `--resident-routing`, which score has no use for: it runs no previews), and
`--dtype`; and how to name a limit `--context` set.

One definition of the flags and their help, and one function turning the parsed values into `loader.load`
arguments, so the three commands cannot drift apart; likewise what bench, plan and tune share (`--prefill-chunk`,
a pack or `--synthetic`). (The leading underscore keeps this module out of the command registry: it defines no
command.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from clover_local.commands._paths import path_of
from clover_local.errors import CloverError
from clover_local.loader import DTYPE_NAMES
from clover_local.runtime.sizes import DEFAULT_CONTEXT, DEFAULT_PREFILL_CHUNK

PANEL = "Loading a pack"


def chat_template_option() -> Any:
    return typer.Option(
        None, "--chat-template", metavar="FILE", help="Render prompts with this Jinja chat template instead of the "
        "model's own (chat_template.jinja), e.g. a fixed copy of a template that renders tool calls or thinking "
        "wrongly; checked before the model loads.", click_type=path_of("--chat-template"))


def blank_is_main(revision: Optional[str]) -> Optional[str]:
    """`--revision ""` (a script's unset variable) is the default branch, as a missing flag is: every command
    sees one value for it (a header said `tiny@`)."""
    return revision if revision is None or revision.strip() else None


def revision_option(panel: Optional[str] = PANEL) -> Any:
    return typer.Option(
        None, "--revision", metavar="REV", rich_help_panel=panel, callback=blank_is_main,
        help="Branch, tag or commit of a Hub MODEL (default: main), e.g. a pack uploaded to a branch with "
             "`clover-local upload --revision`.")


def offload_option() -> Any:
    return typer.Option(
        True, "--offload/--no-offload", rich_help_panel=PANEL,
        help="A pack (the 4-bit GPTQ folder `clover-local quantize` writes) runs through the offloading runtime: "
             "weights stay 4-bit, the routed experts live in host RAM and a device cache holds the ones in use, "
             "so a 35B pack fits a 16 GB GPU. --no-offload dequantizes the whole pack to --dtype first (the exact "
             "reference path; needs the full BF16 size in memory). BF16 checkpoints always load as they are.")


def vram_budget_option() -> Any:
    return typer.Option(
        None, "--vram-budget", metavar="SIZE", rich_help_panel=PANEL,
        help="Device memory the runtime may use for a pack, e.g. 14GB (binary units; a bare number is GiB: 16 "
             "means 16 GiB): the non-expert weights and KV cache first, then as many expert-cache slots as fit; "
             "a bigger budget means fewer expert copies per pass. Lower it when other programs need the GPU. "
             "Default: free device memory minus a margin (on a CPU: half the available RAM). `clover-local plan` "
             "shows what a budget buys. A BF16 checkpoint ignores it (with a warning).")


def context_option() -> Any:
    return typer.Option(
        None, "--context", metavar="N", rich_help_panel=PANEL,
        help=f"Most tokens of prompt plus answer. A pack's KV cache is preallocated for this many (default "
             f"{DEFAULT_CONTEXT}, or the model's context if smaller), so a smaller value leaves more of "
             "--vram-budget to the expert cache. Default for a BF16 checkpoint: the model's context.")


def resident_routing_option() -> Any:
    return typer.Option(
        False, "--resident-routing", rich_help_panel=PANEL,
        help="Faster offloaded decoding, approximately: after a block's first pass, its later passes choose "
             "each token's experts among those already on the GPU (the router's best ones there), so they never "
             "wait for an expert copy; the experts they wanted are copied in behind the next pass and chosen "
             "from the pass after. The first pass and the committed block route exactly. Measured on the tiny "
             "model in BENCHMARKS.md; no effect when every expert fits on the device.")


def dtype_option() -> Any:
    """--dtype, its help listing what `loader.pick_dtype` accepts (one list, so help and check cannot disagree)."""
    names = list(DTYPE_NAMES)
    return typer.Option("auto", "--dtype",
                        help=f"{', '.join(names[:-1])} or {names[-1]} (auto: bf16 on GPU, fp32 on CPU).")


PREFILL_CHUNK_HELP = (f"Prompt tokens per prefill pass (default {DEFAULT_PREFILL_CHUNK}). Each pass needs nearly "
                      "every expert, so a longer chunk copies fewer experts per prompt token, but its activations "
                      "take device memory from the expert cache for good (fewer slots for decoding); `plan` shows "
                      "both.")


def prefill_chunk_option(panel: Optional[str] = PANEL) -> Any:
    return typer.Option(None, "--prefill-chunk", metavar="ROWS", rich_help_panel=panel, help=PREFILL_CHUNK_HELP)


def prefill_chunk_rows(value: Optional[int]) -> int:
    """--prefill-chunk checked, or the runtime's default."""
    if value is None:
        return DEFAULT_PREFILL_CHUNK
    if value < 1:
        raise CloverError(f"--prefill-chunk must be at least 1, got {value}")
    return value


def load_options(offload: bool, vram_budget: Optional[str], context: Optional[int],
                 resident_routing: bool = False, prefill_chunk: Optional[int] = None,
                 chat_template: Optional[Path] = None, revision: Optional[str] = None) -> dict[str, Any]:
    """Keyword arguments for `clover_local.loader.load` from the flags, checked before anything loads: packs
    through the runtime ("auto") unless --no-offload; a --chat-template file read and compiled."""
    from clover_local.config import check_min_context
    from clover_local.loader import AUTO
    from clover_local.runtime.sizes import parse_size
    from clover_local.tokenizer import read_template

    if context is not None:
        check_min_context(context)  # before a Hub download, not only once the config is read
    if not offload and vram_budget is not None:
        raise CloverError("--vram-budget sizes the offloading runtime; it has no effect with --no-offload "
                          "(drop one of them)")
    if not offload and resident_routing:
        raise CloverError("--resident-routing is a choice of the offloading runtime; it has no effect with "
                          "--no-offload (drop one of them)")
    if not offload and prefill_chunk is not None:
        raise CloverError("--prefill-chunk sizes the offloading runtime's prompt passes; it has no effect with "
                          "--no-offload (drop one of them)")
    budget = parse_size(vram_budget, "--vram-budget") if vram_budget is not None else None
    return {"runtime": AUTO if offload else None, "vram_budget": budget, "context": context,
            "resident_routing": resident_routing,
            # None when not given (the loader's runtime takes its default, and knows the flag was not set)
            "prefill_chunk": None if prefill_chunk is None else prefill_chunk_rows(prefill_chunk),
            "chat_template": None if chat_template is None else read_template(chat_template), "revision": revision}


def stderr_console(show: bool = True) -> Any:
    """A Rich console on standard error where a person watches it (`show`, and standard error a terminal), else
    None: `load_shown`'s for generate, score and serve, whose standard output is the answer."""
    if not (show and sys.stderr.isatty()):
        return None
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def load_shown(model: str, device: Optional[str], dtype: Optional[str], console: Any = None, **options: Any) -> Any:
    """`loader.load` (`options`: `load_options(...)`) with its progress drawn on `console` (a Rich Console; None:
    nothing drawn, for scripts, logs and --json): a spinner from the start, then a bar of the decoder layers with
    the time so far — a 35B pack is ≈ 19 GB to read, tens of seconds — gone once the model is in. For a Hub repo
    id the display waits for the first layer: a download draws its own bars before."""
    from clover_local.loader import is_hub_id, load

    if console is None:
        return load(model, device, dtype, **options)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("loading {task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("layers"), TimeElapsedColumn(), console=console, transient=True)
    tasks: list = []

    def show(done: int = 0, total: Optional[int] = None) -> None:
        if not tasks:
            bar.start()
            tasks.append(bar.add_task(model, total=total))
        bar.update(tasks[0], completed=done, total=total)

    if not is_hub_id(model):
        show()
    try:
        return load(model, device, dtype, on_layer=show, **options)
    finally:
        bar.stop()


def pack_or_synthetic(model: Optional[str], synthetic: Optional[str], command: str,
                      progress=lambda msg: None, revision: Optional[str] = None) -> tuple[Any, str]:
    """(pack folder, label) for the commands that run a pack's kernels (bench, tune): MODEL (a Hub one at
    `revision`), or the synthetic pack of --synthetic full|small|full3|small3 (written once to the cache)."""
    from clover_local.loader import resolve_model_path
    from clover_local.pack.reader import is_pack
    from clover_local.runtime.synthetic_pack import ensure_synthetic, spec_of

    if model is None and synthetic is None:
        raise CloverError(f"nothing to {command}: give a pack (MODEL, e.g. clover-local {command} ./clover-int4) or "
                          "--synthetic full|small|full3|small3")
    if model is not None and synthetic is not None:
        raise CloverError("give a pack (MODEL) or --synthetic full|small|full3|small3, not both")
    if revision and synthetic is not None:
        raise CloverError("--revision applies to Hub repo ids, not to --synthetic packs")
    if synthetic is not None:
        spec_of(synthetic)
        progress(f"synthetic {synthetic} pack")
        written = []
        folder = ensure_synthetic(synthetic, on_shard=lambda i, n: (
            written.append(i), progress(f"writing synthetic shard {i + 1}/{n}")))
        if written:  # a pack of up to 20 GB stays on disk: say where, and how to free it
            import sys

            from clover_local.runtime.sizes import fmt_bytes

            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            print(f"note: the synthetic {synthetic} pack ({fmt_bytes(size)}) is kept in {folder} for later runs; "
                  f"`clover-local cache rm {folder.parent.name}/{folder.name}` frees it", file=sys.stderr, flush=True)
        return folder, f"synthetic:{synthetic}"
    folder = Path(resolve_model_path(model, revision))
    if not is_pack(folder):
        raise CloverError(f"{model} is not a quantized pack: {command} runs GPTQ packs (or --synthetic)")
    return folder, model


def context_flag_limit(loaded: Any, context: Optional[int]) -> Optional[str]:
    """How to name the loaded model's token limit when --context (given, or a pack's default) set it below the
    model's own context, e.g. "--context 5; raise --context (the model allows 131,072)"; None when the limit is
    the model's. Why: "exceeds the model's context of 5 tokens" blames the model for the user's flag."""
    limit, model_limit = loaded.config.max_context, loaded.model_context
    if limit >= model_limit:
        return None
    flag = f"--context {context}" if context is not None else f"the default --context of {limit:,} for a pack"
    return f"{flag}; raise --context (the model allows {model_limit:,})"

