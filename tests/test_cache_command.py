"""`clover-local cache`: listing and freeing what clover-local keeps on disk.

Every test points CLOVER_LOCAL_CACHE and the Hugging Face Hub cache at tmp folders (huggingface_hub reads its
constants at import time, so `constants.HF_HUB_CACHE` is patched as well as the environment), and the Hub cache is
built with huggingface_hub's real on-disk layout (`models--owner--name/{blobs,refs/main,snapshots/<sha>/...}`,
snapshot files being relative links into `blobs/`), so `scan_cache_dir` reads it as it would a real one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

SHA_A = "a" * 40
SHA_B = "b" * 40


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(clover-local cache folder, Hub cache folder), both under tmp_path and both not created yet."""
    from huggingface_hub import constants

    root, hub = tmp_path / "clover-cache", tmp_path / "hf" / "hub"
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(root))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    return root, hub


def _write(path: Path, n: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(n))
    return n


def _fill_cache(root: Path) -> dict[str, int]:
    """What clover-local writes, at made-up sizes; returns entry name -> bytes written."""
    sizes = {
        "synthetic/full-v1": _write(root / "synthetic/full-v1/model-00001-of-00002.safetensors", 300_000)
        + _write(root / "synthetic/full-v1/model-00002-of-00002.safetensors", 123_457)
        + _write(root / "synthetic/full-v1/.complete", 31),
        "synthetic/small-v1": _write(root / "synthetic/small-v1/model.safetensors", 50_001),  # no .complete
        "demo": _write(root / "demo/tiny-int4/model.safetensors", 77_777) + _write(root / "demo/tiny-int4/x.json", 9),
        "tuning": _write(root / "tuning/a-sm90-triton3.json", 4_000) + _write(root / "tuning/b-sm89-triton3.json", 1),
        "chat_history": _write(root / "chat_history", 120),
        "unverified-downloads": _write(root / "unverified-downloads/0123abcd.json", 25),
        "stray.bin": _write(root / "stray.bin", 7_000),
    }
    return sizes


