"""Ollama's native API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/ps`, `/api/version`): the wire
format of the `ollama` Python/JS libraries, Open WebUI's Ollama connection and editor plugins, translated to and
from the requests the server already runs.

`/api/chat` becomes a `ChatRequest` (so the template, tools, thinking and structured outputs behave as on
/v1/chat/completions): `messages` (an assistant's `thinking` → its reasoning, its `tool_calls` with object
arguments; a tool message's `tool_name` is taken, the template placing results by order), `tools` (OpenAI's chat
form, as Ollama takes them), `think` (a bool, or "low"/"medium"/"high", which turn it on, "low" and "medium" within
a thinking budget as OpenAI's efforts are, protocol.EFFORT_BUDGETS), `format` ("json": JSON mode; a JSON schema:
structured output, compiled as response_format json_schema is). `/api/generate` is a one-turn chat (`system`,
`prompt`), or with `raw` the prompt continued as it is, as /v1/completions does. A request with no messages (or an
empty prompt) is Ollama's "load the model" call: answered done at once (`done_reason` "load"), the model being
loaded already. Any model name is taken (one model is served, as on the other routes) and echoed in the answer, as
Ollama does.

`options`: `temperature`, `top_p`, `seed` (-1, Ollama's default, a fresh draw each time as Ollama takes it),
`stop`, `num_predict` (a ceiling, cut to --max-tokens and what the context leaves; -1 and -2: the server's
default), `repeat_penalty` (→ repetition_penalty), `presence_penalty`, `frequency_penalty`. Loading and
performance hints (`num_ctx`, `num_gpu`, `num_thread`, ...) are accepted and ignored: `serve` fixes them at start;
so are `keep_alive` (the model stays loaded) and `repeat_last_n` (the penalties here count the prompt and the whole
answer).
`top_k` and `min_p` are taken as the OpenAI routes take them (sampling.choose); `typical_p` is accepted where it
changes nothing (1, or a greedy answer: temperature 0, this server's default) and refused otherwise, as is
`mirostat` (another sampler).

Refused with a 400 rather than ignored: images, `suffix` (no infilling), a non-empty `context` (the old token
context: send the conversation instead), `template` (the model's own template renders the prompt), `logprobs`.
Errors are Ollama's `{"error": "..."}`; a stream's, a last line of the same shape.

The answer: one JSON object, or newline-delimited JSON (Ollama's default is to stream), one object per delta and a
last with `done: true`, `done_reason`, token counts and durations in nanoseconds: `total_duration` as this handler
measured it (queue wait included), `load_duration` 0 (loaded at start), `prompt_eval_duration` the engine's prefill
time where it reports one (long prompts; a short prompt is read in the answer's first pass, so 0 there) and
`eval_duration` the rest of the generation. `prompt_eval_count` is the whole prompt (resumed tokens included).
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clover_local.errors import CloverError
from clover_local.generate.json_schema import Schema, compile_schema
from clover_local.serve.protocol import (WIRE_TEMPERATURE, ApiError, ChatRequest, CompletionRequest, bad_request,
                                         bool_field, effort_thinking, int_field, json_body, model_field, number_field,
                                         parse_messages, penalties_field, read_tools, sampling_field, seed_field,
                                         stop_field, top_k_field)
from clover_local.serve.tools import ToolCall

# Ollama's options that only tell it how to load or run the model: `serve` fixed all of that at start
IGNORED_OPTIONS = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only",
                   "use_mmap", "use_mlock", "num_thread", "numa", "num_keep", "repeat_last_n", "penalize_newline"}
# sampling options this server does not implement, and the value at which each changes nothing
NEUTRAL_OPTIONS = {"typical_p": 1.0}


def error_body(err: ApiError) -> dict:
    """An error as Ollama answers one."""
    return {"error": err.message}


def stream_error(err: ApiError) -> list[dict]:
    return [error_body(err)]


def tag(name: str) -> str:
    """The served model's name as Ollama lists it: with a tag (`:latest` when it has none)."""
    return name if ":" in name else f"{name}:latest"


