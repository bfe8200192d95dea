"""`doctor`, `bench`, `tune` and `score`, continued (a mutation audit's findings): what the first suite let change
unseen.

doctor's checks one by one, with the machine faked where this one lacks it (a CUDA GPU with its capability, memory
and architecture list; a Triton that loads or not; a driver's version file; a tuning table; a disk that cannot be
written; a shipped model that lost a file): each verdict (ok / warn / fail), the text and the fix a user reads,
the token and token-shaped text scrubbed from the details, the fixes and the --json facts, the facts kept as strict
JSON, and the report's sections, fix lines and tally. bench's figures from one offloaded CPU run: the roofline at
the bandwidth it quotes, the RTX 5070 Ti projection as the per-call rule plus the steady PCIe bytes at 50 GB/s, the
per-component floors and projection (from a stand-in profiler with known times and bytes), and the text report
(the projection printed only from GPU times, from graph times where there are some, the component table's columns
dropped least telling first). tune's command flags as they reach `run_tune`, and its table's gain, notes and
totals. score's perplexity and its refusal of a text over the context.
"""

from __future__ import annotations

import io
import json
import math
import sys
import types
from pathlib import Path

import pytest
import torch

from clover_local import diagnostics
from clover_local.diagnostics import common, gpu, host, kernels as kernel_checks, software, storage
from clover_local.diagnostics.common import FAIL, GIB, OK, WARN, Result
from test_cli_generate_ux import GEN, needs_tiny
from test_doctor import isolated
from tests.conftest import run_cli

AUTOUSE = (isolated,)  # test_doctor's: the caches and the token file under tmp_path, no token from outside

# ---- the report: scrubbing, strict JSON, the printed form --------------------------------------------------------


def test_scrub_replaces_each_secret_and_any_token_shaped_text() -> None:
    assert diagnostics.scrub("key=plainvalue9 and plainvalue9", ["plainvalue9"]) == "key=*** and ***"
    shaped = "hf_" + "Ab1" * 8  # 24 characters after hf_, no configured token
    assert diagnostics.scrub(f"the server said {shaped}.", []) == "the server said [a token]."
    assert diagnostics.scrub("hf_short1", []) == "hf_short1"  # too short to be a token


def _only(monkeypatch, *checks) -> None:
    """doctor runs just these (section, name, function) checks."""
    monkeypatch.setattr(diagnostics, "_checks", lambda: list(checks))


def test_a_token_in_a_fix_or_in_the_facts_is_never_printed(monkeypatch, capsys) -> None:
    token = "plainTokenValue42"  # not hf_-shaped: only the configured token's own text can find it
    monkeypatch.setenv("HF_TOKEN", token)

    def leaky(say):
        return Result(WARN, f"detail {token}", f"fix with {token}", {"url": f"https://u:{token}@host/"})

    _only(monkeypatch, ("disk", "leaky", leaky))
    [c] = diagnostics.run_checks()
    assert c.detail == "detail ***" and c.fix == "fix with ***"
    assert run_cli(["doctor", "--json"]) == 0
    out = capsys.readouterr().out
    assert token not in out and json.loads(out)["facts"]["leaky"]["url"] == "https://u:***@host/"


def test_the_json_report_keeps_every_fact_as_strict_json(tmp_path) -> None:
    facts = {"err": float("inf"), "nan": float("nan"), "ok": 0.5, "where": tmp_path, "pair": (1, 2), "n": 3}
    check = diagnostics.Check("k", "kernels", FAIL, "d", "f", facts)
    rep = diagnostics.report([check, diagnostics.Check("h", "host", WARN, "d2")])
    assert rep["facts"]["k"] == {"err": None, "nan": None, "ok": 0.5, "where": str(tmp_path), "pair": [1, 2], "n": 3}
    assert rep["checks"][0] == {"name": "k", "section": "kernels", "status": "fail", "detail": "d", "fix": "f"}
    assert rep["ok"] is False and rep["counts"] == {"ok": 0, "warn": 1, "fail": 1}
    json.dumps(rep, allow_nan=False)


def test_one_line_keeps_the_first_300_characters_of_the_first_line() -> None:
    assert common.one_line(RuntimeError("x" * 500 + "\nmore")) == "RuntimeError: " + "x" * 286
    assert common.one_line(KeyError()) == "KeyError"


