"""The MoE anatomy (`runtime/kernels/moe_anatomy.py`, gpu_check's `anatomy` stage) interpreted on small shapes:
its read probes read exactly the words the MoE pass's programs read (checked by XOR against torch, and a probe
that read the wrong words would fail), its launch split names the call's launches, and the report is complete."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from clover_local.runtime.kernels import moe_anatomy as ma  # noqa: E402
from clover_local.runtime.kernels import w4a16  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() and not w4a16._INTERPRET,
                                reason="no GPU, and TRITON_INTERPRET=1 was not in force when triton loaded")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_the_anatomy_reports_every_probe_checked_and_the_calls_launches() -> None:
    r = ma.moe_anatomy(DEVICE, hidden=128, inter=64, experts=6, rows=5, topk=2, group=64)
    assert r["ok"] and r["finite"]
    assert 2 <= r["shape"]["distinct"] <= 6 and r["shape"]["runs"] >= r["shape"]["distinct"]
    assert list(r["segments_us"]) == ["align", "gate/up", "down", "sum", "call"]
    assert sum(v for k, v in r["segments_us"].items() if k != "call") <= r["segments_us"]["call"] + 1.0
    # every variant whose K split fits whole tiles: gate/up K = 128 inputs = 16 packed rows in tiles of 8 (group
    # 64 caps BLOCK_K at 64): splits of 1 and 2; down K = 64 = 8 rows, one tile: no split
    up = [(p["block_n"], p["split"], p["num_warps"]) for p in r["tiles"] if p["pass"] == "gate/up"]
    down = [(p["block_n"], p["split"], p["num_warps"]) for p in r["tiles"] if p["pass"] == "down"]
    assert up == [t for t in ma.UP_TILES if t[1] <= 2] and down == [t for t in ma.DOWN_TILES if t[1] == 1]
    assert all(p["xor_ok"] and p["us"] > 0 and p["bytes"] > 0 and "error" not in p for p in r["tiles"])
    from clover_local.runtime.slab import SlabLayout

    assert r["flat"]["xor_ok"] and r["flat"]["bytes"] == r["shape"]["distinct"] * SlabLayout(128, 64, 4, 2, 1).nbytes
    # the call with one knob turned at a time: the same output, each pass timed apart
    assert list(r["configs"]) == [name for name, _ in ma.MOE_VARIANTS]
    for name, v in r["configs"].items():
        assert "error" not in v and v["rel_err_vs_default"] < 1e-3, (name, v)
        assert {"align", "gate/up", "down", "sum", "call"} <= set(v), (name, v)


def test_the_anatomy_reports_each_part_as_it_goes() -> None:
    """A GPU stage under a time limit keeps what it measured: the report goes out after each part."""
    parts: list[list[str]] = []
    ma.moe_anatomy(DEVICE, hidden=128, inter=64, experts=6, rows=5, topk=2, group=64, quick=True,
                   on_part=lambda out: parts.append(sorted(out)))
    assert "segments_us" in parts[0] and "flat" not in parts[0]
    assert "flat" in parts[1] and "tiles" not in parts[1]
    assert "tiles" in parts[-1] and len(parts) == 4  # launches, flat read, gate/up probes, down probes


def test_the_read_probe_folds_exactly_the_pass_programs_words_and_splits_along_k() -> None:
    from clover_local.runtime.slab import SlabLayout

    g = torch.Generator().manual_seed(5)
    lay = SlabLayout(256, 64, 4, 2, 1)  # gate/up K = 256 inputs: 32 packed rows, two 16-row tiles
    buf = torch.randint(0, 256, (6, lay.nbytes), dtype=torch.uint8, generator=g).to(DEVICE)
    gate_up, down = lay.stacks(buf)
    idx = torch.tensor([[0, 3], [3, 5], [3, 0], [1, 3]], device=DEVICE)  # slot 3 in 4 pairs; 2 and 4 unused
    align = w4a16.moe_align(idx, 6, 16)
    want = ma.tiles_xor(gate_up.qweight, align, 64, 2, 16)
    for block_n, split in ((64, 1), (32, 1), (128, 1), (64, 2)):
        got = ma.read_tiles(gate_up.qweight, align, 64, 2, 16, 128, 4, block_n, split)
        assert ma.xor_all(got) == want, (block_n, split)
    # a probe of the gate half only, or of other slots, folds to something else: the check can fail
    assert ma.xor_all(ma.read_tiles(gate_up.qweight, align, 32, 2, 16, 128, 4, 32)) != want
    other = w4a16.moe_align(torch.tensor([[2, 4]], device=DEVICE), 6, 16)
    assert ma.xor_all(ma.read_tiles(gate_up.qweight, other, 64, 2, 16, 128, 4, 64)) != want
    with pytest.raises(ValueError, match="do not split"):
        ma.read_tiles(gate_up.qweight, align, 64, 2, 16, 128, 4, 64, split=4)
    slots = torch.tensor([1, 3, 5], dtype=torch.int32, device=DEVICE)
    assert ma.xor_all(ma.read_slabs(buf, slots, block=512)) == ma.xor_all(buf[[1, 3, 5]])
    assert ma.xor_all(ma.read_slabs(buf, slots[:2], block=512)) != ma.xor_all(buf[[1, 3, 5]])
