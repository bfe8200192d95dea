"""`clover-local serve` in this process (a thread), for tests that check answers against the model itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def running_server(loaded: Any, name: str, max_tokens: int, context: int, max_queue: int = 4,
                   think_budget: int | None = None, free_tool_calls: bool = False, answer_room: bool = True,
                   reveal_factor: float = 0.0, drop_oldest: bool = False, think: bool = True, **server_options: Any
                   ) -> Iterator[tuple[Any, str]]:
    """(engine, base URL) of a server on `loaded` at 127.0.0.1, port chosen by the system; stopped on exit."""
    from clover_local.serve.engine import Engine
    from clover_local.serve.http import Limits, make_server

    engine = Engine(loaded, max_queue=max_queue)
    limits = Limits(max_tokens=max_tokens, context=context, think_budget=think_budget,
                    free_tool_calls=free_tool_calls, answer_room=answer_room, reveal_factor=reveal_factor,
                    drop_oldest=drop_oldest, think=think)
    srv = make_server(engine, "127.0.0.1", 0, name, limits, quiet=True, **server_options)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield engine, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        engine.stop()
        srv.shutdown()
        srv.server_close()
