"""Large files that survive an interrupted download: the next run continues them where the last one stopped.

Why this exists: huggingface_hub 2.x writes every attempt at a file to a uuid-named temporary file and deletes it
when the attempt fails (huggingface/huggingface_hub#4196). Within one call it retries a dropped connection with a
Range request, but a Ctrl-C, a kill or a network drop that ends the run loses every partly fetched file: for the
69 GB BF16 release in ~5 GB shards fetched 8 at a time, tens of GB.

What it does: before `snapshot_download` runs (online only), `fetch_large_files` fetches each file of the snapshot
larger than `THRESHOLD` itself, with `Range: bytes=<have>-` GETs into a partial file that stays on disk, checks
the finished file against its LFS sha256, and puts it where huggingface_hub takes it as already downloaded:

- Hub cache: `<HF_HUB_CACHE>/models--owner--name/blobs/<etag>`; the partial is `blobs/<etag>.clover-partial`.
  `snapshot_download` then only links the snapshot to the blob.
- `--dir`: `<dir>/<name>` plus huggingface_hub's download metadata for it; the partial is
  `<dir>/.cache/clover-local/partial/<etag>.clover-partial` (hidden, so never taken for a model file).

Offline, with `force`, or when the listing fails (the Hub cannot be reached, an unknown or gated repo), nothing
happens here and `snapshot_download` behaves, and reports, as before; nor with huggingface_hub < 1.0 (a requests
session), which resumes its own `.incomplete` files. A lock per file keeps two runs from appending to one partial.

Up to `PARALLEL` large files are fetched at once (as snapshot_download fetches 8 files at once: one stream per file
keeps each partial a simple prefix, and several streams fill a line one may not); when one fails, or on Ctrl-C,
the others stop at their next piece, their partials kept. Small files are left to `snapshot_download`.
The HTTP goes through huggingface_hub's session and headers, so the token, HF_ENDPOINT and proxies work as for the
rest of the download; the token is never printed (messages name files, never headers).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from clover_local import __version__
from clover_local.errors import CloverError
from clover_local.paths import nearest_existing

# Files larger than this are fetched here, resumably; the rest by snapshot_download (tests lower it).
THRESHOLD = 64 * 1024 * 1024
PARTIAL_SUFFIX = ".clover-partial"
CHUNK_SIZE = 1024 * 1024  # bytes read from the stream at a time: never a whole file in memory
FSYNC_EVERY = 256 * 1024 * 1024  # flush a partial to disk this often, so a power cut loses little
RETRIES = 5  # dropped connections in a row (no new bytes in between) before the run gives up
RETRY_WAIT_S = 1.0
PARALLEL = 8  # large files fetched at once, one stream each, as snapshot_download fetches files
DISK_MARGIN = 1024**3  # bytes left free after a download: the small files, logs, the system's own needs

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass
class LargeFile:
    """One file to fetch: its name in the repo, size, etag (the LFS sha256 for LFS files), commit and URL."""

    name: str
    size: int
    etag: str
    commit: str
    url: str


@dataclass
class Place:
    """Where a file's bytes go while they arrive (`partial`), and where huggingface_hub looks for them (`final`)."""

    partial: Path
    final: Path
    lock: Path


