"""Kernel tuning (`clover-local tune`): the table's file and identity, the search over tiles (with fake timers:
speed is a benchmark, not a test), the kernels recording their calls and launching with a table's tiles
(interpreted Triton on CPU tensors), and the command on a tiny pack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pytest
import torch

# as in test_kernels.py: the interpreter must be chosen before anything defines the kernels
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from clover_local.errors import CloverError  # noqa: E402
from clover_local.runtime.kernels import PackedStack, linear_w4a16, moe_w4a16, tuning  # noqa: E402
from clover_local.runtime.kernels.reference import linear_w4a16_ref, moe_w4a16_ref  # noqa: E402
from runtime_pack import pack  # noqa: E402,F401
from test_kernels import DEVICE, _random_pack, force_triton, needs_triton  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def table_file(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CLOVER_TUNING_FILE", str(path))
    monkeypatch.delenv("CLOVER_TUNING", raising=False)
    tuning.reset_active()
    yield path
    tuning.reset_active()


# ---- the table ---------------------------------------------------------------------------------------------


def test_signature_keys_and_row_buckets():
    assert [tuning.rows_bucket(m) for m in (1, 2, 3, 17, 32, 33, 512)] == [1, 2, 4, 32, 32, 64, 512]
    a = tuning.Signature("linear", 32, 2048, 8192, 4, 128, k_tile=128)
    assert a.key() == "linear/r32/k2048/n8192/b4/g128/t128"
    assert a.key() != replace(a, k_tile=0).key() != replace(a, bits=8).key()
    assert tuning.Signature("moe_down", 32, 512, 2048, 4, 128, topk=8).key() == "moe_down/r32/k512/n2048/b4/g128/top8"


def test_table_round_trip_identity_and_bad_files(tmp_path, capsys):
    ident = {"device": "NVIDIA H200", "capability": "9.0", "triton": "3.6.0"}
    path = tmp_path / "t.json"
    assert tuning.read_table(path, ident) == (None, None)  # no file: nothing to say
    sig = tuning.Signature("linear", 32, 256, 512, 4, 128)
    tuning.TuningTable(dict(ident), {sig.key(): {"config": {"block_n": 32}, "us": 1.0}}, "today").save(path)
    assert not path.with_name(path.name + ".tmp").exists()
    table, why = tuning.read_table(path, ident)
    assert why is None and table.config(sig) == {"block_n": 32}
    assert table.config(replace(sig, n=1024)) is None
    with pytest.raises(CloverError, match="cannot write the tuning table .*under-a-file.json: File exists"):
        tuning.TuningTable(dict(ident), {}).save(path / "under-a-file.json")  # (a traceback in `tune`)
    other, why = tuning.read_table(path, {**ident, "device": "NVIDIA GeForce RTX 5070 Ti"})
    assert other is None and "RTX 5070 Ti" in why and "H200" in why
    newer, why = tuning.read_table(path, {**ident, "triton": "3.7.0"})
    assert newer is None and "triton" in why
    path.write_text("{not json")
    bad, why = tuning.read_table(path, ident)
    assert bad is None and "cannot be read" in why
    path.write_text(json.dumps({"format": 99, "entries": {}}))
    assert "format" in tuning.read_table(path, ident)[1]


def test_active_table_warns_once_and_can_be_switched_off(table_file, monkeypatch, capsys):
    cpu = torch.device("cpu")
    ident = tuning.device_identity(cpu)
    sig = tuning.Signature("linear", 32, 256, 512, 4, 128)
    tuning.TuningTable({**ident, "triton": "0.0"}, {sig.key(): {"config": {"block_n": 32}}}).save(table_file)
    assert tuning.tuned(sig, cpu) is None and tuning.tuned(sig, cpu) is None
    err = capsys.readouterr().err
    assert err.count("tuning table ignored") == 1 and "clover-local tune" in err
    tuning.TuningTable(dict(ident), {sig.key(): {"config": {"block_n": 32}}}).save(table_file)
    tuning.reset_active()
    assert tuning.tuned(sig, cpu) == {"block_n": 32}
    assert tuning.summary(cpu) == {"enabled": True, "table": str(table_file), "entries": 1}
    monkeypatch.setenv("CLOVER_TUNING", "off")
    assert tuning.tuned(sig, cpu) is None and tuning.summary(cpu)["entries"] == 0


@dataclass(frozen=True)
class _Cfg:  # the shape of LinearConfig / MoeConfig, without Triton
    block_m: int = 16
    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    fields: bool = True


def test_apply_keeps_block_m_and_ignores_unknown_fields():
    got = tuning.apply(_Cfg(), {"block_m": 64, "block_n": 32, "num_warps": 8, "bogus": 1})
    assert got == _Cfg(block_n=32, num_warps=8)
    assert tuning.apply(_Cfg(), None) == _Cfg()
    assert tuning.apply(_Cfg(), {"block_k": 64}, keep=("block_m", "block_k")) == _Cfg()


# ---- the search --------------------------------------------------------------------------------------------


def _fake_call(wrong=(), raises=()) -> tuning.RecordedCall:
    """A call whose output is right for every config but those in wrong, and raises for those in raises; the
    config of its last run is in `.last` (what the fake timers read)."""
    x = torch.randn(8, 16)
    last = []

    def run(cfg):
        last[:] = [cfg]
        if cfg.block_n in raises:
            raise RuntimeError("out of resources: shared memory")
        return x + (1.0 if cfg.block_n in wrong else 1e-4 * cfg.num_warps)

    call = tuning.RecordedCall(tuning.Signature("linear", 32, 256, 512, 4, 128, 128), _Cfg(), run, calls=3)
    call.last = last
    return call


def _cost(cfg) -> float:
    """A fake GPU: smaller BLOCK_N and more warps are faster."""
    return cfg.block_n / 8 + 10.0 / cfg.num_warps


def _timer_of(call: tuning.RecordedCall, cost):
    """A fake timer: runs the call it is given and prices the config that ran."""
    def timer(fn):
        fn()
        return cost(call.last[0])

    return timer


def _tracked(call: tuning.RecordedCall) -> tuning.RecordedCall:
    """call with its runs' configs kept in `.last`, for `_timer_of`."""
    last = []

    def run(cfg):
        last[:] = [cfg]
        return call.run(cfg)

    out = tuning.RecordedCall(call.sig, call.default, run, call.calls)
    out.last = last
    return out