def test_the_text_report_prints_sections_in_order_fixes_under_their_line_and_the_tally(monkeypatch, capsys) -> None:
    _only(monkeypatch,
          ("software", "alpha", lambda say: Result(OK, "fine")),
          ("device", "beta", lambda say: Result(WARN, "so-so", "do the thing")),
          ("host", "gamma", lambda say: Result(OK, "fine too")),
          ("disk", "delta", lambda say: Result(OK, "roomy")))
    assert run_cli(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if line in ("Software", "Device", "Host", "Kernels", "Disk and Hub")]
    assert heads == ["Software", "Device", "Host", "Disk and Hub"]  # a section without checks has no heading
    at = lines.index("  ! beta  so-so")
    assert lines[at + 1] == " " * 10 + "→ do the thing"
    assert lines[-1] == "3 ✓, 1 !, 0 ✗: nothing failed (the ! lines are worth a look)"


# ---- software ----------------------------------------------------------------------------------------------------


def test_installed_metadata_older_than_the_source_is_a_warning(monkeypatch) -> None:
    from clover_local import __version__

    monkeypatch.setattr(software, "_dist_version", lambda *names: "0.0.1")
    r = software.check_clover_local(print)
    assert r.status == WARN and "the installed metadata says 0.0.1" in r.detail and "pip install -e ." in r.fix
    monkeypatch.setattr(software, "_dist_version", lambda *names: __version__)
    assert software.check_clover_local(print).status == OK
    monkeypatch.setattr(software, "_dist_version", lambda *names: None)
    r = software.check_clover_local(print)
    assert r.status == OK and "run from source, not pip-installed" in r.detail


def test_a_shipped_model_missing_a_file_or_left_as_an_lfs_pointer_fails(monkeypatch, tmp_path) -> None:
    from clover_local import loader

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n")
    monkeypatch.setitem(loader.SHORT_NAMES, "tiny", folder)
    r = software.check_tiny_model(print)
    assert r.status == FAIL and "lacks tokenizer.json" in r.detail and "reinstall" in r.fix
    (folder / "tokenizer.json").write_text("{}")
    r = software.check_tiny_model(print)
    assert r.status == FAIL and "Git LFS pointer" in r.detail and r.fix == "in the repo: git lfs pull"


def test_a_torch_or_package_outside_the_declared_range_is_a_warning(monkeypatch) -> None:
    monkeypatch.setattr(software, "_requirements", lambda: {"torch": ">=99", "numpy": ">=99"})
    r = software.check_torch(print)
    assert r.status == WARN and "is outside clover-local's torch>=99" in r.detail
    r = software.check_packages(print)
    assert r.status == WARN and "is outside clover-local's numpy>=99" in r.detail
    monkeypatch.setattr(software, "_requirements", lambda: {"torch": ">=1", "numpy": ">=1"})
    assert software.check_torch(print).status == OK and software.check_packages(print).status == OK
    # a pre-release inside the range is inside it
    assert software._outside("torch", "2.8.0rc1", {"torch": ">=2.4"}) is None
    assert software._outside("torch", "2.3.0", {"torch": ">=2.4"}) == "torch 2.3.0 is outside clover-local's torch>=2.4"


def test_a_missing_required_package_fails_and_transformers_is_only_for_the_tests(monkeypatch) -> None:
    real = software._dist_version
    monkeypatch.setattr(software, "_dist_version", lambda *n: None if n[0] in ("rich", "transformers") else real(*n))
    r = software.check_packages(print)
    assert r.status == FAIL and "rich MISSING" in r.detail and r.fix.endswith("(installs rich)")
    assert "transformers not installed (only the tests need it)" in r.detail
    monkeypatch.setattr(software, "_dist_version", lambda *n: None if n[0] == "transformers" else real(*n))
    assert software.check_packages(print).status == OK
    monkeypatch.setattr(software, "_requirements", lambda: {})  # no metadata: the built-in list, without transformers
    assert software.check_packages(print).status == OK


def _fake_triton(monkeypatch, *, loads: bool, capability=(9, 0), version="3.2.0") -> None:
    from clover_local.runtime import kernels as rk

    monkeypatch.setattr(software, "cuda_available", lambda: True)
    monkeypatch.setattr(rk, "triton_available", lambda: loads)
    monkeypatch.setattr(rk, "triton_on", lambda device: loads)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(software, "_dist_version", lambda *names: version)
    monkeypatch.setattr(software, "_triton_error", lambda: "ImportError: no libcuda")


