"""`clover-local demo`: the shipped tiny model → INT4 pack (cached) → load → one chat turn → next commands, in
under two minutes on a 2-core CPU. Also the same pipeline on a random checkpoint (runs before the tiny model
is shipped) and the error when the tiny model is missing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clover_local.commands.demo import DEMO_PROMPT

from clover_local.loader import SHORT_NAMES
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
TINY = SHORT_NAMES["tiny"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOVER_LOCAL_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HOME=str(tmp_path / "home"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "clover_local", "demo", *args], capture_output=True, text=True,
                          env=_env(tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=300)
    return proc, time.monotonic() - t0


def _check_output(proc: subprocess.CompletedProcess, pack: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"you › {DEMO_PROMPT}" in out
    assert "tokens/pass]" in out  # the turn's figures
    assert "Next, try:" in out
    assert f"clover-local chat {pack}" in out and f"clover-local serve {pack}" in out
    assert "quantize" in proc.stderr and "Traceback" not in proc.stderr
    assert (pack / "clover_manifest.json").is_file()


@pytest.mark.skipif(not (TINY / "config.json").is_file(), reason="tiny model not shipped yet")
def test_demo_end_to_end_under_two_minutes(tmp_path):
    proc, seconds = _demo(tmp_path)
    _check_output(proc, tmp_path / "cache" / "clover-local" / "demo" / "tiny-int4")
    assert seconds < 120, f"the demo took {seconds:.0f} s"
    again, _ = _demo(tmp_path)  # the pack is reused, not made again
    assert again.returncode == 0 and "reused from the cache" in again.stderr
    assert "Good morning!" in proc.stdout  # the shipped model answers the demo's greeting


def test_demo_pipeline_on_a_random_checkpoint(make_checkpoint, tmp_path):
    from clover_local.tiny.train import write_calibration

    src = make_checkpoint(seed=9)
    write_calibration(src / "calibration.jsonl", seed=0, n=40)  # quantize uses a checkpoint's own set
    cache = tmp_path / "packs"
    proc, seconds = _demo(tmp_path, "--source", str(src), "--cache-dir", str(cache))
    _check_output(proc, cache / "tiny-int4")
    assert "done in" in proc.stderr
    # sizes in the binary units plan, bench and the model card use (it printed decimal "MB")
    assert re.search(r"done in [0-9.]+ s: [0-9.]+ (KiB|MiB) → [0-9.]+ (KiB|MiB) at", proc.stderr), proc.stderr
    assert seconds < 120


def test_demo_without_the_tiny_model_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(SHORT_NAMES, "tiny", tmp_path / "no-tiny")
    assert run_cli(["demo", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the tiny model is not in this installation")
