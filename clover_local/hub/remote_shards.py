"""A BF16 checkpoint's shards read from the Hub by byte range, tensor by tensor: `quantize --stream`.

Why: quantizing the 35B release from its Hub id downloaded all 69 GB before the first layer began, so the disk
had to hold 69 GB of source beside the 19 GB pack, and the download and the quantization took turns. A
safetensors shard is an 8-byte header length, a JSON header (each tensor's dtype, shape and data offsets), then
the data: every tensor is one contiguous byte range. So a layer's tensors are fetched by ranged GETs into memory
(never to disk) as the quantizer asks for them; the disk holds the pack and the small files only.

Large ranges are cut into `PART`-byte pieces fetched `PARALLEL` at once (one stream is slow on a long line; a
piece is written into its place in the tensor's buffer, no second copy). A dropped connection continues a piece
from the last byte it received, up to `RETRIES` times in a row without progress; then one line says what to run.
A server that ignores the Range header is refused (it would send whole 5 GB shards for each tensor). HTTP goes
through huggingface_hub's session and headers (token, HF_ENDPOINT, proxies); the token is never printed.

Integrity: a shard's LFS sha256 covers the whole file, which is never read whole; each piece's length is checked
against what was asked, each header against the shard's listed size, and the bytes travel over HTTPS.
"""

from __future__ import annotations

import math
import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch

from clover_local import __version__
from clover_local.errors import CloverError

PART = 32 * 1024 * 1024  # bytes one GET asks for at most: an expert tensor of the 35B release is many parts
PARALLEL = 8  # parts in flight at once
RETRIES = 5  # dropped connections in a row (no new bytes in between) before a read gives up
RETRY_WAIT_S = 1.0

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class Stopped(Exception):
    """A read ends because the run is ending (Ctrl-C, another read's failure): that cause is what is reported."""


