"""The OpenAI chat-completions and completions wire formats: parsing and checking a request, shaping responses
and errors. (/v1/completions' own fields and refusals: `parse_completion_request`.)

Accepted (others are ignored, as OpenAI-compatible servers do): `messages` (system/developer, user, assistant, tool;
text content as a string or a list of text parts; an assistant's `reasoning_content` and `tool_calls`, a tool's
`tool_call_id`), `tools` with `tool_choice` (serve/tools.py reads the calls back; a forced call: below), `max_tokens` /
`max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop`, `n` (1 only), `stream`,
`stream_options.include_usage`, `presence_penalty`, `frequency_penalty` and vLLM's `repetition_penalty`,
`enable_thinking` and `chat_template_kwargs` (vLLM style; `chat_template_kwargs.enable_thinking` wins),
`thinking_token_budget` (vLLM's name: the most tokens the thinking may take, generate/thinking.py),
`reasoning_effort` (none / minimal: no thinking, where enable_thinking is not sent; the other efforts think, low
with a thinking budget of 1,024 tokens and medium of 4,096 where thinking_token_budget is not sent: EFFORT_BUDGETS),
`response_format` text, json_object (JSON mode, both endpoints: the answer is one JSON object, written without
thinking) or json_schema (structured outputs: `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`,
the answer is one value the schema allows, held to it byte by byte as JSON mode is; the subset of JSON Schema in
generate/json_schema.py, anything else in the schema refused with a 400 naming the keyword; also without thinking),
and our own `threshold` and `reveal_factor` (how many positions a pass reveals: every one at least `threshold`
confident, or with `reveal_factor` > 0 Fast-dLLM's factor rule, generate/sampling.sure_enough; a request that sends
neither gets the model's threshold, or `serve --reveal-factor`).

`logprobs: true` (with `top_logprobs` 0 to 20) answers OpenAI's `choices[0].logprobs.content`: for each token of
the message's content (not the thinking's), its log-probability given the conversation and the answer before it,
and the likeliest alternatives. Those come from a causal (left-to-right) scoring pass after the answer: the model
decodes by block diffusion, so no token has a sampling probability of its own (`chat_logprobs`). Not while
streaming (refused, as on /v1/completions), and `top_logprobs` above 0 needs `logprobs: true` (as OpenAI).

A `tool_choice` that forces a call ("required": some call of the tools, or a named function; `parallel_tool_calls`
false: exactly one) holds the answer to the call (serve/tools.py's `ForcedCall`): written without thinking, its
arguments held to the tool's parameters schema — so a schema outside the supported subset is a 400 there too.

Refused with a 400 rather than ignored, since the answer would look as if they were honoured: the deprecated
`functions` / `function_call`, and a json_schema keyword outside the supported subset (`pattern`, `minimum`,
`oneOf` ...). Their harmless forms pass: `functions: []`, `function_call` "none" or "auto".
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from clover_local.errors import CloverError
from clover_local.generate.json_mode import Grammar
from clover_local.generate.json_schema import Schema, compile_schema
from clover_local.generate.ranges import DECODE_RANGES, PENALTY_RANGES, Penalties, Range
from clover_local.serve.tools import ForcedCall, ToolCall
from clover_local.text_files import parse_json


class ApiError(Exception):
    """An error answered as OpenAI does: HTTP status and {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Sampling:
    """What a chat request and a completions request share: how to sample, when to stop, how to answer."""

    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    include_blocks: bool = False  # stream_options.include_blocks (ours): a long prompt's reading, each block's passes
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token (vLLM's -1 is read as 0)
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    threshold: float | None = None
    reveal_factor: float | None = None  # > 0: the factor rule instead of the threshold; 0: the threshold rule
    penalties: Penalties = field(default_factory=Penalties)
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit, -100 to 100
    json_object: bool = False  # response_format json_object: the answer is one JSON object
    json_schema: Schema | None = None  # response_format json_schema, compiled: the answer is one value it allows
    # max_tokens is a ceiling the client must send and sets high (Anthropic's): cut to what the server and the
    # context allow instead of refused
    max_tokens_ceiling: bool = False

    @property
    def json_mode(self) -> str | None:
        """The response_format that holds the answer to JSON (json_object or json_schema), if any."""
        return "json_schema" if self.json_schema is not None else "json_object" if self.json_object else None

    @property
    def answer_grammar(self) -> Grammar | None:
        """What the answer is held to, if anything beyond JSON mode: a json_schema (a chat's forced call too)."""
        return self.json_schema


@dataclass
class ChatRequest(Sampling):
    messages: list[dict[str, Any]] = field(default_factory=list)
    logprobs: int | None = None  # with logprobs: true, top_logprobs (0: the token's own only); None: logprobs off
    tools: list[dict] | None = None  # for the template, and to read the answer's calls back (serve/tools.py)
    forced: ForcedCall | None = None  # a tool_choice that forces a call: the answer is held to it
    parallel_calls: bool = True  # parallel_tool_calls: with tool_choice auto, more than one call may come
    think_budget: int | None = None  # the most tokens the thinking may take (generate/thinking.py)
    enable_thinking: bool = True
    # the request said whether (or how long) to think; one that did not takes the server's default (serve --no-think)
    thinking_asked: bool = False
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # a conversation past the context loses its oldest messages rather than being refused (chat/window.py): Ollama's
    # route, every route with serve --drop-oldest
    drop_oldest: bool = False

    @property
    def answer_grammar(self) -> Grammar | None:
        return self.forced.grammar if self.forced is not None else self.json_schema


@dataclass
class CompletionRequest(Sampling):
    """/v1/completions: raw text (or token ids) continued, no chat template. One answer per prompt."""

    prompts: list[str | list[int]] = field(default_factory=list)
    echo: bool = False
    logprobs: int | None = None  # how many likeliest tokens to list at each position (0: the token's own only)


MAX_STOPS = 16  # OpenAI takes 4; evaluation harnesses send a task's stop strings and the EOS text, often more


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def number_field(body: dict, name: str, r: Range, default: float | None) -> float | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request(f"'{name}' must be a number", name)
    if not r.allows(value):
        raise bad_request(f"'{name}' must be in {r}, got {value}", name)
    return float(value)


# OpenAI's temperature range, which Anthropic's and Ollama's wire formats keep too (the command line's goes to 10)
WIRE_TEMPERATURE = Range(0.0, 2.0, False, 0.0)


def sampling_field(body: dict, name: str) -> float:
    """A decoding field (`top_p`, `min_p`) checked against its range in DECODE_RANGES; absent, its off value."""
    r = DECODE_RANGES[name]
    return number_field(body, name, r, r.off)  # type: ignore[return-value]


def penalties_field(body: dict, names: dict[str, str] | None = None) -> Penalties:
    """The three penalties, each checked against its range; `names` maps ours (presence_penalty, ...) to the
    fields a wire format sends them as (Ollama's repeat_penalty)."""
    values = {}
    for ours, r in PENALTY_RANGES.items():
        name = (names or {}).get(ours, ours)
        values[ours.removesuffix("_penalty")] = number_field(body, name, r, r.off)
    return Penalties(**values)


def top_k_field(body: dict) -> int:
    """`top_k` (vLLM's extra field, Anthropic's, an Ollama option): sample among the k likeliest tokens; 0 (and
    vLLM's -1) keep them all."""
    value = body.get("top_k")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise bad_request("'top_k' must be a whole number: how many of the likeliest tokens a draw takes from "
                          "(0 or -1: all)", "top_k")
    return max(value, 0)


def logit_bias_field(body: dict) -> dict[int, float]:
    """`logit_bias`: {token id (a string, as JSON keys are): a number from -100 to 100}. Whether each id is in the
    model's vocabulary is checked where the model is known (the server's `_settings`)."""
    value = body.get("logit_bias")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request("'logit_bias' must be an object mapping token ids to numbers from -100 to 100", "logit_bias")
    out = {}
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise bad_request(f"'logit_bias' keys are token ids (non-negative integers), got {key!r}", "logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise bad_request(f"'logit_bias' values must be numbers from -100 to 100, got {bias!r} for token {key}",
                              "logit_bias")
        out[int(key)] = float(bias)
    return out


def seed_field(body: dict, name: str = "seed") -> int | None:
    seed = body.get(name)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad_request(f"'{name}' must be an integer", name)
    return seed


def stop_field(body: dict, name: str = "stop") -> list[str] | None:
    """Stop strings: a string or a list of up to MAX_STOPS non-empty ones (None when absent)."""
    stop = body.get(name)
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or len(stop) > MAX_STOPS
                             or not all(isinstance(s, str) and s for s in stop)):
        raise bad_request(f"'{name}' must be a string or a list of up to {MAX_STOPS} non-empty strings", name)
    return stop


def int_field(body: dict, name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer", name)
    if value < minimum:
        raise bad_request(f"'{name}' must be at least {minimum}, got {value}", name)
    return value


def _content(value: Any, i: int, role: str) -> str:
    if value is None and role == "assistant":
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(f"messages[{i}].content: only text parts are supported, got {kind!r}",
                                  f"messages[{i}].content")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def _unsupported(name: str, why: str) -> ApiError:
    return bad_request(f"'{name}' is not supported by clover-local serve ({why})", name)


def read_tools(body: dict) -> list[dict] | None:
    """The request's tools for the template (None: none, or `tool_choice` "none"), checked; a 400 for a malformed
    list, a `parameters` schema that is not well formed, or a `tool_choice` this server cannot honour."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools")
    if body.get("functions"):  # the deprecated form: the same thing under another name, not worth a second path
        raise bad_request("'functions' is not supported by clover-local serve (the deprecated form of tools): send "
                          "'tools' instead", "functions")
    choice = body.get("tool_choice")
    if body.get("function_call") not in (None, "none", "auto"):
        raise bad_request("'function_call' is not supported by clover-local serve: send 'tool_choice'",
                          "function_call")
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(tool, dict) and tool.get("type") == "function" and isinstance(function, dict)
                and isinstance(function.get("name"), str) and function["name"]):
            raise bad_request(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", "
                              "\"description\", \"parameters\"}}", f"tools[{i}]")
        if not isinstance(function.get("parameters", {}), dict):
            raise bad_request(f"tools[{i}].function.parameters must be a JSON schema object",
                              f"tools[{i}].function.parameters")
        try:  # well formed, as the call grammars read it (`properties` an object, `type` a name ...): a keyword
            # past the supported subset is passed over here, as in an unforced call's grammar
            _well_formed(json.dumps(function.get("parameters") or {"type": "object"}, sort_keys=True))
        except CloverError as exc:
            raise bad_request(f"tools[{i}].function.parameters: {exc}", f"tools[{i}].function.parameters") from None
    return tools if tools and choice != "none" else None


@functools.lru_cache(maxsize=256)
def _well_formed(parameters: str) -> None:
    """`read_tools`' check of one tool's schema, kept by its JSON (a refusal is not kept): agents send the same
    tools with every request, and compiling 20 of them took ≈ 20 ms a request."""
    compile_schema(json.loads(parameters), lenient=True)


def read_call_choice(body: dict, req: ChatRequest) -> None:
    """`parallel_tool_calls` and `tool_choice` into `req`, whose tools are read (chat completions, Responses)."""
    req.parallel_calls = bool_field(body, "parallel_tool_calls", True)
    req.forced = read_tool_choice(body, req.tools, req.parallel_calls)


def read_tool_choice(body: dict, tools: list[dict] | None, parallel: bool = True) -> ForcedCall | None:
    """The call `tool_choice` forces (OpenAI chat's forms; the other wire formats translate theirs into them), None
    for "auto" and "none": "required" is some call of `tools` (one or more; one where `parallel` — the request's
    `parallel_tool_calls` — is false), `{"type": "function", "function": {"name"}}` one call of that tool. A
    malformed schema is `read_tools`' 400; a candidate marked `strict` (OpenAI's strict mode asks the whole schema
    be kept) is compiled whole here, so one with a keyword outside the supported subset is a 400 before anything
    runs. Without `strict` such a keyword is passed over and the rest of the schema held (instructor's pydantic
    models carry `minimum`, `pattern` ...: the client validates the arguments itself)."""
    choice = body.get("tool_choice")
    if choice in (None, "auto", "none"):
        return None
    named = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = named.get("name") if isinstance(named, dict) else None
    if choice != "required" and not isinstance(name, str):
        raise bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}", "tool_choice")
    if not tools:
        raise bad_request(f"'tool_choice' {json.dumps(choice)} forces a call, but the request has no tools",
                          "tool_choice")
    picked = [(i, t) for i, t in enumerate(tools) if name is None or t["function"]["name"] == name]
    if not picked:
        raise bad_request(f"'tool_choice' names the function {name!r}, which is not among the tools", "tool_choice")
    for i, tool in picked:
        if tool["function"].get("strict") is not True:
            continue
        try:
            compile_schema(tool["function"].get("parameters") or {"type": "object"})
        except CloverError as exc:
            raise bad_request(f"tools[{i}].function.parameters: {exc} (a strict tool's arguments are held to its "
                              "whole schema)", f"tools[{i}].function.parameters") from None
    return ForcedCall([t for _, t in picked], parallel=name is None and parallel)


def _template_tool_calls(message: dict, i: int) -> dict:
    """An assistant message's `tool_calls` as chat templates read them: each call's `arguments` an object (the
    API sends a JSON string)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        raise bad_request(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(f"messages[{i}].tool_calls[{k}] must hold a function with a name",
                              f"messages[{i}].tool_calls")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = parse_json(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                raise bad_request(f"messages[{i}].tool_calls[{k}].function.arguments is not JSON",
                                  f"messages[{i}].tool_calls") from None
        if not isinstance(arguments, dict):
            raise bad_request(f"messages[{i}].tool_calls[{k}].function.arguments must be a JSON object",
                              f"messages[{i}].tool_calls")
        out.append({"id": call.get("id"), "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}})
    return {**message, "tool_calls": out}


def _response_format(body: dict) -> tuple[bool, Schema | None]:
    """`response_format` as (json_object, compiled json_schema): json_object turns JSON mode on
    (generate/json_mode.py), json_schema holds the answer to the schema (generate/json_schema.py), compiled here so
    that a schema outside the supported subset is a 400 before anything runs."""
    fmt = body.get("response_format")
    if fmt is None:
        return False, None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise bad_request("'response_format' must be an object whose 'type' is text, json_object or json_schema",
                          "response_format")
    if kind != "json_schema":
        return kind == "json_object", None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise bad_request("'response_format' json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}",
                          "response_format")
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise bad_request("'response_format.json_schema.strict' must be true or false", "response_format")
    try:  # strict or not, the answer is held to the schema
        return False, compile_schema(spec["schema"])
    except CloverError as exc:
        raise bad_request(f"'response_format': {exc}", "response_format") from None


def parse_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}] must be an object", f"messages[{i}]")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise bad_request(f"messages[{i}].role must be system, user, assistant or tool, got {role!r}",
                              f"messages[{i}].role")
        msg: dict[str, Any] = {"role": role, "content": _content(m.get("content"), i, role)}
        if role == "assistant" and isinstance(m.get("reasoning_content"), str):
            msg["reasoning_content"] = m["reasoning_content"]
        if role == "assistant" and m.get("tool_calls") is not None:
            msg = _template_tool_calls({**msg, "tool_calls": m["tool_calls"]}, i)
        if role == "tool" and isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def late_system_as_user(messages: list[dict]) -> list[dict] | None:
    """`messages` with each system message after the first turn made a user message in place, its text marked as
    a system reminder (the form Claude Code itself uses in user turns); None when there is none. For chat templates
    that refuse a system message anywhere but first, as the Qwen3.5/3.6 ones do ("System message must be at the
    beginning"), while agents send one mid-conversation (Claude Code's context, late developer messages). In place
    rather than merged into the first: the prompt's start, which the prompt cache resumes, stays as it was."""
    if not any(m["role"] == "system" for m in messages[1:]):
        return None
    return [messages[0]] + [{"role": "user", "content": f"<system-reminder>\n{m['content']}\n</system-reminder>"}
                            if m["role"] == "system" else m for m in messages[1:]]


def json_body(raw: bytes) -> dict:
    try:
        body = parse_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def bool_field(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false", name)
    return value


def model_field(body: dict) -> str | None:
    """The model a request names (any name: one model is served), checked to be a string."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("'model' must be a string", "model")
    return model


def read_sampling(body: dict, req: Sampling, min_tokens: int = 1) -> None:
    """The fields both endpoints read, checked, into `req`."""
    req.model = model_field(body)
    req.stream = bool_field(body, "stream", False)
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise bad_request("'stream_options' must be an object", "stream_options")
        req.include_usage = bool(opts.get("include_usage", False))
        req.include_blocks = bool(opts.get("include_blocks", False))
    mt = int_field(body, "max_completion_tokens", min_tokens)
    mt = mt if mt is not None else int_field(body, "max_tokens", min_tokens)
    if mt is not None:
        req.max_tokens = mt
    req.temperature = number_field(body, "temperature", WIRE_TEMPERATURE, 0.0)
    req.top_p = sampling_field(body, "top_p")
    req.top_k, req.min_p = top_k_field(body), sampling_field(body, "min_p")
    # (absent: the model's threshold, or serve --reveal-factor)
    req.threshold = number_field(body, "threshold", DECODE_RANGES["threshold"], None)
    req.reveal_factor = number_field(body, "reveal_factor", DECODE_RANGES["reveal_factor"], None)
    req.penalties = penalties_field(body)
    req.logit_bias = logit_bias_field(body)
    req.json_object, req.json_schema = _response_format(body)
    req.seed = seed_field(body)
    n = body.get("n")
    if n not in (None, 1):
        raise bad_request("only n=1 is supported", "n")
    req.stop = stop_field(body) or req.stop


NO_THINKING_EFFORTS = ("none", "minimal")
# The model has no effort levels of its own (it thinks until it is done: thousands of tokens), so a low or medium
# effort becomes a thinking budget (generate/thinking.py: the thought is ended for the model where it runs out);
# high and above leave the thinking uncapped. A request's `thinking_token_budget` wins over its effort's.
EFFORT_BUDGETS = {"low": 1024, "medium": 4096}


def effort_thinking(effort: Any, name: str) -> tuple[bool | None, int | None]:
    """A reasoning effort (OpenAI's `reasoning_effort`, the Responses API's `reasoning.effort`, Ollama's `think`
    levels) as (enable_thinking, thinking budget): off for none / minimal, on for any other, None when absent; the
    budget from EFFORT_BUDGETS."""
    if effort is None:
        return None, None
    if not isinstance(effort, str):
        raise bad_request(f"'{name}' must be a string", name)
    return effort not in NO_THINKING_EFFORTS, EFFORT_BUDGETS.get(effort)


def template_options(body: dict, thinking: bool = True) -> tuple[bool, dict[str, Any]]:
    """(enable_thinking, other chat-template variables): vLLM's `chat_template_kwargs`, whose enable_thinking wins
    over the top-level one, `thinking` where neither is sent; the variables the server sets itself are dropped."""
    think = body.get("enable_thinking")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs")
        kwargs = dict(kwargs)
        if "enable_thinking" in kwargs:
            think = kwargs.pop("enable_thinking")
        for reserved in ("messages", "add_generation_prompt"):
            kwargs.pop(reserved, None)
    if think is not None and not isinstance(think, bool):
        raise bad_request("'enable_thinking' must be true or false", "enable_thinking")
    return thinking if think is None else think, kwargs or {}


def enable_thinking_sent(body: dict) -> bool:
    """The body sets enable_thinking (top-level or in chat_template_kwargs, as `template_options` reads it)."""
    kwargs = body.get("chat_template_kwargs")
    return body.get("enable_thinking") is not None or (isinstance(kwargs, dict) and "enable_thinking" in kwargs)


def _chat_logprobs(body: dict, stream: bool) -> int | None:
    """`logprobs` / `top_logprobs` as OpenAI takes them: None when logprobs are off, else how many alternatives.
    Refused: top_logprobs above 0 without logprobs (OpenAI's 400; it would come back as if honoured), out of
    range, and logprobs while streaming (they come from a scoring pass after the answer)."""
    on = bool_field(body, "logprobs", False)
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_LOGPROBS):
        raise bad_request(f"'top_logprobs' must be an integer from 0 to {MAX_LOGPROBS}", "top_logprobs")
    if top and not on:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    if on and stream:
        raise _unsupported("logprobs", "not while streaming: they come from a scoring pass after the answer; "
                           "send stream false")
    return (top or 0) if on else None


def parse_chat_request(raw: bytes) -> ChatRequest:
    body = json_body(raw)
    req = ChatRequest(messages=parse_messages(body.get("messages")), tools=read_tools(body))
    read_sampling(body, req)
    read_call_choice(body, req)
    req.logprobs = _chat_logprobs(body, req.stream)
    # ours (`chat URL` sends it): a conversation that outgrows the context loses its oldest exchanges and max_tokens
    # is cut to the room left, as `chat` does with a model of its own (and the Ollama route does)
    req.drop_oldest = req.max_tokens_ceiling = bool_field(body, "fit_context", False)
    modalities = body.get("modalities") or []
    if body.get("audio") is not None or (isinstance(modalities, list) and set(modalities) - {"text"}):
        raise _unsupported("audio" if body.get("audio") is not None else "modalities",
                           "the model reads and writes text only: leave out audio output")
    # JSON mode holds the whole answer to one object (or schema), so the model answers without thinking first
    mode = req.json_mode
    effort, effort_budget = effort_thinking(body.get("reasoning_effort"), "reasoning_effort")
    req.think_budget = int_field(body, "thinking_token_budget", 1) or effort_budget
    whole = mode is not None or req.forced is not None  # the answer is the JSON (or the call): no thinking
    req.enable_thinking, req.template_kwargs = template_options(body, thinking=not whole and effort is not False)
    req.thinking_asked = effort is not None or req.think_budget is not None or enable_thinking_sent(body)
    if req.tools:
        req.template_kwargs["tools"] = req.tools
    if mode and req.enable_thinking:
        raise bad_request(f"'response_format' {mode} answers without thinking (the whole answer is the JSON): "
                          "leave enable_thinking out or set it to false", "enable_thinking")
    check_forced_thinking(req, "enable_thinking")
    return req


def check_forced_thinking(req: ChatRequest, param: str) -> None:
    """A forced call is the whole answer, written without thinking: a 400 where thinking was asked for (Anthropic's
    API refuses the same)."""
    if req.forced is not None and req.enable_thinking:
        raise bad_request("a 'tool_choice' that forces a call answers without thinking (the whole answer is the "
                          "call): leave thinking off, or send tool_choice auto", param)


@dataclass
class TokenizeRequest:
    """vLLM's /tokenize: a `prompt` as it is, or `messages` rendered with the chat template."""

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    enable_thinking: bool = True
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def parse_tokenize_request(raw: bytes) -> TokenizeRequest:
    """A conversation sent as `prompt` (a list of {role, content}) is taken as `messages`: lm-evaluation-harness's
    remote tokenizer sends its chat-templated requests that way (`--apply_chat_template`); `tools` are rendered
    with them, as a chat request renders them."""
    body = json_body(raw)
    if ("prompt" in body) == ("messages" in body):
        raise bad_request("send either 'prompt' (text) or 'messages' (a conversation) to tokenize", "prompt")
    prompt = body.get("prompt")
    if "prompt" in body and not (isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt)):
        if not isinstance(prompt, str):
            raise bad_request("'prompt' must be a string (or a list of {role, content} messages)", "prompt")
        return TokenizeRequest(prompt=prompt)
    req = TokenizeRequest(messages=parse_messages(body["messages"] if prompt is None else prompt))
    req.add_generation_prompt = bool_field(body, "add_generation_prompt", True)
    req.enable_thinking, req.template_kwargs = template_options(body)
    tools = read_tools(body)
    if tools:  # (vLLM's takes them too: a client counting what a request with tools will cost)
        req.template_kwargs["tools"] = tools
    return req


def parse_detokenize_request(raw: bytes) -> list[int]:
    tokens = json_body(raw).get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad_request("'tokens' must be a list of token ids", "tokens")
    return tokens


def check_ids(ids: list[int], vocab_size: int, what: str, param: str) -> None:
    """A 400 for a token id the model has no row for (it would index past the embedding)."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise bad_request(f"{what} holds token id {bad}, outside this model's vocabulary (0 to {vocab_size - 1})",
                          param)


MAX_LOGPROBS = 20  # likeliest tokens listed a position at most (OpenAI's legacy API: 5; vLLM's default: 20)
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default for /v1/completions (vLLM's too)


def parse_prompts(value: Any) -> list[str | list[int]]:
    """`prompt` as OpenAI takes it: a string, a list of token ids, or a list of either (a batch)."""
    def is_ids(x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)

    if isinstance(value, str) or (is_ids(value) and value):
        prompts = [value]
    elif isinstance(value, list) and value and all(isinstance(x, str) or is_ids(x) for x in value):
        prompts = list(value)
    else:
        raise bad_request("'prompt' must be a string, a list of token ids, or a non-empty list of either", "prompt")
    for i, p in enumerate(prompts):
        if not p:
            raise bad_request(f"prompt[{i}] is empty: a completion continues some text", "prompt")
    return prompts


def parse_completion_request(raw: bytes) -> CompletionRequest:
    """/v1/completions. Refused rather than ignored: `suffix` (no infilling: the text is read left to right),
    `best_of` above 1, `logprobs` with `stream` (they come from a scoring pass after the answer), a batch of prompts
    with `stream`, and `max_tokens` 0 without `echo` (nothing to return)."""
    body = json_body(raw)
    req = CompletionRequest(prompts=parse_prompts(body.get("prompt")), max_tokens=COMPLETIONS_MAX_TOKENS)
    read_sampling(body, req, min_tokens=0)
    req.echo = bool_field(body, "echo", False)
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_LOGPROBS):
        raise bad_request(f"'logprobs' must be an integer from 0 to {MAX_LOGPROBS} on /v1/completions "
                          "(how many likeliest tokens to list at each position)", "logprobs")
    req.logprobs = logprobs
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise bad_request("'suffix' must be a string", "suffix")
    if suffix:
        raise _unsupported("suffix", "no infilling: the model reads the text left to right here")
    if body.get("best_of") not in (None, 1):
        raise bad_request("only best_of=1 is supported", "best_of")
    if req.max_tokens == 0 and not req.echo:
        raise bad_request("'max_tokens' is 0 and 'echo' is off: there would be nothing to return", "max_tokens")
    if req.stream and req.logprobs is not None:
        raise _unsupported("logprobs", "not while streaming: they come from a scoring pass after the answer; "
                           "send stream false")
    if req.stream and len(req.prompts) > 1:
        raise bad_request("stream one prompt at a time (or send the batch with stream false)", "prompt")
    return req


# ---------------------------------------------------------------------------------------------- responses

def completion_id(kind: str = "chatcmpl") -> str:
    return f"{kind}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int, stats: dict, cached_tokens: int = 0
          ) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        # OpenAI's name for prompt tokens served from a prefix cache: here, resumed from the last request's prefill
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        # ours: how block diffusion did on this answer
        "clover": stats,
    }


def answer_usage(*infos: dict) -> dict:
    """Usage of one answer, or the sum over a batch's (block-diffusion figures recomputed from the sums)."""
    if len(infos) == 1:
        i = infos[0]
        return usage(i["prompt_tokens"], i["completion_tokens"], i["reasoning_tokens"], i["stats"], i["cached_tokens"])
    total = {k: sum(i[k] for i in infos) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens",
                                                   "cached_tokens")}
    passes, seconds = sum(i["stats"]["passes"] for i in infos), sum(i["stats"]["seconds"] for i in infos)
    tokens = total["completion_tokens"]
    stats = {"passes": passes, "tokens_per_pass": round(tokens / passes, 4) if passes else 0.0,
             "seconds": round(seconds, 4), "tokens_per_second": round(tokens / seconds, 3) if seconds else 0.0}
    return usage(total["prompt_tokens"], tokens, total["reasoning_tokens"], stats, total["cached_tokens"])


def completion(cid: str, model: str, content: str, reasoning: str | None, finish_reason: str, use: dict,
               tool_calls: list[dict] | None = None, logprobs: dict | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning or None}
    if tool_calls:  # OpenAI's shape: the calls, content null unless the model also wrote some
        message.update(content=content if content.strip() else None, tool_calls=tool_calls)
        finish_reason = "tool_calls"
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": logprobs, "message": message}],
        "usage": use,
    }


def chunk(cid: str, model: str, created: int, delta: dict | None, finish_reason: str | None = None,
          use: dict | None = None) -> dict:
    out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [] if delta is None else
                           [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
    if use is not None:
        out["usage"] = use
    return out


class AnswerShape(Protocol):
    """How one wire format shapes an answer (`Handler._answer` runs it): whole, or as a stream's events — each a
    payload or (event name, payload) — from the engine's deltas; the text's tool calls already split off."""

    ndjson: bool  # the stream is newline-delimited JSON (Ollama's), else server-sent events
    last: str | None  # the stream's closing data line (OpenAI's [DONE]), or None

    def whole(self, info: dict, content: str, calls: list[ToolCall]) -> dict: ...

    def start(self) -> list: ...

    def delta(self, reasoning: str, content: str) -> list: ...

    def end(self, info: dict, rest: str, calls: list[ToolCall]) -> list: ...

    def error(self, err: ApiError) -> list: ...


@dataclass
class ChatAnswer:
    """/v1/chat/completions' shape of an answer: one chat.completion, or its chunks ending with [DONE]. (Each wire
    format has one such shape, with the same methods: `Handler._answer` runs them all.)"""

    model: str
    include_usage: bool = False
    logprobs: Callable[[dict], dict | None] = lambda info: None  # the message's logprobs from a finished answer
    ndjson = False  # a stream of server-sent events
    last = "[DONE]"  # the stream's closing data line

    def __post_init__(self) -> None:
        self.cid, self.created = completion_id(), int(time.time())

    def _chunk(self, delta: dict | None, finish_reason: str | None = None, use: dict | None = None) -> dict:
        return chunk(self.cid, self.model, self.created, delta, finish_reason, use)

    def whole(self, info: dict, content: str, calls: list[ToolCall]) -> dict:
        # (logprobs: of the content as the model wrote it, tool-call text included)
        return completion(self.cid, self.model, content, info["reasoning"], info["finish_reason"], answer_usage(info),
                          [c.to_api() for c in calls], self.logprobs(info))

    def start(self) -> list[dict]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, reasoning: str, content: str) -> list[dict]:
        return ([self._chunk({"reasoning_content": reasoning})] if reasoning else []) + (
            [self._chunk({"content": content})] if content else [])

    def view(self, fields: dict) -> list[dict]:
        """The work in view (`stream_options.include_blocks`): a chunk with no choices, as the usage chunk, holding
        `clover_prompt` (what the prompt is and leaves the answer), `clover_prefill` (a long prompt's tokens read),
        `clover_block` (generate/block_view.py's to_dict) or `clover_commit` (the counts at a block's commit)."""
        return [{**self._chunk(None), **fields}]

    def end(self, info: dict, rest: str, calls: list[ToolCall]) -> list[dict]:
        events = [self._chunk({"content": rest})] if rest else []
        if calls:
            events.append(self._chunk({"tool_calls": [c.to_api(k) for k, c in enumerate(calls)]}))
        events.append(self._chunk({}, "tool_calls" if calls else info["finish_reason"]))
        return events + ([self._chunk(None, use=answer_usage(info))] if self.include_usage else [])

    @staticmethod
    def error(err: ApiError) -> list[dict]:
        return [err.body()]


def text_completion(cid: str, model: str, choices: list[dict], use: dict) -> dict:
    return {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": use}


def text_choice(index: int, text: str, finish_reason: str | None, logprobs: dict | None = None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def text_chunk(cid: str, model: str, created: int, choice: dict | None, use: dict | None = None) -> dict:
    out: dict[str, Any] = {"id": cid, "object": "text_completion", "created": created, "model": model,
                           "choices": [] if choice is None else [choice]}
    if use is not None:
        out["usage"] = use
    return out


def legacy_logprobs(tokenizer, ids: list[int], scores, first: int) -> dict:
    """The completions API's `logprobs` for ids[first:]: each token's text, its log-probability given the tokens
    before it (None for the text's first token, which nothing predicts), the likeliest alternatives (token text
    → logprob; tokens whose texts coincide share a key, as in other servers), and where each token's text starts
    in the returned text (a character split over two tokens starts at the one completing it). `scores` is
    `score_ids(model, ids, top)`'s: scores.logprobs[i] is ids[i+1]'s."""
    pieces = tokenizer.pieces(ids)
    offset = 0
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for i in range(first, len(ids)):
        out["tokens"].append(tokenizer.decode([ids[i]]))
        out["text_offset"].append(offset)
        offset += len(pieces[i])
        if i == 0:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
        else:
            out["token_logprobs"].append(scores.logprobs[i - 1])
            alternatives: dict[str, float] = {}
            for t, lp in scores.top[i - 1] if scores.top else []:
                alternatives.setdefault(tokenizer.decode([t]), lp)  # likeliest first; it keeps a shared key
            out["top_logprobs"].append(alternatives)
    return out


def _logprob(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(tokenizer, ids: list[int], first: int, scores) -> dict:
    """The chat API's `logprobs` for the content's tokens ids[first:] (`ids`: the answer up to there; `scores`:
    theirs, `score_from_snapshot`'s). A token's text and bytes are the text it adds (ChatTokenizer.pieces), so the
    texts join into the content; a token ending inside a multi-byte character adds "" and the one completing it
    the whole character; bytes still open when the answer ends read as the content does (U+FFFD), on its last
    token. Each alternative's text is what it would add in the same place (after the bytes of a character still
    open there), so a greedy token reads as the first of its alternatives."""
    pieces = tokenizer.pieces(ids)
    if ids:
        pieces[-1] += tokenizer.decode(ids)[sum(map(len, pieces)):]
    content = []
    for i in range(first, len(ids)):
        lp = scores.logprobs[i - first]
        open_from = i
        while open_from > 0 and not pieces[open_from - 1]:  # bytes of a character the token may complete
            open_from -= 1
        top = [_logprob(tokenizer.pieces(ids[open_from:i] + [t])[-1], v)
               for t, v in (scores.top[i - first] if scores.top else [])]
        content.append({**_logprob(pieces[i], lp), "top_logprobs": top})
    return {"content": content, "refusal": None}


def first_stop(text: str, stops: list[str]) -> int | None:
    """Where `text` is cut: at the start of the stop string that ends first in it (of two ending together, the
    longer), as a reader taking one character at a time would stop. Defined by where a stop string ends, so a
    text cut as it streams in is cut where the whole text is; None when no stop string is in it."""
    best: tuple[int, int] | None = None
    for s in stops:
        i = text.find(s)  # a stop string's first occurrence is also the one that ends first
        if i >= 0 and (best is None or (i + len(s), i) < best):
            best = (i + len(s), i)
    return None if best is None else best[1]


class StopText:
    """Cuts the content at the first of the request's stop strings, holding back text that may start one.

    The streamed pieces add up to `text`, the non-streamed answer, however the text arrives: a stop string
    starting in text already let out would have been whole in the buffer (`hold` characters are kept back)."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.buffer = ""
        self.text = ""  # all let out so far: the answer's content
        self.hit = False
        self.matched: str | None = None  # the stop string that ended the answer (Anthropic's `stop_sequence`)

    def feed(self, text: str, final: bool = False) -> str:
        """The part of `text` (after what was held back) that is settled; "" once a stop string was met."""
        if self.hit:
            return ""
        if not self.stops:
            self.text += text
            return text
        self.buffer += text
        cut = first_stop(self.buffer, self.stops)
        if cut is not None:  # (the one that ends first: the shortest of those starting at the cut)
            self.matched = min((t for t in self.stops if self.buffer.startswith(t, cut)), key=len)
            out, self.buffer, self.hit = self.buffer[:cut], "", True
        else:
            keep = 0 if final else min(self.hold, len(self.buffer))  # a buffer shorter than `hold`: all kept
            out, self.buffer = self.buffer[: len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
        self.text += out
        return out
