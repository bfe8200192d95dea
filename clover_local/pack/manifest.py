"""The pack manifest: `clover_manifest.json`, the record that makes a pack checkable and shareable.

A pack folder holds `config.json`, tokenizer files, sharded `model-*.safetensors`, a model card
(`README.md`) and this manifest. The manifest says how the pack was made (source, settings, calibration),
what it is worth (measured quality), what it needs (memory) and, above all, which files it is made of, with
each file's size and sha256. A pack is *complete* only once every file is written and hashed:

    manifest = Manifest(source={"repo_id": "Diffuspace/Clover-35B-A3B-Preview"}, settings={...})
    manifest.write(out)            # complete=False: a crash from here on leaves a pack marked unfinished
    ...write the shards, config.json, tokenizer...
    manifest.finalize(out)         # hash every file, set complete=True, write atomically

`verify_pack(folder)` is the gate used before loading a downloaded pack or uploading one: it raises
`CloverError` with one sentence naming the problem (no manifest, unfinished, a missing file, a size or
sha256 mismatch, an unlisted weight file).

What is hashed: every regular file in the folder except the manifest itself, hidden files and folders
(`.cache/` left by Hub downloads, editor droppings, our own temp files) and the model card `README.md`.
The card is documentation generated *from* the manifest; keeping it out of the hashed set lets a person edit
the card, or `eval` refresh the quality numbers and regenerate it, without making the weights look corrupt.
It is still uploaded with the pack.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

from clover_local.errors import CloverError

MANIFEST_NAME = "clover_manifest.json"
CARD_NAME = "README.md"
FORMAT = "clover-pack"
FORMAT_VERSION = 1

# Files with these endings hold tensors; one that the manifest does not list means the pack is not what its
# manifest says (a stray shard from an earlier run, a file copied in by hand) and is refused.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npz", ".npy")

_CHUNK = 8 * 1024 * 1024

ProgressFn = Callable[[int], None]


def now_iso() -> str:
    """The current time as ISO 8601 with a UTC offset, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _is_excluded(rel: PurePosixPath) -> bool:
    if any(part.startswith(".") for part in rel.parts):
        return True
    return str(rel) in (MANIFEST_NAME, CARD_NAME)


def pack_files(folder: str | os.PathLike) -> list[str]:
    """Relative (posix) names of the files that belong to the manifest's file list, sorted."""
    root = Path(folder)
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Do not descend into hidden folders (.cache/huggingface, .git, ...).
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            full = Path(dirpath) / name
            rel = PurePosixPath(full.relative_to(root).as_posix())
            if _is_excluded(rel) or not full.is_file():
                continue
            names.append(str(rel))
    return sorted(names)


def sha256_file(path: str | os.PathLike, on_bytes: ProgressFn | None = None) -> str:
    """Hex sha256 of a file, read in 8 MiB chunks (never the whole file at once)."""
    digest = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            if on_bytes is not None:
                on_bytes(n)
    return digest.hexdigest()


def _check_rel_name(name: str, folder: Path) -> Path:
    """Resolve a manifest file name inside `folder`, refusing names that would escape it."""
    rel = PurePosixPath(name)
    if not name or rel.is_absolute() or ".." in rel.parts or "\\" in name or name.startswith("/"):
        raise CloverError(f"the manifest in {folder} lists an unsafe file name {name!r}; the pack cannot be trusted")
    return folder.joinpath(*rel.parts)


def share_like_any_file(path: str | os.PathLike) -> None:
    """Give a file written through a private temp file (mkstemp, safetensors' writer: mode 0600) the mode any
    new file gets here (0666 less the umask): a pack's files are for sharing, and on a shared machine a mix of
    0600 shards and 0644 configs is a pack other users can list but not load."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


class AlteredFile(CloverError):
    """A file's bytes are not those it was written with (`Manifest.finalize`'s `expected`)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not what was written (its sha256 changed since: a disk or copy error?)")
        self.name = name


