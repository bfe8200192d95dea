"""`clover-local cache`: see and free the disk space clover-local uses.

Two places hold it: clover-local's own cache folder (`paths.cache_root()`: synthetic packs of up to 20 GB, the
demo pack, kernel tuning tables, chat history, notes of unfinished downloads) and the Hugging Face Hub cache,
where `clover-local download` puts checkpoints (the 69 GB BF16 release) and packs. Only Clover models are listed
from the Hub cache; other repos belong to other tools and are counted, never shown or removed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fnmatch
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clover_local.cli import interrupt_exits, reflowed, app
from clover_local.errors import CloverError
from clover_local.paths import LAST_CHAT, cache_root

# What clover-local writes at the top of its cache folder, and what each is (for `list` and --help).
SYNTHETIC = "synthetic"  # runtime/synthetic_pack.py: synthetic/<kind>-v<version>, one folder per pack
KNOWN_ENTRIES = {
    "demo": "the demo's INT4 pack (`demo` remakes it in about a minute)",
    "tuning": "{tables} from `tune`",
    "chat_history": "lines typed in `chat` (its ↑ history)",
    LAST_CHAT: "the last `chat` conversation (`chat --continue`)",
    "unverified-downloads": "{notes} (files still to check against sha256)",
}
REMOVING = ".removing-"  # a folder being removed is first renamed to this prefix, so a half-removed pack is never
#                          taken for a complete one (a synthetic pack is "complete" while its marker file exists)
CONFIG_MAX_BYTES = 4 << 20  # a config.json bigger than this is no model config: not read


@dataclass
class Entry:
    """One row of the listing: a path under the cache folder, or a Clover repo in the Hub cache."""

    name: str
    source: str  # "cache" | "hub"
    path: Path
    bytes: int
    modified: float | None
    what: str
    revisions: list[dict[str, Any]] = field(default_factory=list)
    repo: Any = None  # huggingface_hub's CachedRepoInfo, for a Hub entry

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "source": self.source, "path": str(self.path), "bytes": self.bytes,
                               "modified": _iso(self.modified), "what": self.what}
        if self.source == "hub":
            out["revisions"] = self.revisions
        return out


@dataclass
class Listing:
    """Everything `cache list` shows, gathered once so that `rm` checks names against exactly that."""

    root: Path
    hub_dir: Path
    entries: list[Entry]
    other_hub_repos: int = 0
    warnings: list[str] = field(default_factory=list)
    hub_info: Any = None  # the HFCacheInfo the Hub rows came from; `rm` deletes through it

    @property
    def cache_bytes(self) -> int:
        return sum(e.bytes for e in self.entries if e.source == "cache")

    @property
    def hub_bytes(self) -> int:
        return sum(e.bytes for e in self.entries if e.source == "hub")

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "hub_cache": str(self.hub_dir),
                "entries": [e.to_dict() for e in self.entries], "cache_bytes": self.cache_bytes,
                "hub_bytes": self.hub_bytes, "total_bytes": self.cache_bytes + self.hub_bytes,
                "other_hub_repos": self.other_hub_repos, "warnings": self.warnings}


# ----------------------------------------------------------------------------------------------------
# gathering
# ----------------------------------------------------------------------------------------------------
def _iso(ts: float | None) -> str | None:
    return None if ts is None else _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds")


def _local_time(ts: float | None) -> str:
    return "" if ts is None else _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def fmt_bytes(n: float) -> str:
    """`runtime.sizes.fmt_bytes`, imported when used: that module imports torch, which a listing does not need."""
    from clover_local.runtime.sizes import fmt_bytes as fmt

    return fmt(n)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _usage(path: Path) -> tuple[int, float | None, int]:
    """Bytes, newest mtime and file count of `path`, never following a symlink (a link counts as itself: 0 bytes,
    so a link to another disk is not billed here). A file hard-linked twice counts once."""
    try:
        st = path.lstat()
    except OSError:
        return 0, None, 0
    if not path.is_dir() or path.is_symlink():
        return (0 if path.is_symlink() else st.st_size), st.st_mtime, 1
    total, newest, count, seen = 0, st.st_mtime, 0, set()
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                s = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            newest = max(newest, s.st_mtime)
            if name in files and not os.path.islink(os.path.join(top, name)) and (s.st_dev, s.st_ino) not in seen:
                seen.add((s.st_dev, s.st_ino))
                total += s.st_size
                count += 1
    return total, newest, count


def _what(rel: str, path: Path, count: int) -> str:
    """What an entry of the cache folder is, in a few words."""
    if path.is_symlink():
        return f"a link to {os.readlink(path)} (not followed; rm removes the link only)"
    base = PurePosixPath(rel).name
    if base.startswith(REMOVING):
        return "left by an interrupted `clover-local cache rm`: safe to remove"
    if rel.startswith(SYNTHETIC + "/"):
        m = re.fullmatch(r"(.+)-v(\d+)", base)
        if m and path.is_dir():
            kind = m.group(1)
            if (path / ".complete").is_file():
                return f"synthetic {kind} pack (`bench --synthetic {kind}` remakes it)"
            return f"unfinished synthetic {kind} pack (an interrupted write)"
    elif rel in KNOWN_ENTRIES:
        return KNOWN_ENTRIES[rel].format(tables=_plural(count, "kernel tuning table", "kernel tuning tables"),
                                         notes=_plural(count, "note of an unfinished download",
                                                       "notes of unfinished downloads"))
    return "not written by this version of clover-local"


def _cache_entries(root: Path, warnings: list[str]) -> list[Entry]:
    """One entry per top-level item of the cache folder; one per pack inside `synthetic/`. Nothing is skipped."""
    try:
        if not root.is_dir():
            if root.exists():
                warnings.append(f"{root} (the clover-local cache folder) is not a folder")
            return []
        children = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        warnings.append(f"cannot read {root}: {exc.strerror or exc}")
        return []
    items: list[tuple[str, Path]] = []
    for child in children:
        if child.name == SYNTHETIC and child.is_dir() and not child.is_symlink():
            try:
                items += [(f"{SYNTHETIC}/{p.name}", p) for p in sorted(child.iterdir(), key=lambda p: p.name)]
            except OSError as exc:
                warnings.append(f"cannot read {child}: {exc.strerror or exc}")
        else:
            items.append((child.name, child))
    entries = []
    for rel, path in items:
        size, modified, count = _usage(path)
        entries.append(Entry(rel, "cache", path, size, modified, _what(rel, path, count)))
    return entries


def _clover_kind(repo: Any) -> str | None:
    """"pack" or "checkpoint" when a snapshot of this Hub repo is a Clover model, else None.

    A Clover model is what clover-local reads: a clover-local pack (its manifest), or a `config.json` whose
    model_type is one `config.parse_config` accepts (a pack when it has a quantization_config)."""
    from clover_local.config import KNOWN_MODEL_TYPES
    from clover_local.pack import MANIFEST_NAME

    for revision in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
        if (revision.snapshot_path / MANIFEST_NAME).is_file():
            return "pack"
        config = revision.snapshot_path / "config.json"
        try:
            if not config.is_file() or config.stat().st_size > CONFIG_MAX_BYTES:
                continue
            raw = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and raw.get("model_type") in KNOWN_MODEL_TYPES:
            return "pack" if isinstance(raw.get("quantization_config"), dict) else "checkpoint"
    return None


def _incomplete_bytes(repo_path: Path) -> int:
    """Partly downloaded files of a Hub repo (`blobs/*.incomplete`): not in huggingface_hub's repo size, yet
    removed with the repo, so both the listing and the bytes freed count them."""
    total = 0
    for p in (repo_path / "blobs").glob("*.incomplete"):
        try:
            total += p.lstat().st_size
        except OSError:
            pass
    return total


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps its cache (and `clover-local download` without --dir puts models)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def _hub_entries(hub_dir: Path, warnings: list[str]) -> tuple[list[Entry], int, Any]:
    """The Clover models in the Hub cache, how many other repos there are, and the scan (for `rm`)."""
    from huggingface_hub import scan_cache_dir

    if not hub_dir.exists():
        return [], 0, None
    try:
        info = scan_cache_dir(hub_dir)
    except Exception as exc:  # noqa: BLE001 - a broken cache must not end the listing with a traceback
        warnings.append(f"cannot read the Hugging Face Hub cache {hub_dir}: {str(exc).splitlines()[0]}")
        return [], 0, None
    if info.warnings:
        first = str(info.warnings[0]).splitlines()[0]
        warnings.append(f"{_plural(len(info.warnings), 'folder', 'folders')} of the Hub cache could not be read "
                        f"and {'is' if len(info.warnings) == 1 else 'are'} not listed ({first})")
    entries, others = [], 0
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        kind = _clover_kind(repo) if repo.repo_type == "model" else None
        if kind is None:
            others += 1
            continue
        revisions = [{"commit": r.commit_hash, "refs": sorted(r.refs), "bytes": r.size_on_disk}
                     for r in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)]
        partial = _incomplete_bytes(repo.repo_path)
        named = ", ".join((f"{','.join(r['refs'])} ({r['commit'][:7]})" if r["refs"] else r["commit"][:7])
                          for r in revisions)
        what = f"Clover {kind}, {_plural(len(revisions), 'revision', 'revisions')}: {named}"
        if partial:
            what += f"; {fmt_bytes(partial)} partly downloaded"
        entries.append(Entry(repo.repo_id, "hub", repo.repo_path, repo.size_on_disk + partial, repo.last_modified,
                             what, revisions, repo))
    return entries, others, info


def gather() -> Listing:
    """Scan both places. Never raises for a missing or damaged cache: problems become warnings."""
    warnings: list[str] = []
    root, hub_dir = cache_root(), hub_cache_dir()
    entries = _cache_entries(root, warnings)
    hub, others, info = _hub_entries(hub_dir, warnings)
    return Listing(root, hub_dir, entries + hub, others, warnings, info)


# ----------------------------------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------------------------------
def _stdout() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _table(entries: list[Entry]) -> Table:
    table = Table()
    table.add_column("name", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("modified", no_wrap=True)
    table.add_column("what")
    for e in entries:
        table.add_row(escape(e.name), fmt_bytes(e.bytes), _local_time(e.modified), escape(e.what))
    return table


def _print_listing(listing: Listing) -> None:
    out = _stdout()
    cache = [e for e in listing.entries if e.source == "cache"]
    hub = [e for e in listing.entries if e.source == "hub"]
    for title, rows, none in ((f"[b]clover-local cache[/b] {escape(str(listing.root))}", cache, "empty"),
                              (f"[b]Clover models in the Hub cache[/b] {escape(str(listing.hub_dir))}", hub, "none")):
        out.print(title if rows else f"{title} [dim]({none})[/dim]")
        if rows:
            out.print(_table(rows))
    if listing.other_hub_repos:
        out.print(f"{_plural(listing.other_hub_repos, 'other Hub repo', 'other Hub repos')} not shown "
                  "(not Clover models; they are left to `hf cache`).")
    total = listing.cache_bytes + listing.hub_bytes
    out.print(f"[b]Total {fmt_bytes(total)}[/b] ({fmt_bytes(listing.cache_bytes)} in the clover-local cache, "
              f"{fmt_bytes(listing.hub_bytes)} in {_plural(len(hub), 'Clover model', 'Clover models')} "
              "in the Hub cache)")
    if listing.entries:
        out.print("Free space with: clover-local cache rm NAME... (NAME as listed above; --dry-run to see first)")


def _warn(listing: Listing) -> None:
    err = _stderr()
    for w in listing.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(w)}")


# ----------------------------------------------------------------------------------------------------
# the commands
# ----------------------------------------------------------------------------------------------------
CACHE_HELP = """See and free the disk space clover-local uses: its own cache folder, and the Clover checkpoints and
packs in the Hugging Face Hub cache.