def test_search_picks_the_fastest_correct_candidate_in_two_stages():
    call = _fake_call(wrong=(32,))  # the fastest BLOCK_N computes garbage: must never win
    res = tuning.tune_call(call, tuning.stages_for(call), _timer_of(call, _cost))
    assert res.default_us == _cost(_Cfg())
    assert res.best["block_n"] == 64 or res.best["block_n"] > 32
    assert res.best["num_warps"] == 8  # found by the second stage, around the grid's winner
    assert res.best_us < res.default_us and res.calls == 3
    rejected = [t for t in res.trials if t.config["block_n"] == 32]
    assert rejected and all(t.us is None and "differs" in t.error for t in rejected)
    keys = [json.dumps(t.config, sort_keys=True) for t in res.trials]
    assert len(keys) == len(set(keys)) and json.dumps(asdict(_Cfg()), sort_keys=True) not in keys


def test_search_survives_failing_candidates_and_keeps_the_default_without_a_real_gain():
    call = _fake_call(raises=(128, 256))
    res = tuning.tune_call(call, tuning.stages_for(call), _timer_of(call, lambda c: 10.0 - 0.01 * c.num_warps))
    assert res.best == asdict(_Cfg()) and "3 %" in res.note  # 0.4 % faster is noise, not a win
    assert any(t.error and "shared memory" in t.error for t in res.trials)


