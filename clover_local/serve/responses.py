"""OpenAI's Responses API (`POST /v1/responses`) on top of the chat path: a request is read into the same
`ChatRequest` /v1/chat/completions builds (so template rendering, tools, JSON mode and sampling are one code path),
and the answer is shaped as a response object or its stream of named events.

Accepted: `input` (a string, or a list of items: messages with text parts, past `function_call`s — consecutive ones
one assistant turn — and their `function_call_output`s, `reasoning` items, whose text becomes the next assistant
turn's reasoning_content), `instructions` (with the input's leading system/developer messages, the one system
message), function `tools` and namespaces of them (hosted tools such as web_search left out: see `chat_tools`) with
`tool_choice` auto, none, required or `{"type": "function", "name"}` (the last two force a call as on the chat
route), `max_output_tokens`, `temperature`, `top_p`, `stream`, `text.format` (text, json_object, json_schema),
`reasoning.effort` ("none"/"minimal": no thinking; any other: the model thinks, "low" and "medium" within a thinking
budget, protocol.EFFORT_BUDGETS; absent: the model's default. JSON mode and a forced call answer without thinking
whatever the effort: the whole answer is the JSON), `metadata`, `parallel_tool_calls`, `user`, `truncation`
(echoed), `store` (accepted; the response says `store: false`, since nothing is kept); our chat extensions
`threshold`, `seed`, the penalties, `thinking_token_budget` and `chat_template_kwargs` too. Other fields are
ignored, as OpenAI-compatible servers do.

Refused with a 400 rather than ignored, since the answer would not be what was asked for: `previous_response_id`,
`conversation` and `item_reference` items (this server keeps no responses: send the whole input), `background: true`,
a stored `prompt`, `custom` (free-text) tools, and input parts other than text.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from clover_local.serve.protocol import (ApiError, ChatRequest, answer_usage, bad_request, bool_field,
                                         check_forced_thinking, effort_thinking, enable_thinking_sent, int_field,
                                         json_body, parse_messages, read_call_choice, read_sampling, read_tools,
                                         template_options)
from clover_local.serve.tools import ToolCall

# chat fields this route reads under their own names (our extensions beside OpenAI's)
_SAMPLING_FIELDS = ("model", "stream", "temperature", "top_p", "threshold", "reveal_factor", "seed", "presence_penalty",
                    "frequency_penalty", "repetition_penalty", "thinking_token_budget")
_TEXT_PARTS = ("input_text", "output_text", "text")
NAMESPACE_SEP = "."  # a namespaced function's name for the template: `namespace.name`
# a chat error's param, as this route names it
_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format",
           "enable_thinking": "reasoning.effort"}


@dataclass
class ResponsesRequest:
    """The chat request it runs as, and the request's own fields the response object echoes."""

    chat: ChatRequest
    echo: dict[str, Any] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)  # tool namespaces: their calls come back named apart


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def responses_error(err: ApiError) -> ApiError:
    """A chat error renamed for this route: its param (and the field in its message) as the Responses API calls it."""
    param = _PARAMS.get(err.param or "", err.param)
    message = err.message
    for chat, ours in (("max_tokens", "max_output_tokens"), ("response_format.json_schema.", "text.format."),
                       ("'response_format'", "'text.format'")):
        message = message.replace(chat, ours)
    return ApiError(err.status, message, err.type, param, err.code, err.headers)


# ------------------------------------------------------------------------------------------------ the request

def _refuse_stateful(body: dict) -> None:
    """Fields that need a server that keeps responses, runs them later or stores prompts: a 400 each."""
    for name in ("previous_response_id", "conversation"):
        if body.get(name) is not None:
            raise bad_request(f"'{name}' is not supported: this server keeps no responses or conversations; send the "
                              "whole conversation in 'input'", name)
    if body.get("background"):
        raise bad_request("'background' is not supported: this server answers while the request is open; send "
                          "background false (or leave it out)", "background")
    if body.get("prompt") is not None:
        raise bad_request("'prompt' (a stored prompt template) is not supported: send 'instructions' and 'input'",
                          "prompt")