@dataclass
class Manifest:
    """In-memory form of `clover_manifest.json`. Free-form sections are plain dicts."""

    source: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    complete: bool = False
    created: str = field(default_factory=now_iso)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    # Top-level keys this version does not know, kept so that load -> write does not lose them.
    extra: dict[str, Any] = field(default_factory=dict)

    # -- (de)serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": self.format,
            "format_version": self.format_version,
            "complete": bool(self.complete),
            "created": self.created,
            "source": dict(self.source),
            "settings": dict(self.settings),
            "calibration": dict(self.calibration),
            "quality": dict(self.quality),
            "memory": dict(self.memory),
            "files": {k: dict(v) for k, v in sorted(self.files.items())},
        }
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "the manifest") -> "Manifest":
        if not isinstance(data, dict):
            raise CloverError(f"{where} is not a JSON object")
        if data.get("format") != FORMAT:
            raise CloverError(f"{where} is not a clover-local pack manifest (format is {data.get('format')!r})")
        version = data.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise CloverError(f"{where} has no valid format_version")
        if version > FORMAT_VERSION:
            raise CloverError(
                f"{where} uses pack format version {version}, newer than this clover-local understands "
                f"({FORMAT_VERSION}); upgrade clover-local"
            )
        sections = {}
        for key in ("source", "settings", "calibration", "quality", "memory", "files"):
            value = data.get(key, {})
            if value is None:
                value = {}
            if not isinstance(value, dict):
                raise CloverError(f"{where} has a {key!r} section that is not an object")
            sections[key] = value
        for name, entry in sections["files"].items():
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("sha256"), str)
                or not isinstance(entry.get("bytes"), int)
                or isinstance(entry.get("bytes"), bool)
            ):
                raise CloverError(f"{where} has a malformed entry for {name!r} (needs sha256 and bytes)")
        known = {"format", "format_version", "complete", "created", *sections}
        return cls(
            source=sections["source"],
            settings=sections["settings"],
            calibration=sections["calibration"],
            quality=sections["quality"],
            memory=sections["memory"],
            files=sections["files"],
            complete=bool(data.get("complete", False)),
            created=str(data.get("created") or ""),
            format=FORMAT,
            format_version=version,
            extra={k: v for k, v in data.items() if k not in known},
        )

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "Manifest":
        """Read `clover_manifest.json` from a pack folder."""
        folder = Path(folder)
        path = folder / MANIFEST_NAME
        if not folder.is_dir():
            raise CloverError(f"{folder} is not a folder")
        if not path.is_file():
            raise CloverError(
                f"{folder} has no {MANIFEST_NAME}: it is not a clover-local pack, or its quantization never started"
            )
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CloverError(f"{path} cannot be read as JSON ({exc.__class__.__name__}: {exc})") from None
        return cls.from_dict(data, where=str(path))

    def write(self, folder: str | os.PathLike) -> Path:
        """Write the manifest atomically (temp file in the same folder, fsync, os.replace)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / MANIFEST_NAME
        text = json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST_NAME}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            share_like_any_file(tmp)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:  # make the rename itself durable where the platform allows it
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:
            return target
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)
        return target

    # -- files -------------------------------------------------------------------------------------
    def compute_files(
        self, folder: str | os.PathLike, on_bytes: ProgressFn | None = None
    ) -> dict[str, dict[str, Any]]:
        """Hash every pack file (see the module docstring for what is left out); sets and returns `files`."""
        folder = Path(folder)
        files: dict[str, dict[str, Any]] = {}
        for name in pack_files(folder):
            path = folder / name
            size = path.stat().st_size
            files[name] = {"sha256": sha256_file(path, on_bytes), "bytes": size}
        self.files = files
        return files

    def finalize(self, folder: str | os.PathLike, on_bytes: ProgressFn | None = None,
                 expected: dict[str, str] | None = None) -> "Manifest":
        """Hash all files, mark the pack complete and write the manifest. Call after the last file is written.
        `expected`: name → the sha256 a file had when it was written; one that differs now raises AlteredFile and
        nothing is written (a manifest never certifies bytes other than those written)."""
        self.compute_files(folder, on_bytes=on_bytes)
        for name, sha in (expected or {}).items():
            if self.files.get(name, {}).get("sha256") != sha:
                raise AlteredFile(name)
        self.complete = True
        self.write(folder)
        return self

    @property
    def total_bytes(self) -> int:
        return sum(int(entry["bytes"]) for entry in self.files.values())


def _more(n: int) -> str:
    return f" (and {n} more)" if n > 0 else ""


def verify_pack(
    folder: str | os.PathLike,
    *,
    only: Iterable[str] | None = None,
    on_bytes: ProgressFn | None = None,
) -> Manifest:
    """Check a pack against its manifest and return the manifest; raise `CloverError` on the first problem.

    Order: manifest present and readable, marked complete, every listed file present with its size, no
    unlisted weight file, then the sha256 of every listed file (the slow part, last). `only` restricts the
    sha256 pass to some file names (e.g. the ones just downloaded); presence and sizes are always checked.
    `on_bytes(n)` is called as bytes are hashed, for a progress bar.
    """
    folder = Path(folder)
    manifest = Manifest.load(folder)
    if not manifest.complete:
        raise CloverError(
            f"the pack in {folder} is not complete (its manifest was never finalized): the quantization was "
            "interrupted or is still running; finish it (quantize --resume) before using or uploading it"
        )
    if not manifest.files:
        raise CloverError(f"the manifest in {folder} lists no files; the pack cannot be checked")

    missing: list[str] = []
    wrong_size: list[tuple[str, int, int]] = []
    for name, entry in sorted(manifest.files.items()):
        path = _check_rel_name(name, folder)
        if not path.is_file():
            missing.append(name)
            continue
        size = path.stat().st_size
        if size != entry["bytes"]:
            wrong_size.append((name, entry["bytes"], size))
    if missing:
        raise CloverError(f"the pack in {folder} is missing {missing[0]}{_more(len(missing) - 1)}")
    if wrong_size:
        name, want, got = wrong_size[0]
        raise CloverError(
            f"{name} in {folder} has {got} bytes but the manifest says {want}: the file is truncated or "
            f"was changed{_more(len(wrong_size) - 1)}"
        )

    extra = [name for name in pack_files(folder) if name not in manifest.files and name.endswith(WEIGHT_SUFFIXES)]
    if extra:
        raise CloverError(
            f"{extra[0]} in {folder} is a weight file the manifest does not list{_more(len(extra) - 1)}; "
            "remove it or re-finalize the pack"
        )

    wanted = set(manifest.files) if only is None else set(only) & set(manifest.files)
    for name in sorted(wanted):
        entry = manifest.files[name]
        digest = sha256_file(_check_rel_name(name, folder), on_bytes)
        if digest != entry["sha256"].lower():
            raise CloverError(
                f"{name} in {folder} does not match its sha256 in the manifest: the file is corrupt or was changed"
            )
    return manifest