def test_search_keeps_the_default_when_its_output_is_not_finite():
    x = torch.full((4, 4), float("nan"))
    call = tuning.RecordedCall(tuning.Signature("moe_up", 32, 256, 256, 4, 128, topk=8), _Cfg(), lambda c: x)
    res = tuning.tune_call(call, tuning.stages_for(call), lambda fn: 1.0)
    assert res.trials == [] and res.best == asdict(_Cfg()) and "not finite" in res.note


def test_candidate_grids_hold_the_tile_rules():
    lin = _Cfg(block_n=128, split_k=4)
    sig = tuning.Signature("linear", 32, 2048, 8192, 4, 128, 128)
    cands = tuning.linear_candidates(lin, sig)
    assert all(c.block_k == 128 and c.block_m == 16 for c in cands)  # BLOCK_K is the repack tile
    assert max(c.split_k for c in cands) <= 16 and {c.block_n for c in cands} == {32, 64, 128, 256}
    short = tuning.Signature("linear", 32, 256, 512, 8, 128, 128)  # 2 K tiles: split-K ≤ 2
    assert max(c.split_k for c in tuning.linear_candidates(_Cfg(), short)) == 2
    assert len(tuning.linear_candidates(lin, sig, quick=True)) < len(cands)


def test_refinements_toggle_the_mask_register_only_where_it_acts():
    from clover_local.runtime.kernels.w4a16 import MoeConfig

    def toggles(best) -> bool:
        return any(c.mask_reg != best.mask_reg for c in tuning.refinements(best))

    assert toggles(MoeConfig(16))  # field-wise and folded: MASK_REG is live
    assert not toggles(MoeConfig(16, fields=False)) and not toggles(MoeConfig(16, folded=False))
    assert any(not c.fields for c in tuning.refinements(MoeConfig(16)))  # the other form is still tried
    moe = tuning.refinements(MoeConfig(16))  # the MoE's: 5 stages and a register cap, both apart
    assert [c.maxnreg for c in moe if c.maxnreg] == [128] and any(c.num_stages == 5 and not c.maxnreg for c in moe)
    capped = MoeConfig(16, maxnreg=128)  # a capped winner is tried without its cap
    assert replace(capped, maxnreg=None) in tuning.refinements(capped)
    assert not any(hasattr(c, "maxnreg") for c in tuning.refinements(_Cfg()))  # the dense configs have none


# ---- the kernels record and use the table ------------------------------------------------------------------


