"""`quantize --stream` and `eval --stream`: a Hub checkpoint's weights read by byte range, layer by layer, against
the local stand-in Hub (tests/hub_standin.py, no network). The pack must be the one a local copy gives, byte for
byte; the weights must never land on disk; a dropped line, a busy server and a Ctrl-C must cost no finished work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from clover_local.checkpoint.reader import CheckpointReader
from clover_local.hub import remote_shards
from clover_local.hub.remote_shards import open_remote_checkpoint
from clover_local.loader import resolve_model_path
from quantize.pipeline import QuantizeSettings, quantize_checkpoint
from test_hub import hub  # noqa: F401 (fixture)
from test_quantize import EPOCH, write_src
from tests.conftest import run_cli

REPO = "org/clover-bf16"
CPU = torch.device("cpu")


SHAPE = dict(shards=3, hidden_size=128, moe_intermediate_size=128, shared_expert_intermediate_size=128,
             num_attention_heads=4, head_dim=32, linear_key_head_dim=32, linear_value_head_dim=32)


@pytest.fixture
def src(tmp_path, tokenizer_dir, monkeypatch) -> Path:
    """A BF16 checkpoint in three shards with an index, as the 35B release is laid out (there: 14 shards)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    return write_src(tmp_path / "src", tokenizer_dir, **SHAPE)


@pytest.fixture
def calib(tmp_path) -> Path:
    path = tmp_path / "calib.jsonl"
    path.write_text("".join(json.dumps({"text": f"{i}: the quick brown fox {i * 7} jumps over the lazy dog"}) + "\n"
                            for i in range(12)), encoding="utf-8")
    return path


def on_hub(hub, src: Path) -> str:
    hub.max_requests = 5000  # a GET per tensor part
    return hub.add_repo(REPO, {p.name: p.read_bytes() for p in src.iterdir() if p.is_file()})


