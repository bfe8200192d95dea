"""`clover-local demo`: the whole path on the shipped tiny model, in about a minute on a CPU.

tiny (BF16) → quantize to a GPTQ INT4 pack (cached, reused when complete) → load the pack → one chat turn
with the live display → the commands to try next.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from clover_local.cli import app
from clover_local.commands._paths import path_of
from clover_local.errors import CloverError

if TYPE_CHECKING:
    from rich.console import Console

DEMO_PROMPT = "good morning"  # a chat the tiny model knows: its answer shows several tokens settling per pass
PACK_NAME = "tiny-int4"


def demo_settings(src: Path):
    """GPTQ INT4, small calibration (16 × 128 tokens); group size 128, or the largest power of two that
    divides every quantized input width of a smaller model."""
    from math import gcd

    from clover_local.config import load_config
    from quantize.pipeline import QuantizeSettings

    cfg = load_config(src)
    widths = (cfg.hidden_size, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size,
              cfg.num_attention_heads * cfg.head_dim, cfg.gdn_value_dim)
    common = 0
    for w in widths:
        common = gcd(common, w)
    group = 128
    while group > 8 and common % group:
        group //= 2
    return QuantizeSettings(bits=4, method="gptq", group_size=group, samples=16, seq_len=128)


def tiny_source() -> Path:
    from clover_local.loader import SHORT_NAMES

    path = SHORT_NAMES["tiny"]
    if not (path / "config.json").is_file():
        raise CloverError(f"the tiny model is not in this installation ({path} is missing); reinstall clover-local, "
                          "or train it: python -m clover_local.tiny.train --out clover_local/assets/tiny")
    return path


def _fingerprint(src: Path, settings) -> dict:
    h = hashlib.sha256()
    for f in sorted(src.glob("*.safetensors")) + [src / "config.json"]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return {"source": str(src.resolve()), "source_sha256": h.hexdigest(), "settings": asdict(settings)}


def ensure_pack(src: Path, out: Path, err) -> tuple[Path, bool]:
    """The INT4 pack of `src` in `out`: reused when complete and made from the same source and settings."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from clover_local.loader import pick_device
    from clover_local.pack.manifest import MANIFEST_NAME, Manifest
    from quantize.pipeline import quantize_checkpoint

    settings = demo_settings(src)
    marker = out.with_name(out.name + ".source.json")
    want = _fingerprint(src, settings)
    if (out / MANIFEST_NAME).is_file() and marker.is_file():
        try:
            done = Manifest.load(out).complete and json.loads(marker.read_text()) == want
        except (CloverError, OSError, json.JSONDecodeError):
            done = False
        if done:
            return out, True
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CloverError(f"cannot create the cache folder {out.parent}: {exc.strerror or exc}") from None
    marker.unlink(missing_ok=True)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[step]}"), TimeElapsedColumn(), console=err, transient=True)
    with bar:
        task = bar.add_task("quantizing tiny → INT4", total=None, step="")

        def on_layer(i: int, n: int, step: str) -> None:
            bar.update(task, total=n, completed=i, step=f"layer {min(i, n - 1)}: {step}" if i < n else step)

        quantize_checkpoint(src, out, settings, pick_device("auto"), overwrite=True,
                            source_label={"path": "tiny"}, on_layer=on_layer)
    marker.write_text(json.dumps(want, indent=2) + "\n")
    return out, False


DEMO_SLOTS = 24  # of 64 experts in the tiny model (4 layers x 16)


def load_for_demo(pack: Path, console: Console | None = None):
    """Load the demo's INT4 pack through the offloading runtime with a deliberately small expert cache:
    about a third of the tiny model's experts fit, so the turn exercises misses, block-scoped pinning and
    prefetch, and chat's status line shows the hit rate. `console`: where the load's progress is drawn (as chat
    draws it), None for none."""
    from clover_local.commands._model_options import load_shown
    from clover_local.runtime.load import RuntimeOptions

    return load_shown(str(pack), None, None, console, runtime=RuntimeOptions(slots=DEMO_SLOTS, context=4096))