class _Spy:
    """Stands in for a Triton kernel object: records each launch's meta-parameters, then launches."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.launches.append({k: kw[k] for k in ("BLOCK_N", "BLOCK_K", "num_warps") if k in kw})
            return self.kernel[grid](*args, **kw)

        return launch


def _rand_linear(k, n, bits, gen):
    p = _random_pack(k, n, 128, bits, gen)
    return tuple(p[name].to(DEVICE) for name in ("qweight", "scales", "qzeros"))


@needs_triton
def test_linear_calls_are_recorded_and_run_with_the_table_tiles(force_triton, table_file, monkeypatch):
    from clover_local.runtime.kernels import w4a16

    gen = torch.Generator().manual_seed(3)
    qw, sc, qz = _rand_linear(256, 256, 4, gen)
    x = torch.randn(32, 256, generator=gen).to(DEVICE)
    with tuning.Recorder(rows=32) as rec:
        first = linear_w4a16(x, qw, sc, qz, 128, 4)
        linear_w4a16(x[:5], qw, sc, qz, 128, 4)  # 5 rows: another bucket, not recorded
        linear_w4a16(x, qw, sc, qz, 128, 4)
    assert tuning.recording() is None and list(rec.calls) == ["linear/r32/k256/n256/b4/g128/t0"]
    call = rec.calls["linear/r32/k256/n256/b4/g128/t0"]
    assert call.calls == 2 and torch.equal(call.run(call.default), first)
    x.add_(1.0)  # the record holds its own copy of the input
    assert torch.equal(call.run(call.default), first)

    call = _tracked(call)
    res = tuning.tune_call(call, [lambda _: [replace(call.default, block_n=32), replace(call.default, split_k=2)]],
                           _timer_of(call, lambda c: c.block_n + 100 * (c.split_k > 1)))
    assert res.best["block_n"] == 32 and res.best_us < res.default_us
    ident = tuning.device_identity(torch.device(DEVICE))
    tuning.TuningTable(dict(ident), {call.sig.key(): res.entry()}).save(table_file)
    tuning.reset_active()

    spy = _Spy(w4a16._linear_kernel)
    monkeypatch.setattr(w4a16, "_linear_kernel", spy)
    x.sub_(1.0)
    got = linear_w4a16(x, qw, sc, qz, 128, 4)
    torch.testing.assert_close(got, linear_w4a16_ref(x, qw, sc, qz, 128, 4), rtol=2e-2, atol=2e-2)
    monkeypatch.setenv("CLOVER_TUNING", "off")
    linear_w4a16(x, qw, sc, qz, 128, 4)
    assert [s["BLOCK_N"] for s in spy.launches] == [32, call.default.block_n] and call.default.block_n != 32


@needs_triton
def test_moe_passes_are_tuned_apart(force_triton, table_file, monkeypatch):
    from clover_local.runtime.kernels import w4a16

    gen = torch.Generator().manual_seed(4)
    slots, h, inter, topk, m = 6, 256, 128, 2, 32
    stacks = []
    for k, n in ((h, 2 * inter), (inter, h)):
        parts = [_random_pack(k, n, 128, 4, gen) for _ in range(slots)]
        stacks.append(PackedStack(*(torch.stack([p[name] for p in parts]).to(DEVICE)
                                    for name in ("qweight", "scales", "qzeros")), 128, 4))
    gate_up, down = stacks
    x = torch.randn(m, h, generator=gen).to(DEVICE)
    ids = torch.stack([torch.randperm(slots, generator=gen)[:topk] for _ in range(m)]).to(DEVICE)
    w = torch.softmax(torch.randn(m, topk, generator=gen), -1).to(DEVICE)
    with tuning.Recorder(rows=32) as rec:
        want = moe_w4a16(x, ids, w, gate_up, down)
    assert sorted(rec.calls) == ["moe_down/r32/k128/n256/b4/g128/top2", "moe_up/r32/k256/n256/b4/g128/top2"]
    up, dn = rec.calls["moe_up/r32/k256/n256/b4/g128/top2"], rec.calls["moe_down/r32/k128/n256/b4/g128/top2"]
    assert torch.equal(up.run(up.default), want) and torch.equal(dn.run(dn.default), want)
    # only the down pass gains (BLOCK_N 32); its entry must not change the gate/up pass's tiles
    dn = _tracked(dn)
    res = tuning.tune_call(dn, [lambda _: [replace(dn.default, block_n=32)]], _timer_of(dn, lambda c: c.block_n))
    assert res.best["block_n"] == 32
    ident = tuning.device_identity(torch.device(DEVICE))
    tuning.TuningTable(dict(ident), {dn.sig.key(): res.entry()}).save(table_file)
    tuning.reset_active()
    spy = _Spy(w4a16._moe_kernel)
    monkeypatch.setattr(w4a16, "_moe_kernel", spy)
    got = moe_w4a16(x, ids, w, gate_up, down)
    assert [s["BLOCK_N"] for s in spy.launches] == [up.default.block_n, 32]
    torch.testing.assert_close(got.float(), moe_w4a16_ref(x, ids, w, gate_up, down).float(), rtol=2e-2, atol=2e-2)


@needs_triton
def test_the_gdn_preview_form_is_recorded_tuned_and_read_back(force_triton, table_file, monkeypatch):
    """A GDN layer's preview call is recorded like a W4A16 call (signature by rows and head dims), its forms are
    the candidates (one launch; split over value slices that divide Dv), every form gives the default's output,
    and a table entry choosing the split form makes the next call run it."""
    from clover_local.model.cache import GDNCache
    from clover_local.runtime.kernels import gdn_preview, gdn_preview_kernel
    from test_kernels import _gdn_inputs, _random_gdn

    monkeypatch.delenv("CLOVER_GDN_PREVIEW", raising=False)
    gen = torch.Generator().manual_seed(6)
    gdn = _random_gdn({"linear_key_head_dim": 32, "linear_value_head_dim": 64, "block_size": 16}, torch.float32,
                      gen).to(DEVICE)
    gdn.preview_kernel = gdn_preview_kernel(gdn, torch.device(DEVICE))
    x, ring, state = _gdn_inputs(gdn, 1, 16, torch.float32, gen)
    n = torch.tensor(20, device=DEVICE)

    def layer() -> torch.Tensor:
        with torch.no_grad():
            return gdn(x, GDNCache(ring, state), preview=True, n_prefix=n)

    with tuning.Recorder(rows=16) as rec:
        want = layer()
    key = f"gdn_preview/r16/k32/n64/b0/g0/top{gdn.hv}"
    assert list(rec.calls) == [key] and rec.calls[key].default == gdn_preview.PreviewConfig("whole")
    call = rec.calls[key]
    cands = tuning.stages_for(call)[0](call.default)
    assert [(c.form, c.block_dv) for c in cands] == [("whole", 64), ("split", 64), ("split", 32), ("split", 16)]
    base = call.run(call.default)
    for c in cands:  # every form within the search's tolerance of the default's output
        assert tuning._rel_err(call.run(c), base) < tuning.REL_TOL, c
    call = _tracked(call)
    res = tuning.tune_call(call, tuning.stages_for(call), _timer_of(call, lambda c: 1.0 if c.form == "whole" else
                                                                  0.5 + c.block_dv / 1000))
    assert res.best == {"form": "split", "block_dv": 16}
    ident = tuning.device_identity(torch.device(DEVICE))
    tuning.TuningTable(dict(ident), {key: res.entry()}).save(table_file)
    tuning.reset_active()
    ran = []
    real = gdn_preview.split_gdn_preview
    monkeypatch.setattr(gdn_preview, "split_gdn_preview", lambda *a, **k: ran.append(k) or real(*a, **k))
    got = layer()
    assert ran == [{"block_dv": 16}]
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * want.abs().max().item())


# ---- the command ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("synthetic", ["small", "full"])
def test_tune_refuses_where_no_triton_kernel_runs(tmp_path, synthetic):
    """Before anything is written: `--synthetic full` would write a ≈ 20 GB pack first (it did, until 2026-12-03)."""
    env = {**os.environ, "CLOVER_LOCAL_CACHE": str(tmp_path), "CLOVER_DISABLE_TRITON": "1"}
    res = subprocess.run([sys.executable, "-m", "clover_local", "tune", "--synthetic", synthetic, "--device", "cpu"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: tune times the Triton kernels")
    assert not (tmp_path / "tuning").exists() and not (tmp_path / "synthetic").exists()


_E2E = r"""
import json, os, sys, torch
from dataclasses import replace
from pathlib import Path
from clover_local.runtime.kernels import tuning, w4a16
from clover_local.runtime import tune as tune_mod
from clover_local.runtime.load import RuntimeOptions, load_packed_model

