"""What a pass's token choice costs at the 35B vocabulary size (248,320 columns, 32 rows: one block's masked
positions) with each sampling cut (`generate/sampling.choose`: top_k, top_p, min_p), a logit_bias, and what an
auto tool call's trigger look-out (generate/trigger.py) adds to a free pass: `PYTHONPATH=. python
docs/sampling_cost.py` (figures in BENCHMARKS.md). One intra-op thread, as the decoder's host side runs on a busy
machine; on a GPU these are a few kernels each."""

from __future__ import annotations

import time

import torch

from clover_local.generate.json_schema import SchemaConstraint
from clover_local.generate.sampling import LogitBias, choose
from clover_local.generate.trigger import Trigger
from clover_local.loader import load
from clover_local.serve.tools import template_grammar
from clover_local.serve.xml_calls import TagVocab, XmlCalls

ROWS, VOCAB = 32, 248_320
# tool schemas shaped like coding agents' (a todo list of objects with an enum, a shell command with a bounded
# timeout, an edit, a multi-edit array, a search with many optional flags)
AGENT_SCHEMAS = [
    {"type": "object", "required": ["todos"], "additionalProperties": False, "properties": {"todos": {
        "type": "array", "items": {"type": "object", "additionalProperties": False,
                                   "required": ["content", "status", "activeForm"],
                                   "properties": {"content": {"type": "string", "minLength": 1},
                                                  "status": {"enum": ["pending", "in_progress", "completed"]},
                                                  "activeForm": {"type": "string"}}}}}},
    {"type": "object", "required": ["command"], "properties": {
        "command": {"type": "string"}, "timeout": {"type": "number", "maximum": 600000},
        "description": {"type": "string"}, "run_in_background": {"type": "boolean"}}},
    {"type": "object", "required": ["file_path", "old_string", "new_string"], "properties": {
        "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
        "replace_all": {"type": "boolean", "default": False}}},
    {"type": "object", "required": ["file_path", "edits"], "properties": {
        "file_path": {"type": "string"}, "edits": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["old_string", "new_string"], "properties": {
                "old_string": {"type": "string"}, "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}}}}}},
    {"type": "object", "required": ["pattern"], "properties": {
        "pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"},
        "output_mode": {"enum": ["content", "files_with_matches", "count"]}, "-B": {"type": "number"},
        "-A": {"type": "number"}, "-n": {"type": "boolean"}, "-i": {"type": "boolean"},
        "head_limit": {"type": "integer", "exclusiveMinimum": 0}, "multiline": {"type": "boolean"}}},
]


def timed(fn, repeat: int = 10) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    torch.set_num_threads(1)
    logits = torch.randn(ROWS, VOCAB, generator=torch.Generator().manual_seed(0)) * 3
    gen = torch.Generator().manual_seed(1)
    cases = [("greedy (temperature 0)", 0.0, 1.0, 0, 0.0), ("sampled, no cut", 1.0, 1.0, 0, 0.0),
             ("top_p 0.95", 1.0, 0.95, 0, 0.0), ("top_k 20", 1.0, 1.0, 20, 0.0),
             ("top_k 20, top_p 0.95 (Qwen's recommended cut)", 1.0, 0.95, 20, 0.0), ("min_p 0.05", 1.0, 1.0, 0, 0.05)]
    print(f"| choose, {ROWS} rows x {VOCAB:,} | ms |")
    print("|---|---|")
    for name, temperature, top_p, top_k, min_p in cases:
        ms = timed(lambda: choose(logits, temperature, top_p, gen, top_k, min_p)) * 1e3
        print(f"| {name} | {ms:.1f} |")
    bias = LogitBias({i: -100.0 for i in range(0, VOCAB, VOCAB // 300)})  # 300 biased tokens
    print(f"| logit_bias of 300 tokens (added to the {ROWS} rows) | "
          f"{timed(lambda: bias.apply(logits.clone())) * 1e3 - timed(lambda: logits.clone()) * 1e3:.2f} |")
    tiny = load("tiny", "cpu", "float32")
    tok = tiny.tokenizer
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    watch = Trigger(SchemaConstraint(TagVocab(tok), tiny.stop_token_ids, XmlCalls([tool], True))).watch()
    watch.committed(tok.encode("text committed in the block before this one"))
    run = tok.encode("The weather in Oslo is often grey; let me look it up for you now, then answer.")[:32]
    print(f"| trigger look-out, one free pass (32 revealed tokens, tiny tokenizer) | "
          f"{timed(lambda: watch.find(run), 2000) * 1e3:.3f} |")
    tools = [{"type": "function", "function": {"name": f"tool{i}", "parameters": AGENT_SCHEMAS[i % len(AGENT_SCHEMAS)]}}
             for i in range(20)]
    print(f"| auto calls' grammar for 20 agent-like tools (XmlCalls built) | "
          f"{timed(lambda: XmlCalls(tools, True)) * 1e3:.1f} |")
    template_grammar(tools, True, "<function=")  # (a template teaching the XML form)
    print(f"| ... the same tools sent again (`template_grammar`: kept by their JSON) | "
          f"{timed(lambda: template_grammar(tools, True, '<function=')) * 1e3:.2f} |")


if __name__ == "__main__":
    main()
