"""Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`): the wire format Claude Code and
the `anthropic` SDK speak, translated to and from the chat request the server already runs.

A request becomes a `ChatRequest`, so the chat template, tools, thinking and structured outputs behave exactly as
on /v1/chat/completions:
- `system` (a string or text blocks) → a system message first; `messages` of user and assistant turns (and system
  ones, which Claude Code sends mid-conversation; see `_prompt` in http.py for a template that refuses them) whose
  content is a string or blocks: `text`; an assistant's `thinking` (→ its reasoning) and `tool_use` (→ its tool
  calls, whose `input` the template reads as the arguments); a user's `tool_result` (→ a `tool` message, before the
  turn's text, as Anthropic orders them). `cache_control` marks are ignored (the server's prompt cache needs none:
  a request that repeats the last one's prefix resumes its prefill, reported as `cache_read_input_tokens`).
- `tools` (custom tools: `name`, `description`, `input_schema`) with `tool_choice` auto, none, any or a named tool
  (`{"type": "tool", "name"}`; the last two force a call as OpenAI's "required" and named function do on the chat
  route, without thinking; `disable_parallel_tool_use`: one call); `thinking` `enabled`/`adaptive` or `disabled`
  (absent: the model's default) with its `budget_tokens` kept: where the thinking reaches it, the server ends the
  thinking itself and the answer follows (generate/thinking.py); `stop_sequences`, `temperature`, `top_p`,
  `stream`, `metadata`; structured outputs (`output_config.format` or the beta's `output_format`, `{"type":
  "json_schema", "schema"}`) as response_format json_schema is.
- `max_tokens` is required, and clients set it high (Claude Code: 32,000): it is a ceiling here, cut to this
  server's --max-tokens and what the context leaves, and `stop_reason` "max_tokens" says when the cut was reached.

Refused with a 400 rather than ignored: image or document blocks (the model reads text), Anthropic's server and
built-in tools (`web_search_…`, `bash_…`, `text_editor_…`: their schemas are Anthropic's), an assistant message
last (prefill), and `mcp_servers`. (`top_k` is taken: the draw is among the k likeliest tokens.)

The answer: a `thinking` block (with an empty `signature`: nothing here verifies one), a `text` block, then one
`tool_use` block per call read out of the answer (serve/tools.py); streamed as Anthropic's named events
(message_start, content_block_start / _delta / _stop per block, message_delta with the stop reason, message_stop),
the calls held back to the end as on the chat route. Errors are Anthropic's `{"type": "error", "error": {...}}`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from clover_local.errors import CloverError
from clover_local.generate.json_schema import compile_schema
from clover_local.serve.protocol import (WIRE_TEMPERATURE, ApiError, ChatRequest, bad_request, bool_field,
                                         check_forced_thinking, int_field, json_body, model_field, number_field,
                                         read_tool_choice, read_tools, sampling_field, stop_field, top_k_field)
from clover_local.serve.tools import ForcedCall, ToolCall

# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                503: "overloaded_error", 529: "overloaded_error"}


def error_body(err: ApiError) -> dict:
    """An error as Anthropic's API answers one."""
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(err.status, "invalid_request_error"),
                                       "message": err.message}}


# ---------------------------------------------------------------------------------------------- the request

def _text(value: Any, where: str) -> str:
    """A string, or a list of text blocks joined (what `system` and a `tool_result`'s content may be)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                       and isinstance(b.get("text"), str) for b in value):
        return "\n".join(b["text"] for b in value)
    raise bad_request(f"{where} must be a string or a list of text blocks (this model reads text only)", where)


def _user_turn(blocks: list, i: int) -> list[dict]:
    """A user turn's blocks as chat messages: each tool_result a `tool` message, the text blocks one user message."""
    out: list[dict] = []
    texts: list[str] = []
    for k, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"messages[{i}].content[{k}]"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_result":
            content = block.get("content", "")
            text = _text(content, f"{where}.content") if content else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "content": text, "tool_call_id": str(block.get("tool_use_id", ""))})
        else:
            raise bad_request(f"{where}: a {kind!r} block is not supported (this model reads text; send text and "
                              "tool_result blocks)", f"messages[{i}].content")
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _assistant_turn(blocks: list, i: int) -> dict:
    """An assistant turn's blocks as one chat message: text, thinking as its reasoning, tool_use as tool calls."""
    texts, thinking, calls = [], [], []
    for k, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"messages[{i}].content[{k}]"
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue  # encrypted by another model's API: nothing this one could read
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise bad_request(f"{where}: a tool_use block needs a 'name' and an 'input' object", f"messages[{i}]")
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block["name"], "arguments": block.get("input", {})}})
        else:
            raise bad_request(f"{where}: a {kind!r} block is not supported in an assistant turn (text, thinking and "
                              "tool_use are)", f"messages[{i}].content")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thinking:
        msg["reasoning_content"] = "\n".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _messages(body: dict) -> list[dict]:
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty list of {role, content} objects", "messages")
    out: list[dict] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _text(body["system"], "system")})
    for i, m in enumerate(value):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant", "system"):
            raise bad_request(f"messages[{i}].role must be user, assistant or system, got {role!r}",
                              f"messages[{i}].role")
        content = m.get("content")
        if role == "system":  # Claude Code sends some context this way, after the first user turn
            out.append({"role": "system", "content": _text(content, f"messages[{i}].content")})
            continue
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise bad_request(f"messages[{i}].content must be a string or a list of content blocks",
                              f"messages[{i}].content")
        out.extend(_user_turn(content, i) if role == "user" else [_assistant_turn(content, i)])
    if value[-1].get("role") == "assistant":
        raise bad_request("the last message is the assistant's (a prefill for the answer to continue), which "
                          "clover-local serve does not support: end with a user message", "messages")
    return out