`clover-local cache` alone lists both (as `cache list`); `clover-local cache rm NAME...` removes entries by the
names the listing prints. Everything listed is made again when needed: by the command that wrote it, or by
`clover-local download` for a Hub model.

Examples:

  clover-local cache

  clover-local cache list --json

  clover-local cache rm synthetic/full-v1 --dry-run

  clover-local cache rm 'synthetic/*' Diffuspace/Clover-35B-A3B-Preview --yes
"""

LIST_HELP = """List what clover-local keeps on disk: one row per entry, with its size, when it last changed and what
it is, then a total.

The clover-local cache folder ($CLOVER_LOCAL_CACHE, else $XDG_CACHE_HOME/clover-local, else
~/.cache/clover-local) holds:

  synthetic/KIND-vN     packs of `bench --synthetic KIND` (full 20 GB, full3 15.6 GB)
  demo                  the INT4 pack that `clover-local demo` makes and reuses
  tuning                kernel tuning tables from `clover-local tune`
  chat_history          lines typed in `clover-local chat`
  last_chat.json        the last conversation of `clover-local chat` (what `chat --continue` goes on with)
  unverified-downloads  notes of Hub downloads not yet checked against sha256

Anything else found there is listed by its path, so nothing is hidden. From the Hugging Face Hub cache
($HF_HUB_CACHE, default ~/.cache/huggingface/hub), where `clover-local download` puts models unless given --dir,
only Clover models are listed (a clover-local pack, or a config.json with a Clover model_type), with their
revisions; other repos are counted, not shown. Sizes are binary (1 GiB = 1024^3 bytes).