pack = Path(sys.argv[1])
launched = []  # BLOCK_N of every W4A16 launch, from spies standing in for the two kernels
for name in ("_linear_kernel", "_moe_kernel"):
    class Spy:
        def __getitem__(self, grid, kernel=getattr(w4a16, name)):
            def go(*a, **kw):
                launched.append(kw["BLOCK_N"])
                return kernel[grid](*a, **kw)
            return go
    setattr(w4a16, name, Spy())

def fake_clock(fn):  # the flow is under test, not the speed: a run that launched BLOCK_N 32 is "faster"
    launched.clear()
    fn()
    return 1.0 if 32 in launched else 2.0

# one candidate per call: BLOCK_N 32 (the GDN preview's: its split form, which launches no W4A16 kernel, so the
# fake clock gives it no gain and its default stays)
tuning.stages_for = lambda rec, quick=False: [lambda _b: [
    replace(rec.default, form="split", block_dv=16) if rec.sig.kind == "gdn_preview"
    else replace(rec.default, block_n=32)]]

# interrupted during the third call: the two finished ones are in the table already
timed = []
def interrupted_clock(fn):
    timed.append(1)
    if len(timed) > 4:  # two timings (default, candidate) per call
        raise KeyboardInterrupt
    return fake_clock(fn)