def _chat_tools(body: dict) -> tuple[list[dict] | None, ForcedCall | None, bool]:
    """Anthropic's custom tools in the chat form the template reads, the call `tool_choice` forces, and whether
    calls may go in parallel (not with `disable_parallel_tool_use`), checked as the chat route checks them."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools")
    converted = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}] must be an object", f"tools[{i}]")
        if tool.get("type") not in (None, "custom"):
            raise bad_request(f"tools[{i}] is Anthropic's {tool['type']!r} tool, whose schema only Anthropic's "
                              "models know: describe it as a custom tool (name, description, input_schema)",
                              f"tools[{i}]")
        converted.append({"type": "function", "function": {
            "name": tool.get("name"), "description": tool.get("description", ""),
            "parameters": tool.get("input_schema", {"type": "object"}),
            **({"strict": True} if tool.get("strict") is True else {})}})
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if choice is not None and kind not in ("auto", "none", "any", "tool"):
        raise bad_request("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice")
    chat = {"tools": converted, "tool_choice": {"any": "required", "tool": {
        "type": "function", "function": {"name": choice.get("name") if kind == "tool" else None}}}.get(kind, kind),
        "parallel_tool_calls": not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True)}
    tools = read_tools(chat)
    parallel = chat["parallel_tool_calls"]
    return tools, read_tool_choice(chat, tools, parallel), parallel


def _thinking(body: dict, default: bool) -> tuple[bool, int | None]:
    """(thinking on, its budget): `thinking.budget_tokens` is kept (generate/thinking.py)."""
    value = body.get("thinking")
    if value is None:
        return default, None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("enabled", "adaptive", "disabled"):
        raise bad_request("'thinking' must be {\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}", "thinking")
    budget = value.get("budget_tokens")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise bad_request("'thinking.budget_tokens' must be a positive integer", "thinking")
    return kind != "disabled", budget


def _output_schema(body: dict):
    """Structured outputs: `output_config.format` (or the beta's `output_format`) json_schema, compiled."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    fmt = fmt if fmt is not None else body.get("output_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad_request("the output format must be {\"type\": \"json_schema\", \"schema\": {...}}", "output_config")
    try:
        return compile_schema(fmt["schema"])
    except CloverError as exc:
        raise bad_request(f"'output_config.format': {exc}", "output_config") from None


def parse_messages_request(raw: bytes, count_only: bool = False) -> ChatRequest:
    """A Messages request as the chat request the server runs (`count_only`: /count_tokens, no max_tokens)."""
    body = json_body(raw)
    if body.get("mcp_servers") is not None:
        raise bad_request("'mcp_servers' is not supported by clover-local serve", "mcp_servers")
    tools, forced, parallel = _chat_tools(body)
    req = ChatRequest(messages=_messages(body), tools=tools, forced=forced, parallel_calls=parallel,
                      max_tokens_ceiling=True)
    req.model = model_field(body)
    req.max_tokens = int_field(body, "max_tokens", 1)
    if req.max_tokens is None and not count_only:
        raise bad_request("'max_tokens' is required (the most tokens the answer may take)", "max_tokens")
    req.stream = bool_field(body, "stream", False)
    req.temperature = number_field(body, "temperature", WIRE_TEMPERATURE, 0.0)
    req.top_p = sampling_field(body, "top_p")
    req.top_k = top_k_field(body)
    req.stop = stop_field(body, "stop_sequences") or []
    req.json_schema = _output_schema(body)
    req.enable_thinking, req.think_budget = _thinking(body, default=req.json_schema is None and forced is None)
    req.thinking_asked = body.get("thinking") is not None
    check_forced_thinking(req, "thinking")
    if req.json_schema is not None and req.enable_thinking:
        raise bad_request("a json_schema output format answers without thinking (the whole answer is the JSON): leave "
                          "'thinking' out or disable it", "thinking")
    if req.tools:
        req.template_kwargs["tools"] = req.tools
    return req


# ---------------------------------------------------------------------------------------------- the answer

def message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def _tool_use(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name, "input": {}}


def usage(info: dict) -> dict:
    """Anthropic's usage: input tokens not read from the prompt cache, those that were, and the answer's."""
    cached = info["cached_tokens"]
    return {"input_tokens": info["prompt_tokens"] - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": info["completion_tokens"], "clover": info["stats"]}


def stop_reason(info: dict, calls: list[ToolCall]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished answer."""
    if calls:
        return "tool_use", None
    if info["finish_reason"] == "length":
        return "max_tokens", None
    return ("stop_sequence", info["stop_sequence"]) if info.get("stop_sequence") else ("end_turn", None)


class MessageAnswer:
    """An answer in Anthropic's shape (`Handler._answer` runs it): one message, or its stream events — one content
    block open at a time (thinking, then text), each opened when its first delta comes and closed when the other
    kind starts or the answer ends, the tool_use blocks at the end."""

    ndjson = False  # server-sent events
    last = None  # the stream ends with its own message_stop
    error = staticmethod(lambda err: [("error", error_body(err))])

    def __init__(self, model: str, prompt_tokens: int) -> None:
        self.mid, self.model, self.prompt_tokens = message_id(), model, prompt_tokens
        self.index = -1
        self.open: str | None = None  # "thinking" or "text"

    def whole(self, info: dict, content: str, calls: list[ToolCall]) -> dict:
        blocks: list[dict] = []
        if info["reasoning"]:
            blocks.append({"type": "thinking", "thinking": info["reasoning"], "signature": ""})
        if content or not (blocks or calls):  # an empty answer still has its (empty) text block, as streamed
            blocks.append({"type": "text", "text": content})
        blocks += [{**_tool_use(c), "input": c.arguments} for c in calls]
        reason, sequence = stop_reason(info, calls)
        return {"id": self.mid, "type": "message", "role": "assistant", "model": self.model, "content": blocks,
                "stop_reason": reason, "stop_sequence": sequence, "usage": usage(info)}

    def start(self) -> list[tuple[str, dict]]:
        return [("message_start", {"type": "message_start", "message": {
            "id": self.mid, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0}}})]

    def _switch(self, kind: str | None) -> list[tuple[str, dict]]:
        events = []
        if self.open is not None and self.open != kind:
            events.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
            self.open = None
        if kind is not None and self.open is None:
            self.index += 1
            self.open = kind
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
                {"type": "text", "text": ""}
            events.append(("content_block_start", {"type": "content_block_start", "index": self.index,
                                                   "content_block": block}))
        return events

    def _delta(self, delta: dict) -> tuple[str, dict]:
        return ("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def delta(self, reasoning: str, content: str) -> list[tuple[str, dict]]:
        events = []
        if reasoning:
            events += self._switch("thinking") + [self._delta({"type": "thinking_delta", "thinking": reasoning})]
        if content:
            events += self._switch("text") + [self._delta({"type": "text_delta", "text": content})]
        return events

    def end(self, info: dict, rest: str, calls: list[ToolCall]) -> list[tuple[str, dict]]:
        """The last text, the tool_use blocks, the stop reason and usage, message_stop."""
        events = self.delta("", rest)
        if not calls and self.index < 0:  # an empty answer still has its (empty) text block
            events += self._switch("text")
        events += self._switch(None)
        for call in calls:
            self.index += 1
            events += [("content_block_start", {"type": "content_block_start", "index": self.index,
                                                "content_block": _tool_use(call)}),
                       self._delta({"type": "input_json_delta",
                                    "partial_json": json.dumps(call.arguments, ensure_ascii=False)}),
                       ("content_block_stop", {"type": "content_block_stop", "index": self.index})]
        reason, sequence = stop_reason(info, calls)
        return events + [("message_delta", {"type": "message_delta",
                                            "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                            "usage": usage(info)}),
                         ("message_stop", {"type": "message_stop"})]