def test_triton_on_a_gpu_switched_off_not_loading_or_too_old_for_blackwell(monkeypatch) -> None:
    _fake_triton(monkeypatch, loads=True)
    r = software.check_triton(print)
    assert r.status == OK and "run as Triton kernels on the GPU" in r.detail
    _fake_triton(monkeypatch, loads=True, capability=(10, 0))
    r = software.check_triton(print)
    assert r.status == WARN and "predates Blackwell support" in r.detail and "triton>=3.3" in r.fix
    _fake_triton(monkeypatch, loads=True, capability=(10, 0), version="3.3.1")
    assert software.check_triton(print).status == OK
    _fake_triton(monkeypatch, loads=False)
    r = software.check_triton(print)
    assert r.status == WARN and "triton 3.2.0 does not load (ImportError: no libcuda)" in r.detail
    assert r.facts["error"] == "ImportError: no libcuda"
    monkeypatch.setenv("CLOVER_DISABLE_TRITON", "1")
    r = software.check_triton(print)
    assert r.status == WARN and "switched off by CLOVER_DISABLE_TRITON=1" in r.detail
    assert r.fix == "unset CLOVER_DISABLE_TRITON"


def test_triton_without_a_gpu_says_the_kernels_need_one(monkeypatch) -> None:
    monkeypatch.setattr(software, "cuda_available", lambda: False)
    monkeypatch.delenv("CLOVER_FORCE_TRITON", raising=False)
    r = software.check_triton(print)
    assert r.status == OK and "the Triton kernels need a CUDA GPU" in r.detail and "interpreter" not in r.detail


def test_a_slow_setting_is_named_in_the_fix_and_zero_is_off(monkeypatch) -> None:
    monkeypatch.setattr(software, "cuda_available", lambda: True)
    for name in software.SLOW_ON_GPU:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOVER_DISABLE_TRITON", "1")
    r = software.check_environment(print)
    assert r.fix == "unset CLOVER_DISABLE_TRITON unless you are comparing or debugging"
    monkeypatch.setenv("CLOVER_DISABLE_TRITON", "0")
    r = software.check_environment(print)
    assert r.status == OK and "CLOVER_DISABLE_TRITON=0" in r.detail


# ---- host, disk, Hub ---------------------------------------------------------------------------------------------


def test_cores_this_process_cannot_use_are_said(monkeypatch) -> None:
    from clover_local.runtime import sizes

    monkeypatch.setattr(sizes, "cpu_count", lambda: 2)
    monkeypatch.setattr(host.os, "cpu_count", lambda: 8)
    assert host.check_host(print).detail.startswith("2 CPU cores (of 8: the others are not this process's); RAM ")
    monkeypatch.setattr(host.os, "cpu_count", lambda: 2)
    assert host.check_host(print).detail.startswith("2 CPU cores; RAM ")


def test_no_gpu_skips_the_pinned_copy_without_a_warning(monkeypatch) -> None:
    monkeypatch.setattr(host, "cuda_available", lambda: False)
    r = host.check_pinned(print)
    assert r.status == OK and r.facts == {"skipped": True}


def test_a_cache_folder_that_is_a_file_or_not_writable_fails_with_what_to_set(monkeypatch, isolated) -> None:
    r = storage.check_cache_dir(print)
    assert r.status in (OK, WARN) and " (not made yet): " in r.detail
    a_file = isolated / "a-file"
    a_file.write_text("x")
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(a_file))
    r = storage.check_cache_dir(print)
    assert r.status == FAIL and r.detail == f"{a_file} is not a folder"
    assert r.fix == "set CLOVER_LOCAL_CACHE to a writable folder (on a disk with room)"
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(isolated / "clover-cache"))
    monkeypatch.setattr(storage.os, "access", lambda path, mode: False)
    r = storage.check_cache_dir(print)
    assert r.status == FAIL and "is not writable: nothing can be saved in" in r.detail and r.facts["writable"] is False
    r = storage.check_hub_cache(print)
    assert r.status == FAIL and "HF_HUB_CACHE" in r.fix


def test_the_hub_cache_says_whether_it_shares_the_disk_of_the_clover_local_cache(monkeypatch) -> None:
    r = storage.check_hub_cache(print)
    assert "; the same disk as the clover-local cache" in r.detail  # both under tmp_path
    real = storage.nearest_existing
    monkeypatch.setattr(storage, "nearest_existing", lambda p: Path("/proc") if "clover-cache" in str(p) else real(p))
    assert "the same disk" not in storage.check_hub_cache(print).detail