# ----------------------------------------------------------------------------------------------------
# what to fetch
# ----------------------------------------------------------------------------------------------------
def list_large_files(
    repo_id: str, revision: str | None, allow_patterns: list[str], ignore_patterns: list[str]
) -> list[LargeFile] | None:
    """The files of the snapshot `snapshot_download` will fetch that are larger than `THRESHOLD`, or None when the
    Hub cannot be asked (unreachable, unknown repo, gated, a bad moment): `snapshot_download` then meets the same
    problem and reports it, or falls back to the cache, exactly as without this module (or, given a `--dir`,
    hands the folder back as it is, and `transfer.download` asks the Hub once more for its answer)."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi(library_name="clover-local", library_version=__version__)
    try:
        commit = api.repo_info(repo_id=repo_id, repo_type="model", revision=revision).sha
        entries = [
            e for e in api.list_repo_tree(repo_id=repo_id, repo_type="model", revision=commit, recursive=True)
            if isinstance(e, RepoFile)
        ]
        wanted = filter_repo_objects(
            entries, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns, key=lambda e: e.path
        )
        out = []
        for entry in wanted:
            if (entry.lfs.size if entry.lfs else entry.size) <= THRESHOLD:
                continue
            url = hf_hub_url(repo_id, entry.path, revision=commit)
            # The etag exactly as huggingface_hub names the blob (X-Linked-Etag: the sha256 of an LFS file).
            meta = get_hf_file_metadata(url, library_name="clover-local", library_version=__version__)
            if meta.etag and meta.size and meta.commit_hash:
                out.append(LargeFile(entry.path, meta.size, meta.etag, meta.commit_hash, url))
        return out
    except Exception:  # noqa: BLE001 - whatever stops the listing, snapshot_download meets too (see above)
        return None


def place_of(file: LargeFile, repo_id: str, local_dir: str | os.PathLike | None) -> Place:
    """The partial, final and lock paths of `file` (see the module docstring). The partial sits on the same
    filesystem as the final path, so putting it in place is a rename."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    if local_dir is not None:
        folder = Path(local_dir).expanduser().resolve() / ".cache" / "clover-local" / "partial"
        partial = folder / f"{file.etag}{PARTIAL_SUFFIX}"
        return Place(partial, Path(local_dir).expanduser().resolve() / file.name, folder.parent / f"{file.etag}.lock")
    storage = Path(constants.HF_HUB_CACHE).expanduser().resolve() / repo_folder_name(repo_id=repo_id, repo_type="model")
    lock = storage.parent / ".locks" / storage.name / f"{file.etag}{PARTIAL_SUFFIX}.lock"
    return Place(storage / "blobs" / f"{file.etag}{PARTIAL_SUFFIX}", storage / "blobs" / file.etag, lock)


def already_there(file: LargeFile, place: Place, local_dir: str | os.PathLike | None) -> bool:
    """Whether huggingface_hub will take `file` as downloaded without fetching it: the blob exists (cache), or the
    file exists with download metadata of the same etag, or with the right size and no metadata (huggingface_hub
    hashes it then; we do not overwrite a file it may well accept)."""
    if local_dir is None:
        return place.final.is_file()
    from huggingface_hub.file_download import read_download_metadata

    if not place.final.is_file():
        return False
    meta = read_download_metadata(local_dir=Path(local_dir).expanduser().resolve(), filename=file.name)
    if meta is not None:
        return meta.etag == file.etag
    return place.final.stat().st_size == file.size


# ----------------------------------------------------------------------------------------------------
# fetching
# ----------------------------------------------------------------------------------------------------
def fetch_large_files(
    repo_id: str,
    *,
    revision: str | None,
    local_dir: str | os.PathLike | None,
    allow_patterns: list[str],
    ignore_patterns: list[str],
    retry: str,
    tqdm_class: Any = None,
    reserve: Reserve | None = None,
) -> dict[str, str | None]:
    """Fetch every large file of the snapshot that is not in place yet, resuming partial files. Returns each fetched
    file's name and the sha256 its bytes were checked against as they arrived (None: the Hub gave none), so that a
    manifest check need not read them again. `reserve`: what the caller writes after it (`_check_room`).

    Network and HTTP errors propagate as huggingface_hub raises them (the caller turns them into one sentence); the
    partial files stay for the next run. `retry` is the command to suggest in our own messages."""
    from huggingface_hub.utils import get_session

    if not hasattr(get_session(), "stream"):
        return {}  # huggingface_hub < 1.0 (requests): it resumes its own `.incomplete` files across runs
    files = list_large_files(repo_id, revision, allow_patterns, ignore_patterns)
    places = [(file, place_of(file, repo_id, local_dir)) for file in files or []]
    todo = [(file, place) for file, place in places if not already_there(file, place, local_dir)]
    if not todo:
        return {}
    _check_room(repo_id, todo, retry, reserve)
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(todo)), thread_name_prefix="clover-download") as pool:
        futures = [pool.submit(fetch_one, file, place, local_dir, retry=retry, tqdm_class=tqdm_class, stop=stop)
                   for file, place in todo]
        try:
            for future in as_completed(futures):
                future.result()
        except BaseException:  # Ctrl-C, or one file failed: the others stop at their next piece, partials kept
            stop.set()
            for future in futures:
                future.cancel()
            raise
    return {file.name: file.etag if _SHA256.match(file.etag) else None for file, _ in todo}


@dataclass
class Reserve:
    """Bytes the caller writes in `folder` after the download (`quantize`: the pack it makes of the checkpoint),
    counted in the download's room check where `folder` is on the download's disk."""

    folder: Path
    nbytes: int
    what: str