# ---------------------------------------------------------------------------------------------- the request

def _options(body: dict, req: ChatRequest | CompletionRequest) -> None:
    """`options` into `req`'s sampling fields (the ignored ones skipped, the unimplemented ones checked)."""
    opts = body.get("options")
    if opts is None:
        opts = {}
    if not isinstance(opts, dict):
        raise bad_request("'options' must be an object", "options")
    req.temperature = number_field(opts, "temperature", WIRE_TEMPERATURE, 0.0)
    req.top_p = sampling_field(opts, "top_p")
    req.top_k, req.min_p = top_k_field(opts), sampling_field(opts, "min_p")
    req.penalties = penalties_field(opts, {"repetition_penalty": "repeat_penalty"})
    seed = seed_field(opts)
    req.seed = None if seed == -1 else seed  # Ollama's default seed: draw anew (a client may send its defaults)
    predict = opts.get("num_predict")
    req.max_tokens = None if predict in (None, -1, -2) else int_field(opts, "num_predict", 1)
    req.max_tokens_ceiling = True  # a cap, as Ollama takes it: cut to what the server and the context allow
    req.stop = stop_field(opts) or []
    _check_unimplemented(opts, req.temperature)


def _check_unimplemented(opts: dict, temperature: float) -> None:
    """typical_p passes where it changes nothing (neutral, or a greedy answer); mirostat never."""
    if opts.get("mirostat") not in (None, 0):
        raise bad_request("'options.mirostat' is not supported by clover-local serve (a sampler of its own): leave "
                          "it 0 and use temperature / top_p", "options")
    for name, neutral in NEUTRAL_OPTIONS.items():
        value = opts.get(name)
        if value is not None and value != neutral and temperature > 0:
            raise bad_request(f"'options.{name}' is not supported by clover-local serve when sampling (temperature "
                              f"above 0): leave it out or {neutral}, and use top_p", "options")


def _format(body: dict) -> tuple[bool, Schema | None]:
    """`format` as (JSON mode, compiled schema)."""
    fmt = body.get("format")
    if fmt in (None, ""):
        return False, None
    if fmt == "json":
        return True, None
    if not isinstance(fmt, dict):
        raise bad_request("'format' must be \"json\" or a JSON schema object", "format")
    try:
        return False, compile_schema(fmt)
    except CloverError as exc:
        raise bad_request(f"'format': {exc}", "format") from None


def _thinking(body: dict, req: ChatRequest) -> None:
    """`think` into `req.enable_thinking` (and a level's budget, as an OpenAI effort's: protocol.effort_thinking):
    absent, the model's default (off under `format`: the answer is the JSON)."""
    think = body.get("think")
    if think is not None and not isinstance(think, bool) and think not in ("low", "medium", "high"):
        raise bad_request("'think' must be true, false, \"low\", \"medium\" or \"high\"", "think")
    if isinstance(think, str):
        _, req.think_budget = effort_thinking(think, "think")
    on = req.json_mode is None if think is None else think is not False
    if on and req.json_mode:
        raise bad_request("'format' answers without thinking (the whole answer is the JSON): leave 'think' out or "
                          "set it to false", "think")
    req.enable_thinking = on
    req.thinking_asked = think is not None


def _refuse(body: dict, *names: str) -> None:
    """A 400 for each field that is set but cannot be honoured here."""
    why = {"images": "this model reads text", "suffix": "no infilling: the model reads the text left to right",
           "context": "the old token context is not kept: send the conversation as /api/chat messages instead",
           "template": "the model's own chat template renders the prompt", "logprobs": "not on Ollama's routes"}
    for name in names:
        if body.get(name):
            raise bad_request(f"'{name}' is not supported by clover-local serve ({why[name]})", name)


def _messages(value: list) -> list[dict]:
    """Ollama's messages in the chat form parse_messages checks (an assistant's thinking as reasoning_content; a
    tool message's `tool_name` is not needed: templates render results in the order of the calls)."""
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] must be an object", f"messages[{i}]")
        _refuse(m, "images")
    return parse_messages([{**m, "reasoning_content": m.get("thinking")} for m in value])


