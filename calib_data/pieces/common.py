"""Small helpers shared by the content pools."""

from __future__ import annotations

import json
import textwrap


def d(text: str) -> str:
    """Dedent a triple-quoted block and strip the surrounding blank lines."""
    return textwrap.dedent(text).strip("\n")


def sys_(content: str) -> dict:
    return {"role": "system", "content": d(content)}


def user(content: str) -> dict:
    return {"role": "user", "content": d(content)}


def asst(content: str, think: str | None = None) -> dict:
    m = {"role": "assistant", "content": d(content)}
    if think is not None:
        m["reasoning_content"] = d(think)
    return m


def tool(content: str | dict | list) -> dict:
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    return {"role": "tool", "content": content}


def tool_call(name: str, arguments: dict) -> str:
    """One `<tool_call>` block with a JSON body (name + arguments)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def tools_system(preamble: str, tools: list[dict], lang: str = "en") -> dict:
    """A system message that lists tool JSON schemas inside <tools></tools>."""
    lines = [json.dumps({"type": "function", "function": t}, ensure_ascii=False) for t in tools]
    if lang == "zh":
        howto = (
            "# 工具\n\n你可以调用一个或多个函数来完成用户的请求。函数签名放在 <tools></tools> 标签中：\n"
            "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
            "每次调用函数时，在 <tool_call></tool_call> 标签中返回一个包含函数名和参数的 JSON 对象：\n"
            '<tool_call>\n{"name": <函数名>, "arguments": <参数 JSON 对象>}\n</tool_call>'
        )
    else:
        howto = (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )
    text = d(preamble) + "\n\n" + howto if preamble else howto
    return {"role": "system", "content": text}


def sample(category: str, messages: list[dict]) -> dict:
    return {"category": category, "messages": messages}


def conv(category: str, turns) -> dict:
    """Build a sample from turns: (role, text) or (role, text, think). A think trace attached to a
    user turn is the reasoning for the assistant reply that follows it."""
    msgs = []
    pending = None
    for turn in turns:
        role, text = turn[0], turn[1]
        think = turn[2] if len(turn) > 2 else None
        if role == "system":
            msgs.append(sys_(text))
        elif role == "user":
            msgs.append(user(text))
            pending = think
        else:
            msgs.append(asst(text, think if think is not None else pending))
            pending = None
    return sample(category, msgs)
