"""Hub transfer, continued (a mutation audit's findings): what the first suite let change unseen.

Against the local stand-in (tests/hub_standin.py), no network: repo ids the Hub refuses, the token and any
token-shaped text scrubbed from what a server said, retry hints that name the revision, `--force` and
`--no-verify`, a --dir's owner and an existing --dir kept, the unverified-run record, large files that drop often,
never move on, are answered from another offset or are stopped beside a refused one, streamed reads (busy answers,
drops, shifted ranges, corrupt headers, row bounds), plan's header reads, what upload sends, removes and says, and
the model card's numbers.
"""

from __future__ import annotations

import json
import secrets
import time
import types
from pathlib import Path

import numpy as np
import pytest

from clover_local.errors import CloverError
from clover_local.hub import transfer
from clover_local.pack import MANIFEST_NAME, Manifest
from test_hub import (  # noqa: F401 (fixtures)
    BIG, TOKEN, _http_error, big_repo, cut_first_run, file_gets, hub, make_pack, pack_repo_files, partials,
    resumable, run_cli, sha, with_token,
)

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


# ----------------------------------------------------------------------------------------------------
# refusals and messages
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("repo_id", ["me/pack..v2", "me--you/pack", "me/pack--v2", "me/pack.git"])
def test_repo_ids_the_hub_refuses_are_refused_before_any_request(hub, repo_id):
    """`..`, `--` and a trailing `.git` are not in any Hub repo id: refused in one line, nothing asked."""
    assert not transfer.is_repo_id(repo_id)
    with pytest.raises(CloverError, match="is not a Hub repo id"):
        transfer.download(repo_id, progress=False)
    assert hub.requests == []


def test_any_token_in_a_servers_message_is_scrubbed(monkeypatch):
    """The user's token (whatever its shape) and anything shaped like a Hub token are never echoed from a server's
    answer into a message."""
    mine = "plain-" + secrets.token_hex(12)  # not hf_-shaped: only the exact-token replacement catches it
    other = "hf_" + secrets.token_hex(14)
    monkeypatch.setenv("HF_TOKEN", mine)
    err = transfer.hub_error(_http_error(503, server=f"token {mine} rejected; try {other}"), repo_id="o/r")
    assert mine not in str(err) and other not in str(err)
    assert "token *** rejected; try hf_***" in str(err)


def test_a_file_that_arrived_short_is_a_dropped_connection():
    """huggingface_hub's size check ("Consistency check failed") means the line dropped mid-file: the one line
    that says to run again, not a traceback."""
    exc = OSError("Consistency check failed: file should be of size 4096 but has size 1000 (model.safetensors).")
    err = transfer.hub_error(exc, repo_id="o/r", revision="v2")
    assert isinstance(err, CloverError)
    assert str(err).startswith("the connection to the Hub failed while downloading o/r")
    assert "run the same command again to resume" in str(err)


def test_a_refused_download_of_a_branch_suggests_the_same_branch(hub, tmp_path):
    """The command a message suggests runs the same download: the revision is in it, or it would fetch main."""
    pack = tmp_path / "src"
    make_pack(pack)
    files = pack_repo_files(pack)
    files["config.json"] = files["config.json"].replace(b'"bits": 4', b'"bits": 8')  # same size, other bytes
    hub.add_repo("someone/tampered", {"config.json": b"{}"})
    hub.push("someone/tampered", files, branch="g64")
    with pytest.raises(CloverError) as err:
        transfer.download("someone/tampered", revision="g64", progress=False)
    assert "fetch it again with `clover-local download someone/tampered --revision g64 --force`" in str(err.value)


def test_a_dir_holding_many_files_says_how_many_more(hub, tmp_path):
    """The refusal names three files and counts the rest."""
    hub.add_repo("someone/tiny-pack", {"config.json": b"{}"})
    other = tmp_path / "other"
    other.mkdir()
    n = int(np.random.default_rng(7).integers(5, 12))
    for i in range(n):
        (other / f"f{i:02d}.txt").write_text(str(i))
    with pytest.raises(CloverError, match=rf"\(f00\.txt, f01\.txt, f02\.txt and {n - 3} more\)"):
        transfer.download("someone/tiny-pack", dir=other, progress=False)