Examples:

  clover-local cache list

  clover-local cache list --json
"""

RM_HELP = """Remove cache entries by the names `clover-local cache list` prints, and say how much space that frees.

NAME is an entry of the clover-local cache (synthetic/full-v1, demo, tuning, chat_history, ...) or the repo id of
a Clover model in the Hub cache (owner/name: all its revisions are removed, through huggingface_hub's own
cache deletion). A NAME with * or ? matches listed names (quote it for the shell). Every NAME is checked
before anything is removed: one unknown name removes nothing. Nothing outside the clover-local cache folder and
the Hub cache's repo folders is ever removed; a link is removed, never what it points to.

It asks before removing when run in a terminal; without one (a script), give --yes.

Examples:

  clover-local cache rm synthetic/full-v1

  clover-local cache rm 'synthetic/*' --dry-run

  clover-local cache rm demo tuning --yes

  clover-local cache rm Diffuspace/Clover-35B-A3B-Preview
"""

cache_app = typer.Typer(
    name="cache",
    help=reflowed(CACHE_HELP),
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@cache_app.callback()
def cache(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="With no subcommand: print the listing as one JSON object."),
) -> None:
    if ctx.invoked_subcommand is None:
        list_cache(as_json=as_json)
    elif as_json:
        raise CloverError(f"--json goes after the subcommand: clover-local cache {ctx.invoked_subcommand} ... --json")


@cache_app.command("list", help=reflowed(LIST_HELP), short_help="List the cache entries, their sizes and a total.")
def list_cache(
    as_json: bool = typer.Option(False, "--json", help="Print the listing as one JSON object."),
) -> None:
    listing = gather()
    _warn(listing)
    if as_json:
        print(json.dumps(listing.to_dict(), indent=2))
    else:
        _print_listing(listing)


def _checked_name(name: str) -> str:
    """A NAME as typed, tidied (a trailing / from tab completion), or an error for a path that could leave the
    cache: an absolute path or one with `..`."""
    tidy = name.strip().rstrip("/")
    if not tidy:
        raise CloverError("an empty NAME: give names as `clover-local cache list` prints them")
    pure = PurePosixPath(tidy.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or re.match(r"^[A-Za-z]:", tidy):
        raise CloverError(f"{name!r} is not a cache entry name (no absolute paths or ..): give names as "
                          "`clover-local cache list` prints them, e.g. synthetic/full-v1 or owner/name")
    return pure.as_posix()


def _unknown(name: str, listing: Listing) -> CloverError:
    import difflib

    names = [e.name for e in listing.entries]
    if not names:
        return CloverError(f"nothing named {name!r}: nothing is cached (in {listing.root} or the Hub cache "
                           f"{listing.hub_dir})")
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    shown = close or names[:5]
    more = "" if close or len(names) <= 5 else f", … ({len(names)} in all)"
    hint = "did you mean " if close else "cached: "
    return CloverError(f"nothing named {name!r} in the cache; {hint}{', '.join(shown)}{more} "
                       "(`clover-local cache list` shows every name)")


def _select(names: list[str], listing: Listing) -> list[Entry]:
    """The entries the names ask for, in listing order; every name checked before any is used."""
    by_name = {e.name: e for e in listing.entries}
    by_lower: dict[str, list[Entry]] = {}
    for e in listing.entries:
        by_lower.setdefault(e.name.lower(), []).append(e)
    chosen: dict[str, Entry] = {}
    for raw in names:
        name = _checked_name(raw)
        if name in by_name:  # first: a listed name with [ or ? in it is that entry, not a pattern
            hits = [by_name[name]]
        elif any(c in name for c in "*?["):
            hits = [e for e in listing.entries if fnmatch.fnmatchcase(e.name, name)]
        else:
            hits = by_lower.get(name.lower(), [])  # Hub repo ids are case-insensitive on the Hub
            hits = hits if len(hits) == 1 else []
        if not hits:
            raise _unknown(raw, listing)
        chosen.update((e.name, e) for e in hits)
    return [e for e in listing.entries if e.name in chosen]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _local_target(entry: Entry, root: Path) -> Path:
    """The path to remove for a cache-folder entry: its folder's real path (links resolved) must lie in the
    cache folder's real path; the entry itself is not resolved, so a link is removed and never its target."""
    real_root = root.resolve()
    target = entry.path.parent.resolve() / entry.path.name
    if not _inside(target.parent, real_root) or target == real_root or entry.path.name in ("", ".", ".."):
        raise CloverError(f"refusing to remove {entry.path}: it is not inside the cache folder {real_root}")
    return target


