"""The chat display's host time per pass, timed on a CPU with a stand-in decoder that runs at a GPU's pace.

    python docs/chat_overhead.py [--pass-ms 12] [--blocks 24] [--width 100]

Why: `chat` consumes the decoder's events on the thread that drives the GPU, so every millisecond the display
spends between two passes is a millisecond the GPU waits (at a 12 ms pass, 1 ms is 8 % of the speed). This
runs `ChatApp._answer_live` — the real view, status line, Markdown settling and Rich `Live` refreshes, into a
terminal-sized in-memory console — on the tiny model's tokenizer, with events from a stand-in decoder: blocks of
32 tokens, 3 revealed a pass (≈ 11 passes a block, as the issue assumes), each pass "computing" for --pass-ms
(a sleep: the GIL is free, as in a CUDA wait). It reports the wall time beyond those sleeps (as measured,
overshoot included), per pass.
"""

from __future__ import annotations

import argparse
import io
import random
import time

from rich.console import Console


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pass-ms", type=float, default=12.0, help="the stand-in decoder's time per pass")
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument("--width", type=int, default=100)
    args = parser.parse_args()

    from clover_local.chat.app import ChatApp
    from clover_local.chat.conversation import ChatSettings
    from clover_local.chat.turn import TurnStats, TurnText
    from clover_local.generate.events import BlockCommitted, DecodeStats, Finished, PassDone, Reveal
    from clover_local.loader import load

    loaded = load("tiny", "cpu", "float32")
    console = Console(file=io.StringIO(), force_terminal=True, width=args.width, height=40, highlight=False)
    app = ChatApp(loaded, "tiny", ChatSettings(), interactive=True, console=console)
    words = [i for i in range(loaded.config.vocab_size) if loaded.tokenizer.decode([i]).strip().isalpha()]
    rng = random.Random(0)
    passes, slept = [0], [0.0]

    def events(ids, settings, history, should_stop=None):
        out: list[int] = []
        for b in range(args.blocks):
            tokens: list[int | None] = [None] * 32
            order = list(range(32))
            rng.shuffle(order)
            p = 0
            while order:
                t = time.perf_counter()
                time.sleep(args.pass_ms / 1e3)
                slept[0] += time.perf_counter() - t  # as slept, overshoot included
                reveals = [Reveal(i, rng.choice(words), rng.uniform(0.5, 1.0)) for i in sorted(order[:3])]
                del order[:3]
                for r in reveals:
                    tokens[r.position] = r.token_id
                passes[0] += 1
                yield PassDone(b, p, reveals, list(tokens), 0)
                if should_stop is not None and should_stop():
                    return
                p += 1
            new = [int(t) for t in tokens]  # type: ignore[arg-type]
            out.extend(new)
            if b % 4 == 3:
                new[-1] = loaded.tokenizer.encode("\n\n")[-1]  # paragraphs, so the Markdown settles now and then
            yield BlockCommitted(b, new, p)
        yield Finished(out, DecodeStats(tokens=len(out)))

    app._events = events
    t0 = time.perf_counter()
    app._answer_live(loaded.tokenizer.encode("hello"), None, TurnText(loaded.tokenizer, ""), TurnStats(), None)
    wall = time.perf_counter() - t0
    sleeping = slept[0]
    print(f"{passes[0]} passes, {args.blocks} blocks: wall {wall:.2f} s, decoder stand-in {sleeping:.2f} s, "
          f"display {1e3 * (wall - sleeping) / passes[0]:.2f} ms per pass "
          f"({100 * (wall - sleeping) / sleeping:.1f} % on top of a {args.pass_ms:g} ms pass)")


if __name__ == "__main__":
    main()
