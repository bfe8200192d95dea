"""A pack on the Hub read for planning without downloading it: its config, index and each shard's header.

Why: `clover-local plan owner/pack --vram 16GB` asks whether a pack fits a card, and it answered only after
downloading the whole pack (≈ 19 GB at 35B): the answer matters most before that download. A safetensors shard
says what it holds in a JSON header at its start (≈ 0.3 MiB a shard of the 35B pack), so one ranged GET of a
shard's first bytes (two where the header is longer than the first ask) gives what `read_pack_index` reads from a
local shard. The small JSON files go to a temporary folder, not the Hub cache: planning leaves nothing behind.

Offline, or where the Hub cannot be reached, `remote_pack_index` returns None and `plan` reads the pack from the
local cache as before. HTTP goes through huggingface_hub's session and headers (token, HF_ENDPOINT, proxies), and
the token is never printed.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from clover_local import __version__
from clover_local.errors import CloverError
from clover_local.checkpoint.index import INDEX_NAME
from clover_local.runtime.pack_index import PackIndex, header_from_prefix, read_pack_index

HEADER_PROBE = 512 * 1024  # bytes asked for first: a 35B pack's layer shard has a ≈ 361 KiB header (one request)
PARALLEL = 8  # headers asked for at once (a round trip each)
SMALL_FILES = ("config.json", "generation_config.json", INDEX_NAME)


@dataclass
class RemotePack:
    """What `plan` read from the Hub: the pack's index and what a download of it would fetch."""

    index: PackIndex
    repo_id: str
    revision: str  # the commit the headers were read at
    shards: int
    header_bytes: int  # bytes of shard headers fetched to plan
    download_files: int
    download_bytes: int
    checkpoint: bool = False  # a BF16 checkpoint: `index` is the pack quantize would make of it (config only)

    def to_dict(self) -> dict:
        return {"repo_id": self.repo_id, "revision": self.revision, "checkpoint": self.checkpoint,
                "shards": self.shards, "header_bytes": self.header_bytes, "download_files": self.download_files,
                "download_bytes": self.download_bytes}


def remote_pack_index(repo_id: str, revision: str | None = None, *, bits: int = 4, profile: str = "balanced",
                      group: int = 128) -> RemotePack | None:
    """The pack `repo_id` as `read_pack_index` sees it, from the Hub's file list, its small JSON files and the
    shards' headers; for a BF16 checkpoint, the pack `quantize --bits BITS --profile PROFILE --group-size GROUP`
    would make of it, from its config alone. None offline or where the Hub cannot be reached (the caller then
    uses the local cache). Other Hub problems (no such repo, gated, a rejected token) and a repo that is no Clover
    model are one CloverError."""
    from huggingface_hub import HfApi

    from clover_local.hub.transfer import check_token_text, raise_hub_error, is_connection_error, offline_mode
    from clover_local.runtime.synthetic_pack import checkpoint_index

    if offline_mode():
        return None
    check_token_text()
    api = HfApi(library_name="clover-local", library_version=__version__)
    fetched: dict[str, int] = {}  # header bytes fetched per shard (the header reads run in threads)
    try:
        commit, sizes = repo_files(api, repo_id, revision)
        if "config.json" not in sizes:
            raise CloverError(f"{repo_id} has no config.json: not a Clover model or pack")
        with tempfile.TemporaryDirectory(prefix="clover-plan-") as tmp:
            for name in SMALL_FILES:
                if name in sizes:
                    (Path(tmp) / name).write_bytes(_get(repo_id, commit, name, sizes[name]))
            checkpoint = checkpoint_index(Path(tmp), bits, profile, group, repo_id)
            if checkpoint is not None:
                wanted = _wanted(sizes)
                return RemotePack(checkpoint, repo_id, commit, 0, 0, len(wanted), sum(sizes[f] for f in wanted),
                                  checkpoint=True)

            def header(shard: str) -> dict:
                if shard not in sizes:
                    raise CloverError(f"pack shard {shard} is listed in {INDEX_NAME} but missing from {repo_id}")

                def first(n: int) -> bytes:
                    raw = _get(repo_id, commit, shard, n)
                    fetched[shard] = fetched.get(shard, 0) + len(raw)
                    return raw

                return header_from_prefix(first, sizes[shard], shard, HEADER_PROBE)[0]

            index = read_pack_index(tmp, header, shown=repo_id, parallel=PARALLEL)
    except Exception as exc:  # noqa: BLE001 - sorted below: unreachable → None, the rest one line
        if isinstance(exc, CloverError):
            raise
        if is_connection_error(exc):
            return None
        raise_hub_error(exc, repo_id=repo_id, revision=revision, action="reading")
        raise
    wanted = _wanted(sizes)
    shards = len({t.shard for t in index.tensors.values()})
    return RemotePack(index, repo_id, commit, shards, sum(fetched.values()), len(wanted),
                      sum(sizes[f] for f in wanted))


def repo_files(api, repo_id: str, revision: str | None) -> tuple[str, dict[str, int]]:
    """The commit `revision` names and the size of each file at its top level (an LFS file's real size); Hub
    errors propagate as huggingface_hub raises them."""
    from huggingface_hub.hf_api import RepoFile

    commit = api.repo_info(repo_id=repo_id, repo_type="model", revision=revision).sha
    entries = [e for e in api.list_repo_tree(repo_id=repo_id, repo_type="model", revision=commit)
               if isinstance(e, RepoFile)]
    return commit, {e.path: (e.lfs.size if e.lfs else e.size) for e in entries}


def _wanted(sizes: dict[str, int]) -> list[str]:
    """The files of the repo a download fetches (`clover-local download`'s patterns)."""
    from huggingface_hub.utils import filter_repo_objects

    from clover_local.hub.transfer import ALLOW_PATTERNS, IGNORE_PATTERNS

    return list(filter_repo_objects(list(sizes), allow_patterns=ALLOW_PATTERNS, ignore_patterns=IGNORE_PATTERNS))


def _get(repo_id: str, commit: str, name: str, length: int) -> bytes:
    """The first `length` bytes of a file of the repo: a ranged GET, read no further than asked even where the
    server ignores the Range and sends the whole file."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(library_name="clover-local", library_version=__version__)
    headers["Accept-Encoding"] = "identity"  # offsets are file offsets
    if length:
        headers["Range"] = f"bytes=0-{length - 1}"
    url = hf_hub_url(repo_id, name, revision=commit)
    out = bytearray()
    with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                              timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        if response.status_code >= 300:
            response.read()  # the error body, for huggingface_hub's message
            hf_raise_for_status(response)
        for chunk in response.iter_bytes():
            out += chunk
            if len(out) >= length:
                break
    return bytes(out[:length])