def test_no_token_has_no_source_and_a_token_that_cannot_be_sent_warns(monkeypatch) -> None:
    r = storage.check_hf_token(print)
    assert r.facts == {"set": False, "source": None, "oidc": False}
    monkeypatch.setenv("HF_OIDC_RESOURCE", "https://example.org/r")
    assert storage.check_hf_token(print).detail.startswith("no stored token; HF_OIDC_RESOURCE is set")


def test_a_mirror_endpoint_is_named_and_the_default_is_not(monkeypatch) -> None:
    from huggingface_hub import constants

    assert "endpoint" not in storage.check_hf_offline(print).detail
    monkeypatch.setattr(constants, "ENDPOINT", "https://hf-mirror.example/")
    r = storage.check_hf_offline(print)
    assert r.status == OK and r.detail.endswith("; endpoint https://hf-mirror.example (HF_ENDPOINT)")


# ---- kernels -----------------------------------------------------------------------------------------------------


def test_the_relative_error_is_against_the_largest_magnitude_and_nan_is_infinite() -> None:
    want = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    assert kernel_checks._max_rel(want * 1.1, want) == pytest.approx(0.1, rel=1e-5)
    assert kernel_checks._max_rel(want + torch.tensor([[0.0, float("nan")], [0.0, 0.0]]), want) == float("inf")


def test_a_wrong_triton_kernel_suggests_the_reference_path() -> None:
    case = kernel_checks._KernelCase(torch.device("cuda"), torch.bfloat16, True, 2e-2)
    r = kernel_checks._kernel_result("MoE", case, 0.5, 0.01)
    assert r.status == FAIL and "the Triton kernel's MoE output is wrong" in r.detail
    assert r.fix.startswith("CLOVER_DISABLE_TRITON=1 runs the PyTorch reference instead; ")
    assert kernel_checks._kernel_result("MoE", case, 0.02, 0.01).status == OK  # at the tolerance: ok


def _fake_tuning(monkeypatch, *, table=None, why=None, enabled=True) -> None:
    from clover_local.runtime import kernels as rk
    from clover_local.runtime.kernels import tuning

    monkeypatch.setattr(kernel_checks, "cuda_available", lambda: True)
    monkeypatch.setattr(rk, "triton_on", lambda device: True)
    monkeypatch.setattr(tuning, "device_identity", lambda dev: {"device": "NVIDIA GeForce RTX 5070 Ti",
                                                                "triton": "3.3.1"})
    monkeypatch.setattr(tuning, "table_path", lambda identity: Path("/t/rtx.json"))
    monkeypatch.setattr(tuning, "tuning_enabled", lambda: enabled)
    monkeypatch.setattr(tuning, "read_table", lambda path, identity: (table, why))


def test_the_tuning_table_check(monkeypatch) -> None:
    monkeypatch.setattr(kernel_checks, "cuda_available", lambda: False)
    assert kernel_checks.check_tuning(print).status == OK  # tables are per GPU: nothing to say without one
    _fake_tuning(monkeypatch)
    r = kernel_checks.check_tuning(print)
    assert r.status == WARN and "no tuning table for NVIDIA GeForce RTX 5070 Ti with triton 3.3.1" in r.detail
    assert "clover-local tune" in r.fix
    _fake_tuning(monkeypatch, why="made by triton 3.2.0")
    r = kernel_checks.check_tuning(print)
    assert r.status == WARN and r.detail == "ignored: made by triton 3.2.0"
    _fake_tuning(monkeypatch, table=types.SimpleNamespace(entries={"a": 1, "b": 2, "c": 3}, date="2026-12-01"))
    r = kernel_checks.check_tuning(print)
    assert r.status == OK and r.detail == "/t/rtx.json (3 calls tuned, 2026-12-01)" and r.facts["entries"] == 3
    monkeypatch.setenv("CLOVER_TUNING", "off")
    _fake_tuning(monkeypatch, enabled=False)
    r = kernel_checks.check_tuning(print)
    assert r.status == OK and r.detail.startswith("off (CLOVER_TUNING=off)")


# ---- device ------------------------------------------------------------------------------------------------------