def _text(content: Any, param: str) -> str:
    """A message's content as text: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or a list of text parts", param)
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise bad_request(f"{param}[{k}]: only text parts are supported ({', '.join(_TEXT_PARTS)}), got "
                              f"{kind or type(part).__name__!r}", param)
    return "".join(texts)


def _reasoning_text(item: dict) -> str:
    """A reasoning item's text: its content (ours), else its summary."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            return "".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _call(item: dict, param: str) -> dict:
    """A past function_call item as a chat tool call (parse_messages checks its arguments); one in a namespace
    named as its tool is (`namespace.name`)."""
    if not isinstance(item.get("name"), str) or not item["name"]:
        raise bad_request(f"{param} needs a 'name'", param)
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        raise bad_request(f"{param}.arguments must be a JSON string", param)
    name = item["name"] if not item.get("namespace") else f"{item['namespace']}{NAMESPACE_SEP}{item['name']}"
    return {"id": item.get("call_id") or item.get("id"), "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _assistant(messages: list[dict], reasoning: str | None) -> dict:
    """The assistant turn a call or message joins: the last message when it is the assistant's, else a new one."""
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": ""})
    if reasoning is not None:
        messages[-1]["reasoning_content"] = reasoning
    return messages[-1]


def input_messages(value: Any, instructions: Any = None) -> list[dict]:
    """`input` (and `instructions`) as chat messages in the form parse_messages takes."""
    if instructions is not None and not isinstance(instructions, str):
        raise bad_request("'instructions' must be a string", "instructions")
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a string or a non-empty list of items (messages, function_call, "
                          "function_call_output)", "input")
    messages: list[dict] = []
    reasoning: str | None = None  # a reasoning item's text, for the assistant turn it precedes
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{param} must be an object", param)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"{param}.role must be user, assistant, system or developer, got {role!r}", param)
            text = _text(item.get("content"), f"{param}.content")
            if role == "assistant":
                turn = _assistant(messages, reasoning)
                turn["content"] += text
            else:
                messages.append({"role": role, "content": text})
            reasoning = None
        elif kind == "function_call":
            _assistant(messages, reasoning).setdefault("tool_calls", []).append(_call(item, param))
            reasoning = None
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(item.get("call_id"), str):
                raise bad_request(f"{param} needs the 'call_id' of the call it answers", param)
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text(output, f"{param}.output")})
        elif kind == "reasoning":
            reasoning = _reasoning_text(item)
        elif kind == "item_reference":
            raise bad_request(f"{param}: 'item_reference' is not supported: this server keeps no responses; send the "
                              "item itself", param)
        else:
            raise bad_request(f"{param}: items of type {kind!r} are not supported (messages, function_call, "
                              "function_call_output and reasoning are)", param)
    return _one_system(messages, instructions)


def _one_system(messages: list[dict], instructions: str | None) -> list[dict]:
    """`instructions` and the leading system/developer messages as one system message first (templates take a
    single system message, at the start); system messages later on stay where they are."""
    lead = [] if instructions is None else [instructions]
    while messages and messages[0]["role"] in ("system", "developer"):
        lead.append(messages.pop(0)["content"])
    return ([{"role": "system", "content": "\n\n".join(lead)}] if lead else []) + messages


def _function(tool: dict, param: str, namespace: str | None = None) -> dict:
    """A function tool in the chat form; one inside a namespace named `namespace.name` (the form its calls take)."""
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    if not isinstance(function.get("name"), str) or not function["name"]:
        raise bad_request(f"{param} needs a 'name'", param)
    if namespace is not None:
        function["name"] = f"{namespace}{NAMESPACE_SEP}{function['name']}"
    return {"type": "function", "function": function}


def chat_tools(tools: Any) -> tuple[list[dict] | None, set[str]]:
    """(The tools in the chat form the template takes, the namespaces among them.)

    Function tools pass; a `namespace` (Codex groups its sub-agent tools in one) becomes its functions, each named
    `namespace.name`. Hosted tools — web_search, file_search, code_interpreter, mcp … — are run by OpenAI's
    servers, which this one cannot do: they are left out, so the model never hears of them (Codex sends web_search
    with every request). A `custom` (free-text) tool is a 400: the model could call it, but not in a form read
    back here."""
    if tools is None:
        return None, set()
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools")
    out, namespaces = [], set()
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            out.append(_function(tool, f"tools[{i}]"))
        elif kind == "namespace" and isinstance(tool.get("name"), str) and isinstance(tool.get("tools"), list):
            namespaces.add(tool["name"])
            for k, inner in enumerate(tool["tools"]):
                if not isinstance(inner, dict) or inner.get("type") != "function":
                    raise bad_request(f"tools[{i}].tools[{k}]: only function tools are supported in a namespace",
                                      f"tools[{i}]")
                out.append(_function(inner, f"tools[{i}].tools[{k}]", tool["name"]))
        elif kind in ("custom", "namespace", None):
            raise bad_request(f"tools[{i}] is of type {kind!r}: this server runs function tools (and namespaces of "
                              "them) only", f"tools[{i}]")
    return out, namespaces