def _check_room(repo_id: str, todo: list[tuple[LargeFile, Place]], retry: str, reserve: Reserve | None = None
                ) -> None:
    """Refuse before the first byte when the disk cannot take what is left to fetch (and what `reserve` writes
    after it on the same disk): the 35B release is 69 GB, and a download that fills the disk would fail hours in,
    with the disk full."""
    need = sum(file.size - min(_size(place.partial), file.size) for file, place in todo)
    folder = nearest_existing(todo[0][1].partial.parent)
    free = shutil.disk_usage(folder).free
    after = (reserve.nbytes if reserve is not None
             and os.stat(nearest_existing(reserve.folder)).st_dev == os.stat(folder).st_dev else 0)
    if need + after + DISK_MARGIN <= free:
        return
    gb = 1e9
    then = f", then {after / gb:.1f} GB for {reserve.what}" if after else ""
    raise CloverError(
        f"downloading {repo_id} needs {need / gb:.1f} GB more on the disk of {folder}{then}, which has "
        f"{free / gb:.1f} GB free: free some space (`clover-local cache` lists what clover-local keeps) or download "
        f"to another disk (HF_HOME, or `--dir`), then run `{retry}`; a BF16 checkpoint can be quantized without "
        f"keeping it: `clover-local quantize {repo_id} --out DIR --stream`"
    )


def fetch_one(
    file: LargeFile, place: Place, local_dir: str | os.PathLike | None, *, retry: str, tqdm_class: Any = None,
    stop: threading.Event | None = None,
) -> None:
    """Bring `file` to its final place through its partial file, holding a lock so that two runs never append to
    the same partial."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    place.partial.parent.mkdir(parents=True, exist_ok=True)
    place.lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        with WeakFileLock(place.lock, timeout=2):
            if already_there(file, place, local_dir):  # another run finished it meanwhile
                return
            _download(file, place.partial, retry=retry, tqdm_class=tqdm_class, stop=stop or threading.Event())
            _put_in_place(file, place, local_dir)
    except Timeout:
        raise CloverError(
            f"another download is fetching {file.name} into the same place; let it finish (or stop it), then run "
            f"`{retry}` again"
        ) from None


def _put_in_place(file: LargeFile, place: Place, local_dir: str | os.PathLike | None) -> None:
    """Rename the finished partial to where huggingface_hub looks; in a --dir, record its download metadata."""
    os.replace(place.partial, place.final)
    if local_dir is not None:
        from huggingface_hub.file_download import write_download_metadata

        write_download_metadata(
            local_dir=Path(local_dir).expanduser().resolve(), filename=file.name, commit_hash=file.commit,
            etag=file.etag,
        )
        try:
            place.partial.parent.rmdir()  # tidy when no other partial waits there
        except OSError:
            pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class _Digest:
    """Running sha256 of a partial file, kept in step with the bytes written, so that a resumed file is read back
    once (its old part) rather than whole at the end."""

    def __init__(self) -> None:
        self.sha, self.n = hashlib.sha256(), 0

    def update(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.n += len(chunk)

    def sync(self, path: Path, n: int) -> None:
        """Make this the sha256 of the first `n` bytes of `path`, reading them only if it is not already."""
        if self.n == n:
            return
        self.sha, self.n = hashlib.sha256(), 0
        if n:
            with path.open("rb") as f:
                while self.n < n:
                    block = f.read(min(CHUNK_SIZE, n - self.n))
                    if not block:
                        break
                    self.update(block)


def _write_chunk(f: BinaryIO, chunk: bytes, digest: _Digest | None, bar: Any) -> None:
    """Append one piece of the stream to the partial file (and to the running sha256 and the progress bar)."""
    f.write(chunk)
    if digest is not None:
        digest.update(chunk)
    bar.update(len(chunk))


def _download(file: LargeFile, partial: Path, *, retry: str, stop: threading.Event, tqdm_class: Any = None) -> None:
    """Make `partial` hold all of `file`, continuing from what it holds, and check it against the LFS sha256.

    A partial longer than the file is not a prefix of it: it is discarded first. A partial of the full size (a run
    stopped while checking it) is complete: no request. A dropped connection is retried from the bytes written, up
    to `RETRIES` times in a row without progress; anything else propagates, the partial kept for the next run."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    from clover_local.hub.transfer import is_connection_error

    have = _size(partial)
    if have > file.size:
        partial.unlink()
        have = 0
    digest = _Digest() if _SHA256.match(file.etag) else None
    desc = file.name if not have else f"{file.name} (resuming from {hf_tqdm.format_sizeof(have, 'B', 1024)})"
    failures = 0
    bar_cls = tqdm_class or hf_tqdm
    with bar_cls(total=file.size, initial=have, desc=desc, unit="B", unit_scale=True, unit_divisor=1024) as bar:
        while have < file.size:
            if digest is not None:
                digest.sync(partial, have)
            before = have
            try:
                have = _get_rest(file, partial, have, digest, bar, retry, stop)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                have = _size(partial)
                if failures >= RETRIES and have <= before:
                    raise
                if stop.wait(RETRY_WAIT_S):
                    raise _Stopped() from None
            failures = 0 if have > before else failures + 1
            if failures > RETRIES:  # answers without new bytes, again and again
                raise CloverError(
                    f"the Hub stopped sending {file.name} at {have} of {file.size} bytes; run `{retry}` again to "
                    "resume it"
                )
    if digest is not None:
        digest.sync(partial, file.size)
        if digest.sha.hexdigest() != file.etag:
            partial.unlink(missing_ok=True)
            raise CloverError(
                f"{file.name} arrived corrupted (its sha256 does not match the Hub's); the partial download was "
                f"deleted: run `{retry}` again to fetch it anew"
            )