def test_the_driver_version_is_read_from_proc_or_nvidia_smi(monkeypatch) -> None:
    proc = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
            "GCC version:  gcc version 12.3.0\n")

    class FakePath:
        def __init__(self, text):
            self.text = text

        def __call__(self, _path):
            return self

        def read_text(self, errors=None):
            if self.text is None:
                raise OSError("no such file")
            return self.text

    monkeypatch.setattr(gpu, "Path", FakePath(proc))
    assert gpu._nvidia_driver() == "550.54.14"
    monkeypatch.setattr(gpu, "Path", FakePath(None))
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    assert gpu._nvidia_driver() is None
    monkeypatch.setattr(gpu.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu.subprocess, "run",
                        lambda *a, **k: types.SimpleNamespace(returncode=0, stdout="572.16\n572.16\n"))
    assert gpu._nvidia_driver() == "572.16"
    # a failed run prints its error where the version goes: not taken for one
    failed = "Failed to initialize NVML: Driver/library version mismatch\n"
    monkeypatch.setattr(gpu.subprocess, "run", lambda *a, **k: types.SimpleNamespace(returncode=18, stdout=failed))
    assert gpu._nvidia_driver() == "installed (nvidia-smi found)"


def test_cuda_visible_devices_minus_one_hides_the_gpus(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    r = gpu.check_cuda(print)
    assert r.status == WARN and "CUDA_VISIBLE_DEVICES='-1' hides them" in r.detail


def test_a_driver_supporting_exactly_the_torch_cuda_is_not_called_too_old(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(gpu, "_nvidia_driver", lambda: "570.86")
    monkeypatch.setattr(gpu, "_cuda_driver_api", lambda: "12.8")
    r = gpu.check_cuda(print)
    assert "at most" not in r.detail and "CUDA is not available" in r.detail
    monkeypatch.setattr(gpu, "_cuda_driver_api", lambda: "12.10")  # 12.10 is newer than 12.8, not older
    assert "at most" not in gpu.check_cuda(print).detail


def test_arch_lists_torch_may_give() -> None:
    assert gpu._arch_supported(8, 6, [])  # a build that does not say: assumed to run
    assert gpu._arch_supported(9, 0, ["sm_80", "compute_90"])  # PTX of the very capability
    assert gpu._arch_supported(9, 0, ["sm_80", "sm_90a"])  # an arch-specific cubin
    assert not gpu._arch_supported(8, 0, ["sm_86", "compute_86"])  # newer code does not run on older cards


def _fake_gpu(monkeypatch, *, capability=(12, 0), free=15 * GIB, total=16 * GIB, arch=("sm_90", "sm_120"),
              count=1, first_op=12.0) -> None:
    """torch sees one (or more) CUDA GPUs with these properties; its first operation runs on the CPU."""
    real_arange = torch.arange
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA GeForce RTX 5070 Ti")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(
        major=capability[0], minor=capability[1], name="NVIDIA GeForce RTX 5070 Ti"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (free, total))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch, "arange", lambda *a, device=None, **k: real_arange(*a, **k) * (first_op / 12.0))
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(gpu, "_nvidia_driver", lambda: "572.16")
    monkeypatch.setattr(gpu, "_cuda_driver_api", lambda: "12.8")


def test_a_gpu_is_described_and_judged(monkeypatch) -> None:
    _fake_gpu(monkeypatch)
    r = gpu.check_cuda(print)
    assert r.status == OK, r
    assert r.detail == ("NVIDIA GeForce RTX 5070 Ti (compute capability 12.0, sm_120), 16 GiB, 15 GiB free; driver "
                        "572.16, supports CUDA 12.8")
    _fake_gpu(monkeypatch, count=2)
    r = gpu.check_cuda(print)
    assert r.detail.endswith("; 2 GPUs, clover-local uses cuda:0 (CUDA_VISIBLE_DEVICES picks another)")
    _fake_gpu(monkeypatch, free=12 * GIB)
    r = gpu.check_cuda(print)
    assert r.status == WARN and "4 GiB is held by other programs" in r.detail
    _fake_gpu(monkeypatch, capability=(7, 5), arch=("sm_75", "sm_80"))
    r = gpu.check_cuda(print)
    assert r.status == WARN and "older than Ampere (8.0)" in r.detail
    _fake_gpu(monkeypatch, arch=("sm_80", "sm_90"))
    r = gpu.check_cuda(print)
    assert r.status == WARN and "this torch carries no code for sm_120 (sm_80 sm_90)" in r.detail
    assert "install a torch built for sm_120" in r.fix
    _fake_gpu(monkeypatch, first_op=11.0)
    r = gpu.check_cuda(print)
    assert r.status == FAIL and "a first CUDA operation gives a wrong result" in r.detail


