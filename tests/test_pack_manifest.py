"""The pack manifest: atomic writes, hashing, finalize, and verify_pack's one-sentence refusals."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from clover_local.errors import CloverError
from clover_local.pack import MANIFEST_NAME, Manifest, pack_files, sha256_file, verify_pack


def _pack(folder, *, finalize=True, readme=False):
    folder.mkdir(parents=True, exist_ok=True)
    m = Manifest(
        source={"repo_id": "Diffuspace/Clover-35B-A3B-Preview", "revision": "0123abc"},
        settings={"bits": 4, "group_size": 128, "method": "gptq", "profile": "balanced", "sym": True, "desc_act": False},
        calibration={"source": "calib_data/mix.txt", "samples": 8, "seq_len": 64},
    )
    m.write(folder)  # started, not complete
    rng = np.random.default_rng(0)
    save_file(
        {"layers.0.mlp.qweight": rng.integers(-(2**31), 2**31 - 1, size=(16, 32), dtype=np.int32)},
        str(folder / "model-00001-of-00002.safetensors"),
    )
    save_file(
        {"layers.1.mlp.scales": rng.standard_normal((4, 32)).astype(np.float16)},
        str(folder / "model-00002-of-00002.safetensors"),
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "clover_moe", "quantization_config": {"bits": 4}}))
    (folder / "tok").mkdir()
    (folder / "tok" / "tokenizer.json").write_text('{"version": "1.0"}')
    if readme:
        (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# card\n")
    if finalize:
        m.finalize(folder)
    return m


def test_round_trip_keeps_unknown_keys(tmp_path):
    m = Manifest(settings={"bits": 4, "anything": [1, 2]}, quality={"kl_causal_mean": 0.01})
    m.extra["future_section"] = {"x": 1}
    m.write(tmp_path)
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert raw["format"] == "clover-pack" and raw["format_version"] == 1 and raw["complete"] is False
    assert raw["future_section"] == {"x": 1}
    back = Manifest.load(tmp_path)
    assert back.settings == {"bits": 4, "anything": [1, 2]}
    assert back.quality == {"kl_causal_mean": 0.01}
    assert back.extra == {"future_section": {"x": 1}}
    assert back.to_dict() == raw
    assert "T" in back.created and back.created.endswith("+00:00")


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    Manifest(settings={"bits": 4}).write(tmp_path)
    before = (tmp_path / MANIFEST_NAME).read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        Manifest(settings={"bits": 8}).write(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / MANIFEST_NAME).read_text() == before  # the old manifest is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME]  # no temp file left


def test_finalize_hashes_every_file_but_manifest_card_and_hidden(tmp_path):
    pack = tmp_path / "pack"
    _pack(pack, finalize=False, readme=True)
    (pack / ".cache" / "huggingface").mkdir(parents=True)
    (pack / ".cache" / "huggingface" / "meta").write_text("x")
    m = Manifest.load(pack)
    assert m.complete is False
    m.finalize(pack)
    again = Manifest.load(pack)
    assert again.complete is True
    assert sorted(again.files) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tok/tokenizer.json",
    ]
    for name, entry in again.files.items():
        data = (pack / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert again.total_bytes == sum(e["bytes"] for e in again.files.values())
    assert verify_pack(pack).files == again.files


def test_sha256_is_streamed_in_chunks(tmp_path):
    path = tmp_path / "big.bin"
    data = os.urandom(9 * 1024 * 1024 + 5)
    path.write_bytes(data)
    seen = []
    assert sha256_file(path, seen.append) == hashlib.sha256(data).hexdigest()
    assert len(seen) == 2 and max(seen) <= 8 * 1024 * 1024 and sum(seen) == len(data)


def test_verify_refuses_missing_manifest(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CloverError, match="has no clover_manifest.json"):
        verify_pack(tmp_path)


def test_verify_refuses_incomplete_pack(tmp_path):
    _pack(tmp_path, finalize=False)
    with pytest.raises(CloverError, match="not complete"):
        verify_pack(tmp_path)


def test_verify_names_missing_file(tmp_path):
    _pack(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CloverError, match=r"missing model-00002-of-00002\.safetensors"):
        verify_pack(tmp_path)


def _flip_a_byte(path) -> None:
    """One bit of one byte near the end changed: the size stays, only the sha256 can tell."""
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_names_file_with_wrong_size(tmp_path):
    _pack(tmp_path)
    with open(tmp_path / "config.json", "a") as f:
        f.write(" ")
    with pytest.raises(CloverError, match=r"config\.json .* bytes but the manifest says"):
        verify_pack(tmp_path)


def test_verify_names_file_with_one_byte_changed(tmp_path):
    _pack(tmp_path)
    _flip_a_byte(tmp_path / "model-00001-of-00002.safetensors")
    with pytest.raises(CloverError) as err:
        verify_pack(tmp_path)
    msg = str(err.value)
    assert "model-00001-of-00002.safetensors" in msg and "sha256" in msg
    assert "\n" not in msg


def test_verify_only_hashes_the_named_files(tmp_path):
    _pack(tmp_path)
    _flip_a_byte(tmp_path / "model-00001-of-00002.safetensors")
    verify_pack(tmp_path, only=["config.json"])  # the corrupt shard is not re-hashed
    with pytest.raises(CloverError, match="model-00001"):
        verify_pack(tmp_path, only=["model-00001-of-00002.safetensors"])


def test_verify_refuses_unlisted_weight_file_but_not_other_files(tmp_path):
    _pack(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes")  # not a weight file: fine
    (tmp_path / "README.md").write_text("# edited card")  # the card is not hashed: fine
    verify_pack(tmp_path)
    save_file({"x": np.zeros(4, dtype=np.float32)}, str(tmp_path / "model-00003-of-00002.safetensors"))
    with pytest.raises(CloverError, match=r"model-00003-of-00002\.safetensors .* does not list"):
        verify_pack(tmp_path)


def test_verify_refuses_unsafe_names_and_bad_manifests(tmp_path):
    _pack(tmp_path)
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
    raw["files"]["../outside.json"] = {"sha256": "0" * 64, "bytes": 1}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(CloverError, match="unsafe file name"):
        verify_pack(tmp_path)

    raw["files"].pop("../outside.json")
    raw["format_version"] = 99
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(CloverError, match="newer than this clover-local"):
        verify_pack(tmp_path)

    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(CloverError, match="cannot be read as JSON"):
        Manifest.load(tmp_path)

    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CloverError, match="not a clover-local pack manifest"):
        Manifest.load(tmp_path)


def test_pack_files_lists_subfolders_posix(tmp_path):
    _pack(tmp_path, readme=True)
    assert "tok/tokenizer.json" in pack_files(tmp_path)
    assert MANIFEST_NAME not in pack_files(tmp_path)
    assert "README.md" not in pack_files(tmp_path)


# --- mutation-testing additions ------------------------------------------------------------------------------


def test_verify_names_a_truncated_file(tmp_path):
    _pack(tmp_path)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-5])  # shorter than the manifest says (an interrupted download)
    with pytest.raises(CloverError, match=rf"model-00002-of-00002\.safetensors .* has {len(data) - 5} bytes but "
                                          rf"the manifest says {len(data)}"):
        verify_pack(tmp_path)


def test_verify_compares_the_whole_sha256(tmp_path):
    _pack(tmp_path)
    raw = json.loads((tmp_path / MANIFEST_NAME).read_text())
    entry = raw["files"]["tok/tokenizer.json"]
    assert entry["sha256"] == hashlib.sha256((tmp_path / "tok" / "tokenizer.json").read_bytes()).hexdigest()
    verify_pack(tmp_path)
    last = entry["sha256"][-1]
    entry["sha256"] = entry["sha256"][:-1] + ("0" if last != "0" else "1")  # only the final hex digit differs
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(CloverError, match=r"tok/tokenizer\.json .* sha256"):
        verify_pack(tmp_path)
    entry["sha256"] = entry["sha256"][:-1] + last
    entry["sha256"] = entry["sha256"].upper()  # the digest's case does not matter
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(raw))
    verify_pack(tmp_path)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "extra/model.gguf", "weights.pt", "adapter.npz"])
def test_verify_refuses_unlisted_weight_files_of_every_kind(tmp_path, name):
    _pack(tmp_path)
    stray = tmp_path / name
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"\x00" * 16)
    with pytest.raises(CloverError, match=name.replace(".", r"\.") + " .* does not list"):
        verify_pack(tmp_path)


def test_verify_only_ignores_names_the_manifest_does_not_list(tmp_path):
    _pack(tmp_path)
    _flip_a_byte(tmp_path / "model-00001-of-00002.safetensors")
    # a name the manifest does not list (e.g. a file the Hub listing had) is skipped, not a crash
    assert verify_pack(tmp_path, only=["not-in-the-pack.json", "config.json"]).complete
    with pytest.raises(CloverError, match="model-00001"):
        verify_pack(tmp_path, only=["not-in-the-pack.json", "model-00001-of-00002.safetensors"])


def test_hidden_files_inside_subfolders_are_not_hashed(tmp_path):
    _pack(tmp_path, finalize=False)
    (tmp_path / "tok" / ".tokenizer.json.swp").write_text("editor droppings")
    m = Manifest.load(tmp_path)
    m.finalize(tmp_path)
    assert "tok/tokenizer.json" in m.files
    assert not any(".swp" in name for name in m.files)
    assert "tok/.tokenizer.json.swp" not in pack_files(tmp_path)
    (tmp_path / "tok" / ".tokenizer.json.swp").write_text("changed later")  # still fine: not part of the pack
    verify_pack(tmp_path)


def test_card_tables_render_each_kind_of_value(tmp_path):
    """The card's numbers: the disk row is the sum of the hashed files (not a memory estimate), extra memory keys
    ending in `bytes` are sizes, top-1 agreement is a percentage even at 0, and every recorded setting has its row."""
    from clover_local.pack.card import card_text, human_bytes

    m = _pack(tmp_path)
    m.settings["clip"] = False
    m.memory = {"total_bytes": 7 * 1024**3, "kv_cache_bytes": 3 * 1024**2 + 512 * 1024, "experts_per_layer": 8}
    m.quality = {"top1_causal": 0.0, "top1_preview": 1.0, "kl_causal_mean": 0.25}
    text = card_text(m, None, "me/p")
    disk = human_bytes(sum(e["bytes"] for e in m.files.values()))
    assert disk != human_bytes(7 * 1024**3)
    assert f"| Pack on disk (all files) | {disk} |" in text
    assert "| Weights in total | 7.0 GiB |" in text
    assert "| `kv_cache_bytes` | 3.5 MiB |" in text and "| `experts_per_layer` | 8 |" in text
    assert "| Top-1 agreement with BF16, causal pass | 0.00 % |" in text
    assert "| Top-1 agreement with BF16, preview pass | 100.00 % |" in text
    assert "| Clip search per group | no |" in text and "| Symmetric | yes |" in text
    assert "| GPTQ in activation order (static groups) | not recorded |" in text