def _tool_choice(body: dict) -> Any:
    """`tool_choice` in the chat form (`read_tool_choice`): "none", "auto", "required", or a function by name."""
    choice = body.get("tool_choice")
    if choice in (None, "none", "auto", "required"):
        return choice
    if not (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str)):
        raise bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"name\": ...} (hosted tools and allowed_tools are not supported)", "tool_choice")
    return {"type": "function", "function": {"name": choice["name"]}}


def _member(body: dict, outer: str, inner: str) -> Any:
    """body[outer][inner] (`text.format`, `reasoning.effort`): None where either is absent, a 400 where `outer` is
    not an object."""
    value = body.get(outer)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request(f"'{outer}' must be an object", outer)
    return value.get(inner)


def _text_format(body: dict) -> dict | None:
    """`text.format` as chat's `response_format`."""
    fmt = _member(body, "text", "format")
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return fmt
    if "schema" not in fmt:
        raise bad_request("'text.format' json_schema needs 'name' and 'schema': {\"type\": \"json_schema\", "
                          "\"name\": ..., \"schema\": {...}}", "text.format")
    spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": spec}


def _echo(body: dict, req: ChatRequest) -> dict[str, Any]:
    """The request's fields a response object repeats."""
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_request("'metadata' must be an object", "metadata")
    truncation = body.get("truncation")
    if truncation not in (None, "disabled", "auto"):
        raise bad_request("'truncation' must be \"disabled\" or \"auto\"", "truncation")
    bool_field(body, "store", True)  # checked only
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    return {"instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": req.parallel_calls,
            "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": body.get("max_output_tokens"),
            "metadata": metadata or {}, "text": {**text, "format": text.get("format") or {"type": "text"}},
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "store": False,  # whatever was asked: nothing is kept
            "truncation": truncation or "disabled", "user": body.get("user"),
            "previous_response_id": None, "background": False}


def parse_responses_request(raw: bytes) -> ResponsesRequest:
    """A /v1/responses body as the chat request it runs as (a 400 for what cannot be honoured)."""
    body = json_body(raw)
    _refuse_stateful(body)
    max_output = int_field(body, "max_output_tokens", 1)
    shim = {k: body[k] for k in _SAMPLING_FIELDS if k in body}
    tools, namespaces = chat_tools(body.get("tools"))
    shim.update(max_tokens=max_output, response_format=_text_format(body), tools=tools,
                tool_choice=_tool_choice(body), parallel_tool_calls=body.get("parallel_tool_calls"))
    try:
        req = ChatRequest(messages=parse_messages(input_messages(body.get("input"), body.get("instructions"))),
                          tools=read_tools(shim))
        read_sampling(shim, req)  # (response_format too)
        read_call_choice(shim, req)
        think, effort_budget = effort_thinking(_member(body, "reasoning", "effort"), "reasoning.effort")
        req.think_budget = int_field(shim, "thinking_token_budget", 1) or effort_budget
        mode = req.json_mode
        whole = mode is not None or req.forced is not None  # the answer is the JSON (or the call): no thinking
        options = {"enable_thinking": None if whole else think,
                   "chat_template_kwargs": body.get("chat_template_kwargs")}
        req.enable_thinking, req.template_kwargs = template_options(options, thinking=not whole)
        req.thinking_asked = think is not None or req.think_budget is not None or enable_thinking_sent(body)
        check_forced_thinking(req, "chat_template_kwargs")
        if mode and req.enable_thinking:
            raise bad_request(f"'text.format' {mode} answers without thinking (the whole answer is the JSON): leave "
                              "chat_template_kwargs.enable_thinking out", "chat_template_kwargs")
    except ApiError as err:
        raise responses_error(err) from None
    if req.tools:
        req.template_kwargs["tools"] = req.tools
    return ResponsesRequest(req, _echo(body, req), namespaces)


