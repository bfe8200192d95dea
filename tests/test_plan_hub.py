"""`clover-local plan OWNER/PACK`: the plan from the Hub's file list, the small JSON files and each shard's header
(ranged GETs), before any download — against the local stand-in Hub (tests/hub_standin.py), no network."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from clover_local.hub import remote_index
from clover_local.runtime.pack_index import read_header
from runtime_pack import pack  # noqa: F401 (fixture)
from test_hub import hub, pack_repo_files  # noqa: F401 (fixture)

REPO = "org/tiny-pack"
PLAN_ARGS = ["--vram", "1GB", "--ram", "8GB", "--context", "4096", "--json"]


def plan_json(argv: list[str], capsys) -> tuple[int, dict | None, str]:
    from conftest import run_cli

    code = run_cli(["plan", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def shard_gets(hub) -> list[dict]:
    return [r for r in hub.log("GET") if r["path"].endswith(".safetensors")]


def test_plan_of_a_hub_pack_reads_headers_only_and_matches_the_local_plan(hub, pack, capsys, monkeypatch):
    """`plan` of a Hub id downloaded the whole pack first (≈ 19 GB at 35B) to answer "does it fit?". (The tiny
    pack's shards are ≈ 0.35 MB with ≈ 15 KB headers: the first ask is cut to 32 KiB so it is not whole shards.)"""
    monkeypatch.setattr(remote_index, "HEADER_PROBE", 32 * 1024)
    sha = hub.add_repo(REPO, pack_repo_files(pack))
    code, local, err = plan_json([str(pack), *PLAN_ARGS], capsys)
    assert code == 0, err
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    info = remote.pop("hub")
    assert remote == {**local, "model": REPO}  # the same plan, byte for byte
    shards = sorted(p for p in pack.iterdir() if p.suffix == ".safetensors")
    headers = {p.name: 8 + len(json.dumps(read_header(p)).encode()) for p in shards}
    assert info["shards"] == len(shards) and info["revision"] == sha
    assert info["download_bytes"] == sum(p.stat().st_size for p in pack.iterdir()
                                         if p.is_file() and not p.name.startswith("."))
    gets = shard_gets(hub)
    assert sorted({Path(r["path"]).name for r in gets}) == sorted(headers)
    for r in gets:  # one ranged GET a shard, and no more bytes than its first HEADER_PROBE
        assert r["range"] and r["range"].startswith("bytes=0-"), r
        assert r["sent"] == min(32 * 1024, (pack / Path(r["path"]).name).stat().st_size)
    assert len(gets) == len(shards)
    assert info["header_bytes"] == sum(r["sent"] for r in gets)
    assert info["header_bytes"] < sum(p.stat().st_size for p in shards) / 4  # the weights themselves were not read
    cache = Path(hub_cache())
    assert not any(cache.glob("models--org--tiny-pack*")), "plan must leave nothing in the Hub cache"


def hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def test_a_header_longer_than_the_first_ask_takes_a_second_ranged_get(hub, pack, capsys, monkeypatch):
    hub.add_repo(REPO, pack_repo_files(pack))
    code, local, _ = plan_json([str(pack), *PLAN_ARGS], capsys)
    monkeypatch.setattr(remote_index, "HEADER_PROBE", 64)
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    info = remote.pop("hub")
    assert remote == {**local, "model": REPO}
    gets = shard_gets(hub)
    n_shards = len({Path(r["path"]).name for r in gets})
    assert len(gets) == 2 * n_shards and [r["range"] for r in gets].count("bytes=0-63") == n_shards
    assert info["header_bytes"] == sum(r["sent"] for r in gets)  # both asks of every shard counted


def test_a_server_that_ignores_range_still_gives_the_plan(hub, pack, capsys):
    hub.add_repo(REPO, pack_repo_files(pack))
    hub.ignore_range = True  # a proxy that answers 200 with the whole file
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert remote["fits"]


def test_what_is_not_a_pack_or_not_there_is_one_line_and_offline_uses_the_cache(hub, pack, capsys, monkeypatch):
    from huggingface_hub import constants

    from clover_local.hub import transfer

    files = pack_repo_files(pack)
    hub.add_repo("org/bf16", {"config.json": json.dumps({k: v for k, v in json.loads(files["config.json"]).items()
                                                         if k != "quantization_config"}).encode()})
    # a BF16 checkpoint is planned as the pack quantize makes of it, from its config.json alone
    code, plan, err = plan_json(["org/bf16", *PLAN_ARGS], capsys)
    assert code == 0, err
    assert plan["hub"]["checkpoint"] and plan["planned_as_pack"]["bits"] == 4 and plan["fits"]
    assert not shard_gets(hub)
    from conftest import run_cli

    assert run_cli(["plan", "org/bf16", *PLAN_ARGS[:-1]]) == 0  # in words: the disk quantize needs, the download
    said = " ".join(capsys.readouterr().out.split())
    assert "on --out's disk, after the" in said and "download (none with `--stream`)" in said, said
    code, _, err = plan_json(["nobody/nothing", "--vram", "1GB"], capsys)
    assert code == 2 and "was not found on the Hub" in err
    # a shard the index names but the repo lacks
    broken = dict(files)
    gone = sorted(n for n in files if n.endswith(".safetensors"))[0]
    del broken[gone]
    hub.add_repo("org/broken", broken)
    code, _, err = plan_json(["org/broken", "--vram", "1GB"], capsys)
    assert code == 2 and f"pack shard {gone} is listed in model.safetensors.index.json but missing from org/broken" \
        in err, err
    # offline: the pack from the local cache (downloaded before), and not a request
    hub.add_repo(REPO, files)
    transfer.download(REPO, progress=False)
    n = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert "hub" not in remote and len(hub.requests) == n


def test_the_text_plan_says_what_was_read_and_what_a_download_takes(hub, pack, capsys):
    from conftest import run_cli

    hub.add_repo(REPO, pack_repo_files(pack))
    assert run_cli(["plan", REPO, "--vram", "1GB", "--ram", "8GB", "--context", "4096"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "shards' headers" in out and "nothing else was downloaded" in out
    assert f"clover-local download {REPO}" in out


@pytest.mark.parametrize("status", [401, 503])
def test_hub_errors_while_reading_headers_are_one_line(hub, pack, capsys, status):
    files = pack_repo_files(pack)
    hub.add_repo(REPO, files)
    shard = sorted(n for n in files if n.endswith(".safetensors"))[0]
    hub.faults[shard] = [("status", status)]
    code, _, err = plan_json([REPO, "--vram", "1GB"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(status) in lines[0] and "resume" not in lines[0]


def test_a_hub_pack_whose_plan_cannot_fit_is_refused_before_its_download(hub, pack):
    """`chat owner/pack` on a machine the pack cannot fit downloaded it all (≈ 19 GB at 35B), then refused: the
    plan from the Hub's headers refuses first, with the setting to change; a pack that fits is downloaded and
    loaded, and once it is in the cache no header is asked for again."""
    from clover_local.errors import CloverError
    from clover_local.loader import load

    hub.add_repo(REPO, pack_repo_files(pack))
    with pytest.raises(CloverError) as err:
        load(REPO, "cpu", "float32", "auto", vram_budget=256 * 1024)
    assert "too small" in str(err.value) and "--vram-budget" in str(err.value)
    assert str(err.value).endswith("(nothing was downloaded: the plan was made from the Hub's headers)")
    assert all(r["range"] for r in shard_gets(hub))  # header reads only
    loaded = load(REPO, "cpu", "float32", "auto", vram_budget=1 << 30, context=4096)
    assert loaded.model.runtime is not None
    n = len(shard_gets(hub))
    load(REPO, "cpu", "float32", "auto", vram_budget=1 << 30, context=4096)
    assert len(shard_gets(hub)) == n  # cached: neither headers nor shards fetched again


# ----------------------------------------------------------------------------------------------------
# mutation-audit additions
# ----------------------------------------------------------------------------------------------------
def test_a_repo_without_config_json_is_named_not_a_temporary_folder(hub, capsys):
    hub.add_repo("org/readme-only", {"README.md": b"# notes"})
    code, _, err = plan_json(["org/readme-only", "--vram", "1GB"], capsys)
    assert code == 2 and "org/readme-only has no config.json: not a Clover model or pack" in err, err
    assert "clover-plan-" not in err


def test_a_hub_pack_without_index_or_experts_is_named_by_its_repo_id(hub, pack, capsys):
    """The small JSON files sit in a temporary folder while the headers are read: messages name the repo."""
    files = pack_repo_files(pack)
    hub.add_repo("org/no-index", {k: v for k, v in files.items() if k != "model.safetensors.index.json"})
    code, _, err = plan_json(["org/no-index", "--vram", "1GB"], capsys)
    assert code == 2 and "org/no-index has no model.safetensors.index.json: not a complete pack" in err, err
    assert "clover-plan-" not in err
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if ".mlp.experts." not in k}
    hub.add_repo("org/no-experts", {**files, "model.safetensors.index.json": json.dumps(index).encode()})
    code, _, err = plan_json(["org/no-experts", "--vram", "1GB"], capsys)
    assert code == 2 and "org/no-experts has no per-expert quantized tensors" in err, err
    assert "clover-plan-" not in err


def test_plan_of_a_hub_pack_leaves_no_temporary_files(hub, pack, capsys, monkeypatch, tmp_path):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    hub.add_repo(REPO, pack_repo_files(pack))
    code, _, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert list(scratch.iterdir()) == []


def test_pack_only_flags_are_refused_for_a_hub_pack(hub, pack, capsys):
    hub.add_repo(REPO, pack_repo_files(pack))
    code, _, err = plan_json([REPO, "--vram", "1GB", "--bits", "3"], capsys)
    assert code == 2 and f"{REPO} is a pack: --bits applies to a BF16 checkpoint" in err, err


def test_download_size_counts_only_what_a_download_fetches(hub, pack, capsys):
    files = pack_repo_files(pack)
    extra = {"pytorch_model.bin": b"p" * 5000, "original/model.safetensors": b"o" * 7000, "train.py": b"#" * 300}
    hub.add_repo(REPO, {**files, **extra})
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert remote["hub"]["download_files"] == len(files)
    assert remote["hub"]["download_bytes"] == sum(len(v) for v in files.values())


def test_shard_headers_are_read_in_parallel(hub, pack, capsys, monkeypatch):
    """One round trip a shard, several at once (PARALLEL): 41 sequential round trips at 35B otherwise."""
    import threading

    hub.add_repo(REPO, pack_repo_files(pack))
    real, lock, started, second, overlapped = remote_index._get, threading.Lock(), [], threading.Event(), []

    def get(repo_id, commit, name, length):
        if name.endswith(".safetensors"):
            with lock:
                started.append(name)
                first = len(started) == 1
            if first:
                overlapped.append(second.wait(10))  # a second header asked for while the first is in flight
            else:
                second.set()
        return real(repo_id, commit, name, length)

    monkeypatch.setattr(remote_index, "_get", get)
    code, _, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert len(started) > 1 and overlapped == [True]


def test_a_server_that_ignores_range_is_read_no_further_than_the_first_ask(hub, pack, capsys, monkeypatch):
    """A proxy answering 200 with the whole file: the body is read up to the bytes asked for, then dropped (not
    the whole shard: 19 GB at 35B)."""
    import huggingface_hub.utils

    monkeypatch.setattr(remote_index, "HEADER_PROBE", 16 * 1024)
    real_session = huggingface_hub.utils.get_session
    read: dict[str, int] = {}

    class Counted:
        def __init__(self, response, name):
            self._response, self._name = response, name

        def __getattr__(self, attr):
            return getattr(self._response, attr)

        def iter_bytes(self, *args, **kwargs):
            for chunk in self._response.iter_bytes(*args, **kwargs):
                read[self._name] = read.get(self._name, 0) + len(chunk)
                yield chunk

    class Session:
        def __init__(self, session):
            self._session = session

        def __getattr__(self, attr):
            return getattr(self._session, attr)

        def stream(self, method, url, **kwargs):
            from contextlib import contextmanager

            @contextmanager
            def opened():
                with self._session.stream(method, url, **kwargs) as response:
                    yield Counted(response, str(url).rsplit("/", 1)[-1])
            return opened()

    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: Session(real_session()))
    files = pack_repo_files(pack)
    hub.add_repo(REPO, files)
    hub.ignore_range = True
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    shards = {n: len(d) for n, d in files.items() if n.endswith(".safetensors")}
    big = {n: size for n, size in shards.items() if size > 4 * 65536}  # ≈ 350 KB: many network reads each
    assert set(read) >= set(shards) and big
    for name, size in big.items():  # the first ask and what came with its last network read, not the rest
        assert read[name] < size // 2, (name, read[name], size)


def test_an_unreachable_hub_plans_the_pack_in_the_local_cache(hub, pack, capsys):
    from clover_local.hub import transfer

    hub.add_repo(REPO, pack_repo_files(pack))
    transfer.download(REPO, progress=False)
    hub.stop()  # connections refused from here on
    code, remote, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 0, err
    assert "hub" not in remote and remote["fits"]


def test_a_hub_checkpoint_is_planned_with_the_profile_and_group_size_given(hub, pack, capsys, tmp_path):
    files = pack_repo_files(pack)
    config = json.dumps({k: v for k, v in json.loads(files["config.json"]).items()
                         if k != "quantization_config"}).encode()
    hub.add_repo("org/bf16", {"config.json": config})
    folder = tmp_path / "bf16"
    folder.mkdir()
    (folder / "config.json").write_bytes(config)
    flags = ["--profile", "compact", "--group-size", "64"]
    code, local, err = plan_json([str(folder), *PLAN_ARGS, *flags], capsys)
    assert code == 0, err
    code, remote, err = plan_json(["org/bf16", *PLAN_ARGS, *flags], capsys)
    assert code == 0, err
    assert remote.pop("hub")["checkpoint"]
    assert remote["planned_as_pack"].pop("command") == ("clover-local quantize org/bf16 --out PACK --profile compact "
                                                        "--group-size 64")
    local["planned_as_pack"].pop("command")
    assert remote == {**local, "model": "org/bf16"}


def test_a_relative_folder_shaped_like_a_repo_id_is_that_folder(hub, pack, capsys, monkeypatch, tmp_path):
    import shutil

    from clover_local.loader import load

    shutil.copytree(pack, tmp_path / "work" / "org" / "local-pack")
    monkeypatch.chdir(tmp_path / "work")
    code, plan, err = plan_json(["org/local-pack", *PLAN_ARGS], capsys)
    assert code == 0, err
    assert "hub" not in plan and not hub.requests
    loaded = load("org/local-pack", "cpu", "float32", "auto", vram_budget=1 << 30, context=4096)
    assert loaded.model.runtime is not None and not hub.requests


def test_a_pack_partly_in_the_cache_is_still_refused_before_the_rest_is_downloaded(hub, pack):
    from clover_local.errors import CloverError
    from clover_local.hub import transfer
    from clover_local.loader import load

    hub.add_repo(REPO, pack_repo_files(pack))
    snapshot = Path(transfer.download(REPO, progress=False))
    sorted(snapshot.glob("model-*.safetensors"))[0].unlink()  # an interrupted download: one shard missing
    with pytest.raises(CloverError) as err:
        load(REPO, "cpu", "float32", "auto", vram_budget=256 * 1024)
    assert str(err.value).endswith("(nothing was downloaded: the plan was made from the Hub's headers)")


@pytest.mark.parametrize("dtype,options", [("bfloat16", {}), ("float32", {"prefill_chunk": 64}),
                                           ("float32", {"context": 1024})])
def test_the_refusal_before_the_download_is_the_one_the_load_gives(hub, pack, dtype, options):
    """The same options and dtype as the load itself: the budget it names is the one the load would ask for."""
    from clover_local.errors import CloverError
    from clover_local.loader import load

    hub.add_repo(REPO, pack_repo_files(pack))
    with pytest.raises(CloverError) as local:
        load(str(pack), "cpu", dtype, "auto", vram_budget=300 * 1024, **options)
    with pytest.raises(CloverError) as remote:
        load(REPO, "cpu", dtype, "auto", vram_budget=300 * 1024, **options)
    assert str(remote.value) == f"{local.value} (nothing was downloaded: the plan was made from the Hub's headers)"


def test_a_whole_load_of_a_hub_pack_is_not_judged_by_the_offloaded_plan(hub, pack):
    from clover_local.loader import load

    hub.add_repo(REPO, pack_repo_files(pack))
    loaded = load(REPO, "cpu", "float32", None, vram_budget=256 * 1024)  # dequantized whole: no budget applies
    assert getattr(loaded.model, "runtime", None) is None


def test_a_pack_on_a_branch_is_planned_and_run_with_revision(hub, pack, capsys, monkeypatch, tmp_path):
    """A pack uploaded to a branch (`upload --revision`) with no pack on main: `plan`, `generate` and `chat` with
    `--revision BRANCH` read that branch's pack (chat names it); without it, main's files are no pack."""
    from conftest import run_cli

    hub.add_repo(REPO, {"README.md": b"# the packs are on branches\n"})
    sha = hub.push(REPO, pack_repo_files(pack), branch="int4-g64")
    _, local, _ = plan_json([str(pack), *PLAN_ARGS], capsys)
    code, remote, err = plan_json([REPO, "--revision", "int4-g64", *PLAN_ARGS], capsys)
    assert code == 0, err
    assert remote.pop("hub")["revision"] == sha and remote == {**local, "model": REPO}
    code, _, err = plan_json([REPO, *PLAN_ARGS], capsys)
    assert code == 2 and err.startswith("error: "), err
    args = ["generate", REPO, "-p", "add 12+30", "--no-think", "--max-new-tokens", "4", "--json", "--device", "cpu",
            "--dtype", "float32", "--context", "256"]
    assert run_cli([*args, "--revision", "int4-g64"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["token_ids"]
    # chat names the branch in its header and in what /save (and --continue's note) records it was had with
    saved = tmp_path / "conversation.json"
    monkeypatch.setattr("sys.stdin", io.StringIO(f"add 12+30\n/save {saved}\n"))
    chat = ["chat", REPO, "--revision", "int4-g64", "--no-think", "--max-tokens", "4", "--device", "cpu",
            "--dtype", "float32", "--context", "256"]
    assert run_cli(chat) == 0, capsys.readouterr().err
    assert f"· {REPO}@int4-g64 ·" in capsys.readouterr().err  # the header (stderr: the answer alone on stdout)
    assert json.loads(saved.read_text())["model"] == f"{REPO}@int4-g64"
    snapshots = Path(hub_cache()) / "models--org--tiny-pack" / "snapshots"
    assert (snapshots / sha / "clover_manifest.json").is_file()
