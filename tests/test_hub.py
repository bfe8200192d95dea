"""Hub transfer against a local stand-in (tests/hub_standin.py): the real huggingface_hub client, no network.

Covered: a download cut mid-file and resumed with a Range request; a download that failed outright and is
resumed by running it again (finished files not fetched twice); a large file cut or Ctrl-C'd in one run and
continued from its partial file by the next (Hub cache and --dir), a server that ignores Range, a corrupted
partial caught by its sha256, small files and offline use left to snapshot_download; offline use of the cache;
unknown repo, revision and gated repo messages; resolve_model; an upload of a tiny pack (files arrive intact, card
generated and validated, branch created, unchanged objects not re-sent); a dry run that sends nothing; a
corrupt pack refused naming the file; a missing token; the token never printed; the CLI's one-line errors;
the generated card against huggingface_hub's card parsing/validation.
"""

from __future__ import annotations

import hashlib
import re
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from hub_standin import HubStandin, check_card_yaml

from clover_local.errors import CloverError
from clover_local.hub import transfer
from clover_local.pack import MANIFEST_NAME, Manifest
from clover_local.pack.card import (
    DEFAULT_BASE_MODEL,
    PLACEHOLDER_REPO_ID,
    build_card,
    card_problems,
    card_text,
    check_card,
    write_card,
)

TOKEN = "hf_standinSECRETtoken0123456789abcdefXYZ"