def _hub_strategy(entries: list[Entry], listing: Listing) -> Any:
    """huggingface_hub's deletion plan for every revision of these repos, checked to touch only their folders."""
    if not entries:
        return None
    hub_real = listing.hub_dir.resolve()
    for e in entries:
        if e.repo.repo_path.resolve().parent != hub_real:
            raise CloverError(f"refusing to remove {e.name}: {e.repo.repo_path} is not a repo folder of the Hub "
                              f"cache {hub_real}")
    # huggingface_hub matches revisions by commit hash across all repos it scanned, and a duplicated repo shares
    # its commits with the original: its planner is given only the repos to remove, so no other one can match.
    only = dataclasses.replace(listing.hub_info, repos=frozenset(e.repo for e in entries))
    strategy = only.delete_revisions(*[r.commit_hash for e in entries for r in e.repo.revisions])
    folders = [Path(os.path.abspath(e.repo.repo_path)) for e in entries]
    for group in (strategy.repos, strategy.snapshots, strategy.refs, strategy.blobs,
                  getattr(strategy, "files", frozenset())):
        for path in group:
            if not any(_inside(Path(os.path.abspath(path)), f) for f in folders):
                raise CloverError(f"refusing to remove the Hub repos: huggingface_hub's plan would delete {path}, "
                                  "outside their folders in the Hub cache; nothing was removed")
    return strategy