def _tools(body: dict) -> list[dict] | None:
    tools = body.get("tools")
    if isinstance(tools, list):  # Ollama's clients may leave the type out
        tools = [{"type": "function", **t} if isinstance(t, dict) else t for t in tools]
    return read_tools({"tools": tools})


def _common(body: dict, req: ChatRequest | CompletionRequest) -> None:
    req.model = model_field(body) or None
    req.stream = bool_field(body, "stream", True)  # (Ollama's default: streamed)
    _options(body, req)
    req.json_object, req.json_schema = _format(body)


def _chat_parts(body: dict, req: ChatRequest) -> ChatRequest:
    _common(body, req)
    _thinking(body, req)
    if req.tools:
        req.template_kwargs["tools"] = req.tools
    return req


def parse_chat(raw: bytes) -> ChatRequest | None:
    """/api/chat as the chat request the server runs; None for a request with no messages (load the model)."""
    body = json_body(raw)
    _refuse(body, "logprobs")
    if not body.get("messages"):
        return _load_only(body)
    if not isinstance(body["messages"], list):
        raise bad_request("'messages' must be a list of {role, content} objects", "messages")
    return _chat_parts(body, ChatRequest(messages=_messages(body["messages"]), tools=_tools(body),
                                         drop_oldest=True))


def parse_generate(raw: bytes) -> ChatRequest | CompletionRequest | None:
    """/api/generate: a one-turn chat, or with `raw` a completion of the prompt as it is; None for no prompt."""
    body = json_body(raw)
    _refuse(body, "images", "suffix", "context", "template", "logprobs")
    prompt, system = body.get("prompt"), body.get("system")
    if prompt is not None and not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string", "prompt")
    if system is not None and not isinstance(system, str):
        raise bad_request("'system' must be a string", "system")
    if not prompt:
        return _load_only(body)
    if body.get("raw"):
        if system or body.get("think"):
            name = "system" if system else "think"
            raise bad_request(f"'{name}' needs the chat template, which 'raw' leaves out: put it in the prompt or "
                              "send raw false", name)
        req = CompletionRequest(prompts=[prompt])
        _common(body, req)
        return req
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return _chat_parts(body, ChatRequest(messages=messages))


def _load_only(body: dict) -> None:
    model_field(body)  # (checked: the answer names it)
    return None


def requested_model(raw: bytes) -> str | None:
    """The model a load-only request named (it is answered under that name, as Ollama does)."""
    try:
        model = json_body(raw).get("model")
    except ApiError:
        return None
    return model if isinstance(model, str) and model else None


# ---------------------------------------------------------------------------------------------- the answer

def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _ns(seconds: float) -> int:
    return max(0, round(seconds * 1e9))


def _tool_call(call: ToolCall, index: int) -> dict:
    return {"id": call.id, "function": {"index": index, "name": call.name, "arguments": call.arguments}}