def _hub_repo(hub: Path, repo_id: str, files: dict[str, bytes], sha: str = SHA_A) -> Path:
    """One model repo in huggingface_hub's cache layout; returns its folder."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo / "snapshots" / sha / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return repo


CLOVER_CONFIG = json.dumps({"model_type": "clover_moe", "num_hidden_layers": 40}).encode()


def _fill_hub(hub: Path) -> dict[str, int]:
    """A Clover checkpoint, a clover-local pack (sharing the checkpoint's commit hash, as a duplicated repo
    would) and a repo of another model; returns Clover repo id -> bytes of its blobs."""
    weights = os.urandom(200_000)
    _hub_repo(hub, "Diffuspace/Clover-35B-A3B-Preview", {"config.json": CLOVER_CONFIG, "model.safetensors": weights})
    pack_files = {"clover_manifest.json": b'{"format": "clover-local-pack"}', "config.json": b"{}",
                  "model.safetensors": os.urandom(90_000)}
    _hub_repo(hub, "someone/clover-35b-int4", pack_files, sha=SHA_A)
    _hub_repo(hub, "openai-community/gpt2", {"config.json": b'{"model_type": "gpt2"}', "m.bin": b"x" * 5000}, sha=SHA_B)
    return {"Diffuspace/Clover-35B-A3B-Preview": len(CLOVER_CONFIG) + len(weights),
            "someone/clover-35b-int4": sum(len(v) for v in pack_files.values())}


def _listing(capsys) -> dict:
    assert run_cli(["cache", "list", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ----------------------------------------------------------------------------------------------------
# list
# ----------------------------------------------------------------------------------------------------
def test_list_shows_one_row_per_entry_with_the_bytes_written(caches, capsys) -> None:
    root, _ = caches
    sizes = _fill_cache(root)
    listing = _listing(capsys)
    got = {e["name"]: e["bytes"] for e in listing["entries"]}
    assert got == sizes  # every entry (the stray file too), each at exactly the bytes written
    assert listing["cache_bytes"] == listing["total_bytes"] == sum(sizes.values())
    assert listing["root"] == str(root) and listing["other_hub_repos"] == 0
    what = {e["name"]: e["what"] for e in listing["entries"]}
    assert "2 kernel tuning tables" in what["tuning"]
    assert what["synthetic/small-v1"].startswith("unfinished") and not what["synthetic/full-v1"].startswith("unf")
    assert "not written" in what["stray.bin"]
    assert all(e["source"] == "cache" and e["modified"] for e in listing["entries"])


def test_list_table_names_the_root_every_entry_and_the_total(caches, capsys) -> None:
    from clover_local.runtime.sizes import fmt_bytes

    root, hub = caches
    sizes = _fill_cache(root)
    hub_sizes = _fill_hub(hub)
    assert run_cli(["cache"]) == 0  # the group alone lists
    out = capsys.readouterr().out
    assert str(root) in out and str(hub) in out
    for name, n in {**sizes, **hub_sizes}.items():
        line = next(line for line in out.splitlines() if f" {name} " in line)
        assert fmt_bytes(n) in line, line
    assert f"Total {fmt_bytes(sum(sizes.values()) + sum(hub_sizes.values()))}" in out
    assert "1 other Hub repo not shown" in out and "gpt2" not in out


def test_a_missing_cache_and_hub_cache_are_an_empty_listing(caches, capsys) -> None:
    root, hub = caches
    assert not root.exists() and not hub.exists()
    assert run_cli(["cache", "--json"]) == 0
    out, err = capsys.readouterr()
    listing = json.loads(out)
    assert listing["entries"] == [] and listing["total_bytes"] == 0 and listing["warnings"] == [] and err == ""
    assert run_cli(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "(empty)" in out and "(none)" in out and "Total 0 B" in out
    assert run_cli(["cache", "rm", "demo", "--yes"]) == 2
    assert "nothing is cached" in capsys.readouterr().err


def test_hub_cache_lists_only_clover_models_with_their_revisions(caches, capsys) -> None:
    _, hub = caches
    hub_sizes = _fill_hub(hub)
    listing = _listing(capsys)
    rows = {e["name"]: e for e in listing["entries"]}
    assert {n: e["bytes"] for n, e in rows.items()} == hub_sizes  # gpt2 left out
    assert listing["other_hub_repos"] == 1 and listing["hub_bytes"] == sum(hub_sizes.values())
    ckpt, pack = rows["Diffuspace/Clover-35B-A3B-Preview"], rows["someone/clover-35b-int4"]
    assert ckpt["source"] == "hub" and ckpt["revisions"] == [{"commit": SHA_A, "refs": ["main"],
                                                             "bytes": hub_sizes[ckpt["name"]]}]
    assert "checkpoint" in ckpt["what"] and "pack" in pack["what"]  # config model_type / clover_manifest.json


def test_a_corrupted_hub_cache_is_a_warning_not_a_traceback(caches, capsys, monkeypatch) -> None:
    _, hub = caches
    _fill_hub(hub)
    (hub / "models--broken--repo" / "blobs").mkdir(parents=True)  # no snapshots folder: scan_cache_dir objects
    assert run_cli(["cache", "list"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert [line for line in err.splitlines() if line] == [err.splitlines()[0]] and err.startswith("warning:")
    assert "Diffuspace/Clover-35B-A3B-Preview" in out  # the readable repos are still listed

    hub_file = hub.parent / "not-a-folder"
    hub_file.write_text("x")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub_file))
    assert run_cli(["cache", "list"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: cannot read the Hugging Face Hub cache") and "Traceback" not in err


# ----------------------------------------------------------------------------------------------------
# rm
# ----------------------------------------------------------------------------------------------------
def test_rm_removes_exactly_the_named_entry(caches, capsys) -> None:
    root, _ = caches
    sizes = _fill_cache(root)
    assert run_cli(["cache", "rm", "synthetic/full-v1/", "--yes", "--json"]) == 0  # trailing / (tab completion)
    result = json.loads(capsys.readouterr().out)
    assert result["bytes_freed"] == sizes["synthetic/full-v1"] and not result["dry_run"]
    assert [r["name"] for r in result["removed"]] == ["synthetic/full-v1"]
    assert not (root / "synthetic/full-v1").exists()
    left = {e["name"]: e["bytes"] for e in _listing(capsys)["entries"]}
    assert left == {k: v for k, v in sizes.items() if k != "synthetic/full-v1"}  # siblings untouched, no leftovers
    assert not [p for p in (root / "synthetic").iterdir() if p.name.startswith(".removing-")]


def test_rm_says_what_it_frees_and_a_glob_picks_several(caches, capsys) -> None:
    from clover_local.runtime.sizes import fmt_bytes

    root, _ = caches
    sizes = _fill_cache(root)
    both = sizes["synthetic/full-v1"] + sizes["synthetic/small-v1"]
    assert run_cli(["cache", "rm", "synthetic/*", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"Would free {fmt_bytes(both)} ({both} bytes)" in out
    assert (root / "synthetic/full-v1").is_dir() and (root / "synthetic/small-v1").is_dir()  # dry run
    assert run_cli(["cache", "rm", "synthetic/*", "tuning", "-y"]) == 0
    out, err = capsys.readouterr()
    assert f"Frees {fmt_bytes(both + sizes['tuning'])}" in out and "removed 3 entries" in err
    assert sorted(p.name for p in root.iterdir()) == ["chat_history", "demo", "stray.bin", "synthetic",
                                                      "unverified-downloads"]


def test_an_unknown_name_removes_nothing(caches, capsys) -> None:
    root, _ = caches
    sizes = _fill_cache(root)
    assert run_cli(["cache", "rm", "demo", "synthetic/fulll-v1", "--yes"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("error: nothing named 'synthetic/fulll-v1'"), err
    assert "synthetic/full-v1" in err  # the names it could have meant
    assert (root / "demo").is_dir()  # named first, valid, and still not removed: all names are checked first
    assert {e["name"]: e["bytes"] for e in _listing(capsys)["entries"]} == sizes


@pytest.mark.parametrize("name", ["../outside", "synthetic/../../outside", "/etc", "demo/../../outside"])
def test_names_that_leave_the_cache_are_refused(caches, capsys, name: str) -> None:
    root, _ = caches
    _fill_cache(root)
    outside = root.parent / "outside"
    _write(outside / "keep.txt", 10)
    assert run_cli(["cache", "rm", name, "--yes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "no absolute paths or .." in err
    assert (outside / "keep.txt").is_file() and (root / "demo").is_dir()


def test_a_link_in_the_cache_is_removed_but_never_its_target(caches, capsys) -> None:
    root, _ = caches
    _fill_cache(root)
    elsewhere = root.parent / "big-disk"
    _write(elsewhere / "full-v1" / "model.safetensors", 1000)
    (root / "synthetic" / "full3-v1").symlink_to(elsewhere / "full-v1", target_is_directory=True)
    rows = {e["name"]: e for e in _listing(capsys)["entries"]}
    assert rows["synthetic/full3-v1"]["bytes"] == 0 and "link" in rows["synthetic/full3-v1"]["what"]
    assert run_cli(["cache", "rm", "synthetic/full3-v1", "--yes"]) == 0
    assert not (root / "synthetic" / "full3-v1").is_symlink()
    assert (elsewhere / "full-v1" / "model.safetensors").is_file()


def test_without_a_terminal_rm_refuses_unless_given_yes(caches, capsys, monkeypatch) -> None:
    root, _ = caches
    _fill_cache(root)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal, even with an answer waiting
    code = run_cli(["cache", "rm", "demo"])
    out, err = capsys.readouterr()
    assert code != 0 and (root / "demo").is_dir()
    assert err.count("\n") == 1 and err.startswith("error:") and "--yes" in err
    assert "demo" in out  # it said what it would have removed


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_rm_asks_first(caches, capsys, monkeypatch) -> None:
    root, _ = caches
    _fill_cache(root)
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    assert run_cli(["cache", "rm", "demo"]) == 1
    assert "nothing removed" in capsys.readouterr().err and (root / "demo").is_dir()
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    assert run_cli(["cache", "rm", "demo"]) == 0
    assert not (root / "demo").exists() and (root / "tuning").is_dir()


def test_rm_of_a_hub_repo_goes_through_huggingface_hubs_deletion(caches, capsys, monkeypatch) -> None:
    from huggingface_hub.utils import DeleteCacheStrategy

    _, hub = caches
    hub_sizes = _fill_hub(hub)
    plans: list[DeleteCacheStrategy] = []
    real_execute = DeleteCacheStrategy.execute

    def execute(self: DeleteCacheStrategy) -> None:
        plans.append(self)
        real_execute(self)

    monkeypatch.setattr(DeleteCacheStrategy, "execute", execute)
    assert run_cli(["cache", "rm", "openai-community/gpt2", "--yes"]) == 2  # not a Clover model: not ours to remove
    assert "nothing named" in capsys.readouterr().err and not plans
    repo = hub / "models--Diffuspace--Clover-35B-A3B-Preview"
    assert run_cli(["cache", "rm", "Diffuspace/Clover-35B-A3B-Preview", "--yes", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bytes_freed"] == hub_sizes["Diffuspace/Clover-35B-A3B-Preview"]
    assert len(plans) == 1 and plans[0].repos == frozenset({repo}) and not repo.exists()
    # the pack shares the removed commit hash and the other repo is not Clover: both are untouched
    assert (hub / "models--someone--clover-35b-int4" / "snapshots" / SHA_A / "model.safetensors").is_file()
    assert (hub / "models--openai-community--gpt2" / "snapshots" / SHA_B / "m.bin").is_file()
    listing = _listing(capsys)
    assert [e["name"] for e in listing["entries"]] == ["someone/clover-35b-int4"] and listing["other_hub_repos"] == 1


# ----------------------------------------------------------------------------------------------------
# help
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["cache"], ["cache", "list"], ["cache", "rm"]])
def test_cache_help_teaches_with_indented_examples(capsys, command: list[str]) -> None:
    """The help test in test_cli_surface.py walks top-level commands only; `cache` is a group, checked here."""
    assert run_cli([*command, "--help"]) == 0
    lines = [line.strip("│").rstrip() for line in capsys.readouterr().out.splitlines()]
    heads = [i for i, line in enumerate(lines) if line.strip() == "Examples:"]
    examples = [line for i in heads for line in lines[i + 1:i + 6] if "clover-local" in line]
    assert examples and all(line.startswith("   clover-local cache") for line in examples), lines


def test_cache_is_listed_and_its_subcommands_end_on_ctrl_c_like_the_rest(capsys) -> None:
    from clover_local import cli

    cli._register()
    assert run_cli(["--help"]) == 0 and " cache " in capsys.readouterr().out
    from clover_local.commands.cache import cache_app

    callbacks = [c.callback for c in cache_app.registered_commands] + [cache_app.registered_callback.callback]
    assert all(hasattr(cb, "__wrapped__") for cb in callbacks)


# ----------------------------------------------------------------------------------------------------
# mutation-audit additions
# ----------------------------------------------------------------------------------------------------
def test_sizes_count_a_hard_linked_file_once_and_a_link_inside_an_entry_as_nothing(caches, capsys) -> None:
    root, _ = caches
    n = _write(root / "demo/tiny-int4/model.safetensors", 50_000)
    os.link(root / "demo/tiny-int4/model.safetensors", root / "demo/tiny-int4/again.safetensors")
    _write(root.parent / "elsewhere/big.bin", 90_000)
    (root / "demo/tiny-int4/big.bin").symlink_to(root.parent / "elsewhere/big.bin")
    (root / "demo/link-to-folder").symlink_to(root.parent / "elsewhere", target_is_directory=True)
    rows = {e["name"]: e["bytes"] for e in _listing(capsys)["entries"]}
    assert rows == {"demo": n}


def test_a_hub_pack_without_manifest_is_a_pack_and_partial_downloads_are_counted(caches, capsys) -> None:
    _, hub = caches
    config = json.dumps({"model_type": "clover_moe", "quantization_config": {"quant_method": "gptq"}}).encode()
    repo = _hub_repo(hub, "someone/gptq-pack", {"config.json": config, "model.safetensors": b"w" * 1000})
    (repo / "blobs" / ("f" * 64 + ".incomplete")).write_bytes(b"p" * 4321)
    row = _listing(capsys)["entries"][0]
    assert row["name"] == "someone/gptq-pack" and "Clover pack" in row["what"] and "partly downloaded" in row["what"]
    assert row["bytes"] == len(config) + 1000 + 4321
    assert run_cli(["cache", "rm", "someone/gptq-pack", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_freed"] == len(config) + 1000 + 4321 and not repo.exists()


def test_hub_names_match_case_insensitively_when_unambiguous(caches, capsys) -> None:
    _, hub = caches
    _fill_hub(hub)
    assert run_cli(["cache", "rm", "diffuspace/clover-35b-a3b-preview", "--dry-run", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["removed"]] == ["Diffuspace/Clover-35B-A3B-Preview"]
    _hub_repo(hub, "DIFFUSPACE/clover-35b-a3b-preview", {"config.json": CLOVER_CONFIG}, sha=SHA_B)
    assert run_cli(["cache", "rm", "diffuspace/clover-35b-a3b-preview", "--dry-run"]) == 2  # two: neither chosen
    assert "nothing named" in capsys.readouterr().err


def test_a_glob_matching_nothing_is_an_unknown_name_and_removes_nothing(caches, capsys) -> None:
    root, _ = caches
    sizes = _fill_cache(root)
    assert run_cli(["cache", "rm", "demo", "synthetic/zzz*", "--yes"]) == 2
    assert "nothing named 'synthetic/zzz*'" in capsys.readouterr().err
    assert {e["name"]: e["bytes"] for e in _listing(capsys)["entries"]} == sizes


def test_a_name_with_brackets_is_that_entry_not_a_pattern(caches, capsys) -> None:
    """`cache rm '[old] pack'` said "nothing named '[old] pack'; did you mean [old] pack": [ made it a pattern."""
    root, _ = caches
    _write(root / "[old] pack" / "x.bin", 10)
    _write(root / "o pack" / "x.bin", 10)  # what the pattern [old] pack would match
    assert run_cli(["cache", "rm", "[old] pack", "--yes", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["removed"]] == ["[old] pack"]
    assert not (root / "[old] pack").exists() and (root / "o pack").is_dir()


def test_json_before_rm_is_refused(caches, capsys) -> None:
    root, _ = caches
    _fill_cache(root)
    assert run_cli(["cache", "--json", "rm", "demo", "--yes"]) == 2
    assert "--json goes after the subcommand" in capsys.readouterr().err and (root / "demo").is_dir()


def test_in_a_terminal_an_empty_answer_removes_nothing(caches, capsys, monkeypatch) -> None:
    root, _ = caches
    _fill_cache(root)
    monkeypatch.setattr("sys.stdin", _Terminal("\n"))
    assert run_cli(["cache", "rm", "demo"]) == 1
    assert (root / "demo").is_dir()


def test_a_folder_cut_short_is_listed_as_left_over_not_as_the_pack(caches, capsys, monkeypatch) -> None:
    """A folder is renamed before it is removed: one cut short (a full disk, Ctrl-C) is never taken for a
    complete synthetic pack, and the error says what was removed before it and what is left."""
    from clover_local.commands import cache

    root, _ = caches
    _fill_cache(root)
    real = shutil.rmtree

    def rmtree(path, *a, **kw):
        if "full-v1" in str(path):
            (Path(path) / "model-00001-of-00002.safetensors").unlink()  # part of it went, then:
            raise PermissionError(13, "Permission denied", str(Path(path) / "model-00002-of-00002.safetensors"))
        return real(path, *a, **kw)

    monkeypatch.setattr(cache.shutil, "rmtree", rmtree)
    assert run_cli(["cache", "rm", "demo", "synthetic/full-v1", "--yes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: could not remove synthetic/full-v1") and "Permission denied" in err, err
    assert "removed before it: demo" in err
    names = {e["name"]: e["what"] for e in _listing(capsys)["entries"]}
    assert "synthetic/full-v1" not in names and "demo" not in names
    left = [n for n in names if n.startswith("synthetic/.removing-full-v1-")]
    assert len(left) == 1 and "interrupted" in names[left[0]] and left[0] in err


def test_a_hub_repo_that_cannot_be_deleted_is_an_error_not_a_success(caches, capsys, monkeypatch) -> None:
    """huggingface_hub logs a path it may not delete (with a traceback) and returns: rm printed that traceback,
    then "✓ removed 1 entry, freed …" and exited 0, the repo still there."""
    _, hub = caches
    _fill_hub(hub)
    repo = hub / "models--Diffuspace--Clover-35B-A3B-Preview"
    real = shutil.rmtree

    def rmtree(path, *a, **kw):
        if Path(path) == repo:
            raise PermissionError(1, "Operation not permitted", str(repo / "blobs"))
        return real(path, *a, **kw)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert run_cli(["cache", "rm", "Diffuspace/Clover-35B-A3B-Preview", "--yes"]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: could not remove Diffuspace/Clover-35B-A3B-Preview from "
                                                   "the Hub cache: ") and "permission denied" in lines[0], err
    assert f"what is left is in {repo}" in lines[0]
    assert "Traceback" not in out + err and "removed 1" not in out + err and repo.is_dir()


def test_repos_sharing_a_commit_hash_lose_only_the_one_named(caches, capsys) -> None:
    """huggingface_hub takes each commit hash from the first repo that has it, in an order that changes from run
    to run: its planner is given only the named repo. Ten pairs, so a planner given every repo fails here."""
    _, hub = caches
    for k in range(10):
        _hub_repo(hub, f"org/target-{k}", {"config.json": CLOVER_CONFIG, "m.safetensors": b"t%d" % k}, sha=SHA_A)
        _hub_repo(hub, f"org/dup-{k}", {"config.json": CLOVER_CONFIG, "m.safetensors": b"d%d" % k}, sha=SHA_A)
    for k in range(10):
        assert run_cli(["cache", "rm", f"org/target-{k}", "--yes"]) == 0, capsys.readouterr().err
        assert not (hub / f"models--org--target-{k}").exists()
        assert (hub / f"models--org--dup-{k}" / "snapshots" / SHA_A / "m.safetensors").is_file()
    capsys.readouterr()
    assert sorted(e["name"] for e in _listing(capsys)["entries"]) == sorted(f"org/dup-{k}" for k in range(10))
