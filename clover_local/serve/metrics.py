"""`GET /metrics`: the figures `/health` gives, in Prometheus' text format, so a server run as a service can be
watched the way vLLM's and llama.cpp's are (a Prometheus scrape, a Grafana panel): requests by outcome, tokens and
passes (their rates are tokens/s and passes/s), the queue, the prompt cache and the offloading runtime's counters,
and histograms of the latencies a user feels (`Latency`: the wait in the queue, the time to the first answer token,
the whole request; a dashboard's percentiles come from them, as from vLLM's).

One source: `Engine.health()`. Counters end in `_total`; histograms are `_bucket` / `_sum` / `_count`; everything
else is a gauge (the runtime's figures are exported as they are named there, under `clover_runtime_`).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# health() key -> (metric, help) for the figures that only grow
_COUNTERS = {
    "passes": ("clover_passes_total", "Model passes run (preview and commit)."),
    "tokens": ("clover_generated_tokens_total", "Answer tokens generated."),
}
_CACHE_COUNTERS = {"lookups", "hits", "parked_hits", "parked", "reused_tokens"}


# seconds: a queue wait or a first token of a short prompt (tenths) up to a long agent answer (minutes)
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_LATENCY_HELP = {
    "queue": ("clover_queue_wait_seconds", "Seconds a request waited for the model before its answer began."),
    "first_token": ("clover_time_to_first_token_seconds",
                    "Seconds from a request's arrival to its answer's first token (its queue wait and prompt read)."),
    "request": ("clover_request_seconds", "Seconds from a request's arrival to its answer's end (completed ones)."),
}


@dataclass
class Histogram:
    """Observations counted into `BUCKETS` (each an upper bound; one more past the last), with their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    sum: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds

    def to_dict(self) -> dict:
        """Prometheus' cumulative form: {"le": [bounds], "counts": [observations at or under each], "sum", "count"}."""
        running, cumulative = 0, []
        for n in self.counts[:-1]:
            running += n
            cumulative.append(running)
        return {"le": list(BUCKETS), "counts": cumulative, "sum": round(self.sum, 6), "count": sum(self.counts)}


class Latency:
    """The engine's latency histograms (`_LATENCY_HELP`'s keys), observed by its worker, read under its lock."""

    def __init__(self) -> None:
        self.histograms = {key: Histogram() for key in _LATENCY_HELP}

    def observe(self, key: str, seconds: float) -> None:
        self.histograms[key].observe(seconds)

    def to_dict(self) -> dict:
        return {key: h.to_dict() for key, h in self.histograms.items()}


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
        """One family; each row (what follows the name: a histogram's series suffix, then the labels; its value)."""
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
    for key, h in (health.get("latency") or {}).items():
        name, help_text = _LATENCY_HELP[key]
        rows = [("_bucket" + _labels(model=model, le=repr(float(le))), float(n)) for le, n in zip(h["le"], h["counts"])]
        rows += [("_bucket" + _labels(model=model, le="+Inf"), float(h["count"])), ("_sum" + label, float(h["sum"])),
                 ("_count" + label, float(h["count"]))]
        metric(name, "histogram", help_text, rows)
    for key, value in (health.get("runtime") or {}).items():
        number = _number(value)
        if number is not None:
            metric(f"clover_runtime_{_name(key)}", "gauge", f"Offloading runtime: {key}.", [(label, number)])
    for key, value in (health.get("gpu_memory") or {}).items():  # (where the model is on CUDA)
        metric(f"clover_gpu_memory_{_name(key)}", "gauge", f"The GPU's memory: {key.replace('_', ' ')} (torch's "
               "allocator, of the card's).", [(label, float(value))])
    return "\n".join(out) + "\n"