# huggingface_hub's LFS upload passes a file object as `data=`, which httpx2 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
REPO_ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------------------------------------
def _point_client_at(monkeypatch, url: str, home: Path) -> None:
    """Point huggingface_hub at the stand-in and an isolated HF_HOME (constants are read at import time)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import close_session

    close_session()
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(home / "clover-local"))  # download's unverified-run records
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(home / "xet"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / "agent_harnesses.json"), raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    # The stand-in speaks plain HTTP + LFS, not the Xet protocol.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    # huggingface_hub keeps streamed bytes in 10 MiB pieces; smaller pieces let a ~1 MB file show a mid-file resume.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    standin = HubStandin(token=TOKEN, max_requests=400, max_seconds=90).start()
    _point_client_at(monkeypatch, standin.url, tmp_path / "hf_home")
    yield standin
    standin.stop()
    from huggingface_hub.utils import close_session

    close_session()


@pytest.fixture
def with_token(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)


def make_pack(folder: Path, *, shard_bytes: int = 4096, source_repo: str | None = None, quality=None) -> Manifest:
    """A tiny pack: two safetensors shards, config.json, tokenizer and template, a finalized manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    m = Manifest(
        source={"repo_id": source_repo or DEFAULT_BASE_MODEL, "revision": "0123456789abcdef"},
        settings={"bits": 4, "group_size": 128, "method": "gptq", "profile": "balanced", "sym": True, "desc_act": False},
        calibration={"source": "calib_data/mix.txt", "samples": 8, "seq_len": 64},
        quality=quality if quality is not None else {"kl_causal_mean": 0.0123, "top1_causal": 0.965},
        memory={"total_bytes": 123456789, "expert_bytes": 100000000, "non_expert_bytes": 23456789},
    )
    m.write(folder)
    rng = np.random.default_rng(1)
    n = max(8, shard_bytes // 4 // 8)
    save_file(
        {
            "model.layers.0.mlp.experts.0.gate_proj.qweight": rng.integers(-(2**31), 2**31 - 1, size=(n, 8), dtype=np.int32),
            "model.layers.0.mlp.experts.0.gate_proj.scales": rng.standard_normal((2, 8)).astype(np.float16),
        },
        str(folder / "model-00001-of-00002.safetensors"),
    )
    save_file(
        {"model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float32)},
        str(folder / "model-00002-of-00002.safetensors"),
    )
    config = {
        "model_type": "clover_moe",
        "num_hidden_layers": 2,
        "hidden_size": 8,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "quantization_config": {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "desc_act": False,
            "sym": True,
            "checkpoint_format": "gptq",
            "dynamic": {"-:.*router.*": {}},
        },
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text('{"eos_token_id": 2}')
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    m.finalize(folder)
    return m


def pack_repo_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------------
# download
# ----------------------------------------------------------------------------------------------------
def test_download_resumes_a_dropped_connection_mid_file(hub, tmp_path):
    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=1_200_000)
    files = pack_repo_files(pack)
    files["modeling_clover.py"] = b"import os  # remote code is never downloaded"
    files["pytorch_model.bin"] = b"pickle bytes are never downloaded"
    hub.add_repo("someone/tiny-pack", files)
    shard = "model-00001-of-00002.safetensors"
    size = len(files[shard])
    hub.faults[shard] = [("drop", 700_000)]  # the first GET of the big shard is cut after 700 kB

    path = transfer.download("someone/tiny-pack", progress=False)

    assert (path / shard).read_bytes() == files[shard]
    gets = hub.log("GET", shard)
    assert len(gets) == 2, gets
    assert gets[0]["range"] is None
    resumed_from = int(gets[1]["range"].removeprefix("bytes=").rstrip("-"))
    # the second request continued from the bytes already written (in 64 KiB steps), it did not start over
    assert 0 < resumed_from <= 700_000 < size
    # only what a checkpoint or pack needs
    assert not (path / "modeling_clover.py").exists() and not (path / "pytorch_model.bin").exists()
    assert not hub.log(contains="modeling_clover.py") and not hub.log(contains="pytorch_model.bin")
    assert sorted(p.name for p in path.iterdir()) == sorted(n for n in pack_repo_files(pack))
    Manifest.load(path)  # and it is the pack


def test_failed_download_is_resumed_by_running_it_again(hub, tmp_path):
    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=600_000)
    files = pack_repo_files(pack)
    hub.add_repo("someone/tiny-pack", files)
    shard = "model-00001-of-00002.safetensors"
    # the connection drops mid-file, then the Hub has a bad moment: this run fails
    hub.faults[shard] = [("drop", 200_000), ("status", 503)]

    with pytest.raises(CloverError) as err:
        transfer.download("someone/tiny-pack", progress=False)
    msg = str(err.value)
    assert "run the same command again to resume" in msg and "\n" not in msg

    n_before = len(hub.requests)
    path = transfer.download("someone/tiny-pack", progress=False)
    second_run = hub.requests[n_before:]
    fetched = [r["path"].rsplit("/", 1)[-1] for r in second_run if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert fetched == [shard]  # finished files were kept; only the interrupted one is fetched
    for name, data in files.items():
        assert (path / name).read_bytes() == data


def test_download_verifies_a_pack_against_its_manifest(hub, tmp_path):
    pack = tmp_path / "src"
    make_pack(pack)
    files = pack_repo_files(pack)
    files["config.json"] = files["config.json"].replace(b'"bits": 4', b'"bits": 8')  # same size, other bytes
    hub.add_repo("someone/tampered", files)
    with pytest.raises(CloverError, match=r"config\.json .*sha256.*--force"):
        transfer.download("someone/tampered", progress=False)


def test_download_reads_a_shard_once_and_still_catches_a_wrong_one(hub, tmp_path, monkeypatch):
    """A large file's sha256 is checked as it arrives; when that equals the manifest's sum, the manifest check does
    not read the file again (the shards: ≈ 19 GB at 35B). A shard the Hub serves faithfully but that is not the
    manifest's (same size, other bytes) is still refused."""
    from clover_local.hub import resume

    monkeypatch.setattr(resume, "THRESHOLD", 512)  # both shards are large files here (fetched by resume.py)
    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=1 << 16)
    files = pack_repo_files(pack)
    shards = [n for n in files if n.endswith(".safetensors")]
    small = sum(len(data) for name, data in files.items()
                if name not in shards and name not in (MANIFEST_NAME, "README.md"))
    hashed: list[int] = []
    hub.add_repo("someone/tiny-pack", files)
    transfer.download("someone/tiny-pack", progress=False, on_verify_bytes=hashed.append)
    assert sum(hashed) == small  # config, tokenizer…: read for their sums; the shards were checked on arrival

    last = files[shards[-1]]
    files[shards[-1]] = last[:-8] + bytes(8)  # the Hub's sha256 (its etag) matches these bytes; the manifest's not
    hub.add_repo("someone/swapped-shard", files)
    with pytest.raises(CloverError, match=re.escape(shards[-1]) + ".*sha256"):
        transfer.download("someone/swapped-shard", progress=False)


def test_download_into_a_folder_and_reuse(hub, tmp_path):
    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    target = tmp_path / "packs" / "int4"
    path = transfer.download("someone/tiny-pack", dir=target, progress=False)
    assert path.resolve() == target.resolve()
    assert (target / MANIFEST_NAME).is_file() and (target / "model-00002-of-00002.safetensors").is_file()
    n_gets = len(hub.log("GET", "/resolve/"))
    transfer.download("someone/tiny-pack", dir=target, progress=False)
    assert len(hub.log("GET", "/resolve/")) == n_gets  # nothing fetched twice


def test_download_works_offline_from_the_cache(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    online = transfer.download("someone/tiny-pack", progress=False)

    n = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert transfer.download("someone/tiny-pack", progress=False) == online
    assert len(hub.requests) == n  # HF_HUB_OFFLINE: no request at all

    with pytest.raises(CloverError, match=r"not \(fully\) in the local Hub cache and offline mode is on"):
        transfer.download("someone/never-downloaded", progress=False)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.stop()  # the Hub is unreachable: connection refused
    assert transfer.download("someone/tiny-pack", progress=False) == online
    with pytest.raises(CloverError, match="cannot reach the Hub"):
        transfer.download("someone/never-downloaded", progress=False)


def test_a_folder_download_without_the_hub_is_refused_unless_it_holds_the_model(hub, tmp_path, monkeypatch, caplog):
    """Where the Hub cannot be reached the Hub client hands back a --dir as it finds it: after a first try that never
    connected, a folder holding only the download's origin record was reported downloaded ("✓ … is in DIR"). Now
    it is the usual one line (and the folder the try made is gone); a folder holding the whole model is used."""
    from huggingface_hub import constants

    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    whole = transfer.download("someone/tiny-pack", dir=tmp_path / "whole", progress=False)
    hub.stop()  # connection refused from here on
    assert transfer.download("someone/tiny-pack", dir=tmp_path / "whole", progress=False) == whole
    fresh = tmp_path / "fresh"
    caplog.set_level(logging.WARNING)
    with pytest.raises(CloverError, match=r"someone/tiny-pack is not whole in .*fresh: the Hub could not be reached"):
        transfer.download("someone/tiny-pack", dir=fresh, progress=False)
    assert not fresh.exists()
    assert "Returning existing local_dir" not in caplog.text  # (the Hub client's note: the error line says it)
    part = tmp_path / "part"  # a folder an earlier try left with its config only
    part.mkdir()
    (part / transfer.ORIGIN_RECORD).write_text(json.dumps({"repo_id": "someone/tiny-pack"}))
    shutil.copy(pack / "config.json", part / "config.json")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CloverError, match=r"not \(fully\) in the local Hub cache and offline mode is on"):
        transfer.download("someone/tiny-pack", dir=part, progress=False)
    assert (part / "config.json").is_file()  # what was there stays, for the retry


def test_unknown_repo_revision_and_gated_repo_messages(hub):
    hub.add_repo("someone/exists", {"config.json": b"{}"})
    hub.add_repo("org/gated", {"config.json": b"{}"}, gated=True)
    with pytest.raises(CloverError) as err:
        transfer.download("nobody/does-not-exist", progress=False)
    assert str(err.value).startswith("repository nobody/does-not-exist was not found on the Hub")
    assert "hf auth login" in str(err.value)
    with pytest.raises(CloverError, match="revision 'nope' does not exist in someone/exists"):
        transfer.download("someone/exists", revision="nope", progress=False)
    with pytest.raises(CloverError, match="org/gated is gated"):
        transfer.download("org/gated", progress=False)
    with pytest.raises(CloverError, match="is not a Hub repo id"):
        transfer.download("not a repo", progress=False)


@pytest.mark.parametrize("repo, revision, expected", [
    ("nobody/nothing", None, "repository nobody/nothing was not found on the Hub"),
    ("org/gated", None, "org/gated is gated: open"),
    ("someone/exists", "nope", "revision 'nope' does not exist in someone/exists"),
], ids=["unknown", "gated", "revision"])
def test_a_download_into_a_dir_says_what_the_hub_answered(hub, tmp_path, repo, revision, expected):
    """With --dir the Hub's refusal (an unknown repo or revision, a gated repo) is the message, as without it: the
    folder is marked as the download's before snapshot_download runs, and huggingface_hub hands a non-empty
    local_dir back as it is when the Hub refuses to list the repo, so the error said the folder was "not whole"
    and the Hub "could not be reached". A folder the download made is gone again; the user's own is kept."""
    hub.add_repo("someone/exists", {"config.json": b"{}"})
    hub.add_repo("org/gated", {"config.json": b"{}"}, gated=True)
    with pytest.raises(CloverError, match=expected) as err:
        transfer.download(repo, revision=revision, dir=tmp_path / "new", progress=False)
    assert "not whole" not in str(err.value) and not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    with pytest.raises(CloverError, match=expected):
        transfer.download(repo, revision=revision, dir=tmp_path / "mine", progress=False)
    assert (tmp_path / "mine").is_dir()


def test_resolve_model(hub, tmp_path, monkeypatch):
    pack = tmp_path / "local-pack"
    make_pack(pack)
    assert transfer.resolve_model(str(pack), kind="pack") == pack  # a local folder is used as is
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    monkeypatch.chdir(tmp_path)
    got = transfer.resolve_model("someone/tiny-pack", kind="pack")
    assert got == transfer.download("someone/tiny-pack", progress=False)
    assert "snapshots" in got.parts
    (tmp_path / "someone").mkdir()
    (tmp_path / "someone" / "tiny-pack").mkdir()  # a local folder wins over a repo id of the same shape
    assert transfer.resolve_model("someone/tiny-pack") == Path("someone/tiny-pack")
    with pytest.raises(CloverError, match="neither an existing folder nor a Hub repo id"):
        transfer.resolve_model("./missing/folder/here")
    with pytest.raises(CloverError, match="not a clover-local pack"):
        transfer.resolve_model(str(tmp_path / "someone"), kind="pack")
    with pytest.raises(CloverError, match="--revision applies to Hub repo ids"):
        transfer.resolve_model(str(pack), revision="main")
    with pytest.raises(CloverError, match="was not found on the Hub.*no local folder nobody/nothing either"):
        transfer.resolve_model("nobody/nothing")


def test_download_into_a_dir_holding_another_model_is_refused_before_writing(hub, tmp_path, monkeypatch):
    """A --dir with another model in it: downloading would overwrite its config and tokenizer and leave its shard
    beside the pack's; offline, the Hub client would hand the old folder back as the repo. Refused up front."""
    from huggingface_hub import constants

    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    hub.add_repo("someone/other-pack", pack_repo_files(pack))
    other = tmp_path / "bf16"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "clover_moe"}')
    (other / "model.safetensors").write_bytes(b"weights of another model")
    before = pack_repo_files(other)
    with pytest.raises(CloverError, match=r"bf16 already holds other files \(config\.json, model\.safetensors\)"):
        transfer.download("someone/tiny-pack", dir=other, progress=False)
    assert pack_repo_files(other) == before and not hub.log("GET", "/resolve/")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CloverError, match="already holds other files"):
        transfer.download("someone/tiny-pack", dir=other, progress=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    mine = tmp_path / "mine"
    transfer.download("someone/tiny-pack", dir=mine, progress=False)
    assert transfer.download("someone/tiny-pack", dir=mine, progress=False) == mine  # its own repo: fine
    with pytest.raises(CloverError, match="holds a download of someone/tiny-pack"):
        transfer.download("someone/other-pack", dir=mine, progress=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".DS_Store").write_bytes(b"")
    transfer.download("someone/other-pack", dir=tmp_path / "empty", progress=False)  # hidden files do not count


def test_files_a_failed_run_finished_are_checked_by_the_run_that_completes(hub, tmp_path, monkeypatch):
    """The first run fails after config.json arrived (altered, same size); the second only fetches the shard it
    lacked. The manifest check at the end must still cover config.json."""
    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=600_000)
    files = pack_repo_files(pack)
    files["config.json"] = files["config.json"].replace(b'"bits": 4', b'"bits": 8')
    hub.add_repo("someone/tampered", files)
    shard = "model-00001-of-00002.safetensors"
    hub.faults[shard] = [("drop", 200_000), ("status", 503)]
    with pytest.raises(CloverError, match="run the same command again"):
        transfer.download("someone/tampered", progress=False)
    later = types.SimpleNamespace(time=lambda: time.time() + 3600)
    monkeypatch.setattr(transfer, "time", later)  # the second run comes an hour later
    with pytest.raises(CloverError, match=r"config\.json .*sha256"):
        transfer.download("someone/tampered", progress=False)


