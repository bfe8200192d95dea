"""Where clover-local keeps what it makes for itself (demo pack, synthetic packs, chat history and the last
conversation, kernel tuning), and what a file name read from a file may be."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$CLOVER_LOCAL_CACHE, else $XDG_CACHE_HOME/clover-local, else ~/.cache/clover-local."""
    if os.environ.get("CLOVER_LOCAL_CACHE"):
        return Path(os.environ["CLOVER_LOCAL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "clover-local"


LAST_CHAT = "last_chat.json"  # the last `chat` conversation, kept as it goes (`chat --continue`), in the cache root


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: where a folder not made yet will be (its disk, its rights)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def is_plain_file_name(name: object) -> bool:
    """Whether `name` (read from an index or a state file) names a file beside it: not a path that reaches
    elsewhere (`../x`, `/tmp/x`, `a/b`), not empty, `.` or `..`."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name