def _get_rest(file: LargeFile, partial: Path, have: int, digest: _Digest | None, bar: Any, retry: str,
              stop: threading.Event) -> int:
    """One GET of the bytes `partial` lacks; returns how many bytes it holds afterwards.

    206 from `have`: append. 200 (the server ignored the Range): truncate and take the whole body. 416: complete if
    the partial has the full size, else start over; so does a 206 that does not start at `have`."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(library_name="clover-local", library_version=__version__)
    headers["Accept-Encoding"] = "identity"  # the bytes as stored, so that offsets are file offsets
    if have:
        headers["Range"] = f"bytes={have}-"
    with get_session().stream(
        "GET", file.url, headers=headers, follow_redirects=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
    ) as response:
        status = response.status_code
        if status == 416 and have:
            return have if have == file.size else _restart(partial, bar)
        if status >= 300:
            response.read()  # the error body, for huggingface_hub's message
            hf_raise_for_status(response)
            raise CloverError(f"the Hub answered {status} for {file.name}; run `{retry}` again")
        if status == 206:
            m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != have:
                return _restart(partial, bar)
            mode = "ab"
        else:  # 200: the whole file, whatever was asked
            if have:
                have = _restart(partial, bar)
            if digest is not None:
                digest.sync(partial, 0)
            mode = "wb"
        return _stream_to(response, partial, mode, have, file, digest, bar, retry, stop)


class _Stopped(Exception):
    """This file's fetch ends because another's failed (or Ctrl-C): that one's error is the one reported."""


def _restart(partial: Path, bar: Any) -> int:
    """Drop the partial (what the server sends cannot continue it); 0 bytes held now."""
    partial.unlink(missing_ok=True)
    bar.reset(total=bar.total)
    return 0


def _stream_to(
    response: Any, partial: Path, mode: str, have: int, file: LargeFile, digest: _Digest | None, bar: Any,
    retry: str, stop: threading.Event,
) -> int:
    """Write the response body to `partial` (opened with `mode`), flushing to disk every `FSYNC_EVERY` bytes and
    at the end; returns the bytes it holds. A disk error becomes one sentence; the partial keeps what was written."""
    unsynced = 0
    try:
        with partial.open(mode) as f:
            for chunk in response.iter_bytes(chunk_size=CHUNK_SIZE):
                if stop.is_set():  # another file failed, or Ctrl-C: what arrived so far stays for the next run
                    raise _Stopped()
                if have + len(chunk) > file.size:
                    raise CloverError(
                        f"the Hub sent more bytes of {file.name} than it lists ({file.size}); run `{retry}` again"
                    )
                _write_chunk(f, chunk, digest, bar)
                have += len(chunk)
                unsynced += len(chunk)
                if unsynced >= FSYNC_EVERY:
                    f.flush()
                    os.fsync(f.fileno())
                    unsynced = 0
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        from clover_local.hub.transfer import is_connection_error

        if is_connection_error(exc):
            raise
        raise CloverError(
            f"cannot write {partial} ({exc.strerror or exc.__class__.__name__}); free some space or fix the "
            f"folder, then run `{retry}` again to resume it"
        ) from None
    return have