def test_offline_download_of_a_dir_with_a_cut_short_shard_is_refused(hub, tmp_path, monkeypatch):
    """Offline nothing is fetched, so nothing was hashed: the sizes are still checked against the manifest."""
    from huggingface_hub import constants

    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    target = tmp_path / "packs" / "int4"
    transfer.download("someone/tiny-pack", dir=target, progress=False)
    shard = target / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    for f in target.iterdir():  # all of it from an earlier day: nothing is new to this run
        if f.is_file():
            os.utime(f, (f.stat().st_atime - 3600, f.stat().st_mtime - 3600))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CloverError, match=r"model-00001-of-00002\.safetensors .*has 100 bytes"):
        transfer.download("someone/tiny-pack", dir=target, progress=False)


def test_download_takes_only_the_top_level(hub, tmp_path):
    """A subfolder (another format's copy of the weights) is not what any loader reads: it is not fetched."""
    pack = tmp_path / "src"
    make_pack(pack)
    files = pack_repo_files(pack)
    files["original/model.safetensors"] = b"a second copy of the weights"
    files["original/config.json"] = b"{}"
    hub.add_repo("someone/tiny-pack", files)
    path = transfer.download("someone/tiny-pack", progress=False)
    assert not (path / "original").exists() and not hub.log(contains="/original/")


def test_a_token_with_a_pasted_character_is_refused_in_one_line(hub, tmp_path, monkeypatch, capsys):
    """A zero-width space copied with the token: the HTTP client would fail with a traceback (UnicodeEncodeError)
    before any request. One line instead, naming where the token came from, never the token."""
    pack = tmp_path / "pack"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    bad = "hf_standinSECRET\u200btoken0123456789abcdef"
    monkeypatch.setenv("HF_TOKEN", bad)
    for argv in (["download", "someone/tiny-pack"], ["upload", str(pack), "--repo-id", "me/x"]):
        code, out, err = run_cli(argv, monkeypatch, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert "token (from HF_TOKEN) has a character" in lines[0]
        assert "standinSECRET" not in out + err
    assert hub.requests == []


def test_gated_message_links_the_configured_endpoint(hub):
    hub.add_repo("org/gated", {"config.json": b"{}"}, gated=True)
    with pytest.raises(CloverError, match=f"open {hub.url}/org/gated with"):
        transfer.download("org/gated", progress=False)


# ----------------------------------------------------------------------------------------------------
# large files resume across runs (clover_local/hub/resume.py)
# ----------------------------------------------------------------------------------------------------
BIG = "model-00001-of-00002.safetensors"  # ~1.5 MB in these tests, over the lowered threshold


@pytest.fixture
def resumable(monkeypatch):
    """The resumable path for files over 256 KiB (64 MiB in use), in 64 KiB pieces, retrying without waiting."""
    from clover_local.hub import resume

    monkeypatch.setattr(resume, "THRESHOLD", 256 * 1024)
    monkeypatch.setattr(resume, "CHUNK_SIZE", 64 * 1024)
    monkeypatch.setattr(resume, "RETRY_WAIT_S", 0.0)
    return resume


def big_repo(hub, tmp_path, repo_id: str = "someone/big") -> dict[str, bytes]:
    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=1_500_000)
    files = pack_repo_files(pack)
    hub.add_repo(repo_id, files)
    return files


def file_gets(requests: list[dict], name: str) -> list[dict]:
    return [r for r in requests if r["method"] == "GET" and r["path"].endswith("/" + name)]


def partials(root: Path) -> list[Path]:
    return sorted(root.rglob("*.clover-partial"))


def cut_first_run(hub, repo_id: str, target: Path | None) -> str:
    """Run 1: the large file's connection drops after 700 kB, the retry meets a 503: the run fails."""
    hub.faults[BIG] = [("drop", 700_000), ("status", 503)]
    with pytest.raises(CloverError) as err:
        transfer.download(repo_id, dir=target, progress=False)
    return str(err.value)


