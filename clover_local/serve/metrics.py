"""`GET /metrics`: the figures `/health` gives, in Prometheus' text format, so a server run as a service can be
watched the way vLLM's and llama.cpp's are (a Prometheus scrape, a Grafana panel): requests by outcome, tokens and
passes (their rates are tokens/s and passes/s), the queue, the prompt cache and the offloading runtime's counters.

One source: `Engine.health()`. Counters end in `_total`; everything else is a gauge (the runtime's figures are
exported as they are named there, under `clover_runtime_`).
"""

from __future__ import annotations

import math
import re
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# health() key -> (metric, help) for the figures that only grow
_COUNTERS = {
    "passes": ("clover_passes_total", "Model passes run (preview and commit)."),
    "tokens": ("clover_generated_tokens_total", "Answer tokens generated."),
}
_CACHE_COUNTERS = {"lookups", "hits", "parked_hits", "parked", "reused_tokens"}


def _name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _labels(**values: str) -> str:
    quoted = (f'{k}="' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
              for k, v in values.items())
    return "{" + ",".join(quoted) + "}"


def prometheus_text(health: dict[str, Any], model: str) -> str:
    """`health` (Engine.health()) as Prometheus text, every series labelled with the served model's name."""
    label = _labels(model=model)
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
        out.extend(f"{name}{lab} {int(v) if v.is_integer() else v!r}" for lab, v in rows)

    requests = [(_labels(model=model, outcome=outcome), float(n)) for outcome, n in health.get("requests", {}).items()]
    metric("clover_requests_total", "counter", "Requests answered, by outcome (rejected: the queue was full).",
           requests)
    for key, (name, help_text) in _COUNTERS.items():
        metric(name, "counter", help_text, [(label, float(health.get(key, 0)))])
    queue = health.get("queue", {})
    metric("clover_queue_waiting", "gauge", "Requests waiting for the model.",
           [(label, float(queue.get("waiting", 0)))])
    metric("clover_queue_running", "gauge", "1 while a request is being answered.",
           [(label, float(bool(queue.get("running"))))])
    metric("clover_uptime_seconds", "gauge", "Seconds since the server started.",
           [(label, float(health.get("uptime_seconds", 0)))])
    for key, value in (health.get("prompt_cache") or {}).items():
        number = _number(value)
        if number is None or key == "last_reused":
            continue
        counter = key in _CACHE_COUNTERS
        name = f"clover_prompt_cache_{_name(key)}" + ("_total" if counter else "")
        metric(name, "counter" if counter else "gauge", f"Prompt cache: {key.replace('_', ' ')}.", [(label, number)])
    for key, value in (health.get("runtime") or {}).items():
        number = _number(value)
        if number is not None:
            metric(f"clover_runtime_{_name(key)}", "gauge", f"Offloading runtime: {key}.", [(label, number)])
    return "\n".join(out) + "\n"
