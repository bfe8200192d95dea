"""A chat's state: its settings and messages, rendered with the model's chat template for every turn, saved to
and loaded from JSON.

The whole conversation is re-rendered each turn (simple and always right); the chat's PromptCache then resumes
the prefill after the longest part of the new prompt's token ids that the last turn already prefilled.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clover_local.chat.window import system_head
from clover_local.errors import CloverError
from clover_local.generate.ranges import DECODE_RANGES, PENALTY_RANGES, Penalties
from clover_local.text_files import parse_json, unreadable

SAVE_FORMAT = "clover-local-chat"
ROLES = ("system", "user", "assistant")


@dataclass
class ChatSettings:
    threshold: float = 0.9
    reveal_factor: float = 0.0  # > 0: Fast-dLLM's factor rule instead of the threshold (sampling.sure_enough)
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token (sampling.choose)
    min_p: float = 0.0
    max_tokens: int = 1024
    think: bool = True  # enable_thinking in the chat template
    show_thinking: bool = True  # display: thinking expanded, or one summary line
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    think_budget: int | None = None  # the most tokens the thinking may take (generate/thinking.py); None: no limit

    def reveal_rule(self) -> str:
        """The rule a pass reveals by, as /set names it (the banner and /set show it)."""
        return f"reveal_factor {self.reveal_factor:g}" if self.reveal_factor else f"threshold {self.threshold:g}"

    def penalties(self) -> Penalties:
        return Penalties(self.presence_penalty, self.frequency_penalty, self.repetition_penalty)


# name -> (parse, check, description of what is allowed)
def _float(v: str) -> float:
    return float(v)


def _int(v: str) -> int:
    return int(v)


def _budget(v: str) -> int | None:
    return None if v.lower() == "off" else int(v)


def _factor(v: str) -> float:
    return 0.0 if v.lower() == "off" else float(v)


_R = DECODE_RANGES
SETTABLE: dict[str, tuple[Any, Any, str]] = {
    "threshold": (_float, _R["threshold"].allows, f"a number in {_R['threshold']}; 1 reveals one token per pass"),
    "reveal_factor": (_factor, _R["reveal_factor"].allows,
                      f"a number in {_R['reveal_factor']}, or off (0): the threshold rule"),
    "temperature": (_float, _R["temperature"].allows, f"a number in {_R['temperature']}; 0 is greedy"),
    "top_p": (_float, _R["top_p"].allows, f"a number in {_R['top_p']}"),
    "top_k": (_int, lambda x: x >= 0, "a whole number, 0 for all tokens"),
    "min_p": (_float, _R["min_p"].allows, f"a number in {_R['min_p']}; 0 is off"),
    "max_tokens": (_int, lambda x: x >= 1, "a whole number of at least 1"),
    "think_budget": (_budget, lambda x: x is None or x >= 1, "a whole number of at least 1, or off"),
    **{name: (_float, r.allows, f"a number in {r}; {r.off:g} is off") for name, r in PENALTY_RANGES.items()},
}


def set_value(settings: ChatSettings, name: str, raw: str) -> Any:
    """Parse and set one of SETTABLE; a bad name or value raises CloverError with what is allowed."""
    key = name.replace("-", "_").lower()
    if key not in SETTABLE:
        raise CloverError(f"/set knows {', '.join(SETTABLE)}; not {name!r}")
    parse, ok, allowed = SETTABLE[key]
    try:
        value = parse(raw)
    except ValueError:
        raise CloverError(f"/set {key} needs {allowed}; got {raw!r}") from None
    if not ok(value):
        raise CloverError(f"/set {key} needs {allowed}; got {raw}")
    setattr(settings, key, value)
    return value


def restore_settings(settings: ChatSettings, saved: Any, keep: set[str] = frozenset()) -> list[str]:
    """Set what a saved conversation's settings say (each checked as /set checks it; unknown or bad values are
    skipped: an old or hand-edited file still loads), except the names in `keep` (given on the command line).
    Returns the names that changed."""
    if not isinstance(saved, dict):
        return []
    changed = []
    for key, value in saved.items():
        if key in keep or not hasattr(settings, key) or getattr(settings, key) == value:
            continue
        if key == "think_budget":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                continue
        elif key in SETTABLE:
            parse, ok, _ = SETTABLE[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            try:  # a float where a whole number belongs (512.0 by another tool) is a bad value, not a crash
                value = parse(str(value))
            except ValueError:
                continue
            if not ok(value):
                continue
        elif key in ("think", "show_thinking"):
            if not isinstance(value, bool):
                continue
        elif key == "seed":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                continue
        setattr(settings, key, value)
        changed.append(key)
    return changed


def describe_settings(settings: ChatSettings, names: list[str]) -> str:
    """`thinking off, temperature 0.7` for the names given (a note after a load)."""
    words = {"think": lambda v: f"thinking {'on' if v else 'off'}",
             "show_thinking": lambda v: f"thinking {'shown' if v else 'summarized'}"}
    return ", ".join(words.get(n, lambda v, n=n: f"{n} {v}")(getattr(settings, n)) for n in names)


def check_messages(messages: Any, where: str) -> list[dict[str, Any]]:
    """Validate a list of {"role", "content"[, "reasoning_content"]} messages."""
    if not isinstance(messages, list):
        raise CloverError(f"{where}: 'messages' must be a list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise CloverError(f"{where}: message {i} is not an object")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise CloverError(f"{where}: message {i} has role {role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise CloverError(f"{where}: message {i} has no text 'content'")
        if role == "system" and i != 0:
            raise CloverError(f"{where}: a system message may only come first (message {i})")
        msg: dict[str, Any] = {"role": role, "content": content}
        if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
            msg["reasoning_content"] = m["reasoning_content"]
        if m.get("interrupted") is True:
            msg["interrupted"] = True
        out.append(msg)
    return out


def for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the chat template takes them: our own bookkeeping keys dropped."""
    return [{k: v for k, v in m.items() if k != "interrupted"} for m in messages]