@pytest.mark.parametrize("into_dir", [False, True], ids=["hub-cache", "dir"])
def test_an_interrupted_large_file_continues_in_the_next_run(hub, tmp_path, resumable, into_dir, capsys):
    files = big_repo(hub, tmp_path)
    size = len(files[BIG])
    target = tmp_path / "dl" if into_dir else None
    root = target if into_dir else tmp_path / "hf_home" / "hub"

    msg = cut_first_run(hub, "someone/big", target)
    assert "run the same command again to resume" in msg and "large files continue" in msg and "\n" not in msg
    run1 = file_gets(hub.requests, BIG)
    [partial] = partials(root)
    kept = partial.stat().st_size
    assert 0 < kept <= 700_000 and partial.read_bytes() == files[BIG][:kept]
    # within the run, the dropped connection was retried from the bytes written
    assert [r["range"] for r in run1] == [None, f"bytes={kept}-"]

    n = len(hub.requests)
    path = transfer.download("someone/big", dir=target, progress=True)
    run2 = hub.requests[n:]
    gets = file_gets(run2, BIG)
    assert [r["range"] for r in gets] == [f"bytes={kept}-"]  # snapshot_download did not fetch it again
    assert sum(r["sent"] for r in gets) == size - kept  # only the rest crossed the wire
    assert "resuming from" in capsys.readouterr().err  # the bar says so
    for name, data in files.items():
        assert (path / name).read_bytes() == data
        assert len(file_gets(hub.requests, name)) == (1 if name != BIG else 3)  # small files: once each
    assert partials(root) == []
    if into_dir:
        assert path.resolve() == target.resolve() and not (target / ".cache" / "clover-local" / "partial").exists()
        assert transfer._visible_files(target) == sorted(files)
    else:
        assert (path / BIG).is_symlink() and (path / BIG).resolve().name == sha(files[BIG])

    n = len(hub.requests)
    assert transfer.download("someone/big", dir=target, progress=False) == path
    assert file_gets(hub.requests[n:], BIG) == []  # a third run finds it in place


def test_several_large_files_are_fetched_at_once_and_all_resume(hub, tmp_path, resumable):
    """The shards are fetched side by side (as snapshot_download fetches files), each into its own partial: a run
    that fails keeps every partial, and the next continues each from its last byte."""
    rng = np.random.default_rng(3)
    files = {f"model-0000{k}-of-00003.safetensors": rng.bytes(600_000 + k) for k in (1, 2, 3)}
    hub.add_repo("someone/shards", {"config.json": b"{}", **files})
    for name in files:
        hub.faults[name] = [("drop", 400_000), ("status", 503)]
    with pytest.raises(CloverError):
        transfer.download("someone/shards", progress=False)
    kept = {p.name: p.read_bytes() for p in partials(tmp_path / "hf_home" / "hub")}
    by_sha = {sha(data) + ".clover-partial": data for data in files.values()}
    assert kept and all(by_sha[name].startswith(part) for name, part in kept.items())
    # side by side: all three were asked for before the first failure ended the run (one after another, the
    # first file's failure came before the others' first request)
    assert all(file_gets(hub.requests, name) for name in files)

    hub.faults.clear()  # what the first failure stopped short never met its own
    n = len(hub.requests)
    path = transfer.download("someone/shards", progress=False)
    for name, data in files.items():
        assert (path / name).read_bytes() == data
        [get] = file_gets(hub.requests[n:], name)
        part = kept.get(sha(data) + ".clover-partial", b"")
        assert get["range"] == (f"bytes={len(part)}-" if part else None)
    assert partials(tmp_path / "hf_home" / "hub") == []


def test_a_server_that_ignores_range_still_gives_the_right_file(hub, tmp_path, resumable):
    files = big_repo(hub, tmp_path)
    cut_first_run(hub, "someone/big", None)
    [partial] = partials(tmp_path / "hf_home" / "hub")
    kept = partial.stat().st_size
    assert kept > 0

    hub.ignore_range = True  # a proxy that answers 200 with the whole file
    n = len(hub.requests)
    path = transfer.download("someone/big", progress=False)
    [get] = file_gets(hub.requests[n:], BIG)
    assert get["range"] == f"bytes={kept}-" and get["sent"] == len(files[BIG])
    assert (path / BIG).read_bytes() == files[BIG]
    assert partials(tmp_path / "hf_home" / "hub") == []


def test_a_corrupted_partial_is_caught_deleted_and_the_next_run_succeeds(hub, tmp_path, resumable, monkeypatch, capsys):
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    files = big_repo(hub, tmp_path)
    target = tmp_path / "dl"
    cut_first_run(hub, "someone/big", target)
    [partial] = partials(target)
    data = bytearray(partial.read_bytes())
    data[1000:1010] = b"0123456789"  # same size, other bytes (a bad disk, a stray write)
    partial.write_bytes(bytes(data))

    disable_progress_bars()  # stderr: only what the CLI says
    try:
        code, out, err = run_cli(["download", "someone/big", "--dir", str(target)], monkeypatch, capsys)
    finally:
        enable_progress_bars()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {BIG} arrived corrupted") and "was deleted" in lines[0]
    assert f"clover-local download someone/big --dir {target}" in lines[0]
    assert partials(target) == [] and not (target / BIG).exists()

    n = len(hub.requests)
    path = transfer.download("someone/big", dir=target, progress=False)
    assert [r["range"] for r in file_gets(hub.requests[n:], BIG)] == [None]  # fetched anew
    assert (path / BIG).read_bytes() == files[BIG]


def test_ctrl_c_keeps_the_partial_and_says_the_rerun_resumes_it(hub, tmp_path, resumable, monkeypatch, capsys):
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    files = big_repo(hub, tmp_path)
    target = tmp_path / "dl"
    real_write = resumable._write_chunk
    written = []

    def ctrl_c_after_500k(f, chunk, digest, bar):
        if sum(written) >= 500_000:
            raise KeyboardInterrupt
        real_write(f, chunk, digest, bar)
        written.append(len(chunk))

    monkeypatch.setattr(resumable, "_write_chunk", ctrl_c_after_500k)
    disable_progress_bars()
    try:
        code, out, err = run_cli(["download", "someone/big", "--dir", str(target)], monkeypatch, capsys)
    finally:
        enable_progress_bars()
    assert code == 130 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "again to resume" in line and "partly downloaded large files continue" in line, err
    [partial] = partials(target)
    assert partial.stat().st_size == sum(written) >= 500_000

    monkeypatch.setattr(resumable, "_write_chunk", real_write)
    n = len(hub.requests)
    path = transfer.download("someone/big", dir=target, progress=False)
    assert [r["range"] for r in file_gets(hub.requests[n:], BIG)] == [f"bytes={sum(written)}-"]
    assert (path / BIG).read_bytes() == files[BIG]


def test_a_full_size_partial_needs_no_request_and_a_longer_one_starts_over(hub, tmp_path, resumable):
    from huggingface_hub import constants

    files = big_repo(hub, tmp_path)
    blobs = Path(constants.HF_HUB_CACHE) / "models--someone--big" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{sha(files[BIG])}.clover-partial"
    partial.write_bytes(files[BIG])  # a run stopped after the last byte, before the check and rename
    path = transfer.download("someone/big", progress=False)
    assert file_gets(hub.requests, BIG) == [] and (path / BIG).read_bytes() == files[BIG]

    hub.add_repo("someone/big2", files)
    blobs2 = Path(constants.HF_HUB_CACHE) / "models--someone--big2" / "blobs"
    blobs2.mkdir(parents=True)
    (blobs2 / partial.name).write_bytes(files[BIG] + b"junk")  # not a prefix of the file
    path = transfer.download("someone/big2", progress=False)
    assert [r["range"] for r in file_gets(hub.requests, BIG)] == [None]
    assert (path / BIG).read_bytes() == files[BIG] and partials(blobs2) == []


