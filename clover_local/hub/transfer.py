"""Moving checkpoints and packs to and from the Hugging Face Hub, with `huggingface_hub` doing the HTTP.

- `download(repo_id)`: `snapshot_download` limited to the files a Clover checkpoint or pack needs (top-level
  only), into the standard Hub cache (or `dir`, which must be empty, new, or an earlier download of the same
  repo). Completed files are reused, and a connection dropped while the call runs is retried with a Range
  request (by huggingface_hub, and by resume.py for its files). Across runs huggingface_hub 2.x resumes nothing:
  it deletes a partly fetched file when the run ends (huggingface/huggingface_hub#4196). So, online and without
  `force`, the files over `resume.THRESHOLD` (64 MiB: the weight shards) are fetched first by
  `resume.fetch_large_files`, up to 8 at once, into partial files kept on disk; a run that failed, was killed
  or interrupted is resumed by running it again: finished files are not fetched twice and a partial file
  continues from its last byte. Each is checked against its LFS sha256 and put where `snapshot_download` takes
  it as done (a blob of the Hub cache, or the file and its download metadata in `dir`). `force` fetches every
  file again through huggingface_hub. Offline (`HF_HUB_OFFLINE=1`, or the Hub cannot be reached) the cached
  snapshot is used, exactly as before (resume.py sends nothing). A pack is checked against its manifest after
  the transfer: every file's presence and size, and the sha256 of the files written since the first run that
  did not finish (not the files an earlier, checked download left).
- `resolve_model(arg)`: what every command calls on its MODEL/SRC argument: a local folder as is, a repo id
  through `download`.
- `upload(pack, repo_id)`: refuses a pack whose manifest does not match its files, writes the model card if
  the pack has none, creates the repo (and branch), then sends the files with huggingface_hub's resumable path:
  `HfApi.upload_large_folder` where the installed huggingface_hub has it; huggingface_hub 2.x has no such method
  and its `HfApi.upload_folder` is itself the streamed, resumable, multi-commit pipeline (with hf_xet installed).
  Weight files an earlier pack left in the repo that are not part of this one are then deleted (a download
  would otherwise fetch them with it); a repo holding weights that are not a pack is refused before sending.
  `dry_run=True` returns exactly the files and sizes it would send and the card, touching no network.

Every error a person can cause or meet (unknown repo, gated repo, bad revision, no token, offline with an
empty cache, a dropped connection) becomes a one-sentence `CloverError`. The token is never printed: messages
are built here, and any text taken from a server answer is scrubbed of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from clover_local import __version__
from clover_local.checkpoint.index import INDEX_NAME, read_weight_map
from clover_local.errors import CloverError
from clover_local.text_files import unreadable
from clover_local.pack.manifest import CARD_NAME, MANIFEST_NAME, Manifest, verify_pack

if TYPE_CHECKING:
    from clover_local.hub.resume import Reserve

# What a Clover checkpoint or pack needs. Never code (*.py) or pickles (*.bin, *.pt): nothing is executed.
ALLOW_PATTERNS = [
    "*.safetensors",
    "*.json",  # config, generation_config, tokenizer, safetensors index, clover_manifest.json
    "*.jinja",  # chat template
    "tokenizer*",
    "*.txt",  # merges.txt / vocab.txt
    "README.md",
    MANIFEST_NAME,
]
# Only the repo's top level: every loader (ours, transformers) reads a model from there; a subfolder holds something
# else (another format's copy of the weights, originals) and would only add gigabytes to the download.
IGNORE_PATTERNS = ["*/*"]

_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}$")
_LOGIN_HINT = "run `hf auth login` or set HF_TOKEN"

ProgressFn = Callable[[int], None]


# ----------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------
def is_repo_id(text: str) -> bool:
    """`owner/name` as the Hub spells repo ids (no leading dot, no `..`, no `--`)."""
    return bool(_REPO_ID_RE.match(text)) and ".." not in text and "--" not in text and not text.endswith(".git")


def _check_repo_id(repo_id: str) -> None:
    if not isinstance(repo_id, str) or not is_repo_id(repo_id):
        raise CloverError(f"{repo_id!r} is not a Hub repo id: expected owner/name, e.g. {_example_id()}")


def _example_id() -> str:
    return "Diffuspace/Clover-35B-A3B-Preview"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def offline_mode() -> bool:
    """Offline as huggingface_hub sees it, or as the environment says now."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or _truthy(os.environ.get("HF_HUB_OFFLINE"))


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def _quiet_tqdm():
    from huggingface_hub.utils import tqdm as hf_tqdm

    class QuietTqdm(hf_tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return QuietTqdm


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


_CONNECTION_CLASS_NAMES = {
    "TransportError",  # httpx / httpx2: connect, read, write, protocol errors, timeouts
    "TimeoutException",
    "NetworkError",
    "RemoteProtocolError",
    "ConnectionError",  # requests (huggingface_hub < 1.0) and builtins
    "ChunkedEncodingError",
    "Timeout",
}


def is_connection_error(exc: BaseException) -> bool:
    """A dropped, refused or timed-out connection anywhere in the exception chain (not offline mode)."""
    from huggingface_hub import errors as E

    offline_error = getattr(E, "OfflineModeIsEnabled", ())
    for e in _chain(exc):
        if isinstance(e, offline_error):
            return False
        if any(cls.__name__ in _CONNECTION_CLASS_NAMES for cls in type(e).__mro__):
            return True
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and "Consistency check failed" in str(e):
            return True  # huggingface_hub: the file arrived with the wrong size
    return False


def _scrub(text: str) -> str:
    """Remove the token (whatever its source) from text that came from elsewhere."""
    try:
        from huggingface_hub import get_token

        token = _offline_token() or (None if os.environ.get("HF_OIDC_RESOURCE") else get_token())
    except Exception:
        token = None
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{20,}", "hf_***", text)


def _short(exc: BaseException, limit: int = 160) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    text = _scrub(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _server_message(exc: BaseException) -> str:
    msg = getattr(exc, "server_message", None) or ""
    msg = " ".join(str(msg).split())
    return _scrub(msg)[:200]


def download_command(repo_id: str, dir: str | os.PathLike | None = None, revision: str | None = None) -> str:
    """The `clover-local download` line that fetches the same files into the same place: a retry hint without
    --dir would fill the Hub cache and leave the folder asked for empty (no token: it is never a flag)."""
    parts = ["clover-local", "download", repo_id]
    if dir is not None:
        parts += ["--dir", str(dir)]
    if revision:
        parts += ["--revision", revision]
    return shlex.join(parts)


def hub_error(
    exc: BaseException, *, repo_id: str, revision: str | None = None, action: str = "downloading",
    retry: str | None = None,
) -> CloverError | None:
    """Translate an exception from huggingface_hub into one clear sentence, or None if it is not a Hub error.
    `retry` is the download command to suggest (default: `download_command(repo_id, revision=revision)`)."""
    from huggingface_hub import errors as E

    retry = retry or download_command(repo_id, revision=revision)
    rev = _revision_text(revision)
    # Class names moved between huggingface_hub versions: look them up defensively.
    gated = getattr(E, "GatedRepoError", ())
    disabled = getattr(E, "DisabledRepoError", ())
    not_found = getattr(E, "RepositoryNotFoundError", ())
    bad_revision = getattr(E, "RevisionNotFoundError", ())
    local_missing = tuple(
        c for c in (getattr(E, "LocalEntryNotFoundError", None), getattr(E, "OfflineModeIsEnabled", None)) if c
    )
    remote_missing = getattr(E, "RemoteEntryNotFoundError", None) or getattr(E, "EntryNotFoundError", ())
    for e in _chain(exc):
        if isinstance(e, CloverError):
            return e
        if isinstance(e, gated):
            return CloverError(
                f"{repo_id} is gated: open {endpoint()}/{repo_id} with the account of your token and "
                f"accept its terms, then retry ({_LOGIN_HINT} if you are not logged in)"
            )
        if isinstance(e, disabled):
            return CloverError(f"{repo_id} has been disabled on the Hub")
        if isinstance(e, not_found):
            return CloverError(
                f"repository {repo_id} was not found on the Hub: check the id, or if it is private, "
                f"{_LOGIN_HINT} with an account that can see it"
            )
        if isinstance(e, bad_revision):
            return CloverError(f"revision {revision or 'main'!r} does not exist in {repo_id}")
        if local_missing and isinstance(e, local_missing):
            return not_cached(repo_id, rev, retry)
        if isinstance(e, remote_missing):
            return CloverError(f"a file of {repo_id}{rev} is listed but missing on the Hub: {_short(e)}")
        if isinstance(e, E.HfHubHTTPError):
            return _http_error(e, repo_id, rev, action)
        if isinstance(e, ValueError) and "Invalid metadata in README.md" in str(e):
            problems = "; ".join(line.strip("- ").strip() for line in str(e).splitlines()[1:] if line.strip())
            return CloverError(f"the Hub refused the pack's README.md metadata: {_scrub(problems) or 'invalid'}")
        if isinstance(e, OSError) and not isinstance(e, ConnectionError) and e.filename and e.strerror:
            # a file of this machine's (HF_HOME naming a file, a cache we may not write): not the Hub's doing
            return CloverError(f"{action} {repo_id} stopped at {e.filename}: {e.strerror}")
    if is_connection_error(exc):
        return CloverError(f"the connection to the Hub failed while {action} {repo_id} ({_short(exc)}); "
                           f"{_resume_hint(action)}")
    return None


def _resume_hint(action: str) -> str:
    """What running the command again does after a failure while `action`."""
    if action.startswith("upload"):
        return "run the same command again to resume: files already uploaded are skipped"
    if action == "reading":  # nothing kept to resume: plan's header reads
        return "run the same command again"
    return ("run the same command again to resume: finished files are kept, and large files continue from where "
            "they stopped")


def _http_error(e: BaseException, repo_id: str, rev: str, action: str) -> CloverError:
    """An HTTP answer of the Hub's as one sentence: the status, the server's message, what to do."""
    status = getattr(getattr(e, "response", None), "status_code", None)
    server = _server_message(e)
    detail = f": {server}" if server else ""
    uploading = action.startswith("upload")
    if status == 401:
        return CloverError(
            f"the Hub rejected your token (401 Unauthorized) while {action} {repo_id}: {_LOGIN_HINT} again"
        )
    if status == 403:
        need = "write" if uploading else "read"
        return CloverError(
            f"the Hub refused access to {repo_id} (403 Forbidden){detail}; your token needs {need} access "
            f"to it ({_LOGIN_HINT} with a token that has it)"
        )
    if status in (408, 429) or (isinstance(status, int) and status >= 500):
        return CloverError(f"the Hub answered {status} while {action} {repo_id}{detail}; {_resume_hint(action)}")
    if status == 400 and uploading and "metadata" in str(e).lower():
        return CloverError(f"the Hub refused the model card of the pack{detail}")
    return CloverError(f"the Hub answered {status} while {action} {repo_id}{rev}{detail}")


def raise_hub_error(exc: BaseException, **kw) -> None:
    err = hub_error(exc, **kw)
    if err is None:
        raise exc
    raise err from None


def _visible_files(folder: Path) -> list[str]:
    """Names (relative, posix) of the files under `folder`, leaving out hidden files and folders (the Hub client's
    `.cache/`, our own records, editor droppings)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out += [(Path(dirpath) / n).relative_to(folder).as_posix() for n in filenames if not n.startswith(".")]
    return sorted(out)


def _fresh_files(folder: Path, since: float) -> list[str]:
    """Names (relative, posix) of files under `folder` whose data was written at or after `since`."""
    out = []
    for name in _visible_files(folder):
        try:
            if (folder / name).stat().st_mtime >= since:  # follows the cache's symlink to the blob
                out.append(name)
        except OSError:
            continue
    return out


def _names(names: list[str], shown: int = 3) -> str:
    """`a, b, c and 4 more`: a few file names for a one-line message."""
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


# ----------------------------------------------------------------------------------------------------
# download
# ----------------------------------------------------------------------------------------------------
# A --dir remembers which repo it holds (hidden, so never hashed, uploaded or taken for a model file).
ORIGIN_RECORD = ".clover-local-download.json"


def _dir_owner(folder: Path) -> str | None:
    """The repo id a previous `download --dir` into `folder` recorded, if any."""
    try:
        owner = json.loads((folder / ORIGIN_RECORD).read_text(encoding="utf-8")).get("repo_id")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def _claim_dir(folder: Path, repo_id: str) -> None:
    """Make `folder` the home of `repo_id`, refusing one that holds anything else: the download would overwrite
    that model's config and tokenizer and leave its other shards beside the new ones (a mix no loader can tell
    apart), and offline the Hub client would hand back the old folder as if it were `repo_id`."""
    if folder.exists() and not folder.is_dir():
        raise CloverError(f"{folder} is a file; give --dir a folder for {repo_id}")
    owner = _dir_owner(folder)
    if owner is None or owner.lower() != repo_id.lower():
        present = _visible_files(folder) if folder.is_dir() else []
        if present:
            what = f"a download of {owner}" if owner else "other files"
            raise CloverError(
                f"{folder} already holds {what} ({_names(present)}); give --dir an empty or new folder for "
                f"{repo_id}, or delete those files first"
            )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on the way (a/file/b), no permission
        raise CloverError(f"cannot make the folder {folder}: {exc.strerror}") from None
    (folder / ORIGIN_RECORD).write_text(json.dumps({"repo_id": repo_id}) + "\n", encoding="utf-8")


def _unverified_record(repo_id: str, dir: str | os.PathLike | None) -> Path:
    """Where a download of `repo_id` (into `dir`, or the Hub cache) notes when its first unfinished run began."""
    from huggingface_hub import constants

    from clover_local.paths import cache_root

    target = str(Path(dir).resolve()) if dir is not None else f"hub-cache:{constants.HF_HUB_CACHE}"
    key = hashlib.sha256(f"{repo_id.lower()}\n{target}".encode()).hexdigest()[:24]
    return cache_root() / "unverified-downloads" / f"{key}.json"


def _unverified_since(record: Path) -> float:
    """When the files not yet checked against the manifest began to arrive: a run that failed left finished files
    that the next run does not fetch again, so the run that completes the download checks them too. Notes the
    start of this run if no earlier run is pending."""
    try:
        return float(json.loads(record.read_text(encoding="utf-8"))["since"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    since = time.time() - 1.0
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"since": since}) + "\n", encoding="utf-8")
    except OSError:
        pass  # an unwritable cache only loses the check of an earlier failed run's files
    return since


def _verify_download(folder: Path, since: float, retry: str, on_bytes: ProgressFn | None,
                     checked: dict[str, str | None] | None = None) -> None:
    """Check a downloaded pack against its manifest: every file present with its size (cheap, always, so a
    partial folder handed back offline is caught), and the sha256 of each file written since `since` — except a
    file whose bytes were checked as they arrived (`checked`: name → sha256) against the manifest's own sum: reading
    it again would only repeat that (≈ 11 s for the 19 GB pack at this machine's 1.8 GB/s; minutes on a slow disk)."""
    fresh = _fresh_files(folder, since)
    if checked:
        try:
            sums = {name: entry.get("sha256") for name, entry in Manifest.load(folder).files.items()}
        except CloverError:
            sums = {}  # verify_pack says what is wrong with the manifest
        fresh = [name for name in fresh if checked.get(name) is None or checked[name] != sums.get(name)]
    try:
        verify_pack(folder, only=fresh, on_bytes=on_bytes)
    except CloverError as exc:
        raise CloverError(f"{exc}; fetch it again with `{retry} --force`") from None


def download(
    repo_id: str,
    dir: str | os.PathLike | None = None,
    revision: str | None = None,
    progress: bool = True,
    *,
    verify: bool = True,
    force: bool = False,
    on_verify_bytes: ProgressFn | None = None,
    reserve: Reserve | None = None,
) -> Path:
    """Download a Clover checkpoint or pack; return the local folder (Hub cache snapshot, or `dir`).

    Resumable across runs, large files included, and cache-reusing (see the module docstring and resume.py).
    Offline, or when the Hub cannot be reached, the cached snapshot is returned if it is complete. With `verify`,
    a pack's newly written files are checked against the sha256 sums in its manifest. A `dir` holding anything
    but an earlier download of `repo_id` is refused. `reserve`: what the caller writes after it, counted in the
    room check where it shares the download's disk (`resume.Reserve`).
    """
    from huggingface_hub import snapshot_download

    _check_repo_id(repo_id)
    offline = offline_mode()
    if not offline:
        check_token_text()
    kwargs: dict[str, Any] = dict(
        repo_id=repo_id,
        repo_type="model",
        revision=revision,
        allow_patterns=ALLOW_PATTERNS,
        ignore_patterns=IGNORE_PATTERNS,
        library_name="clover-local",
        library_version=__version__,
        force_download=force,
    )
    made_dir = dir is not None and not Path(dir).exists()
    if dir is not None:
        _claim_dir(Path(dir), repo_id)
        kwargs["local_dir"] = str(dir)
    if not progress:
        kwargs["tqdm_class"] = _quiet_tqdm()
    unverified = _unverified_record(repo_id, dir)
    started = _unverified_since(unverified)
    retry = download_command(repo_id, dir, revision)
    checked: dict[str, str | None] = {}  # large files whose sha256 was checked as they arrived
    try:
        try:
            if not offline and not force:
                # huggingface_hub deletes a partly fetched file when a run ends: fetch the large ones ourselves,
                # resumably, and leave them where snapshot_download takes them as done (see resume.py).
                from clover_local.hub.resume import fetch_large_files

                checked = fetch_large_files(
                    repo_id, revision=revision, local_dir=dir, allow_patterns=ALLOW_PATTERNS,
                    ignore_patterns=IGNORE_PATTERNS, retry=retry, tqdm_class=kwargs.get("tqdm_class"),
                    reserve=reserve,
                )
            path = snapshot_download(**kwargs, local_files_only=offline)
            local_only = offline
        except Exception as exc:
            if offline or not is_connection_error(exc):
                raise_hub_error(exc, repo_id=repo_id, revision=revision, action="downloading", retry=retry)
            # The connection dropped during the transfer: if the cache holds everything, carry on offline.
            try:
                path = snapshot_download(**{**kwargs, "force_download": False}, local_files_only=True)
                local_only = True
            except Exception:
                raise_hub_error(exc, repo_id=repo_id, revision=revision, action="downloading", retry=retry)
        if not holds_model(Path(path)):  # what the Hub client found here and handed back when it could not ask
            rev = _revision_text(revision)
            if local_only:
                raise not_cached(repo_id, rev, retry)
            _raise_hubs_answer(repo_id, revision, retry)
            raise CloverError(f"{repo_id}{rev} is not whole in {path}: the Hub could not be reached, or the repo has "
                              f"no config.json and .safetensors weights; check your connection and the id, then run "
                              f"`{retry}` again")
    except BaseException:
        if made_dir:
            _remove_if_no_files(Path(dir))
        raise
    folder = Path(path)
    if verify:
        if (folder / MANIFEST_NAME).is_file():
            _verify_download(folder, started, retry, on_verify_bytes, checked)
        unverified.unlink(missing_ok=True)
    return folder


def _raise_hubs_answer(repo_id: str, revision: str | None, retry: str) -> None:
    """The Hub's own answer about a repo whose download came back empty, as the error (an unknown repo or
    revision, a gated repo): where the Hub refuses to list a repo, snapshot_download hands back a `--dir` as it
    is — never empty, since `_claim_dir` marks it first — so the refusal was lost. Returns where the Hub cannot
    be reached or answers with the repo (the caller then says the folder is not whole)."""
    from huggingface_hub import HfApi

    try:
        HfApi(library_name="clover-local", library_version=__version__).repo_info(
            repo_id=repo_id, repo_type="model", revision=revision)
    except Exception as exc:  # noqa: BLE001 - any answer but a dropped line is the message
        if not is_connection_error(exc):
            raise_hub_error(exc, repo_id=repo_id, revision=revision, action="downloading", retry=retry)


def _revision_text(revision: str | None) -> str:
    """` (revision 'v2')` after a repo id in a message; nothing for the default branch."""
    return f" (revision {revision!r})" if revision else ""


def not_cached(repo_id: str, rev: str, retry: str) -> CloverError:
    """The Hub cannot be asked (offline mode, or no connection) and the files are not here."""
    if offline_mode():
        return CloverError(
            f"{repo_id}{rev} is not (fully) in the local Hub cache and offline mode is on (HF_HUB_OFFLINE=1): "
            f"unset it and run `{retry}` once with a connection"
        )
    return CloverError(
        f"cannot reach the Hub at {endpoint()} and {repo_id}{rev} is not (fully) in the local cache: "
        f"check your connection, then run `{retry}` again"
    )


class _HandedBackNote(logging.Filter):
    """Drops the Hub client's warning that it hands back a --dir it could not ask the Hub about: `download` checks
    the folder itself (`holds_model`) and says what is wrong in its one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Returning existing local_dir")


logging.getLogger("huggingface_hub._snapshot_download").addFilter(_HandedBackNote())


def holds_model(folder: Path) -> bool:
    """`folder` has what a model needs: config.json and its weights (every shard its index names, else a
    .safetensors file). Asked where the Hub could not be: offline, the Hub client hands back a --dir as it finds it
    (one holding only our origin record, after a first try that never connected) and a cached snapshot likewise."""
    if not (folder / "config.json").is_file():
        return False
    index = folder / INDEX_NAME
    if not index.is_file():
        return any(folder.glob("*.safetensors"))
    try:
        shards = set(read_weight_map(index).values())
    except (OSError, CloverError):
        return False
    return bool(shards) and all((folder / shard).is_file() for shard in shards)


def _remove_if_no_files(folder: Path) -> None:
    """Remove a --dir this download created when the failure left no file in it (only the Hub client's empty
    metadata folders and our origin record): a failed first try leaves nothing behind; any partial file stays,
    for the retry."""
    record = folder / ORIGIN_RECORD
    if any(p.is_file() and p != record for p in folder.rglob("*")):
        return
    shutil.rmtree(folder, ignore_errors=True)


def snapshot_commit(folder: Path) -> str | None:
    """The commit a Hub-cache snapshot folder holds (`…/snapshots/<sha>`), or None for any other folder: what
    a pack records as its source's revision, and what a resumed quantization reads again."""
    folder = Path(folder)
    if folder.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", folder.name):
        return folder.name
    return None


def commit_of(repo_id: str, revision: str) -> str:
    """The commit a branch, tag or commit of `repo_id` names now (one API call); a Hub failure is one line."""
    from huggingface_hub import HfApi

    try:
        api = HfApi(library_name="clover-local", library_version=__version__)
        return api.repo_info(repo_id=repo_id, repo_type="model", revision=revision).sha
    except Exception as exc:  # noqa: BLE001 - every Hub failure is one line
        raise_hub_error(exc, repo_id=repo_id, revision=revision, action="reading")
        raise


def resolve_model(arg: str, *, revision: str | None = None, kind: str = "any", reserve: Reserve | None = None
                  ) -> Path:
    """Turn a MODEL/SRC argument into a local folder.

    A local folder is used as is; `owner/name` that is not a local path is downloaded into the Hub cache
    (through `download`, like `clover-local download`). `kind` is "any", "pack" (must have a manifest) or
    "checkpoint" (must have config.json and safetensors).
    """
    if kind not in ("any", "pack", "checkpoint"):
        raise ValueError(f"kind must be 'any', 'pack' or 'checkpoint', not {kind!r}")
    text = str(arg)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise CloverError(f"{text} is a file; expected a model folder or a Hub repo id (owner/name)")
        if revision:
            raise CloverError(f"--revision applies to Hub repo ids, but {text} is a local folder")
        folder = local
    elif is_repo_id(text) and not text.startswith(("./", "../", "~")):
        try:
            folder = download(text, revision=revision, reserve=reserve)
        except CloverError as exc:
            if str(exc).startswith("repository "):
                raise CloverError(f"{exc}; there is no local folder {text} either") from None
            raise
    else:
        raise CloverError(f"{text} is neither an existing folder nor a Hub repo id (owner/name)")
    if kind == "pack" and not (folder / MANIFEST_NAME).is_file():
        raise CloverError(
            f"{text} is not a clover-local pack (no {MANIFEST_NAME}); "
            f"make one with `clover-local quantize {text} --out DIR`"
        )
    if kind == "checkpoint" and not ((folder / "config.json").is_file() and any(folder.glob("*.safetensors"))):
        raise CloverError(f"{text} is not a checkpoint folder (it needs config.json and *.safetensors files)")
    return folder


# ----------------------------------------------------------------------------------------------------
# upload
# ----------------------------------------------------------------------------------------------------
@dataclass
class UploadResult:
    """What `upload` sent (or, for a dry run, would send)."""

    repo_id: str
    revision: str | None
    private: bool
    dry_run: bool
    files: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "bytes"}], in upload order
    card: str = ""
    card_generated: bool = False  # the card was generated by clover-local in this call (written unless dry run)
    token_found: bool = False
    notes: list[str] = field(default_factory=list)  # things worth telling the person (e.g. visibility kept)
    url: str | None = None
    commit: str | None = None
    removed: list[str] = field(default_factory=list)  # weight files of an earlier upload deleted from the repo

    @property
    def total_bytes(self) -> int:
        return sum(f["bytes"] for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["total_bytes"] = self.total_bytes
        return out


def token_and_source() -> tuple[str | None, str]:
    """The token from HF_TOKEN or the login file, found without any network call, and where it came from."""
    from huggingface_hub import constants

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = (os.environ.get(var) or "").strip()
        if value:
            return value, var
    try:
        value = Path(constants.HF_TOKEN_PATH).read_text().strip()
    except OSError:
        return None, ""
    return (value or None), "the token file `hf auth login` wrote"


def _offline_token() -> str | None:
    """The token from HF_TOKEN or the login file, found without any network call."""
    return token_and_source()[0]


def check_token_text(token: str | None = None) -> None:
    """Refuse a token that no HTTP header can carry (a non-breaking or zero-width space pasted with it): the Hub
    client would fail on it with a traceback before sending anything. The token itself is never shown."""
    found, source = token_and_source()
    token = token if token is not None else found
    if not token:
        return
    cleaned = token.replace("\r", "").replace("\n", "")  # huggingface_hub drops these itself
    bad = next((i for i, c in enumerate(cleaned) if not (c.isascii() and c.isprintable())), None)
    if bad is not None:
        where = f" (from {source})" if source and token == found else ""
        raise CloverError(
            f"your Hub token{where} has a character a token cannot have at position {bad + 1} (e.g. a space "
            f"copied from a web page); set it again: {_LOGIN_HINT}"
        )


def _token() -> str:
    from huggingface_hub import get_token

    try:
        token = get_token()
    except Exception as exc:  # e.g. an OIDC exchange that failed
        raise CloverError(f"could not obtain a Hub token ({_short(exc)}); {_LOGIN_HINT}") from None
    if not token:
        raise CloverError(f"you are not logged in to the Hugging Face Hub: {_LOGIN_HINT}, then run upload again")
    check_token_text(token)
    return token


def _pattern(name: str) -> str:
    """An fnmatch pattern that matches exactly `name`."""
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def _card_for_upload(folder: Path, manifest: Manifest, repo_id: str, revision: str | None) -> tuple[str, bool]:
    """(card text, generated now). A card clover-local wrote earlier is regenerated; a hand-written one is kept."""
    from clover_local.pack.card import card_for_pack, card_problems, is_generated_card

    path = folder / CARD_NAME
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CloverError(f"{path} cannot be read ({unreadable(exc)})") from None
        if not is_generated_card(text) or CARD_NAME in manifest.files:  # hand-written, or hashed: keep it
            problems = [p for p in card_problems(text) if "cannot be parsed" in p]
            if problems:
                raise CloverError(f"{path} has a broken metadata block: {problems[0]}; fix it or delete the file")
            return text, False
    card = card_for_pack(folder, repo_id=repo_id, manifest=manifest, revision=revision)
    return str(card), True


def _refuse_checkpoint(folder: Path, shown: str) -> None:
    """A model checkpoint (config.json and safetensors, no manifest) given where a pack belongs: say what upload
    shares and how to make one, rather than only that a manifest is missing."""
    if (folder / MANIFEST_NAME).exists() or not (folder / "config.json").is_file():
        return
    if not any(folder.glob("*.safetensors")):
        return
    raise CloverError(
        f"{shown} is a model checkpoint, not a clover-local pack (it has no {MANIFEST_NAME}); upload shares "
        f"packs: make one with `clover-local quantize {shlex.quote(shown)} --out DIR`, then upload DIR"
    )


# Weight files (and their index) in a repo's top level, which `download` fetches and loaders read.
WEIGHT_PATTERNS = ["*.safetensors", "*.safetensors.index.json"]


def _stale_files(remote: list[str], keep: set[str]) -> list[str]:
    """Weight files in the repo's listing that are not this pack's (an earlier upload's shards, say): left there,
    every download of the repo would hold them beside the pack's own and fail its manifest check, or mix two
    models. Other files (a LICENSE, an image, someone's notes) are not ours to delete."""
    from huggingface_hub.utils import filter_repo_objects

    weights = filter_repo_objects(remote, allow_patterns=WEIGHT_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
    return sorted(name for name in weights if name not in keep)


def _refuse_foreign_weights(repo_id: str, remote: list[str], stale: list[str]) -> None:
    """Only an earlier pack's weights are replaced: a repo whose weights are not a clover-local pack (someone's
    BF16 checkpoint, another format) is refused before anything is sent, since the upload would delete them from
    its head."""
    if stale and MANIFEST_NAME not in remote:
        raise CloverError(
            f"{repo_id} already holds weights that are not a clover-local pack ({_names(stale)}); upload the pack "
            f"to a repo of its own (another --repo-id), or remove those files from {repo_id} first"
        )


def _remove_stale(api: Any, repo_id: str, revision: str | None, stale: list[str]) -> None:
    """Delete an earlier pack's `stale` weight files in one commit, after the pack is up (the repo is never
    without a complete pack)."""
    from huggingface_hub import CommitOperationDelete

    if stale:
        api.create_commit(
            repo_id=repo_id,
            repo_type="model",
            revision=revision,
            operations=[CommitOperationDelete(path_in_repo=name) for name in stale],
            commit_message=f"Remove {len(stale)} files that are not part of the clover-local pack",
        )


def upload(
    pack: str | os.PathLike,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
    *,
    progress: bool = True,
    on_verify_bytes: ProgressFn | None = None,
    commit_message: str | None = None,
) -> UploadResult:
    """Verify a pack and upload it to `repo_id` (created if needed; `revision` is a branch, created if needed).

    The pack's README.md is written from the manifest if the pack has none (it is not part of the manifest's
    hashed file list, see `clover_local.pack.manifest`). An earlier pack's weight files that this pack does not
    have are deleted after the upload (`UploadResult.removed`), so a download gets this pack's weights only; a
    repo holding weights that are not a pack is refused before anything is sent.
    With `dry_run`, nothing is written or sent: the result lists the files and sizes that would be sent and the
    card.
    """
    _check_repo_id(repo_id)
    if revision is not None and not revision.strip():
        revision = None
    folder = Path(pack).expanduser()
    if not folder.is_dir():
        raise CloverError(f"{pack} is not a folder; upload takes a pack folder made by `clover-local quantize`")

    _refuse_checkpoint(folder, str(pack))
    manifest = verify_pack(folder, on_bytes=on_verify_bytes)
    card, generated = _card_for_upload(folder, manifest, repo_id, revision)

    listed = [n for n in sorted(manifest.files) if n not in (MANIFEST_NAME, CARD_NAME)]
    names = listed + [MANIFEST_NAME, CARD_NAME]
    files = [{"name": n, "bytes": manifest.files[n]["bytes"]} for n in listed]
    files.append({"name": MANIFEST_NAME, "bytes": (folder / MANIFEST_NAME).stat().st_size})
    files.append({"name": CARD_NAME, "bytes": len(card.encode("utf-8"))})
    result = UploadResult(
        repo_id=repo_id,
        revision=revision,
        private=private,
        dry_run=dry_run,
        files=files,
        card=card,
        card_generated=generated,
        token_found=_offline_token() is not None or bool(os.environ.get("HF_OIDC_RESOURCE")),
    )
    if dry_run:
        return result

    token = _token()
    result.token_found = True
    if generated:
        tmp = folder / f".{CARD_NAME}.tmp"
        tmp.write_text(card, encoding="utf-8")
        tmp.replace(folder / CARD_NAME)

    from huggingface_hub import HfApi
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    api = HfApi(token=token, library_name="clover-local", library_version=__version__)
    restore_bars = False
    if not progress and not are_progress_bars_disabled():
        disable_progress_bars()
        restore_bars = True
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
        if private and getattr(api.repo_info(repo_id=repo_id, repo_type="model"), "private", True) is False:
            result.notes.append(
                f"{repo_id} already existed and is public; --private only applies when creating a repo."
            )
        if revision and revision != "main":
            api.create_branch(repo_id=repo_id, branch=revision, repo_type="model", exist_ok=True)
        remote = api.list_repo_files(repo_id=repo_id, repo_type="model", revision=revision)
        stale = _stale_files(remote, set(names))
        _refuse_foreign_weights(repo_id, remote, stale)
        patterns = [_pattern(n) for n in names]
        message = commit_message or f"Upload clover-local pack ({len(names)} files)"
        if hasattr(api, "upload_large_folder"):
            # huggingface_hub versions that have it (added in 0.25): the resumable, multi-commit uploader.
            api.upload_large_folder(
                repo_id=repo_id,
                folder_path=str(folder),
                repo_type="model",
                revision=revision,
                private=private,
                allow_patterns=patterns,
            )
        else:
            # huggingface_hub 2.x has no upload_large_folder: its upload_folder is the streamed, resumable,
            # multi-commit pipeline when hf_xet is installed (a single LFS commit without it).
            info = api.upload_folder(
                repo_id=repo_id,
                folder_path=str(folder),
                repo_type="model",
                revision=revision,
                allow_patterns=patterns,
                commit_message=message,
            )
            result.commit = getattr(info, "oid", None)
        _remove_stale(api, repo_id, revision, stale)
        result.removed = stale
    except Exception as exc:
        raise_hub_error(exc, repo_id=repo_id, revision=revision, action="uploading to")
    finally:
        if restore_bars:
            enable_progress_bars()
    url = f"{endpoint()}/{repo_id}"
    result.url = url if not revision or revision == "main" else f"{url}/tree/{revision}"
    return result
