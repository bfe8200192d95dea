"""`clover-local plan OWNER/PACK`: the plan from the Hub's file list, the small JSON files and each shard's header
(ranged GETs), before any download — against the local stand-in Hub (tests/hub_standin.py), no network."""

from __future__ import annotations

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