def test_the_vram_budget_says_whether_the_35b_pack_fits(monkeypatch) -> None:
    from clover_local.runtime import sizes, synthetic_pack

    small = synthetic_pack.synthetic_index("small")  # the full pack's index takes seconds to build; the logic is one
    monkeypatch.setattr(synthetic_pack, "synthetic_index", lambda kind: small)
    monkeypatch.setattr(gpu, "cuda_available", lambda: True)
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 64 * GIB)
    monkeypatch.setattr(sizes, "default_budget", lambda dev: GIB)
    r = gpu.check_vram_budget(print)
    assert r.status == OK and r.facts["fits_35b"] is True and r.facts["bytes"] == GIB
    assert r.detail == "1 GiB (free memory minus a margin): the 35B 4-bit pack fits, 64 of 64 experts on the GPU (100%)"
    monkeypatch.setattr(sizes, "default_budget", lambda dev: 1 << 20)
    r = gpu.check_vram_budget(print)
    assert r.status == WARN and "the 35B 4-bit pack does not fit" in r.detail and "--bits 3" in r.fix


# ---- bench -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def offloaded_bench(tmp_path_factory) -> dict:
    """One `bench --synthetic small --json` on the CPU at a budget of 24 of the pack's 64 experts (so experts
    cross "PCIe" in every pass), 32-row prefill chunks, 3 passes."""
    from clover_local.runtime.bench import bench_context
    from clover_local.runtime.placement import make_plan
    from clover_local.runtime.synthetic_pack import synthetic_index

    base = make_plan(synthetic_index("small"), GIB, None, bench_context(32, 32), torch.float32, prefill_chunk=32)
    budget = base.device_fixed + base.workspace + 24 * base.slab_bytes
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLOVER_LOCAL_CACHE", str(tmp_path_factory.mktemp("bench-cache")))
        mp.setattr(sys, "stdout", out)
        assert run_cli(["bench", "--synthetic", "small", "--prefix", "32", "--passes", "3", "--device", "cpu",
                        "--vram-budget", f"{budget}B", "--prefill-chunk", "32", "--json"]) == 0
    r = json.loads(out.getvalue())
    r["_slab_bytes"] = base.slab_bytes
    return r


def test_bench_figures_follow_from_what_it_measured(offloaded_bench) -> None:
    r = offloaded_bench
    assert r["synthetic"] is True and r["tokens_per_pass_source"] == "assumed (synthetic weights)"
    assert r["passes"] == 3 and len(r["ms_per_pass_each"]) == 3 and r["slots"] == 24
    assert r["ms_per_pass"] == pytest.approx(sum(r["ms_per_pass_each"][1:]) / 2, abs=2e-3)
    assert r["roofline_ratio"] == pytest.approx(r["ms_per_pass"] / r["roofline_ms"], rel=1e-2)
    # the floor is the bytes a pass reads at the bandwidth quoted beside it (GB/s: 1e9 bytes a second)
    assert r["roofline_ms"] == pytest.approx(1e3 * r["device_bytes_per_pass"] / (r["device_bandwidth_gbps"] * 1e9),
                                             rel=2e-2)
    # the projection: the per-call rule (the components' sum) plus the steady passes' PCIe bytes at 50 GB/s, which
    # are at least their misses' slabs and at most all the passes' bytes
    pcie_ms = r["projection_5070ti"]["ms_per_pass"] - sum(c["projected_ms_5070ti"] for c in r["components"])
    assert r["misses_per_steady_pass"] > 0
    low = 1e3 * r["misses_per_steady_pass"] * r["_slab_bytes"] / 50e9
    assert 0.9 * low <= pcie_ms <= 1e3 * r["pcie_bytes"] / 50e9 + 1e-3, (pcie_ms, low)
    pr = r["projection_5070ti"]
    assert pr["tokens_per_s"] == pytest.approx(3.0 * 1e3 / pr["ms_per_pass"], rel=1e-3) and pr["timed_on"] == "cpu"
    ms = [c["graph_ms"] if "graph_ms" in c else c["ms"] for c in r["components"]]
    assert ms == sorted(ms, reverse=True)  # largest first


