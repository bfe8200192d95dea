"""`clover-local serve` with a scripted decoder, for docs/agent_clients_check.sh: the first answer calls a tool (the
text given), the answer to a prompt holding a tool's result is plain text. A model this small never writes a tool
call of its own, so this is how an agent's whole loop — call, run, result sent back, answer — is driven through
the real server: `python docs/scripted_serve.py MODEL_DIR PORT CALL_TEXT`."""

from __future__ import annotations

import sys

from clover_local.generate.events import BlockCommitted, DecodeStats, Finished
from clover_local.loader import load
from clover_local.serve.engine import Engine
from clover_local.serve.http import Limits, make_server

DONE = "All done: the command printed hello-from-tool."


class Scripted:
    """Answers `call` until the prompt's last turn holds a tool's result, then DONE; a block per 32 tokens."""

    block_size = 32

    def __init__(self, tokenizer, call: str) -> None:
        self.tokenizer, self.call = tokenizer, call

    def generate(self, prompt_ids, settings, reuse=None, snapshot_at=None):
        last_turn = self.tokenizer.decode(prompt_ids).rsplit("<|im_start|>assistant", 2)[-2]
        ids = self.tokenizer.encode(DONE if "<tool_response>" in last_turn else self.call)[:settings.max_new_tokens]
        for b in range(0, len(ids), self.block_size):
            yield BlockCommitted(b // self.block_size, ids[b:b + self.block_size], 1)
        yield Finished(ids, DecodeStats(tokens=len(ids), passes=1, stop_reason="stop"))


def main() -> None:
    folder, port, call = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    loaded = load(folder, "cpu", "float32")
    engine = Engine(loaded)
    engine.decoder = Scripted(loaded.tokenizer, call)
    server = make_server(engine, "127.0.0.1", port, "tiny", Limits(max_tokens=1024, context=131072))
    print(f"serving a scripted tiny on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