def test_offline_or_unreachable_the_resumable_path_stays_out(hub, tmp_path, resumable, monkeypatch):
    from huggingface_hub import constants

    files = big_repo(hub, tmp_path)
    online = transfer.download("someone/big", progress=False)

    def must_not_run(*a, **k):
        raise AssertionError("the resumable path ran offline")

    n = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(resumable, "fetch_large_files", must_not_run)
    assert transfer.download("someone/big", progress=False) == online
    assert len(hub.requests) == n  # no request at all
    monkeypatch.undo()  # everything back, the stand-in too
    _point_client_at(monkeypatch, hub.url, tmp_path / "hf_home")
    monkeypatch.setattr(resumable, "THRESHOLD", 256 * 1024)
    monkeypatch.setattr(resumable, "RETRY_WAIT_S", 0.0)

    hub.add_repo("someone/big2", files)
    cut_first_run(hub, "someone/big2", None)
    [partial] = partials(tmp_path / "hf_home" / "hub" / "models--someone--big2")
    before = partial.read_bytes()
    hub.stop()  # the Hub cannot be reached: the cached snapshot is used, or the usual message
    assert transfer.download("someone/big", progress=False) == online
    with pytest.raises(CloverError, match="cannot reach the Hub"):
        transfer.download("someone/big2", progress=False)
    assert partial.read_bytes() == before  # kept for when the Hub is back


def test_the_resumable_path_sends_the_token_and_never_shows_it(hub, tmp_path, resumable, with_token, capsys, caplog):
    from huggingface_hub.utils import logging as hf_logging

    pack = tmp_path / "src"
    make_pack(pack, shard_bytes=1_500_000)
    files = pack_repo_files(pack)
    hub.add_repo("me/private-big", files, private=True)  # 404 without the token
    hf_logging.set_verbosity_debug()
    caplog.set_level(logging.DEBUG)
    try:
        msg = cut_first_run(hub, "me/private-big", None)
        path = transfer.download("me/private-big", progress=True)
    finally:
        hf_logging.set_verbosity_warning()
    gets = file_gets(hub.requests, BIG)
    assert len(gets) == 3 and all(r["auth"] for r in gets) and gets[-1]["range"]
    assert (path / BIG).read_bytes() == files[BIG]
    out, err = capsys.readouterr()
    assert TOKEN not in msg + out + err + caplog.text


def test_small_files_stay_with_snapshot_download(hub, tmp_path, resumable, monkeypatch):
    """Below the threshold nothing changes: one plain GET per file, no Range, no partial file, no HEAD of ours."""
    monkeypatch.setattr(resumable, "THRESHOLD", 64 * 1024 * 1024)
    files = big_repo(hub, tmp_path)
    path = transfer.download("someone/big", progress=False)
    for name, data in files.items():
        assert [r["range"] for r in file_gets(hub.requests, name)] == [None]
        assert (path / name).read_bytes() == data
    assert partials(tmp_path / "hf_home") == []


# ----------------------------------------------------------------------------------------------------
# upload
# ----------------------------------------------------------------------------------------------------
def test_upload_removes_files_an_earlier_upload_left(hub, tmp_path, with_token, monkeypatch, capsys):
    """A pack re-made with other shard names, uploaded to the same repo: the old shards must not stay, or every
    download of the repo holds both sets and fails the manifest check."""
    first = tmp_path / "first"
    make_pack(first)
    transfer.upload(first, "me/clover-tiny-int4", progress=False)
    second = tmp_path / "second"
    make_pack(second)
    for i in (1, 2):
        (second / f"model-0000{i}-of-00002.safetensors").rename(second / f"model-0000{i}-of-00003.safetensors")
    Manifest.load(second).finalize(second)
    repo = hub.repos["me/clover-tiny-int4"]
    kept = {"LICENSE": b"kept", "eval_results.json": b"{}"}  # not weights: not ours to delete
    repo.commits[repo.branches["main"]].update(kept)

    code, out, err = run_cli(["upload", str(second), "--repo-id", "me/clover-tiny-int4"], monkeypatch, capsys)
    assert code == 0, err
    assert "removed 2 weight files of an earlier upload" in err and "model-00001-of-00002.safetensors" in err
    assert hub.files_at("me/clover-tiny-int4") == {**pack_repo_files(second), **kept}
    path = transfer.download("me/clover-tiny-int4", progress=False)
    assert sorted(p.name for p in path.iterdir()) == sorted([*pack_repo_files(second), "eval_results.json"])


def test_upload_into_a_repo_of_other_weights_is_refused_before_sending(hub, tmp_path, with_token):
    """Only an earlier pack's shards are replaced: weights that are not a clover-local pack (someone's BF16
    checkpoint) would otherwise be deleted from the repo's head by the upload."""
    theirs = {"config.json": b"{}", "model.safetensors": b"bf16 weights"}
    hub.add_repo("me/clover-bf16", theirs)
    pack = tmp_path / "pack"
    make_pack(pack)
    with pytest.raises(CloverError, match=r"me/clover-bf16 already holds weights that are not a clover-local pack "
                                          r"\(model.safetensors\); upload the pack to a repo of its own"):
        transfer.upload(pack, "me/clover-bf16", progress=False)
    assert hub.files_at("me/clover-bf16") == theirs  # nothing sent, nothing deleted


def test_upload_of_a_checkpoint_says_it_takes_a_pack(hub, tmp_path, with_token):
    ckpt = REPO_ROOT / "clover_local" / "assets" / "tiny"
    with pytest.raises(CloverError, match=r"is a model checkpoint, not a clover-local pack.*clover-local quantize"):
        transfer.upload(ckpt, "me/x", progress=False)
    assert hub.requests == []