@dataclass
class RemoteShards:
    """The shards of `repo_id` at `commit` (name → size in bytes), opened lazily, and what reading them took."""

    repo_id: str
    commit: str
    sizes: dict[str, int]
    retry: str = "the same command with --resume"  # what to run after a read that gave up
    fetched_bytes: int = 0
    requests: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _shards: dict[str, RemoteShard] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())

    def open(self, shard: str) -> RemoteShard:
        """The shard's reader (its header fetched once per run)."""
        with self._lock:
            opened = self._shards.get(shard)
        if opened is None:
            if shard not in self.sizes:
                raise CloverError(f"shard {shard} is listed in the index but missing from {self.repo_id}")
            opened = RemoteShard(self, shard)
            with self._lock:
                self._shards[shard] = opened
        return opened

    def url(self, name: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, name, revision=self.commit)

    def read(self, name: str, start: int, end: int) -> bytearray:
        """Bytes [start, end) of file `name`, fetched in parallel parts; a Hub failure is one CloverError."""
        from clover_local.hub.transfer import raise_hub_error

        try:
            return self._read(name, start, end)
        except (CloverError, Stopped):
            raise
        except Exception as exc:  # noqa: BLE001 - a refused token, a vanished file: one line
            raise_hub_error(exc, repo_id=self.repo_id, action="reading")
            raise

    def _read(self, name: str, start: int, end: int) -> bytearray:
        out = bytearray(end - start)
        if end == start:
            return out
        view = memoryview(out)
        parts = [(a, min(a + PART, end)) for a in range(start, end, PART)]
        cancel = threading.Event()  # set when one part fails or the caller is interrupted: the others end
        if len(parts) == 1:
            self._read_part(name, start, end, view, cancel)
            return out
        with ThreadPoolExecutor(min(PARALLEL, len(parts)), thread_name_prefix="clover-range") as pool:
            try:
                futures = [pool.submit(self._read_part, name, a, b, view[a - start:b - start], cancel)
                           for a, b in parts]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # Ctrl-C while waiting: the parts in flight stop at their next chunk
                cancel.set()
                raise
            failed = [f.exception() for f in done if f.exception() is not None]
            if failed:
                cancel.set()
                raise next((e for e in failed if not isinstance(e, Stopped)), failed[0])
        return out

    def _ended(self, cancel: threading.Event) -> bool:
        return self.stop.is_set() or cancel.is_set()

    def _read_part(self, name: str, start: int, end: int, into: memoryview, cancel: threading.Event) -> None:
        """Fill `into` with bytes [start, end) of `name`, continuing after a dropped connection or a busy server."""
        held = [0]  # bytes of `into` filled so far, kept by _get as they arrive (a dropped GET keeps its share)
        failures = 0
        while start + held[0] < end:
            before = held[0]
            try:
                self._get(name, start + held[0], end, into, held, cancel)
            except Stopped:
                raise
            except Exception as exc:  # noqa: BLE001 - a dropped line is retried, the rest is raised
                if not _transient(exc):
                    raise
                if failures >= RETRIES and held[0] == before:
                    raise CloverError(f"the connection to the Hub keeps dropping while reading {name} of "
                                      f"{self.repo_id}; check the network and run {self.retry}") from None
                if self.stop.wait(RETRY_WAIT_S) or cancel.is_set():
                    raise Stopped() from None
            failures = 0 if held[0] > before else failures + 1

    def _get(self, name: str, start: int, end: int, into: memoryview, held: list[int], cancel: threading.Event) -> None:
        """One ranged GET of bytes [start, end) into `into[held[0]:]`, advancing `held[0]` as bytes arrive."""
        from huggingface_hub import constants
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        headers = build_hf_headers(library_name="clover-local", library_version=__version__)
        headers["Accept-Encoding"] = "identity"  # offsets are file offsets
        headers["Range"] = f"bytes={start}-{end - 1}"
        with self._lock:
            self.requests += 1
        with get_session().stream("GET", self.url(name), headers=headers, follow_redirects=True,
                                  timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
            if response.status_code >= 300:
                response.read()  # the error body, for huggingface_hub's message
                hf_raise_for_status(response)
            m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if response.status_code != 206 or not m or int(m.group(1)) != start:
                raise CloverError(f"the Hub's server did not answer a ranged request for {name} of "
                                  f"{self.repo_id}, which --stream needs; quantize without --stream (it downloads "
                                  "the checkpoint first)")
            for chunk in response.iter_bytes():  # as the socket gives them: a cut line loses none, and no re-chunking
                if self._ended(cancel):
                    raise Stopped()
                have = held[0]
                n = min(len(chunk), len(into) - have)
                into[have:have + n] = chunk[:n]
                held[0] = have + n
                with self._lock:
                    self.fetched_bytes += n
                if held[0] == len(into):
                    break


def _transient(exc: BaseException) -> bool:
    """A dropped connection, a timeout, or an answer that says "later" (408, 429, 5xx): worth asking again."""
    from clover_local.hub.transfer import is_connection_error

    status = getattr(getattr(exc, "response", None), "status_code", None)
    return is_connection_error(exc) or status in (408, 429) or (isinstance(status, int) and status >= 500)


class RemoteShard:
    """What the checkpoint reader asks of safetensors' `safe_open`, answered by ranged GETs: `keys()`,
    `get_tensor(name)` and `get_slice(name)[i]` (one expert of a fused expert tensor)."""

    def __init__(self, shards: RemoteShards, name: str) -> None:
        from clover_local.hub import remote_index
        from clover_local.runtime.pack_index import header_from_prefix

        self.shards, self.name = shards, name
        self.header, self.data_start = header_from_prefix(lambda n: bytes(shards.read(name, 0, n)),
                                                          shards.sizes[name], name, remote_index.HEADER_PROBE)
        self.header.pop("__metadata__", None)

    def keys(self) -> list[str]:
        return list(self.header)

    def _entry(self, tensor: str) -> tuple[torch.dtype, list[int], int, int]:
        entry = self.header.get(tensor)
        if entry is None:
            raise CloverError(f"shard {self.name} of {self.shards.repo_id} has no tensor {tensor}")
        dtype = DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise CloverError(f"tensor {tensor} in {self.name} has dtype {entry.get('dtype')}, which clover-local "
                              "does not read")
        begin, end = (int(x) for x in entry["data_offsets"])
        shape = [int(d) for d in entry["shape"]]
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise CloverError(f"tensor {tensor} in {self.name} is corrupt (its offsets do not match its shape)")
        return dtype, shape, begin, end

    def _tensor(self, start: int, end: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        if end == start:
            return torch.empty(shape, dtype=dtype)
        buf = self.shards.read(self.name, self.data_start + start, self.data_start + end)
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)

    def get_tensor(self, tensor: str) -> torch.Tensor:
        dtype, shape, begin, end = self._entry(tensor)
        return self._tensor(begin, end, dtype, shape)

    def get_slice(self, tensor: str) -> _Rows:
        return _Rows(self, tensor)


class _Rows:
    """`get_slice(name)[i]`: row i of a tensor's first dimension, its own byte range."""

    def __init__(self, shard: RemoteShard, tensor: str) -> None:
        self.shard, self.tensor = shard, tensor

    def __getitem__(self, index: int) -> torch.Tensor:
        dtype, shape, begin, _ = self.shard._entry(self.tensor)
        if not isinstance(index, int) or not 0 <= index < shape[0]:
            raise IndexError(f"row {index} of {self.tensor} {shape}")
        row = math.prod(shape[1:]) * dtype.itemsize
        return self.shard._tensor(begin + index * row, begin + (index + 1) * row, dtype, shape[1:])


def open_remote_checkpoint(repo_id: str, revision: str | None = None) -> tuple[Path, RemoteShards]:
    """The small files of a Hub checkpoint (config, tokenizer, template, index) in the Hub cache, and its shards
    as `RemoteShards` at the same commit: what `--stream` reads instead of a download. Offline it is refused (a
    streamed read needs the Hub; drop --stream to use a downloaded copy)."""
    from huggingface_hub import HfApi, snapshot_download

    from clover_local.hub.remote_index import repo_files
    from clover_local.hub.transfer import (
        ALLOW_PATTERNS, IGNORE_PATTERNS, _quiet_tqdm, check_token_text, offline_mode, raise_hub_error,
    )

    if offline_mode():
        raise CloverError("--stream reads the checkpoint from the Hub, and HF_HUB_OFFLINE is set; drop --stream to "
                          "use a downloaded copy")
    check_token_text()
    api = HfApi(library_name="clover-local", library_version=__version__)
    try:
        commit, files = repo_files(api, repo_id, revision)
        folder = snapshot_download(repo_id=repo_id, repo_type="model", revision=commit,
                                   allow_patterns=ALLOW_PATTERNS, ignore_patterns=[*IGNORE_PATTERNS, "*.safetensors"],
                                   library_name="clover-local", library_version=__version__,
                                   tqdm_class=_quiet_tqdm())  # a few small files: no bar
    except Exception as exc:  # noqa: BLE001 - every Hub failure is one line
        raise_hub_error(exc, repo_id=repo_id, revision=revision, action="reading")
        raise
    sizes = {name: size for name, size in files.items() if name.endswith(".safetensors") and "/" not in name}
    if not sizes:
        raise CloverError(f"{repo_id} has no .safetensors weights at its top level")
    return Path(folder), RemoteShards(repo_id, commit, sizes)