class Answer:
    """The objects of one answer, for /api/chat (`message`) or /api/generate (`response`), in Ollama's shape
    (`Handler._answer` runs it): one object, or newline-delimited JSON."""

    ndjson = True
    last = None  # the stream ends with its own done object
    error = staticmethod(stream_error)

    def __init__(self, chat: bool, model: str, started: float) -> None:
        self.chat, self.model, self.started = chat, model, started

    def start(self) -> list[dict]:
        return []

    def piece(self, reasoning: str, content: str, calls: list[ToolCall] | None = None) -> dict:
        """One object, not done: a delta's text (or, unstreamed, the whole answer's)."""
        out: dict[str, Any] = {"model": self.model, "created_at": _now()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                message["thinking"] = reasoning
            if calls:
                message["tool_calls"] = [_tool_call(c, k) for k, c in enumerate(calls)]
            out["message"] = message
        else:
            out["response"] = content
            if reasoning:
                out["thinking"] = reasoning
        return {**out, "done": False}

    def delta(self, reasoning: str, content: str) -> list[dict]:
        return [self.piece(reasoning, content)] if reasoning or content else []

    def done(self, info: dict) -> dict:
        """The figures of a finished answer, as Ollama's last object carries them."""
        seconds, prefill = info["stats"]["seconds"], info.get("prefill_seconds", 0.0)
        return {"done": True, "done_reason": info["finish_reason"],
                "total_duration": _ns(time.perf_counter() - self.started), "load_duration": 0,
                "prompt_eval_count": info["prompt_tokens"], "prompt_eval_duration": _ns(prefill),
                "eval_count": info["completion_tokens"], "eval_duration": _ns(seconds - prefill)}

    def whole(self, info: dict, content: str, calls: list[ToolCall]) -> dict:
        return {**self.piece(info["reasoning"], content, calls), **self.done(info)}

    def end(self, info: dict, rest: str, calls: list[ToolCall]) -> list[dict]:
        """A stream's last objects: the content held back with the tool calls, then the figures."""
        last = [self.piece("", rest, calls)] if rest or calls else []
        return last + [{**self.piece("", ""), **self.done(info)}]

    def loaded(self) -> dict:
        """The answer to a request with nothing to answer (Ollama's way to load a model)."""
        return {**self.piece("", ""), "done": True, "done_reason": "load"}


# ---------------------------------------------------------------------------------------------- the model

def _disk_size(path: Path) -> int:
    """The checkpoint's bytes on disk (a folder's files, not recursing)."""
    try:
        return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.iterdir()
                                                               if f.is_file())
    except OSError:
        return 0


def _parameters(model: Any) -> str:
    try:
        count = sum(p.numel() for p in model.parameters())
    except (AttributeError, TypeError):  # an offloading runtime, not a torch module
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def model_entry(loaded: Any, name: str) -> dict:
    """The served model as /api/tags and /api/ps list it. `digest` is the sha256 of the name (stable, not of the
    weights: hashing gigabytes at start is not worth it)."""
    modified = datetime.fromtimestamp(Path(loaded.path).stat().st_mtime, timezone.utc).isoformat()
    details = {"parent_model": "", "format": "safetensors", "family": "clover", "families": ["clover"],
               "parameter_size": _parameters(loaded.model), "quantization_level": ""}
    return {"name": tag(name), "model": tag(name), "modified_at": modified.replace("+00:00", "Z"),
            "size": _disk_size(Path(loaded.path)), "digest": hashlib.sha256(tag(name).encode()).hexdigest(),
            "details": details}


def running_entry(loaded: Any, name: str, context: int) -> dict:
    """The loaded model as /api/ps lists it (no expiry: it stays loaded while `serve` runs)."""
    vram = 0
    try:
        import torch

        if torch.cuda.is_initialized():
            vram = torch.cuda.memory_allocated()
    except ImportError:
        pass
    entry = model_entry(loaded, name)
    return {**entry, "size": max(entry["size"], vram), "size_vram": vram, "context_length": context}


def capabilities(template: str) -> list[str]:
    """What the chat template reads, as Ollama names it."""
    return ["completion"] + [cap for cap, word in (("tools", "tools"), ("thinking", "enable_thinking"))
                             if word in template]


def show(loaded: Any, name: str, context: int) -> dict:
    template = loaded.tokenizer.chat_template or ""
    c = loaded.config
    info = {"general.architecture": "clover", "general.basename": name, "clover.context_length": context,
            "clover.embedding_length": c.hidden_size, "clover.block_count": c.num_hidden_layers,
            "clover.attention.head_count": c.num_attention_heads, "clover.attention.head_count_kv":
            c.num_key_value_heads, "clover.expert_count": c.num_experts,
            "clover.expert_used_count": c.num_experts_per_tok, "clover.vocab_size": c.vocab_size}
    entry = model_entry(loaded, name)
    return {"modelfile": "", "parameters": "", "template": template, "details": entry["details"],
            "model_info": info, "capabilities": capabilities(template), "modified_at": entry["modified_at"]}
