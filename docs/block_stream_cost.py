"""What streaming the block being denoised costs a served answer (`stream_options.include_blocks`: the chat page and
`chat URL` ask for it): the same greedy answers, streamed with and without it, alternately, from a `clover-local
serve tiny` process on the CPU, where a pass is cheapest and so the added work per pass weighs most.

    PYTHONPATH=. python docs/block_stream_cost.py [--rounds 25]

Prints the median wall time of a round of answers each way (client side: request to [DONE]), the passes, and the
difference per pass."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

PROMPTS = ["reverse a b c d e f g h", "add 123+456", "write a list of three fruits"]


def answer(port: int, prompt: str, blocks: bool) -> tuple[float, int, int]:
    """(seconds, passes, chunks) of one streamed answer."""
    body = {"messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": 128,
            "enable_thinking": False, "stream_options": {"include_usage": True, "include_blocks": blocks}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    chunks, passes = 0, 0
    for raw in conn.getresponse():
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        chunks += 1
        if chunk.get("usage"):
            passes = chunk["usage"]["clover"]["passes"]
    seconds = time.perf_counter() - start
    conn.close()
    return seconds, passes, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "clover_local", "serve", "tiny", "--port", "0", "--device", "cpu",
                               "--quiet"], stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in server.stdout:
        m = re.search(r"127\.0\.0\.1:(\d+)/v1", line)
        if m:
            port = int(m.group(1))
            break
    for prompt in PROMPTS:  # warm-up
        answer(port, prompt, False)
    times: dict[bool, list[float]] = {False: [], True: []}
    passes = chunks_on = chunks_off = 0  # (a round's: the same greedy answers each round)
    for _ in range(args.rounds):
        for blocks in (False, True):
            results = [answer(port, prompt, blocks) for prompt in PROMPTS]
            times[blocks].append(sum(r[0] for r in results))
            passes = sum(r[1] for r in results)
            if blocks:
                chunks_on = sum(r[2] for r in results)
            else:
                chunks_off = sum(r[2] for r in results)
    server.terminate()
    server.wait()
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"{len(PROMPTS)} answers a round ({passes} passes; {chunks_off} chunks streamed without include_blocks, "
          f"{chunks_on} with), {args.rounds} rounds alternating; median a round:")
    print(f"  without include_blocks: {off * 1000:.1f} ms")
    print(f"  with include_blocks:    {on * 1000:.1f} ms ({100 * (on - off) / off:+.1f}%, "
          f"{1e6 * (on - off) / passes:+.0f} µs a pass)")


if __name__ == "__main__":
    main()