def _remove_local(target: Path) -> None:
    """Remove a file, a link (never its target) or a folder. A folder is first renamed, so that one cut short
    (Ctrl-C, a full disk) is listed as left over rather than taken for a complete pack."""
    if target.is_symlink() or not target.is_dir():
        target.unlink()
        return
    doomed = target.with_name(f"{REMOVING}{target.name}-{os.getpid()}")
    try:
        target.rename(doomed)
    except OSError:
        doomed = target
    shutil.rmtree(doomed)


def _execute_quietly(strategy: Any) -> list[str]:
    """huggingface_hub's deletion, run with the warnings it logs for a path it could not delete (permission
    denied: with a traceback, and no exception raised) collected instead of printed."""
    import logging

    log = logging.getLogger("huggingface_hub.utils._cache_manager")
    problems: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            problems.append(record.getMessage())

    handler, propagate = Collect(logging.WARNING), log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        strategy.execute()
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
    return problems


def _confirm(count: int) -> bool:
    return typer.confirm(f"Remove {_plural(count, 'entry', 'entries')}?", default=False, err=True)


def _print_plan(chosen: list[Entry], freed: int, dry_run: bool) -> None:
    out = _stdout()
    out.print("Would remove (dry run):" if dry_run else "Will remove:")
    rows = []
    for e in chosen:
        where = str(e.path)
        if e.source == "hub":
            where += f" (Hub cache, {_plural(len(e.revisions), 'revision', 'revisions')})"
        rows.append((e.name, fmt_bytes(e.bytes), where))
    wide, size_wide = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    for name, size, where in rows:
        out.print(f"  {escape(name.ljust(wide))}  {size.rjust(size_wide)}  {escape(where)}", soft_wrap=True)
    out.print(f"{'Would free' if dry_run else 'Frees'} {fmt_bytes(freed)} ({freed} bytes).")


@cache_app.command("rm", help=reflowed(RM_HELP), short_help="Remove cache entries by name, freeing their space.",
                   no_args_is_help=True)