def weights(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.safetensors"))}


def quantize_args(src: str | Path, out: Path, calib: Path, *extra) -> list:
    return ["quantize", src, "--out", out, "--calib", calib, "--samples", "4", "--seq-len", "64", "--device", "cpu",
            "--json", *extra]


def shard_gets(hub) -> list[dict]:
    return [r for r in hub.log("GET") if r["path"].endswith(".safetensors")]


def test_a_streamed_quantization_makes_the_local_pack_and_keeps_no_weights_on_disk(hub, src, calib, tmp_path,
                                                                                   capsys, monkeypatch):
    """Byte for byte the pack the same settings make from a local copy; every shard byte came by a ranged GET
    (the tensors are cut into parts: PART is lowered so parallel parts are exercised); no .safetensors of the
    checkpoint in the Hub cache; the summary counts what was fetched; the quality is measured as the layers go,
    as from the local copy, without reading the checkpoint again."""
    monkeypatch.setattr(remote_shards, "PART", 64 * 1024)
    assert run_cli(quantize_args(src, tmp_path / "local", calib)) == 0
    local = json.loads(capsys.readouterr().out)
    sha = on_hub(hub, src)
    assert run_cli(quantize_args(REPO, tmp_path / "streamed", calib, "--stream")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert weights(tmp_path / "streamed") == weights(tmp_path / "local")
    shard_bytes = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    assert summary["source_bytes"] == shard_bytes
    # each tensor once; the embeddings again for the pack's copy (the bound allows the other globals too); the
    # headers
    again = sum(t.numel() * t.element_size() for name, t in CheckpointReader(src).global_state().items())
    assert shard_bytes <= summary["fetched_bytes"] <= shard_bytes + again + 3 * 512 * 1024
    assert summary["quality"] == local["quality"] and summary["quality"]["kl_causal_mean"] > 0
    gets = shard_gets(hub)
    assert gets and all(r["range"] for r in gets)
    assert max(r["sent"] for r in gets) <= 64 * 1024
    assert sum(r["sent"] for r in gets) == summary["fetched_bytes"]
    assert not list((tmp_path / "hf_home").rglob("*.safetensors")), "no weights kept on disk"
    manifest = json.loads((tmp_path / "streamed" / "clover_manifest.json").read_text())
    assert manifest["source"] == {"repo_id": REPO, "revision": sha}


def test_a_dropped_line_and_a_busy_server_are_continued_and_a_ctrl_c_resumes(hub, src, calib, tmp_path, monkeypatch):
    """A connection cut mid-part continues from the byte it reached (a 503 in between is asked again), and a run stopped
    after layer 1 (as Ctrl-C there) resumes to the same pack; the fetch of the layer ahead was stopped."""
    monkeypatch.setattr(remote_shards, "RETRY_WAIT_S", 0.01)
    settings = QuantizeSettings(samples=4, seq_len=64, calib=str(calib))
    quantize_checkpoint(src, tmp_path / "local", settings, CPU)
    on_hub(hub, src)
    shard = sorted(src.glob("*.safetensors"))[1].name
    hub.faults[shard] = [("drop", 1000), ("status", 503)]
    folder, remote = open_remote_checkpoint(REPO)
    with pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(folder, tmp_path / "streamed", settings, CPU, remote=remote, stop_after_layer=1)
    assert remote.stop.is_set()
    folder, remote = open_remote_checkpoint(REPO)
    result = quantize_checkpoint(folder, tmp_path / "streamed", settings, CPU, remote=remote, resume=True)
    assert result.resumed_from == 2
    assert weights(tmp_path / "streamed") == weights(tmp_path / "local")
    assert hub.faults[shard] == []  # both met
    gets = [r for r in shard_gets(hub) if r["path"].endswith(shard)]
    [cut] = [r for r in gets if r.get("sent") == 1000]
    first, last = (int(x) for x in cut["range"].removeprefix("bytes=").split("-"))
    assert f"bytes={first + 1000}-{last}" in [r["range"] for r in gets]  # continued from the byte it reached


def test_a_read_of_one_expert_takes_its_own_bytes(hub, src, monkeypatch):
    """`expert(layer, e)` (eval's per-expert reads) fetches that expert's rows of the fused tensor, not the layer's."""
    on_hub(hub, src)
    folder, remote = open_remote_checkpoint(REPO)
    streamed, local = CheckpointReader(folder, remote=remote), CheckpointReader(src)
    for shard in remote.sizes:  # headers first (each read once a run)
        remote.open(shard)
    before = remote.fetched_bytes
    got, want = streamed.expert(0, 3), local.expert(0, 3)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert remote.fetched_bytes - before == sum(t.numel() * t.element_size() for t in want.values())
    assert all(torch.equal(a, b) for a, b in zip(streamed.layer_state(3).values(), local.layer_state(3).values()))


@pytest.mark.parametrize("case, expected", [
    ("local", "--stream reads a checkpoint from the Hub by its repo id (owner/name); {src} is not one"),
    ("tiny", "--stream reads a checkpoint from the Hub by its repo id (owner/name); tiny is not one"),
    ("offline", "--stream reads the checkpoint from the Hub, and HF_HUB_OFFLINE is set"),
    ("no ranges", "did not answer a ranged request"),
    ("missing", "repository org/nothing-here was not found on the Hub"),
])
def test_stream_refusals_are_one_line(case, expected, hub, src, calib, tmp_path, capsys, monkeypatch):
    on_hub(hub, src)
    source = {"local": str(src), "tiny": "tiny", "missing": "org/nothing-here"}.get(case, REPO)
    if case == "offline":
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if case == "no ranges":
        hub.ignore_range = True
    assert run_cli(quantize_args(source, tmp_path / "out", calib, "--stream")) == 2
    err = capsys.readouterr().err
    assert expected.format(src=src) in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err


def test_eval_stream_measures_what_a_local_reference_gives(hub, src, calib, tmp_path, capsys):
    """`eval --stream` reads the reference by range and reports the same figures as with the local copy."""
    assert run_cli(quantize_args(src, tmp_path / "pack", calib, "--no-eval")) == 0
    on_hub(hub, src)
    capsys.readouterr()
    args = ["eval", tmp_path / "pack", "--samples", "2", "--seq-len", "32", "--calib", calib, "--device", "cpu",
            "--json"]
    assert run_cli([*args, "--reference", src]) == 0
    local = json.loads(capsys.readouterr().out)
    assert run_cli([*args, "--reference", REPO, "--stream"]) == 0
    assert json.loads(capsys.readouterr().out) == local
    assert not list((tmp_path / "hf_home").rglob("*.safetensors"))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "download"])