# ------------------------------------------------------------------------------------------------ the response

def responses_usage(chat_usage: dict) -> dict:
    """Chat usage (the server's `_usage`) under the Responses API's names, our block-diffusion figures kept."""
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": chat_usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": chat_usage["completion_tokens_details"]["reasoning_tokens"]},
            "total_tokens": chat_usage["total_tokens"], "clover": chat_usage.get("clover")}


def reasoning_item(item_id: str, text: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text else []}


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str = "completed") -> dict:
    """An assistant message; `text` None while it is still empty (a stream's first event of it)."""
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [] if text is None else [output_text(text)]}


def call_item(item_id: str, call: ToolCall, namespaces: set[str], done: bool = True) -> dict:
    """A function_call item; a call to `namespace.name` as `name` with its `namespace`."""
    arguments = json.dumps(call.arguments, ensure_ascii=False) if done else ""
    space, sep, name = call.name.partition(NAMESPACE_SEP)
    named = {"name": name, "namespace": space} if sep and space in namespaces else {"name": call.name}
    return {"type": "function_call", "id": item_id, "call_id": call.id, **named, "arguments": arguments,
            "status": "completed" if done else "in_progress"}


def said(text: str) -> bool:
    """Whether a text makes an output item: whitespace alone does not (the same rule streamed and not)."""
    return bool(text.strip())