def test_a_token_with_a_bad_character_says_where(monkeypatch):
    """The position named is the character's place counted from 1 (the token itself is never shown)."""
    token = "hf_" + secrets.token_hex(6) + "\u00a0" + secrets.token_hex(6)
    monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(CloverError) as err:
        transfer.check_token_text()
    assert f"at position {token.index(chr(0xa0)) + 1} " in str(err.value) and token not in str(err.value)


# ----------------------------------------------------------------------------------------------------
# download
# ----------------------------------------------------------------------------------------------------
def test_a_dir_is_its_repos_whatever_the_case_of_the_id(hub, tmp_path, monkeypatch):
    """Hub repo ids are case-insensitive: a --dir downloaded as one spelling is the same repo under another."""
    from huggingface_hub import constants

    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    mine = transfer.download("someone/tiny-pack", dir=tmp_path / "mine", progress=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert transfer.download("Someone/Tiny-Pack", dir=tmp_path / "mine", progress=False) == mine


def test_a_failed_download_keeps_the_users_own_empty_folder(hub, tmp_path):
    """Only a folder the download made is removed after a failure; one the person made stays."""
    hub.add_repo("someone/exists", {"config.json": b"{}"})
    folder = tmp_path / "mine"
    folder.mkdir()
    with pytest.raises(CloverError, match="revision 'nope' does not exist"):
        transfer.download("someone/exists", revision="nope", dir=folder, progress=False)
    assert folder.is_dir()
    with pytest.raises(CloverError, match="revision 'nope' does not exist"):
        transfer.download("someone/exists", revision="nope", dir=tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()  # one it made is gone


def test_force_fetches_every_file_again_from_the_start(hub, tmp_path, resumable):
    """`--force` fetches each file anew through huggingface_hub: a partial left by a failed run is not continued,
    and every file is fetched once, whole, even where the cache holds it."""
    files = big_repo(hub, tmp_path)
    cut_first_run(hub, "someone/big", None)
    assert partials(tmp_path / "hf_home" / "hub")
    for _ in range(2):  # the second time the cache holds every file
        n = len(hub.requests)
        path = transfer.download("someone/big", progress=False, force=True)
        for name, data in files.items():
            assert [r["range"] for r in file_gets(hub.requests[n:], name)] == [None], name
            assert (path / name).read_bytes() == data


def test_a_busy_hub_is_reported_not_answered_with_an_older_cached_snapshot(hub, tmp_path, resumable):
    """Only a connection that cannot be made falls back to the cache: when the Hub answers 503 while main has
    moved on, the run fails with what to do, rather than handing back the older snapshot as if it were main."""
    files = big_repo(hub, tmp_path)
    old = transfer.download("someone/big", progress=False)
    newer = dict(files)
    newer[BIG] = np.random.default_rng(5).bytes(len(files[BIG]))
    hub.push("someone/big", newer)
    hub.faults[BIG] = [("status", 503)] * 8
    with pytest.raises(CloverError, match="the Hub answered 503 while downloading someone/big"):
        transfer.download("someone/big", progress=False)
    assert (old / BIG).read_bytes() == files[BIG]


def test_a_checked_download_is_not_checked_again_by_the_next_run(hub, tmp_path, monkeypatch):
    """The record of an unfinished run is dropped once the files are checked: a later run that fetches nothing
    hashes nothing."""
    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", pack_repo_files(pack))
    first: list[int] = []
    transfer.download("someone/tiny-pack", progress=False, on_verify_bytes=first.append)
    assert sum(first) > 0
    later = types.SimpleNamespace(time=lambda: time.time() + 3600)
    monkeypatch.setattr(transfer, "time", later)  # the next run comes an hour later
    again: list[int] = []
    transfer.download("someone/tiny-pack", progress=False, on_verify_bytes=again.append)
    assert sum(again) == 0


def test_no_verify_skips_the_manifest_check(hub, tmp_path, monkeypatch, capsys):
    """`--no-verify` takes the files as the Hub has them; without it the same repo is refused."""
    pack = tmp_path / "src"
    make_pack(pack)
    files = pack_repo_files(pack)
    files["config.json"] = files["config.json"].replace(b'"bits": 4', b'"bits": 8')
    hub.add_repo("someone/tampered", files)
    code, out, err = run_cli(["download", "someone/tampered", "--dir", str(tmp_path / "a")], monkeypatch, capsys)
    assert code == 2 and "sha256" in err
    code, out, err = run_cli(["download", "someone/tampered", "--dir", str(tmp_path / "b"), "--no-verify"],
                             monkeypatch, capsys)
    assert code == 0, err
    assert out.strip() == str(tmp_path / "b")  # stdout: the folder alone, for scripts
    assert (tmp_path / "b" / "config.json").read_bytes() == files["config.json"]


def test_cli_download_json_names_the_revision(hub, tmp_path, monkeypatch, capsys):
    pack = tmp_path / "src"
    make_pack(pack)
    hub.add_repo("someone/tiny-pack", {"config.json": b"{}"})
    hub.push("someone/tiny-pack", pack_repo_files(pack), branch="g64")
    code, out, err = run_cli(["download", "someone/tiny-pack", "--revision", "g64", "--json"], monkeypatch, capsys)
    assert code == 0, err
    info = json.loads(out)
    assert info["revision"] == "g64" and (Path(info["path"]) / MANIFEST_NAME).is_file()


def test_resolve_model_refuses_what_is_not_a_checkpoint(tmp_path):
    pack = tmp_path / "pack"
    make_pack(pack)
    assert transfer.resolve_model(str(pack), kind="checkpoint") == pack
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text("{}")
    with pytest.raises(CloverError, match="is not a checkpoint folder"):
        transfer.resolve_model(str(tmp_path / "cfg"), kind="checkpoint")
    with pytest.raises(CloverError, match="is a file; expected a model folder"):
        transfer.resolve_model(str(pack / "config.json"))


# ----------------------------------------------------------------------------------------------------
# upload
# ----------------------------------------------------------------------------------------------------
def test_a_card_the_manifest_hashes_is_sent_as_it_is(hub, tmp_path, with_token):
    """A manifest that lists README.md (with its sha256) fixes the card: regenerating it would send a card that
    every download then refuses against the manifest."""
    from clover_local.pack.card import write_card
    from clover_local.pack.manifest import sha256_file

    pack = tmp_path / "pack"
    make_pack(pack)
    card = write_card(pack)  # clover-local's own card (marker line kept), then hashed with the pack
    m = Manifest.load(pack)
    m.files["README.md"] = {"bytes": card.stat().st_size, "sha256": sha256_file(card)}
    m.write(pack)
    before = card.read_bytes()
    result = transfer.upload(pack, "me/hashed-card", progress=False)
    assert not result.card_generated and card.read_bytes() == before
    assert hub.files_at("me/hashed-card")["README.md"] == before
    transfer.download("me/hashed-card", progress=False)  # the manifest check passes


def test_upload_removes_an_earlier_packs_index_too(hub, tmp_path, with_token):
    """An index an earlier pack had and this one has not would make loaders look for shards that are gone."""
    first = tmp_path / "first"
    make_pack(first)
    shards = sorted(p.name for p in first.glob("*.safetensors"))
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": shards[-1]}}
    (first / "model.safetensors.index.json").write_text(json.dumps(index))
    Manifest.load(first).finalize(first)
    transfer.upload(first, "me/pack", progress=False)
    assert "model.safetensors.index.json" in hub.files_at("me/pack")
    second = tmp_path / "second"
    make_pack(second)
    result = transfer.upload(second, "me/pack", progress=False)
    assert result.removed == ["model.safetensors.index.json"]
    assert hub.files_at("me/pack") == pack_repo_files(second)


def test_dry_run_says_whether_a_token_was_found(hub, tmp_path, monkeypatch, capsys):
    """The dry run tells a person without a token to log in before the real upload, and does not with one."""
    pack = tmp_path / "pack"
    make_pack(pack)
    argv = ["upload", str(pack), "--repo-id", "me/p", "--dry-run"]
    code, out, err = run_cli(argv, monkeypatch, capsys)
    assert code == 0 and "no Hub token found" in err
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code, out, err = run_cli(argv, monkeypatch, capsys)
    assert code == 0 and "no Hub token found" not in err
    code, out, err = run_cli([*argv, "--json"], monkeypatch, capsys)
    assert json.loads(out)["token_found"] is True
    assert hub.requests == []


def test_dry_run_table_totals_the_files(hub, tmp_path, monkeypatch, capsys):
    pack = tmp_path / "pack"
    make_pack(pack, shard_bytes=int(np.random.default_rng(11).integers(5_000, 50_000)))
    code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/p", "--dry-run", "--json"], monkeypatch, capsys)
    info = json.loads(out)
    code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/p", "--dry-run"], monkeypatch, capsys)
    [total] = [line for line in out.splitlines() if f"total ({len(info['files'])} files)" in line]
    assert str(info["total_bytes"]) in total


def test_cli_upload_to_a_branch_and_its_notes(hub, tmp_path, with_token, monkeypatch, capsys):
    """`--revision` reaches the upload (the files land on the branch, main untouched), and what the upload has to
    say (--private on an existing public repo) is printed."""
    pack = tmp_path / "pack"
    make_pack(pack)
    hub.add_repo("me/already-public", {})
    code, out, err = run_cli(["upload", str(pack), "--repo-id", "me/already-public", "--revision", "g64",
                              "--private"], monkeypatch, capsys)
    assert code == 0, err
    assert "note: me/already-public already existed and is public" in err
    assert "/me/already-public/tree/g64" in err
    assert hub.files_at("me/already-public", "g64") == pack_repo_files(pack)
    assert hub.files_at("me/already-public") == {}


def test_ctrl_c_during_a_download_names_the_same_command(hub, tmp_path, monkeypatch, capsys):
    """The rerun the message suggests fetches into the same folder and revision."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(transfer, "download", interrupted)
    code, out, err = run_cli(["download", "someone/p", "--dir", str(tmp_path / "d"), "--revision", "v2"],
                             monkeypatch, capsys)
    assert code == 130
    assert f"run `clover-local download someone/p --dir {tmp_path / 'd'} --revision v2` again to resume" in err


# ----------------------------------------------------------------------------------------------------
# the model card
# ----------------------------------------------------------------------------------------------------
def test_human_bytes_switches_unit_at_1024():
    from clover_local.pack.card import human_bytes

    assert human_bytes(1023) == "1023 B" and human_bytes(1024) == "1.0 KiB"
    assert human_bytes(1024**2 - 1) == "1024.0 KiB" and human_bytes(1024**2) == "1.0 MiB"


def test_card_numbers_keep_four_significant_digits(tmp_path):
    """A KL of 0.01234 is not rounded to 0.0123 (two packs' KL often differ in the fourth digit)."""
    from clover_local.pack.card import card_text

    rng = np.random.default_rng(13)
    kl = float(rng.uniform(0.01001, 0.01999))
    m = make_pack(tmp_path / "pack", quality={"kl_causal_mean": kl})
    text = card_text(m, None, "me/p")
    assert f"| KL(BF16 ‖ pack), causal pass, mean per token | {kl:.4g} |" in text


def test_a_card_names_the_release_as_base_only_when_every_dimension_matches():
    """A model with the release's depth and width but fewer experts is not the release."""
    from clover_local.pack.card import RELEASE_SHAPE, card_metadata

    local = Manifest(source={"path": "/data/mine"}, settings={"bits": 4})
    for key in RELEASE_SHAPE:
        config = {"model_type": "clover_moe", "text_config": {**RELEASE_SHAPE, key: RELEASE_SHAPE[key] // 2}}
        assert "base_model" not in card_metadata(local, config), key


def test_a_source_that_is_not_a_repo_id_is_not_named_as_base():
    """A manifest's source repo id that the Hub would refuse is not written into the card's metadata."""
    from clover_local.pack.card import DEFAULT_BASE_MODEL, build_card, card_metadata

    m = Manifest(source={"repo_id": "C:\\models\\clover"}, settings={"bits": 4})
    assert card_metadata(m)["base_model"] == DEFAULT_BASE_MODEL
    build_card(m)  # valid Hub metadata


def test_a_card_for_main_names_no_revision(tmp_path):
    from clover_local.pack.card import card_text

    m = make_pack(tmp_path / "pack")
    assert "--revision" not in card_text(m, None, "me/p", revision="main")
    assert "clover-local chat me/p --revision g64 " in card_text(m, None, "me/p", revision="g64")


def test_the_card_counts_the_per_module_exceptions(tmp_path):
    from clover_local.pack.card import card_text

    m = make_pack(tmp_path / "pack")
    config = json.loads((tmp_path / "pack" / "config.json").read_text())
    n = len(config["quantization_config"]) + int(np.random.default_rng(17).integers(1, 6))  # not its key count
    config["quantization_config"]["dynamic"] = {f"-:.*layers\\.{i}\\.router.*": {} for i in range(n)}
    assert f"| Per-module exceptions | {n} (see" in card_text(m, config, "me/p")


def test_a_pack_with_no_hub_base_is_apache_licensed(tmp_path):
    """The shipped tiny model (no Hub base): clover-local's own license, stated as such."""
    from clover_local.pack.card import card_metadata, card_text

    tiny = {"model_type": "clover_moe", "num_hidden_layers": 2, "hidden_size": 8, "num_experts": 4}
    local = Manifest(source={"path": "tiny"}, settings={"bits": 4})
    assert card_metadata(local, tiny)["license"] == "apache-2.0"
    assert "## License\n\nApache-2.0.\n" in card_text(local, tiny, "me/tiny")


@pytest.mark.parametrize("meta, problem", [
    ("base_model_relation: quantized", "base_model_relation is set without base_model"),
    ("tags:\n- gptq\n- ''", "tags must be a list of non-empty strings"),
])
def test_card_problems_catch_what_the_hub_refuses(meta, problem):
    from clover_local.pack.card import card_problems

    assert problem in card_problems(f"---\nlicense: apache-2.0\n{meta}\n---\n# card\n")


def test_write_card_keeps_a_hand_written_card(tmp_path):
    from clover_local.pack.card import write_card

    pack = tmp_path / "pack"
    make_pack(pack)
    mine = "---\nlicense: apache-2.0\n---\n# My words " + secrets.token_hex(4) + "\n"
    (pack / "README.md").write_text(mine)
    write_card(pack, "me/p")
    assert (pack / "README.md").read_text() == mine


# ----------------------------------------------------------------------------------------------------
# large files (resume.py)
# ----------------------------------------------------------------------------------------------------
def test_a_line_that_drops_often_but_moves_on_is_followed_to_the_end(hub, tmp_path, resumable):
    """Only drops in a row without new bytes count against the retries: a file cut many times, each time
    further on, arrives whole in one run."""
    files = big_repo(hub, tmp_path)
    cuts = resumable.RETRIES + 3
    hub.faults[BIG] = [("drop", 100_000)] * cuts
    path = transfer.download("someone/big", progress=False)
    assert (path / BIG).read_bytes() == files[BIG]
    assert len(file_gets(hub.requests, BIG)) == cuts + 1


def test_a_line_that_drops_without_progress_gives_up_with_the_resume_hint(hub, tmp_path, resumable):
    """RETRIES drops in a row with no new byte end the run with the connection's one line (the partial kept for
    the rerun), not a loop or another message."""
    files = big_repo(hub, tmp_path)
    hub.faults[BIG] = [("drop", 300_000)] + [("drop", 0)] * (resumable.RETRIES + 20)
    with pytest.raises(CloverError) as err:
        transfer.download("someone/big", progress=False)
    assert str(err.value).startswith("the connection to the Hub failed while downloading someone/big")
    assert len(file_gets(hub.requests, BIG)) == 1 + resumable.RETRIES + 1
    [partial] = partials(tmp_path / "hf_home" / "hub")
    assert partial.read_bytes() == files[BIG][:partial.stat().st_size] and partial.stat().st_size > 0


def test_when_one_large_file_fails_the_others_stop_and_keep_their_partials(hub, tmp_path, resumable, monkeypatch):
    """A refused file ends the run at once: the file fetched beside it stops at its next piece (what it had kept
    for the rerun) rather than the run waiting for all of it."""
    rng = np.random.default_rng(19)
    files = {"model-00001-of-00002.safetensors": rng.bytes(700_000),
             "model-00002-of-00002.safetensors": rng.bytes(1_400_000)}
    hub.add_repo("someone/shards", {"config.json": b"{}", **files})
    slow, refused = sorted(files, key=lambda n: -len(files[n]))
    hub.faults[refused] = [("status", 403)]
    real_write = resumable._write_chunk

    def slow_write(f, chunk, digest, bar):
        time.sleep(0.05)  # ≈ 1 s for the whole file: long after the refusal
        real_write(f, chunk, digest, bar)

    monkeypatch.setattr(resumable, "_write_chunk", slow_write)
    with pytest.raises(CloverError, match="403"):
        transfer.download("someone/shards", progress=False)
    blobs = tmp_path / "hf_home" / "hub" / "models--someone--shards" / "blobs"
    assert not (blobs / sha(files[slow])).exists()  # it did not run to its end
    for partial in partials(blobs):  # what it had is kept (a prefix), unless the refusal came before its first byte
        assert partial.name == sha(files[slow]) + ".clover-partial" and partial.stat().st_size < len(files[slow])
        assert files[slow].startswith(partial.read_bytes())


def test_an_updated_large_file_in_a_dir_is_fetched_resumably(hub, tmp_path, resumable):
    """The repo's next release changes a shard: in a --dir the new shard goes through the resumable path too (its
    download metadata names the old etag), so a cut keeps its partial for the rerun."""
    files = big_repo(hub, tmp_path)
    target = tmp_path / "dl"
    transfer.download("someone/big", dir=target, progress=False, verify=False)
    newer = dict(files)
    newer[BIG] = np.random.default_rng(23).bytes(len(files[BIG]))
    hub.push("someone/big", newer)
    cut_first_run(hub, "someone/big", target)
    [partial] = partials(target)
    assert 0 < partial.stat().st_size and newer[BIG].startswith(partial.read_bytes())
    path = transfer.download("someone/big", dir=target, progress=False, verify=False)
    assert (path / BIG).read_bytes() == newer[BIG]


def test_a_server_that_answers_without_bytes_ends_in_one_line(hub, tmp_path, resumable, monkeypatch):
    """Answers that bring no new byte (an empty 206), again and again: after RETRIES of them the run stops with a
    line that says where the file stopped and that a rerun resumes it, rather than asking forever."""
    files = big_repo(hub, tmp_path)
    asked = []

    def empty_answer(file, partial, have, *args):
        asked.append(have)
        if len(asked) > 50:
            raise AssertionError("asked forever")
        return have

    monkeypatch.setattr(resumable, "_get_rest", empty_answer)
    with pytest.raises(CloverError) as err:
        transfer.download("someone/big", progress=False)
    assert str(err.value).startswith(f"the Hub stopped sending {BIG} at 0 of {len(files[BIG])} bytes")
    assert "clover-local download someone/big` again to resume it" in str(err.value)
    assert len(asked) == resumable.RETRIES + 1


# ----------------------------------------------------------------------------------------------------
# streamed reads (remote_shards.py) and plan's header reads (remote_index.py)
# ----------------------------------------------------------------------------------------------------
def _shard_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data


@pytest.fixture
def streamed(hub, monkeypatch):
    """A Hub repo of one shard (a 64×32 F32 tensor, random), read by ranged GETs in 2 KiB parts."""
    from clover_local.hub import remote_shards

    monkeypatch.setattr(remote_shards, "PART", 2048)
    monkeypatch.setattr(remote_shards, "RETRY_WAIT_S", 0.0)
    rows = np.random.default_rng(29).standard_normal((64, 32)).astype(np.float32)
    header = {"w": {"dtype": "F32", "shape": [64, 32], "data_offsets": [0, rows.nbytes]},
              "bad": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}
    shard = _shard_bytes(header, rows.tobytes())
    sha = hub.add_repo("org/ckpt", {"config.json": b"{}", "model.safetensors": shard})
    hub.max_requests = 2000
    return types.SimpleNamespace(
        module=remote_shards, rows=rows, shard=shard,
        open=lambda: remote_shards.RemoteShards("org/ckpt", sha, {"model.safetensors": len(shard)}))


def test_a_streamed_read_continues_after_busy_answers(streamed, hub):
    """429 and 500 mean "later": asked again, the bytes arrive."""
    hub.faults["model.safetensors"] = [("status", 429), ("status", 500), ("status", 502)]
    shards = streamed.open()
    assert bytes(shards.read("model.safetensors", 0, len(streamed.shard))) == streamed.shard


def test_a_streamed_read_counts_only_drops_in_a_row_without_progress(streamed, hub):
    """Drops that each bring bytes reset the count: one more drop with none after them is retried too."""
    hub.faults["model.safetensors"] = [("drop", 100)] * streamed.module.RETRIES + [("drop", 0)]
    shards = streamed.open()
    assert bytes(shards.read("model.safetensors", 100, 1900)) == streamed.shard[100:1900]


def test_a_streamed_read_that_keeps_dropping_gives_up_in_one_line(streamed, hub):
    hub.faults["model.safetensors"] = [("drop", 0)] * (streamed.module.RETRIES + 3)
    shards = streamed.open()
    with pytest.raises(CloverError, match="the connection to the Hub keeps dropping while reading model.safetensors "
                                          "of org/ckpt; check the network and run the same command with --resume"):
        shards.read("model.safetensors", 0, 1000)


def test_a_streamed_tensor_is_checked_and_rows_are_bounded(streamed):
    """A header whose offsets do not match the shape is refused; a row past the first dimension is an IndexError;
    each row is its own bytes."""
    shard = streamed.open().open("model.safetensors")
    import torch

    assert torch.equal(shard.get_tensor("w"), torch.from_numpy(streamed.rows))
    last = streamed.rows.shape[0] - 1
    assert torch.equal(shard.get_slice("w")[last], torch.from_numpy(streamed.rows[last]))
    with pytest.raises(IndexError):
        shard.get_slice("w")[last + 1]
    with pytest.raises(CloverError, match="tensor bad in model.safetensors is corrupt"):
        shard.get_tensor("bad")


def test_a_stream_of_a_repo_without_weights_is_refused(hub):
    from clover_local.hub.remote_shards import open_remote_checkpoint

    hub.add_repo("org/no-weights", {"config.json": b"{}", "sub/model.safetensors": b"x" * 64})
    with pytest.raises(CloverError, match="org/no-weights has no .safetensors weights at its top level"):
        open_remote_checkpoint("org/no-weights")


def test_plan_refuses_a_token_with_a_pasted_character_before_asking(hub, monkeypatch):
    from clover_local.hub.remote_index import remote_pack_index

    hub.add_repo("org/p", {"config.json": b"{}"})
    monkeypatch.setenv("HF_TOKEN", "hf_" + secrets.token_hex(8) + "\u200b")
    with pytest.raises(CloverError, match=r"token \(from HF_TOKEN\) has a character"):
        remote_pack_index("org/p")
    assert hub.requests == []


def test_plan_of_a_checkpoint_counts_only_what_a_download_fetches(hub):
    """A BF16 checkpoint's download size leaves out what `download` never fetches (pickles, code)."""
    from clover_local.checkpoint.synthetic import REAL_SPEC, tiny_config_dict
    from clover_local.hub.remote_index import remote_pack_index

    rng = np.random.default_rng(31)
    files = {"config.json": json.dumps(tiny_config_dict(REAL_SPEC)).encode(),
             "model.safetensors": rng.bytes(4096), "pytorch_model.bin": rng.bytes(3000), "modeling.py": b"x = 1\n"}
    hub.add_repo("org/bf16", files)
    got = remote_pack_index("org/bf16")
    assert got.checkpoint and got.download_files == 2
    assert got.download_bytes == len(files["config.json"]) + 4096


def test_cli_force_fetches_the_cached_files_again(hub, tmp_path, monkeypatch, capsys):
    pack = tmp_path / "src"
    make_pack(pack)
    files = pack_repo_files(pack)
    hub.add_repo("someone/tiny-pack", files)
    assert run_cli(["download", "someone/tiny-pack"], monkeypatch, capsys)[0] == 0
    n = len(hub.requests)
    code, out, err = run_cli(["download", "someone/tiny-pack", "--force"], monkeypatch, capsys)
    assert code == 0, err
    fetched = sorted(r["path"].rsplit("/", 1)[-1] for r in hub.requests[n:]
                     if r["method"] == "GET" and "/resolve/" in r["path"])
    assert fetched == sorted(files)


def test_a_cut_short_file_without_download_metadata_in_a_dir_is_fetched_resumably(hub, tmp_path, resumable):
    """A shard in a --dir with no download metadata (copied in by hand) and the wrong size is not taken as done: it
    is fetched through the resumable path, so a cut keeps its partial."""
    from huggingface_hub.file_download import get_local_download_paths

    files = big_repo(hub, tmp_path)
    target = tmp_path / "dl"
    transfer.download("someone/big", dir=target, progress=False)
    get_local_download_paths(target, BIG).metadata_path.unlink()
    (target / BIG).write_bytes(files[BIG][:1000])
    cut_first_run(hub, "someone/big", target)
    [partial] = partials(target)
    assert 0 < partial.stat().st_size and files[BIG].startswith(partial.read_bytes())
    path = transfer.download("someone/big", dir=target, progress=False)
    assert (path / BIG).read_bytes() == files[BIG]


@pytest.fixture
def shifted_ranges(monkeypatch):
    """A proxy between us and the Hub that answers a ranged GET from 16 bytes before the offset asked (a 206 whose
    Content-Range says so): what arrives is not the bytes that follow what we hold."""
    from huggingface_hub import utils as hf_utils

    real = hf_utils.get_session

    class Shifting:
        def stream(self, method, url, headers=None, **kw):
            asked = (headers or {}).get("Range", "")
            if asked.startswith("bytes=") and not asked.startswith("bytes=0-"):
                start, end = asked.removeprefix("bytes=").split("-")
                headers = {**headers, "Range": f"bytes={int(start) - 16}-{end}"}
            return real().stream(method, url, headers=headers, **kw)

        def __getattr__(self, name):  # every other call: the client's own session
            return getattr(real(), name)

    monkeypatch.setattr(hf_utils, "get_session", lambda: Shifting())


def test_a_resumed_file_answered_from_another_offset_starts_over(hub, tmp_path, resumable, shifted_ranges):
    """The partial is continued only by bytes that start where it ends; otherwise the file is fetched from its
    start, and arrives intact in the same run."""
    files = big_repo(hub, tmp_path)
    hub.faults[BIG] = [("drop", 700_000)]
    path = transfer.download("someone/big", progress=False)
    assert (path / BIG).read_bytes() == files[BIG]
    assert [r["range"] for r in file_gets(hub.requests, BIG)][-1] is None  # started over


def test_a_streamed_read_answered_from_another_offset_is_refused(streamed, shifted_ranges):
    """`--stream` has no sha256 to catch shifted bytes: a 206 that does not start where asked is refused."""
    with pytest.raises(CloverError, match="did not answer a ranged request for model.safetensors"):
        streamed.open().read("model.safetensors", 100, 900)