def test_a_resume_reads_the_commit_the_run_started_from_when_main_has_moved(stream, hub, src, calib, tmp_path,
                                                                            tokenizer_dir, capsys):
    """The vendor updates the release while a run is interrupted: `--resume` reads the commit the run began at, not
    main (neither refused nor, from a downloaded copy, fetched again), the pack records that commit, and `eval`
    compares with it by default; `--revision main` names the commit that differs (resume) or is refused as another
    model (eval)."""
    first = on_hub(hub, src)
    out = tmp_path / "pack"
    settings = QuantizeSettings(samples=4, seq_len=64, calib=str(calib))
    if stream:
        folder, remote = open_remote_checkpoint(REPO)
    else:
        folder, remote = resolve_model_path(REPO), None
    with pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(folder, out, settings, CPU, remote=remote, stop_after_layer=1)
    update = write_src(tmp_path / "update", tokenizer_dir, seed=7, **SHAPE)
    second = hub.push(REPO, {p.name: p.read_bytes() for p in update.iterdir() if p.is_file()})
    flags = ["--no-eval", *(["--stream"] if stream else [])]

    before, _ = len(shard_gets(hub)), capsys.readouterr()
    assert run_cli(quantize_args(REPO, out, calib, "--resume", "--revision", "main", *flags)) == 2
    err = capsys.readouterr().err
    assert (f"read {REPO} at {first[:12]}, and --revision main is {second[:12]}: drop --revision to resume at "
            f"{first[:12]}") in err and err.count("\n") == 1, err
    assert len(shard_gets(hub)) == before  # refused before a byte of either commit's weights
    assert run_cli(quantize_args(REPO, out, calib, "--resume", *flags)) == 0
    assert json.loads(capsys.readouterr().out)["source"] == {"repo_id": REPO, "revision": first}
    assert json.loads((out / "clover_manifest.json").read_text())["source"] == {"repo_id": REPO, "revision": first}
    read_since = [r["path"] for r in shard_gets(hub)[before:]]
    if stream:  # the layers left, from the first commit
        assert read_since and all(f"/{first}/" in path for path in read_since), read_since
    else:  # the first commit's download was whole already
        assert read_since == []

    args = ["eval", out, "--reference", REPO, "--samples", "2", "--seq-len", "32", "--calib", calib, "--device",
            "cpu", "--json", *flags[1:]]
    assert run_cli(args) == 0
    assert json.loads(capsys.readouterr().out)["kl_causal_mean"] > 0
    assert run_cli([*args, "--revision", "main"]) == 2
    assert "was not made from" in capsys.readouterr().err


def test_a_download_with_no_room_for_the_pack_after_it_is_refused_first(hub, src, calib, tmp_path, capsys,
                                                                        monkeypatch):
    """`quantize REPO` downloads the checkpoint, then writes the pack beside it: where --out shares the download's
    disk, a disk with room for the download but not for the pack after it is refused before a weight is fetched
    (as `plan` does, from the repo's config.json); --stream, which keeps no weights, fits the same disk."""
    import shutil

    from clover_local.hub import resume
    from clover_local.hub.remote_index import remote_pack_index
    from quantize.footprint import compute_dtype, run_bytes
    from quantize.quality import QualityCheck

    monkeypatch.setattr(resume, "THRESHOLD", 512)  # the shards are the large files (fetched by resume.py)
    on_hub(hub, src)
    download = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    settings = QuantizeSettings(samples=4, seq_len=64)
    pack, progress = run_bytes(remote_pack_index(REPO).index, 0, settings, compute_dtype(CPU),
                               QualityCheck(samples=4, seq_len=64))
    usage = shutil.disk_usage(tmp_path)
    room = {"free": download + pack + 2 * progress + resume.DISK_MARGIN - 1}
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=room["free"]))
    out = tmp_path / "pack"
    assert run_cli(quantize_args(REPO, out, calib)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: downloading org/clover-bf16") and "for the pack quantize makes in" in err, err
    assert shard_gets(hub) == [] and not out.exists()
    assert run_cli(quantize_args(REPO, tmp_path / "streamed", calib, "--stream")) == 0, capsys.readouterr().err
    room["free"] += 1
    assert run_cli(quantize_args(REPO, out, calib)) == 0, capsys.readouterr().err
