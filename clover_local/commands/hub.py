"""`clover-local download` and `clover-local upload`: Hub transfer of checkpoints and packs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clover_local.cli import app
from clover_local.commands._model_options import blank_is_main
from clover_local.commands._paths import path_of
from clover_local.errors import CloverError, Interrupted
from clover_local.hub import transfer
from clover_local.pack.card import human_bytes


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


class _HashBar:
    """A Rich byte progress bar for the sha256 checks (huggingface_hub shows none for those).

    It starts on the first hashed bytes and stops when `total` bytes are hashed (or on `close`), so it never
    shares the terminal with huggingface_hub's own transfer bars.
    """

    def __init__(self, console: Console, what: str, total: int | None = None):
        self.console, self.what, self.total = console, what, total
        self.done = 0
        self._progress = None
        self._task = None
        self._finished = False

    def __call__(self, n: int) -> None:
        if self._finished or not self.console.is_terminal:
            return
        if self._progress is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=self.console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.what, total=self.total)
        self._progress.advance(self._task, n)
        self.done += n
        if self.total is not None and self.done >= self.total:
            self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._finished = True

    def __enter__(self) -> "_HashBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


DOWNLOAD_HELP = (
    "Download a Clover checkpoint or a clover-local pack from the Hugging Face Hub.\n\n"
    "Only the files a model needs are fetched (safetensors, JSON configs, tokenizer, chat template, README, "
    "clover_manifest.json), into the Hub cache shared with other tools, or into --dir. Transfers resume: a "
    "dropped connection is retried from where it stopped, and running the same command again after a failure or "
    "Ctrl-C skips finished files and continues each large file (over 64 MiB: the weight shards) from the bytes "
    "already on disk; those are fetched up to 8 at once and checked against their sha256 before use. A pack "
    "is checked against the sha256 sums in its manifest. With HF_HUB_OFFLINE=1, or when the Hub cannot be "
    "reached, the cached copy is used. --force fetches every file again from the start. --dir must be empty, "
    "new, or an earlier download of the same repo.\n\n"
    "The local folder is printed on stdout, so scripts can capture it."
)

DOWNLOAD_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "The BF16 source, into the Hub cache:  clover-local download Diffuspace/Clover-35B-A3B-Preview\n\n"
    "A pack, into a folder:  clover-local download someone/clover-35b-int4 --dir ./packs/int4\n\n"
    "A branch, tag or commit:  clover-local download someone/clover-35b-int4 --revision v2\n\n"
    "From the cache only:  HF_HUB_OFFLINE=1 clover-local download someone/clover-35b-int4\n\n"
    "Private or gated repos need a token: run `hf auth login` or set HF_TOKEN."
)


@app.command(help=DOWNLOAD_HELP, epilog=DOWNLOAD_EPILOG, no_args_is_help=True)
def download(
    repo_id: str = typer.Argument(..., metavar="REPO_ID", help="Hub repo id, owner/name."),
    dir: Optional[Path] = typer.Option(
        None, "--dir", help="Put the files in this folder instead of the Hub cache.",
        click_type=path_of("--dir", "folder")),
    revision: Optional[str] = typer.Option(None, "--revision", callback=blank_is_main,
                                           help="Branch, tag or commit (default: main)."),
    force: bool = typer.Option(False, "--force", help="Fetch every file again, even if cached."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check a pack's files against its manifest."),
    json_out: bool = typer.Option(False, "--json", help='Print {"repo_id", "revision", "path"} as JSON.'),
) -> None:
    console = _stderr()
    try:
        with _HashBar(console, "checking sha256") as on_bytes:
            path = transfer.download(
                repo_id, dir=dir, revision=revision, progress=True, verify=verify, force=force, on_verify_bytes=on_bytes
            )
    except KeyboardInterrupt:
        raise Interrupted(f"download interrupted; run `{transfer.download_command(repo_id, dir, revision)}` again "
                          "to resume (finished files are kept, partly downloaded large files continue where they "
                          "stopped)") from None
    if json_out:
        print(json.dumps({"repo_id": repo_id, "revision": revision, "path": str(path)}))
    else:
        console.print(f"[green]✓[/green] {escape(repo_id)} is in {escape(str(path))}")
        print(path)


UPLOAD_HELP = (
    "Upload a pack made by `clover-local quantize` to the Hugging Face Hub.\n\n"
    "The pack is checked first: the manifest must be marked complete and every file must match its size and "
    "sha256 in clover_manifest.json, otherwise nothing is sent. The model card README.md is generated from the "
    "manifest (base model, quantization settings, calibration, measured KL and agreement, memory) and written "
    "into the pack, unless the pack has a hand-written one (a card without clover-local's first-line marker). "
    "The repo is created if needed (--private applies only when it is created); --revision uploads to a "
    "branch, created if needed. Packs upload with huggingface_hub's resumable path: if an upload stops, run "
    "the same command again. An earlier pack's weight files that are not part of this one (*.safetensors and "
    "their index) are deleted afterwards, so a download gets this pack only; other files are left as they are, "
    "and a repo holding weights that are not a clover-local pack is refused.\n\n"
    "--dry-run lists exactly the files and sizes that would be sent and prints the card, without touching the "
    "network or the pack."
)

UPLOAD_EPILOG = (
    "[bold]Examples[/bold]\n\n"
    "See what would be sent:  clover-local upload ./packs/int4 --repo-id me/clover-35b-int4 --dry-run\n\n"
    "Upload to a new private repo:  clover-local upload ./packs/int4 --repo-id me/clover-35b-int4 --private\n\n"
    "Upload to branch g64:  clover-local upload ./packs/int4 --repo-id me/clover-35b-int4 --revision g64\n\n"
    "Uploading needs a token with write access: run `hf auth login` or set HF_TOKEN. The token is never printed."
)


@app.command(help=UPLOAD_HELP, epilog=UPLOAD_EPILOG, no_args_is_help=True)
def upload(
    pack: Path = typer.Argument(..., metavar="PACK", click_type=path_of("PACK", "folder"), help="The pack folder."),
    repo_id: str = typer.Option(..., "--repo-id", help="Target Hub repo id, owner/name."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (if it does not exist yet)."),
    revision: Optional[str] = typer.Option(None, "--revision", callback=blank_is_main,
                                           help="Branch to upload to (created if needed)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List files and sizes and print the card; send nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
) -> None:
    console = _stderr()
    total = None
    try:
        from clover_local.pack.manifest import Manifest

        total = Manifest.load(pack).total_bytes if Path(pack).is_dir() else None
    except CloverError:
        total = None  # upload() reports the problem in its own words
    try:
        with _HashBar(console, "checking sha256", total) as on_bytes:
            result = transfer.upload(
                pack, repo_id, private=private, revision=revision, dry_run=dry_run, on_verify_bytes=on_bytes
            )
    except KeyboardInterrupt:
        raise Interrupted(
            "upload interrupted; run the same command again to resume (files already uploaded are skipped)"
        ) from None
    for note in result.notes:
        console.print(f"note: {note}", markup=False)
    if result.removed and not json_out:
        console.print(
            f"removed {len(result.removed)} weight files of an earlier upload that are not part of this pack: "
            f"{transfer._names(result.removed)}", markup=False,
        )

    if json_out:
        print(json.dumps(result.to_dict()))
        return
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    title = f"{'Would send' if dry_run else 'Sent'} to {repo_id}" + (f" @ {revision}" if revision else "")
    table = Table(title=escape(title))
    table.add_column("file")
    table.add_column("bytes", justify="right")
    table.add_column("size", justify="right")
    for f in result.files:
        table.add_row(escape(f["name"]), str(f["bytes"]), human_bytes(f["bytes"]))
    table.add_row(f"total ({len(result.files)} files)", str(result.total_bytes), human_bytes(result.total_bytes))
    out.print(table)
    if dry_run:
        origin = "generated from the manifest" if result.card_generated else "from the pack"
        out.print(f"\nREADME.md ({origin}):\n", style="bold")
        sys.stdout.write(result.card if result.card.endswith("\n") else result.card + "\n")
        if not result.token_found:
            console.print(
                "note: no Hub token found; run `hf auth login` or set HF_TOKEN before uploading.", markup=False
            )
        console.print("dry run: nothing was sent and the pack was not changed.")
    else:
        console.print(f"[green]✓[/green] uploaded {len(result.files)} files to {escape(str(result.url))}")