def test_upload_a_tiny_pack(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    assert not (pack / "README.md").exists()

    result = transfer.upload(pack, "me/clover-tiny-int4", progress=False)

    assert result.url == f"{hub.url}/me/clover-tiny-int4" and result.commit
    assert (pack / "README.md").is_file()  # the card was generated into the pack
    remote = hub.files_at("me/clover-tiny-int4")
    local = pack_repo_files(pack)
    assert remote == local  # every file arrived intact, nothing else was sent
    assert sorted(f["name"] for f in result.files) == sorted(local)
    assert "base_model_relation: quantized" in remote["README.md"].decode()
    assert hub.validated_cards and hub.validated_cards[-1] == remote["README.md"].decode()
    puts = hub.log("PUT", "/lfs-upload/")
    assert len(puts) == 2  # the two safetensors shards went through LFS
    writes = [r for r in hub.requests if r["method"] in ("POST", "PUT") and "validate-yaml" not in r["path"]]
    assert all(r["auth"] for r in writes if "lfs-upload" not in r["path"])

    # again, to a branch: the branch is created and unchanged objects are not sent twice; the branch's card runs
    # the branch's pack (main's card names no revision)
    result = transfer.upload(pack, "me/clover-tiny-int4", revision="g64", progress=False)
    assert result.url.endswith("/me/clover-tiny-int4/tree/g64")
    on_branch = hub.files_at("me/clover-tiny-int4", "g64")
    card = on_branch.pop("README.md").decode()
    assert on_branch == {k: v for k, v in local.items() if k != "README.md"}
    assert "clover-local chat me/clover-tiny-int4 --revision g64" in card
    assert "clover-local plan me/clover-tiny-int4 --revision g64 --vram 16GB" in card
    assert "--revision" not in remote["README.md"].decode()
    assert len(hub.log("PUT", "/lfs-upload/")) == 2
    assert hub.log("POST", "/branch/g64")


def test_upload_private_repo_is_created_private(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    transfer.upload(pack, "me/secret-pack", private=True, progress=False)
    assert hub.repos["me/secret-pack"].private is True


def test_upload_dry_run_sends_nothing_and_lists_files(hub, tmp_path, monkeypatch):
    pack = tmp_path / "pack"
    manifest = make_pack(pack)
    before = {p: p.stat().st_mtime_ns for p in pack.rglob("*")}

    result = transfer.upload(pack, "me/clover-tiny-int4", dry_run=True)

    assert hub.requests == []  # no request reached the server
    assert {p: p.stat().st_mtime_ns for p in pack.rglob("*")} == before  # the pack is untouched
    assert not (pack / "README.md").exists()
    expected = {n: e["bytes"] for n, e in manifest.files.items()}
    expected[MANIFEST_NAME] = (pack / MANIFEST_NAME).stat().st_size
    expected["README.md"] = len(result.card.encode())
    assert {f["name"]: f["bytes"] for f in result.files} == expected
    assert result.card_generated and "clover-local chat me/clover-tiny-int4" in result.card
    assert result.token_found is False


def test_upload_refuses_a_corrupt_pack(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    shard = pack / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed, same size
    shard.write_bytes(bytes(data))
    with pytest.raises(CloverError) as err:
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert "model-00001-of-00002.safetensors" in str(err.value) and "sha256" in str(err.value)
    assert hub.requests == []


def test_upload_refuses_an_incomplete_pack(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    m = Manifest.load(pack)
    m.complete = False
    m.write(pack)
    with pytest.raises(CloverError, match="not complete"):
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert hub.requests == []


def test_upload_without_a_token_says_how_to_log_in(hub, tmp_path):
    pack = tmp_path / "pack"
    make_pack(pack)
    with pytest.raises(CloverError) as err:
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert "not logged in" in str(err.value)
    assert "hf auth login" in str(err.value) and "HF_TOKEN" in str(err.value)
    assert hub.requests == []


def test_upload_with_a_rejected_token(hub, tmp_path, monkeypatch):
    pack = tmp_path / "pack"
    make_pack(pack)
    wrong = "hf_wrongWRONGwrong0123456789abcdefghij"
    monkeypatch.setenv("HF_TOKEN", wrong)
    with pytest.raises(CloverError) as err:
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert "rejected your token" in str(err.value) and wrong not in str(err.value)


def test_upload_regenerates_a_generated_card_and_keeps_a_handwritten_one(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    write_card(pack)  # e.g. by quantize, before the repo id is known and before eval added numbers
    assert PLACEHOLDER_REPO_ID in (pack / "README.md").read_text()
    m = Manifest.load(pack)
    m.quality["kl_preview_mean"] = 0.0456  # eval updates the manifest (not hashed, so the pack stays valid)
    m.write(pack)
    transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    text = hub.files_at("me/clover-tiny-int4")["README.md"].decode()
    assert PLACEHOLDER_REPO_ID not in text and "clover-local download me/clover-tiny-int4" in text
    assert "0.0456" in text
    assert text == (pack / "README.md").read_text()

    mine = "---\nlicense: apache-2.0\nbase_model: Diffuspace/Clover-35B-A3B-Preview\n---\n# My own words\n"
    (pack / "README.md").write_text(mine)
    result = transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert not result.card_generated
    assert hub.files_at("me/clover-tiny-int4")["README.md"].decode() == mine


def test_upload_with_a_card_the_hub_refuses(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    (pack / "README.md").write_text("---\nlicense: not-a-license\n---\n# mine\n")
    with pytest.raises(CloverError, match="refused the pack's README.md metadata: .*license"):
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)
    assert not hub.log("PUT", "/lfs-upload/")  # refused before any weight was sent
    (pack / "README.md").write_text("---\nlicense: [unclosed\n---\n# mine\n")
    with pytest.raises(CloverError, match="broken metadata block"):
        transfer.upload(pack, "me/clover-tiny-int4", progress=False)


def test_upload_private_to_an_existing_public_repo_says_so(hub, tmp_path, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    hub.add_repo("me/already-public", {})
    result = transfer.upload(pack, "me/already-public", private=True, progress=False)
    assert result.notes and "already existed and is public" in result.notes[0]


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------
def run_cli(argv, monkeypatch, capsys):
    """Run `clover-local ARGV` in-process through `cli.main` (only this module's commands registered)."""
    import importlib

    from clover_local import cli

    monkeypatch.setattr(cli, "_register", lambda: importlib.import_module("clover_local.commands.hub"))
    code = 0
    try:
        cli.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_download_prints_the_folder(hub, tmp_path, monkeypatch, capsys):
    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    code, out, err = run_cli(["download", "someone/tiny-pack", "--json"], monkeypatch, capsys)
    assert code == 0, err
    info = json.loads(out)
    assert info["repo_id"] == "someone/tiny-pack" and (Path(info["path"]) / MANIFEST_NAME).is_file()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["download", "nobody/nothing"], "was not found on the Hub"),
        (["download", "someone/exists", "--revision", "nope"], "does not exist"),
        (["upload", "PACK", "--repo-id", "me/x"], "not logged in"),
        (["upload", "PACK", "--repo-id", "not/a/repo"], "not a Hub repo id"),
        (["upload", "MISSING", "--repo-id", "me/x"], "is not a folder"),
    ],
)
def test_cli_errors_are_one_line(hub, tmp_path, monkeypatch, capsys, argv, needle):
    hub.add_repo("someone/exists", {"config.json": b"{}"})
    pack = tmp_path / "pack"
    make_pack(pack)
    argv = [str(pack) if a == "PACK" else str(tmp_path / "missing") if a == "MISSING" else a for a in argv]
    code, out, err = run_cli(argv, monkeypatch, capsys)
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert "Traceback" not in err + out


def test_cli_corrupt_pack_names_the_file(hub, tmp_path, monkeypatch, capsys, with_token):
    pack = tmp_path / "pack"
    make_pack(pack)
    cfg = pack / "tokenizer.json"
    cfg.write_bytes(cfg.read_bytes().replace(b"BPE", b"BPF"))
    code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/x"], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and "tokenizer.json" in err and "Traceback" not in err
    assert hub.requests == []


def test_cli_dry_run_lists_files_sizes_and_card(hub, tmp_path, monkeypatch, capsys):
    pack = tmp_path / "pack"
    manifest = make_pack(pack)
    code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/clover-tiny-int4", "--dry-run"], monkeypatch, capsys)
    assert code == 0, err
    for name, entry in manifest.files.items():
        line = next(line for line in out.splitlines() if name in line)
        assert str(entry["bytes"]) in line
    assert MANIFEST_NAME in out and "README.md" in out
    assert "base_model: Diffuspace/Clover-35B-A3B-Preview" in out and "## Measured quality" in out
    assert "nothing was sent" in err
    assert hub.requests == []

    code, out, err = run_cli(
        ["upload", str(pack), "--repo-id", "me/clover-tiny-int4", "--dry-run", "--json"], monkeypatch, capsys
    )
    info = json.loads(out)
    assert info["dry_run"] is True and info["total_bytes"] == sum(f["bytes"] for f in info["files"])
    assert hub.requests == []


def test_token_is_never_printed_or_logged(hub, tmp_path, monkeypatch, capsys, with_token, caplog):
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_debug()
    caplog.set_level(logging.DEBUG)
    try:
        pack = tmp_path / "pack"
        make_pack(pack)
        code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/clover-tiny-int4", "--json"], monkeypatch, capsys)
        assert code == 0, err
        assert json.loads(out)["url"].endswith("/me/clover-tiny-int4")
        code2, out2, err2 = run_cli(["upload", str(pack), "--repo-id", "me/x", "--dry-run"], monkeypatch, capsys)
        assert code2 == 0
        hub.token = "hf_otherTokenTheServerWants000000000000"  # now the server rejects ours
        code3, out3, err3 = run_cli(["upload", str(pack), "--repo-id", "me/y"], monkeypatch, capsys)
        assert code3 != 0 and "rejected your token" in err3
    finally:
        hf_logging.set_verbosity_warning()
    everything = out + err + out2 + err2 + out3 + err3 + caplog.text
    assert caplog.records  # debug logging really was captured
    assert TOKEN not in everything
    assert TOKEN not in (pack / "README.md").read_text() + (pack / MANIFEST_NAME).read_text()


def test_cli_subprocess_one_line_error_no_traceback(hub, tmp_path):
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf_sub"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        env.pop(var, None)
    # The child process refuses any connection that is not to the stand-in, like the in-process tests.
    guard = (
        "import socket, runpy\n"
        "_connect = socket.socket.connect\n"
        "def connect(self, address):\n"
        "    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ('127.0.0.1', '::1'):\n"
        "        raise SystemExit(f'tried to reach {address!r}')\n"
        "    return _connect(self, address)\n"
        "socket.socket.connect = connect\n"
        "runpy.run_module('clover_local', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", guard, "download", "nobody/nothing"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: repository nobody/nothing was not found"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert hub.log("GET", "/api/models/nobody/nothing")  # it really asked the stand-in


# ----------------------------------------------------------------------------------------------------
# model card
# ----------------------------------------------------------------------------------------------------
def test_card_passes_huggingface_hub_metadata_validation(hub, tmp_path):
    from huggingface_hub import ModelCard, ModelCardData, metadata_load

    pack = tmp_path / "pack"
    manifest = make_pack(pack)
    card = build_card(manifest, json.loads((pack / "config.json").read_text()), repo_id="me/clover-tiny-int4")

    # huggingface_hub's own parsing: front matter found, a dict, loadable as ModelCardData, stable round trip
    reparsed = ModelCard(str(card))
    meta = reparsed.data.to_dict()
    assert ModelCardData(**meta).to_dict() == meta
    path = tmp_path / "README.md"
    card.save(path)
    assert metadata_load(path) == meta
    assert ModelCard.load(path).data.to_dict() == meta
    assert meta["base_model"] == DEFAULT_BASE_MODEL
    assert meta["base_model_relation"] == "quantized"
    assert meta["license"] == "apache-2.0" and meta["library_name"] == "clover-local"
    assert {"gptq", "4-bit", "clover_moe", "block-diffusion", "moe"} <= set(meta["tags"])
    assert card_problems(card) == []
    # ModelCard.validate() is the real client call to /api/validate-yaml (answered by the stand-in)
    card.validate()
    assert hub.validated_cards[-1] == str(card)

    broken = str(card).replace("license: apache-2.0", "license: not-a-license")
    assert card_problems(broken) and check_card_yaml(broken)
    with pytest.raises(CloverError, match="license"):
        check_card(broken)
    with pytest.raises(ValueError):
        ModelCard(broken).validate()


def test_card_content_follows_the_manifest(tmp_path):
    pack = tmp_path / "pack"
    manifest = make_pack(pack, quality={"kl_causal_mean": 0.0123, "top1_causal": 0.965})
    text = card_text(manifest, json.loads((pack / "config.json").read_text()), "me/p")
    assert "clover-local download me/p" in text and "clover-local chat me/p" in text
    assert "| Group size | 128 |" in text and "| Bits | 4 |" in text
    assert "0.0123" in text and "96.50 %" in text
    assert text.count("not measured") == 3  # preview KL, preview top-1, task accuracy
    assert "`samples` | 8" in text and "`seq_len` | 64" in text
    assert "117.7 MiB" in text  # memory total_bytes
    assert "model-00001-of-00002.safetensors" in text

    other = make_pack(tmp_path / "p2", source_repo="someone/Clover-finetune", quality={})
    other.settings["bits"] = 8
    meta_text = card_text(other)
    assert "base_model: someone/Clover-finetune" in meta_text and "- 8-bit" in meta_text
    assert meta_text.count("not measured") == 5
    assert PLACEHOLDER_REPO_ID in meta_text

    local = Manifest(source={"path": "/data/clover-bf16"}, settings={"bits": 4, "method": "rtn"})
    rtn = card_text(local)
    assert f"base_model: {DEFAULT_BASE_MODEL}" in rtn and "round-to-nearest" in rtn
    check_card(rtn)


def test_a_card_names_the_release_as_base_only_for_a_pack_of_its_shape():
    """A pack quantized from a local folder: the release is its base when the config has the release's shape; the
    shipped tiny model (or any other Clover-architecture model) names no base model rather than a wrong one."""
    from clover_local.pack.card import RELEASE_SHAPE, card_metadata

    tiny_config = json.loads((Path(__file__).parents[1] / "clover_local/assets/tiny/config.json").read_text())
    local = Manifest(source={"path": "tiny"}, settings={"bits": 4, "method": "gptq"})
    meta = card_metadata(local, tiny_config)
    assert "base_model" not in meta and "base_model_relation" not in meta
    text = card_text(local, tiny_config, "me/tiny-int4")
    assert DEFAULT_BASE_MODEL not in text and "Clover-35B" not in text
    assert "\n# tiny — INT4 GPTQ pack for clover-local\n" in text and "A quantized pack of `tiny`" in text
    check_card(text)

    release_config = {"model_type": "clover_moe", "text_config": {**RELEASE_SHAPE, "vocab_size": 248320}}
    meta = card_metadata(Manifest(source={"path": "/data/clover-bf16"}, settings={"bits": 4}), release_config)
    assert meta["base_model"] == DEFAULT_BASE_MODEL and meta["base_model_relation"] == "quantized"
    # a Hub source is named whatever its shape
    hub_source = Manifest(source={"repo_id": "someone/clover-mini"}, settings={"bits": 4})
    assert card_metadata(hub_source, tiny_config)["base_model"] == "someone/clover-mini"


def test_card_claims_only_what_the_tool_knows(tmp_path):
    """No measurement claimed for an unmeasured pack, the text and token counts of a measured one, no install
    command the project does not publish, and no license asserted for a base model whose license is unknown."""
    pack = tmp_path / "pack"
    unmeasured = make_pack(pack, quality={})
    config = json.loads((pack / "config.json").read_text())
    text = card_text(unmeasured, config, "me/p")
    assert "clover-local eval PACK --reference SRC --save" in text and "Compared with" not in text
    assert "pip install" not in text and "pypi.org" not in text

    measured = make_pack(tmp_path / "p2", quality={
        "kl_causal_mean": 0.0063, "top1_causal": 0.965, "tokens_causal": 1022, "tokens_preview": 520,
        "eval_text": "calibration.jsonl (held-out split)",
    })
    text = card_text(measured, config, "me/p")
    assert "on calibration.jsonl (held-out split), over 1022 tokens (causal pass) and 520 masked positions" in text

    assert "license: apache-2.0" in text  # the Clover release: the project's license
    foreign = make_pack(tmp_path / "p3", source_repo="someone/Clover-finetune")
    text = card_text(foreign, config, "me/p")
    assert "license: other" in text and "Apache" not in text
    assert "The license of the base model [someone/Clover-finetune]" in text
    check_card(text)


# ----------------------------------------------------------------------------------------------------
# a BF16 checkpoint too large to load whole, refused before its weights are fetched
# ----------------------------------------------------------------------------------------------------
def test_a_hub_checkpoint_too_large_to_load_whole_is_refused_before_its_weights(hub, monkeypatch):
    """`chat owner/Clover-35B-A3B-Preview` (the 69 GB BF16 release) on a 32 GB machine downloaded it all, then
    could not load it: the file list and config.json say so first, and no weight file is asked for."""
    import clover_local.runtime.sizes as sizes
    from clover_local.checkpoint.synthetic import REAL_SPEC, tiny_config_dict
    from clover_local.loader import load

    config = json.dumps(tiny_config_dict(REAL_SPEC)).encode()
    hub.add_repo("org/clover-bf16", {"config.json": config, "model-00001-of-00002.safetensors": b"x" * 64,
                                     "model-00002-of-00002.safetensors": b"y" * 64})
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 32 << 30)
    with pytest.raises(CloverError) as err:
        load("org/clover-bf16", "cpu", "bfloat16", "auto")
    assert str(err.value) == (
        "org/clover-bf16 needs 64.6 GiB to load whole in bfloat16, and this machine has 32 GiB of memory available; "
        "quantize it (clover-local quantize org/clover-bf16 --out PACK) and run the pack: it runs offloaded "
        "(nothing was downloaded but its config.json)")
    assert hub.log(contains="config.json") and not hub.log("GET", ".safetensors")
    # a pack of the same shape runs offloaded: not refused here (its download goes ahead)
    hub.add_repo("org/clover-pack", {"config.json": config, MANIFEST_NAME: b"{}"})
    class ReachedTheDownload(Exception):
        pass

    def download(arg, revision=None):
        raise ReachedTheDownload(arg)

    monkeypatch.setattr("clover_local.loader.resolve_model_path", download)
    with pytest.raises(ReachedTheDownload):
        load("org/clover-pack", "cpu", "bfloat16", "auto")


def test_a_download_the_disk_cannot_take_is_refused_before_its_first_byte(hub, tmp_path, resumable, monkeypatch):
    """The 35B release is 69 GB: a download that fills the disk hours in is refused at the start, counting what a
    partial file already holds, with what to do (another disk, or quantize --stream)."""
    import shutil as real_shutil

    files = big_repo(hub, tmp_path)
    cut_first_run(hub, "someone/big", None)  # a partial of 700 kB stays
    [partial] = partials(tmp_path / "hf_home" / "hub")
    left = len(files[BIG]) - partial.stat().st_size
    usage = real_shutil.disk_usage(tmp_path)
    for free, refused in ((left + resumable.DISK_MARGIN - 1, True), (left + resumable.DISK_MARGIN, False)):
        monkeypatch.setattr(resumable.shutil, "disk_usage", lambda path, free=free: usage._replace(free=free))
        n = len(file_gets(hub.requests, BIG))
        if refused:
            with pytest.raises(CloverError) as err:
                transfer.download("someone/big", progress=False)
            msg = str(err.value)
            assert f"needs {left / 1e9:.1f} GB more" in msg and "--stream" in msg and "clover-local download" in msg
            assert len(file_gets(hub.requests, BIG)) == n  # not a byte asked for
        else:
            path = transfer.download("someone/big", progress=False)
            assert (path / BIG).read_bytes() == files[BIG]


def _http_error(status: int, message: str = "", server: str = ""):
    """A huggingface_hub HTTP error answered with `status` (built without a live response: what `hub_error` reads
    of one is its status code and the server's message)."""
    from huggingface_hub.errors import HfHubHTTPError

    err = HfHubHTTPError.__new__(HfHubHTTPError)
    Exception.__init__(err, message or f"{status} error")
    err.response = types.SimpleNamespace(status_code=status)
    err.server_message = server
    return err


@pytest.mark.parametrize("status, action, server, expected", [
    (401, "downloading", "", "the Hub rejected your token (401 Unauthorized) while downloading o/r: "),
    (403, "downloading", "gated", "the Hub refused access to o/r (403 Forbidden): gated; your token needs read access"),
    (403, "uploading to", "", "the Hub refused access to o/r (403 Forbidden); your token needs write access"),
    (503, "downloading", "busy", "the Hub answered 503 while downloading o/r: busy; run the same command again to "
                                 "resume: finished files are kept"),
    (429, "uploading to", "", "the Hub answered 429 while uploading to o/r; run the same command again to resume: "
                              "files already uploaded are skipped"),
    (500, "reading", "", "the Hub answered 500 while reading o/r; run the same command again"),
    (400, "uploading to", "bad", "the Hub refused the model card of the pack: bad"),
    (404, "downloading", "", "the Hub answered 404 while downloading o/r (revision 'v2')"),
])
def test_hub_error_http_statuses(status, action, server, expected):
    """Each HTTP answer the Hub gives becomes one sentence naming the status and what to do: a token problem says
    how to log in (with the access an upload needs), a busy or failing Hub says what running again keeps."""
    message = "Invalid metadata" if status == 400 else ""
    err = transfer.hub_error(_http_error(status, message, server), repo_id="o/r", revision="v2", action=action)
    assert isinstance(err, CloverError) and str(err).startswith(expected), str(err)


def test_a_local_file_error_inside_the_hub_client_names_the_file_not_the_hub():
    """HF_HOME naming a file: the Hub client's NotADirectoryError (at its token file) was a traceback in download,
    plan, generate and quantize of a repo id. A connection error is still the Hub's, with its resume hint."""
    import errno

    err = transfer.hub_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/home/x/hf/token"),
                             repo_id="o/r", action="reading")
    assert str(err) == "reading o/r stopped at /home/x/hf/token: Not a directory"
    wrapped = RuntimeError("snapshot failed")
    wrapped.__cause__ = PermissionError(errno.EACCES, "Permission denied", "/cache/hub/models--o--r")
    assert str(transfer.hub_error(wrapped, repo_id="o/r")) == ("downloading o/r stopped at /cache/hub/models--o--r: "
                                                               "Permission denied")
    assert str(transfer.hub_error(ConnectionError("reset by peer"), repo_id="o/r")).startswith(
        "the connection to the Hub failed while downloading o/r")