class Conversation:
    def __init__(self, system: str | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.saved_settings: dict[str, Any] = {}  # what the last `load` read beside the messages
        self.saved_model: str | None = None  # ... and the model it was had with (ours)
        # how many of the first messages after the system message the model no longer reads: the conversation
        # outgrew the context (chat/window.py; ChatApp.ask sets it for each answer: `read_from`)
        self.left_out = 0
        if system:
            self.messages.append({"role": "system", "content": system})

    def reset(self) -> None:
        self.messages = [m for m in self.messages[:1] if m["role"] == "system"]
        self.left_out = 0

    @property
    def system(self) -> str | None:
        return self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else None

    def set_system(self, text: str | None) -> None:
        """The system message (None: none), always first, whatever was said since: the template puts it first,
        so the next answer reads the whole conversation again under it."""
        if self.system is not None:
            self.messages.pop(0)
        if text:
            self.messages.insert(0, {"role": "system", "content": text})

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def add_assistant(self, content: str, reasoning: str = "", interrupted: bool = False) -> None:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            msg["reasoning_content"] = reasoning
        if interrupted:
            msg["interrupted"] = True
        self.messages.append(msg)

    def pop_exchange(self) -> list[dict[str, Any]]:
        """Remove the last user message and what came after it (its answer) and return them ([] when there is no
        user message: the system message stays)."""
        last = max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=None)
        if last is None:
            return []
        removed = self.messages[last:]
        del self.messages[last:]
        self.left_out = min(self.left_out, len(self.messages) - self._first)  # (the window stays where it was)
        return removed

    @property
    def _first(self) -> int:
        """Index of the first message after the system message."""
        return system_head(self.messages)

    def read_from(self, start: int) -> None:
        """The model reads the conversation from message `start` on (`window.fit`'s cut; 0: all of it)."""
        self.left_out = start - self._first if start else 0

    def template_messages(self) -> list[dict[str, Any]]:
        """Messages as the chat template takes them (`for_template`): the system message and those not left out."""
        return for_template(self.messages[: self._first] + self.messages[self._first + self.left_out:])

    @property
    def turns(self) -> int:
        return sum(m["role"] == "user" for m in self.messages)

    # ------------------------------------------------------------------ files
    def save(self, path: Path, settings: ChatSettings, model: str, *, over_any: bool = False) -> None:
        """The conversation as JSON at `path`, written whole (through `PATH.part`: a kill mid-write leaves the
        file as it was). A file there that holds something other than a conversation chat saved is refused, not
        overwritten (`/save notes.txt` must not wipe the notes), unless `over_any` (`chat --continue`'s own file)."""
        data = {"format": SAVE_FORMAT, "version": 1, "model": model, "settings": asdict(settings),
                "messages": self.messages}
        path = path.expanduser()
        if path.parent and not path.parent.exists():
            raise CloverError(f"cannot save to {path}: folder {path.parent} does not exist")
        if path.is_dir():  # (before its `.part` is named: `/` has no name to add to)
            raise CloverError(f"cannot save to {path}: Is a directory")
        if not over_any and path.is_file() and not _ours_or_empty(path):
            raise CloverError(f"{path} holds something other than a conversation saved by chat: nothing written; "
                              "/save to another name, or remove that file first")
        part = path.with_name(path.name + ".part")
        try:
            part.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
            os.replace(part, path)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise CloverError(f"cannot save to {path}: {exc.strerror or exc}") from None

    def load(self, path: Path) -> int:
        """Replace the messages with a saved conversation (ours, {"messages": [...]}, or a bare list)."""
        path = path.expanduser()
        try:
            data = parse_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CloverError(f"cannot load {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CloverError(f"cannot load {path}: {unreadable(exc)}") from None
        except json.JSONDecodeError as exc:
            raise CloverError(f"cannot load {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        messages = data.get("messages") if isinstance(data, dict) else data
        self.messages = check_messages(messages, str(path))
        self.left_out = 0
        # the settings it was saved with (ours; {} for other formats): `restore_settings` applies them
        self.saved_settings = data.get("settings", {}) if isinstance(data, dict) else {}
        model = data.get("model") if isinstance(data, dict) else None
        self.saved_model = model if isinstance(model, str) else None
        return len(self.messages)


def _ours_or_empty(path: Path) -> bool:
    """Whether the file at `path` is a conversation chat saved, or empty: what /save may write over."""
    try:
        if path.stat().st_size == 0:
            return True
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == SAVE_FORMAT