try:
    tune_mod.run_tune(pack, label="tiny", device=torch.device("cpu"), dtype=torch.float32, vram_budget=None,
                      timer=interrupted_clock)
    raise AssertionError("not interrupted")
except KeyboardInterrupt:
    pass
table_path = tuning.table_path(tuning.device_identity(torch.device("cpu")))
assert len(json.loads(table_path.read_text())["entries"]) == 2
report = tune_mod.run_tune(pack, label="tiny", device=torch.device("cpu"), dtype=torch.float32, vram_budget=None,
                           uniform=True, timer=fake_clock)
table = json.loads(Path(report["table"]).read_text())
kinds = sorted({r["kind"] for r in report["calls"]})
assert kinds == ["gdn_preview", "linear", "moe_down", "moe_up"], kinds
w4 = [r for r in report["calls"] if r["kind"] != "gdn_preview"]
assert all(r["changed"] == {"block_n": 32} and r["calls_per_pass"] >= 1 for r in w4), report["calls"]
assert all(not r["changed"] for r in report["calls"] if r["kind"] == "gdn_preview"), report["calls"]
assert report["saved_us_per_pass"] > 0 and set(table["entries"]) == {r["key"] for r in report["calls"]}

# a fresh runtime reads the table: every recorded call now launches with BLOCK_N 32, and the pass still matches
model = load_packed_model(pack, torch.device("cpu"), torch.float32, RuntimeOptions(context=128, cuda_graphs=False))
bs = model.config.diffusion.block_size  # the rows tune recorded
block = torch.full((1, bs), model.config.diffusion.mask_token_id, dtype=torch.long)
launched.clear()
with torch.inference_mode():
    tuned = model(block, model.new_cache(), preview=True)
assert launched and set(launched) == {32}, sorted(set(launched))
os.environ["CLOVER_TUNING"] = "off"
launched.clear()
with torch.inference_mode():
    plain = model(block, model.new_cache(), preview=True)
assert 32 not in launched, sorted(set(launched))
torch.testing.assert_close(tuned, plain, rtol=2e-2, atol=2e-2)
print("ok")
"""


@needs_triton
def test_tune_writes_a_table_that_the_next_runtime_uses(pack, tmp_path):  # noqa: F811
    """The whole flow on the tiny pack, interpreted: record a preview pass's calls, search (one candidate, a
    fake clock), write the table, and a freshly loaded runtime launches every recorded call with its tiles."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CLOVER_FORCE_TRITON": "1", "OMP_NUM_THREADS": "1",
           "CLOVER_LOCAL_CACHE": str(tmp_path)}
    env.pop("CLOVER_TUNING_FILE", None)
    env.pop("CLOVER_TUNING", None)
    res = subprocess.run([sys.executable, "-c", _E2E, str(pack)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT / "tests")
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]
    assert len(list((tmp_path / "tuning").glob("cpu-sminterpreter-triton*.json"))) == 1