def test_the_component_rows_floors_and_projection_follow_the_rule() -> None:
    """Each call takes the larger of its time and its bytes at 896 GB/s; floors are the bytes at this device's
    bandwidth and at 896 GB/s; the graph figures pair the same calls' replay times."""
    from clover_local.runtime.bench import ComponentProfiler

    frames = [types.SimpleNamespace(bytes=896_000_000), types.SimpleNamespace(bytes=896_000_000),
              types.SimpleNamespace(bytes=0)]
    own = [("experts", 0.0005), ("experts", 0.002), ("norms", 0.0001)]  # 0.5 ms, 2 ms, 0.1 ms
    prof = types.SimpleNamespace(frames=frames, own_seconds=lambda: own)
    rows, projected, projected_graph = ComponentProfiler.components(prof, 100e9, None)
    assert [r["component"] for r in rows] == ["experts", "norms"]
    e = rows[0]
    assert e["calls"] == 2 and e["bytes"] == 1_792_000_000 and e["ms"] == pytest.approx(2.5)
    assert e["floor_ms"] == pytest.approx(17.92) and e["floor_ms_5070ti"] == pytest.approx(2.0)
    assert e["projected_ms_5070ti"] == pytest.approx(3.0)  # max(0.5, 1) + max(2, 1)
    assert projected == pytest.approx(3.1) and projected_graph is None
    graph = [("experts", 0.0002), ("experts", 0.0015), ("norms", 0.00005)]
    rows, projected, projected_graph = ComponentProfiler.components(prof, 100e9, graph)
    assert rows[0]["graph_ms"] == pytest.approx(1.7) and rows[0]["projected_ms_5070ti_graph"] == pytest.approx(2.5)
    assert projected_graph == pytest.approx(2.55)


def _printed(monkeypatch, capsys, r: dict) -> str:
    from clover_local.commands import bench

    monkeypatch.setenv("COLUMNS", "400")  # one line per print
    bench._print(r)
    return capsys.readouterr().out


def test_bench_text_report_on_a_cpu(offloaded_bench, monkeypatch, capsys) -> None:
    r = offloaded_bench
    out = _printed(monkeypatch, capsys, r)
    assert ": 24 of 64 expert slots; prefix 32, 32-row block, 3 passes" in out
    assert f"{r['tokens_per_s']:.1f} tok/s at 3.0 tokens/pass, assumed (synthetic weights)" in out
    assert f"hit rate {r['hit_rate']} (first pass {r['hit_rate_first_pass']}, {r['misses_first_pass']} misses)" in out
    assert r["hit_rate"] != r["hit_rate_first_pass"]
    from clover_local.runtime.sizes import fmt_bytes

    assert f"PCIe {fmt_bytes(r['pcie_bytes'])} at {r['pcie_gbps']} GB/s" in out
    assert "host reads: off (off on a CPU device" in out
    assert f"the steady pass takes {r['roofline_ratio']}× that floor" in out
    assert f"({100 * r['memory']['plan_error']:+.2f}%)" in out
    assert "RTX 5070 Ti projection: needs GPU timings (this run timed the CPU)" in out
    assert "proj." not in out  # no projection column from CPU times
    assert "kernel tiles" not in out


def test_bench_text_report_projects_from_gpu_times(offloaded_bench, monkeypatch, capsys) -> None:
    r = json.loads(json.dumps(offloaded_bench))
    r["device"] = "cuda"
    r["kernel_tuning"] = {"entries": 7, "table": "/t/rtx.json", "enabled": True}
    r["memory"]["plan_error"] = 0.0123
    out = _printed(monkeypatch, capsys, r)
    assert "vs plan" in out and "(+1.23%)" in out
    pr = r["projection_5070ti"]
    assert f"RTX 5070 Ti projection: {pr['ms_per_pass']:.2f} ms per pass, {pr['tokens_per_s']:.1f} tok/s" in out
    assert "kernel tiles: tuned for this GPU (7 calls, /t/rtx.json)" in out
    assert "proj." in out and "graph" not in out.split("profiled pass")[1].split("floors")[0]
    r["kernel_tuning"] = {"entries": 0, "table": None, "enabled": True}
    # with graph times: their projection first, and the table's projection column from them
    for i, c in enumerate(r["components"]):
        c["graph_ms"], c["projected_ms_5070ti_graph"] = c["ms"] / 2, 1000.0 + i
    r["projection_5070ti_graph_components"] = {"ms_per_pass": 12.345, "tokens_per_s": 243.0, "rule": "graph rule"}
    out = _printed(monkeypatch, capsys, r)
    assert "kernel tiles: the defaults (`clover-local tune` picks them for this GPU, once)" in out
    assert "RTX 5070 Ti projection from graph times: 12.35 ms per pass, 243.0 tok/s (graph rule)" in out
    assert "1000.000" in out and "1001.000" in out