class ResponseShape:
    """One response's object: its id and the request's echoed fields, with the output, status and usage so far."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.id, self.created_at, self.model, self.echo = new_id("resp"), int(time.time()), model, req.echo
        self.namespaces = req.namespaces

    def object(self, status: str, output: list[dict], use: dict | None = None, finish_reason: str | None = None,
               error: dict | None = None) -> dict:
        cut = finish_reason == "length"
        done = status == "completed"
        return {"id": self.id, "object": "response", "created_at": self.created_at,
                "completed_at": int(time.time()) if done else None,
                "status": "incomplete" if cut and done else status,
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": error,
                "model": self.model, "output": output, "usage": use, **self.echo}

    def complete(self, reasoning: str, content: str, calls: list[ToolCall], finish_reason: str, use: dict) -> dict:
        """The whole response to a non-streamed request."""
        output = [reasoning_item(new_id("rs"), reasoning)] if said(reasoning) else []
        if said(content):
            output.append(message_item(new_id("msg"), content, "incomplete" if finish_reason == "length" else
                                       "completed"))
        output += [call_item(new_id("fc"), c, self.namespaces) for c in calls]
        return self.object("completed", output, responses_usage(use), finish_reason)


class ResponseEvents:
    """A streamed response's events, as (event name, payload) pairs numbered from 0: the lifecycle, then each output
    item opened when its first text that is not whitespace alone arrives (whitespace before it held back and sent
    with it), its deltas, its close; the tool calls (held back by the caller) at the end; the last event carries the
    whole response."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.seq = 0
        self.items: list[dict] = []  # the output so far (the open item, last, as it was opened)
        self.open: str | None = None  # the open item's kind (reasoning or message) while its text streams
        self.text = ""  # the open item's text so far
        self.pending = {"reasoning": "", "message": ""}  # whitespace not yet sent (no item opened for it)

    def _ev(self, name: str, **payload: Any) -> tuple[str, dict]:
        event = (name, {"type": name, "sequence_number": self.seq, **payload})
        self.seq += 1
        return event

    def start(self) -> list[tuple[str, dict]]:
        response = self.shape.object("in_progress", [])
        return [self._ev("response.created", response=response), self._ev("response.in_progress", response=response)]

    def _where(self) -> dict:
        """The open (last) item's place, as its text events name it."""
        return {"item_id": self.items[-1]["id"], "output_index": len(self.items) - 1, "content_index": 0}

    def _opening(self, kind: str) -> list[tuple[str, dict]]:
        """Close the open item, open one of `kind`."""
        events = self._closing()
        reasoning = kind == "reasoning"
        item = reasoning_item(new_id("rs"), "") if reasoning else message_item(new_id("msg"), None, "in_progress")
        self.items.append(item)
        self.open, self.text = kind, ""
        part = {"type": "reasoning_text", "text": ""} if reasoning else output_text("")
        return events + [self._ev("response.output_item.added", output_index=len(self.items) - 1, item=dict(item)),
                         self._ev("response.content_part.added", **self._where(), part=part)]

    def _text(self, kind: str, text: str) -> list[tuple[str, dict]]:
        """A piece of reasoning or content text, into its item (opened if need be)."""
        if not text:
            return []
        events = []
        if self.open != kind:
            if not said(self.pending[kind] + text):
                self.pending[kind] += text
                return []
            text, self.pending[kind] = self.pending[kind] + text, ""
            events = self._opening(kind)
        self.text += text
        if kind == "reasoning":
            return events + [self._ev("response.reasoning_text.delta", **self._where(), delta=text)]
        return events + [self._ev("response.output_text.delta", **self._where(), delta=text, logprobs=[])]

    def _finished(self, status: str) -> dict | None:
        """The open item in its final form (replacing it in `items`); None when none is open."""
        if self.open is None:
            return None
        last = self.items[-1]
        item = (reasoning_item(last["id"], self.text) if self.open == "reasoning"
                else message_item(last["id"], self.text, status))
        self.items[-1], self.open = item, None
        return item

    def _closing(self, status: str = "completed") -> list[tuple[str, dict]]:
        """The open item's done events."""
        kind, text = self.open, self.text
        item = self._finished(status)
        if item is None:
            return []
        where = {"item_id": item["id"], "output_index": len(self.items) - 1, "content_index": 0}
        part = item["content"][0]
        if kind == "reasoning":
            events = [self._ev("response.reasoning_text.done", **where, text=text)]
        else:
            events = [self._ev("response.output_text.done", **where, text=text, logprobs=[])]
        return events + [self._ev("response.content_part.done", **where, part=part),
                         self._ev("response.output_item.done", output_index=where["output_index"], item=item)]

    def delta(self, reasoning: str, content: str) -> list[tuple[str, dict]]:
        return self._text("reasoning", reasoning) + self._text("message", content)

    def done(self, content: str, calls: list[ToolCall], finish_reason: str, use: dict) -> list[tuple[str, dict]]:
        """The rest of the content, the open item closed, the calls, then response.completed (or .incomplete)."""
        events = self._text("message", content) + self._closing("incomplete" if finish_reason == "length"
                                                                 else "completed")
        for call in calls:
            events += self._call(call)
        response = self.shape.object("completed", self.items, responses_usage(use), finish_reason)
        name = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return events + [self._ev(name, response=response)]

    def _call(self, call: ToolCall) -> list[tuple[str, dict]]:
        item_id, index = new_id("fc"), len(self.items)
        done = call_item(item_id, call, self.shape.namespaces)
        self.items.append(done)
        where = {"item_id": item_id, "output_index": index}
        opened = call_item(item_id, call, self.shape.namespaces, done=False)
        return [self._ev("response.output_item.added", output_index=index, item=opened),
                self._ev("response.function_call_arguments.delta", **where, delta=done["arguments"]),
                self._ev("response.function_call_arguments.done", **where, arguments=done["arguments"]),
                self._ev("response.output_item.done", output_index=index, item=done)]

    def failed(self, err: ApiError) -> list[tuple[str, dict]]:
        """An error after the stream began: response.failed, with the output so far and the error."""
        self._finished("incomplete")
        error = {"code": err.code or "server_error", "message": err.message, "type": err.type, "param": err.param}
        return [self._ev("response.failed", response=self.shape.object("failed", self.items, error=error))]


class ResponseAnswer(ResponseEvents):
    """A response in the Responses API's shape (`Handler._answer` runs it): the response object, or its events."""

    ndjson = False  # server-sent events
    last = None  # the stream ends with its own response.completed (or .incomplete)

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        super().__init__(ResponseShape(req, model))

    def whole(self, info: dict, content: str, calls: list[ToolCall]) -> dict:
        return self.shape.complete(info["reasoning"], content, calls, info["finish_reason"], answer_usage(info))

    def end(self, info: dict, rest: str, calls: list[ToolCall]) -> list[tuple[str, dict]]:
        return self.done(rest, calls, info["finish_reason"], answer_usage(info))

    def error(self, err: ApiError) -> list[tuple[str, dict]]:
        return self.failed(err)