@app.command()
def demo(
    prompt: str = typer.Option(DEMO_PROMPT, "--prompt", "-p", help="The message of the chat turn."),
    cache_dir: Optional[Path] = typer.Option(
        None, "--cache-dir", help="Where the INT4 pack is kept (default: ~/.cache/clover-local/demo).",
        click_type=path_of("--cache-dir", "folder")),
    pace: float = typer.Option(0.06, "--pace", help="Seconds to show each pass on a terminal (0: full speed)."),
    plain: bool = typer.Option(False, "--plain", help="Plain text even on a terminal."),
    source: Optional[str] = typer.Option(None, "--source", hidden=True,
                                         help="Another BF16 checkpoint folder instead of the shipped tiny model."),
) -> None:
    """The embedded default: the shipped tiny Clover model → quantize to INT4 → load → one chat turn, live.

    The INT4 pack is kept in the cache folder and reused next time. Then it prints what to try next.

    Example:

      clover-local demo
    """
    from rich.console import Console
    from rich.text import Text

    from clover_local.chat.app import PLAIN_PROMPT, ChatApp, check_pace
    from clover_local.paths import cache_root
    from clover_local.chat.conversation import ChatSettings

    check_pace(pace)
    if not prompt.strip():
        raise CloverError(f"--prompt is empty: give the chat turn a message (default: {DEMO_PROMPT!r})")
    t0 = time.perf_counter()
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not plain
    console = Console(highlight=False, soft_wrap=not interactive)
    err = Console(stderr=True, highlight=False, soft_wrap=not interactive)  # piped: paths whole, one line each
    say = console.print if interactive else err.print
    src = Path(source).expanduser() if source else tiny_source()
    if not (src / "config.json").is_file():
        raise CloverError(f"{src} is not a model folder (no config.json)")
    out = (cache_dir.expanduser() if cache_dir else cache_root() / "demo") / PACK_NAME

    say(Text.assemble(("1/3 ", "bold cyan"), ("quantize ", "bold"), (f"{src.name} (BF16) → GPTQ INT4, "
                                                                     "16 calibration samples", "")))
    tq = time.perf_counter()
    pack, reused = ensure_pack(src, out, err)
    from clover_local.runtime.sizes import fmt_bytes

    src_bytes = sum(f.stat().st_size for f in src.glob("*.safetensors"))
    pack_bytes = sum(f.stat().st_size for f in pack.glob("*.safetensors"))
    how = "reused from the cache" if reused else f"done in {time.perf_counter() - tq:.1f} s"
    say(Text(f"    {how}: {fmt_bytes(src_bytes)} → {fmt_bytes(pack_bytes)} at {pack}", style="grey62"))

    say(Text.assemble(("2/3 ", "bold cyan"), ("load ", "bold"), ("the INT4 pack", "")))
    tl = time.perf_counter()
    loaded = load_for_demo(pack, console if interactive else None)
    say(Text(f"    loaded in {time.perf_counter() - tl:.1f} s", style="grey62"))

    say(Text.assemble(("3/3 ", "bold cyan"), ("one chat turn", "bold"),
                      (f" (slowed to {pace * 1000:.0f} ms per pass so you can watch)" if interactive and pace else "",
                       "grey62")))
    settings = ChatSettings(threshold=loaded.config.diffusion.threshold, max_tokens=256)
    chat = ChatApp(loaded, PACK_NAME, settings, interactive=interactive, console=console)
    chat.pace = pace if interactive else 0.0
    if interactive:
        console.print(Text.assemble(("you ›", "bold cyan"), " ", prompt))
    else:
        print(PLAIN_PROMPT + prompt, flush=True)
    stats = chat.ask(prompt)
    if stats is None:
        raise CloverError("the demo's chat turn failed")
    if stats.stop_reason == "cancelled":  # Ctrl-C mid-answer: chat kept what was written; the demo ends there
        raise KeyboardInterrupt
    if not interactive:
        print(f"[{stats.tokens} tokens, {stats.passes} passes, {stats.tokens_per_pass:.2f} tokens/pass]", flush=True)
    label = "tiny" if source is None else str(src)
    nxt = [
        (f"clover-local chat {pack}", "chat with the INT4 pack (/help inside)"),
        (f"clover-local chat {label}", "the same model in BF16"),
        (f'clover-local generate {label} --prompt "reverse a b c d" --json', "one answer, for scripts"),
        (f"clover-local serve {pack}", "an OpenAI-compatible server and a chat page on 127.0.0.1:8000 (then "
                                       "`clover-local chat http://127.0.0.1:8000` chats with it)"),
        (f"clover-local eval {pack} --reference {label}", "what INT4 cost: KL and top-1 agreement"),
        ("clover-local quantize Diffuspace/Clover-35B-A3B-Preview --out clover-int4", "the real 35B model"),
    ]
    if interactive:
        console.print()
        console.print(Text(f"demo done in {time.perf_counter() - t0:.0f} s. Next, try:", style="bold"))
        for cmd, what in nxt:
            console.print(Text.assemble("  ", (cmd, "cyan"), ("   # " + what, "grey50")))
    else:
        print(f"\ndemo done in {time.perf_counter() - t0:.0f} s. Next, try:")
        for cmd, what in nxt:
            print(f"  {cmd}   # {what}")