def rm(
    names: list[str] = typer.Argument(..., metavar="NAME...", help="Entry names or Hub repo ids, as `cache list` "
                                      "prints them; * and ? match several."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking (needed without a terminal)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be removed and the space freed; remove "
                                 "nothing."),
    as_json: bool = typer.Option(False, "--json", help='Print {"dry_run", "removed", "bytes_freed"} as one JSON '
                                 "object (with --dry-run: what would be)."),
) -> None:
    listing = gather()
    _warn(listing)
    chosen = _select(names, listing)
    local = [(e, _local_target(e, listing.root)) for e in chosen if e.source == "cache"]
    hub = [e for e in chosen if e.source == "hub"]
    strategy = _hub_strategy(hub, listing)
    freed = sum(e.bytes for e in chosen)
    if not as_json:
        _print_plan(chosen, freed, dry_run)
    removed: list[Entry] = []
    if not dry_run:
        if not yes:
            _ask(len(chosen))
        _remove_cached(local, listing.root, removed)
        _remove_hub(hub, strategy, removed)
    if as_json:
        listed = chosen if dry_run else removed
        print(json.dumps({"dry_run": dry_run, "removed": [{k: v for k, v in e.to_dict().items() if k != "what"}
                                                          for e in listed],
                          "bytes_freed": freed}, indent=2))
    elif not dry_run:
        _stderr().print(f"[green]✓[/green] removed {_plural(len(removed), 'entry', 'entries')}, "
                        f"freed {fmt_bytes(freed)}")


def _ask(count: int) -> None:
    """Go on only where a person at a terminal says yes (`--yes` skips this)."""
    if not sys.stdin.isatty():
        raise CloverError(f"not removing {_plural(count, 'entry', 'entries')} without confirmation: there "
                          "is no terminal to ask; add --yes to remove without asking")
    if not _confirm(count):
        _stderr().print("nothing removed")
        raise typer.Exit(1)


def _remove_cached(local: list[tuple[Entry, Path]], root: Path, removed: list[Entry]) -> None:
    """Our cache folder's entries, in order, each added to `removed` once gone; the first that cannot be removed
    ends the command with what was removed before it and what is left of it."""
    for e, target in local:
        try:
            _remove_local(target)
        except OSError as exc:
            done = f"; removed before it: {', '.join(r.name for r in removed)}" if removed else ""
            left = target.with_name(f"{REMOVING}{target.name}-{os.getpid()}")  # _remove_local's rename
            kept = (f"; what is left of it is listed as {left.relative_to(root.resolve()).as_posix()}"
                    if left.exists() else "")
            raise CloverError(f"could not remove {e.name} ({target}): {exc.strerror or exc}{kept}{done}") from None
        removed.append(e)


def _remove_hub(hub: list[Entry], strategy, removed: list[Entry]) -> None:
    """The Hub cache's entries, through huggingface_hub's own deletion (`strategy`), judged by what is left on
    disk: it logs a path it cannot delete and goes on, so whatever it says, a folder still there is not removed."""
    if strategy is None:
        return
    try:
        problems = _execute_quietly(strategy)
    except OSError as exc:
        problems = [f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)]
    left = [e for e in hub if os.path.lexists(e.repo.repo_path)]
    if left:
        removed += [e for e in hub if e not in left]
        done = f"; removed: {', '.join(r.name for r in removed)}" if removed else ""
        why = problems[0] if problems else "its folder is still there"
        raise CloverError(f"could not remove {', '.join(e.name for e in left)} from the Hub cache: {why}; "
                          f"what is left is in {', '.join(str(e.repo.repo_path) for e in left)}{done}")
    removed += hub


def _wrap_like_top_level_commands() -> None:
    """`cli._register` reflows docstrings and adds the one-line Ctrl-C exit for top-level commands only; the
    subcommands here get the same (help is set above), so `cache rm` cut short ends like every command."""
    for command in [*cache_app.registered_commands, cache_app.registered_callback]:
        if command is not None and command.callback is not None and not hasattr(command.callback, "__wrapped__"):
            command.callback = interrupt_exits(command.callback)


_wrap_like_top_level_commands()
app.add_typer(cache_app, name="cache", help=reflowed(CACHE_HELP),
              short_help="List what clover-local keeps on disk (synthetic packs, demo, Hub models) and free it.")