def test_a_narrow_console_drops_this_machines_floor_column_first(offloaded_bench) -> None:
    from rich.console import Console
    from rich.measure import Measurement

    from clover_local.commands import bench

    def headers(width: int) -> list[str]:
        console = Console(width=width, file=io.StringIO())
        t = bench._component_table(offloaded_bench, console)
        return [str(c.header).replace("\n", " ") for c in t.columns], t

    wide = Console(width=1000, file=io.StringIO())
    full = Measurement.get(wide, wide.options, bench._component_table(offloaded_bench, wide)).maximum
    names, _ = headers(full)
    assert "floor ms" in names and "bytes" in names
    names, _ = headers(full - 1)
    assert "floor ms" not in names and "bytes" in names and "calls" in names and "5070 Ti floor" in names


# ---- tune --------------------------------------------------------------------------------------------------------


def test_tune_passes_its_flags_to_the_run(monkeypatch, capsys, tmp_path) -> None:
    from clover_local.commands import _model_options
    from clover_local.runtime import tune as rt

    seen = {}
    report = {"model": "synthetic:small", "device": "cpu", "capability": "9.0", "triton": "3.3.1", "calls": [],
              "kernel_us_per_pass_default": 0.0, "kernel_us_per_pass_tuned": 0.0, "saved_us_per_pass": 0.0,
              "written": False, "table": "/t/x.json"}
    checked = []
    monkeypatch.setattr(rt, "check_device", checked.append)
    monkeypatch.setattr(rt, "run_tune", lambda folder, **kw: seen.update(kw) or report)
    monkeypatch.setattr(_model_options, "pack_or_synthetic", lambda *a: (tmp_path, a[0] or "synthetic:small"))
    assert run_cli(["tune", "--synthetic", "small", "--device", "cpu", "--dry-run", "--quick", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report
    assert checked == [torch.device("cpu")]
    assert seen["write"] is False and seen["quick"] is True and seen["uniform"] is True
    assert run_cli(["tune", str(tmp_path), "--device", "cpu", "--json"]) == 0
    assert seen["write"] is True and seen["quick"] is False and seen["uniform"] is False


def test_tune_table_gain_notes_and_totals(monkeypatch, capsys) -> None:
    from clover_local.commands import tune

    monkeypatch.setenv("COLUMNS", "300")
    row = {"kind": "moe_down", "k": 512, "n": 2048, "bits": 4, "calls_per_pass": 40}
    r = {"model": "synthetic:full", "device": "NVIDIA H200", "capability": "9.0", "triton": "3.3.1",
         "calls": [{**row, "default_us": 120.0, "tuned_us": 90.0, "changed": {"block_n": 128}, "note": ""},
                   {**row, "kind": "linear", "default_us": 50.0, "tuned_us": 50.0, "changed": {},
                    "note": "no candidate beat the default"}],
         "kernel_us_per_pass_default": 9000.0, "kernel_us_per_pass_tuned": 7800.0, "saved_us_per_pass": 1200.0,
         "written": True, "table": "/t/h200.json"}
    tune._print(r)
    out = capsys.readouterr().out
    assert "25 %" in out and "block_n=128" in out and "no candidate beat the default" in out
    assert "9.000 ms with the default tiles, 7.800 ms tuned (saves 1.200 ms)" in out
    assert "written: /t/h200.json" in out
    tune._print({**r, "written": False})
    assert "--dry-run: /t/h200.json left as it was" in capsys.readouterr().out


# ---- score -------------------------------------------------------------------------------------------------------


@needs_tiny
def test_score_perplexity_is_the_exponent_of_the_mean_negative_log_prob(capsys) -> None:
    assert run_cli(["score", "tiny", "--text", "good morning to you", "--json", *GEN]) == 0
    r = json.loads(capsys.readouterr().out)
    mean = sum(r["logprobs"]) / len(r["logprobs"])
    assert mean < 0 and r["ppl"] == pytest.approx(math.exp(-mean)) and len(r["logprobs"]) == len(r["token_ids"]) - 1
    assert run_cli(["score", "tiny", "--text", "good morning to you", *GEN]) == 0
    assert capsys.readouterr().out.strip() == (f"{len(r['token_ids'])} tokens, mean log-prob {mean:.4f}, "
                                               f"perplexity {r['ppl']:.4f}")
    # one token more than --context allows is refused
    n = len(r["token_ids"])
    assert run_cli(["score", "tiny", "--text", "good morning to you", "--context", str(n - 1), *GEN]) != 0
    assert f"the text has {n} tokens" in capsys.readouterr().err
    assert run_cli(["score", "tiny", "--text", "good morning to you", "--context", str(n), "--json", *GEN]) == 0
    assert run_cli(["score", "tiny", "--text", "a", *GEN]) != 0  # one token: nothing to score
    assert "the text must have at least two tokens to score" in capsys.readouterr().err
