"""`clover-local doctor`: every check reports, none tracebacks, the token is never shown, and the exit status says
whether something failed.

Each test points the clover-local cache and the Hugging Face Hub cache (and its token file) at tmp folders, with no
token in the environment, so what the machine running the tests has set does not leak in. The CUDA-only branches
are reached through the pure functions they use (`_arch_supported`) or a patched `_nvidia_driver` /
`cuda_available`; the Triton branch through the interpreter (CLOVER_FORCE_TRITON=1 with TRITON_INTERPRET=1, which
tests/conftest.py sets without a GPU).
"""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from clover_local import diagnostics
from tests.conftest import run_cli

NAMES = ["clover-local", "tiny-model", "python", "torch", "triton", "flash-linear-attention", "packages",
         "environment", "cuda", "vram-budget", "host", "pinned-memory", "kernel-dense", "kernel-moe", "tuning-table",
         "cache-dir", "hub-cache", "hf-token", "hf-offline"]
SECRET = "hf_someSECRETvalue1234567890abcdef"
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts what a machine without a CUDA GPU reports")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Caches and the token file under tmp_path; no Hub token, offline mode or tuning overrides from outside."""
    from huggingface_hub import constants

    hf = tmp_path / "hf"
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "clover-cache"))
    monkeypatch.setenv("HF_HOME", str(hf))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf / "hub"))
    monkeypatch.setattr(constants, "HF_HOME", str(hf))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf / "token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_OIDC_RESOURCE", "CLOVER_TUNING_FILE",
                "CLOVER_FORCE_TRITON", "CLOVER_DISABLE_TRITON"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _strict(text: str) -> dict:
    """The --json output parsed as strict JSON (Infinity or NaN would be refused by jq and most parsers)."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in doctor --json")

    return json.loads(text, parse_constant=refuse)


def _json_run(capsys) -> tuple[int, dict, str]:
    """(exit code, the JSON object, stdout + stderr)."""
    code = run_cli(["doctor", "--json"])
    out, err = capsys.readouterr()
    return code, _strict(out), out + err


def _by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@no_gpu
def test_json_on_a_machine_without_gpu(capsys) -> None:
    code, report, both = _json_run(capsys)
    checks = _by_name(report)
    assert [c["name"] for c in report["checks"]] == NAMES
    assert set(report["facts"]) == set(NAMES)
    assert all(c["status"] in ("ok", "warn", "fail") for c in report["checks"])
    assert [c["name"] for c in report["checks"] if c["status"] == "fail"] == [], report["checks"]
    assert code == 0 and report["ok"] is True and report["counts"]["fail"] == 0
    # no GPU: said plainly, a warning and not a failure
    assert checks["cuda"]["status"] == "warn" and "no CUDA GPU" in checks["cuda"]["detail"]
    assert "plan MODEL --vram 16GB" in checks["cuda"]["detail"] and report["facts"]["cuda"]["available"] is False
    assert checks["pinned-memory"]["detail"].startswith("skipped: no GPU")
    # the CPU reference path of the kernels' problem, checked against the weights it was packed from
    for name in ("kernel-dense", "kernel-moe"):
        facts = report["facts"][name]
        assert checks[name]["status"] == "ok", checks[name]
        assert facts["path"] == "reference" and facts["device"] == "cpu"
        assert 0 <= facts["max_rel_err"] <= facts["tolerance"]
        assert "needs a CUDA GPU" in checks[name]["detail"] and "TRITON_INTERPRET=1" in checks[name]["detail"]
    from clover_local import __version__

    assert report["facts"]["clover-local"]["version"] == __version__
    assert report["facts"]["torch"]["version"] == torch.__version__
    assert checks["hf-token"]["status"] == "ok" and "no token: public repos only" in checks["hf-token"]["detail"]
    assert checks["hf-offline"]["status"] == "ok"
    assert report["facts"]["hub-cache"]["free_bytes"] > 0 and checks["hub-cache"]["status"] in ("ok", "warn")
    assert "Traceback" not in both


def test_text_report_gives_each_check_one_symbol_line(capsys) -> None:
    code = run_cli(["doctor"])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    for name in NAMES:
        mine = [line for line in lines if line[4:].split(" ", 1)[0] == name]
        assert len(mine) == 1 and mine[0][:4] in ("  ✓ ", "  ! ", "  ✗ "), (name, mine)
    # wrapped at 120 columns (a word longer than the room, such as a tmp path, stays whole), no padding
    bad = [line for line in lines if (len(line) > 120 and len(line.split()) > 1) or line != line.rstrip()]
    assert not bad, bad
    marks = [line[2] for line in lines if line[:4] in ("  ✓ ", "  ! ", "  ✗ ")]
    tally = f"{marks.count('✓')} ✓, {marks.count('!')} !, {marks.count('✗')} ✗: "
    assert lines[-1].startswith(tally) and len(marks) == len(NAMES), (lines[-1], marks)
    assert ("nothing failed" in lines[-1]) == (code == 0) == ("✗" not in marks)
    assert "Traceback" not in out + err


def test_a_check_that_raises_is_one_fail_line_and_exit_1(capsys, monkeypatch) -> None:
    def broken(say):
        raise RuntimeError("boom\nsecond line of the message")

    monkeypatch.setattr(diagnostics.host, "check_host", broken)
    assert run_cli(["doctor"]) == 1
    out, err = capsys.readouterr()
    line = next(line for line in out.splitlines() if line.startswith("  ✗ host "))
    assert "the check itself failed: RuntimeError: boom" in line
    assert "second line" not in out and "Traceback" not in out + err
    assert any(line.startswith("  ✓ kernel-moe ") for line in out.splitlines())  # the checks after it still ran
    assert "1 failed" in out.splitlines()[-1]

    code, report, both = _json_run(capsys)
    host = _by_name(report)["host"]
    assert code == 1 and report["ok"] is False and report["counts"]["fail"] == 1
    assert host["status"] == "fail" and host["detail"].endswith("RuntimeError: boom") and host["fix"]
    assert "Traceback" not in both


def test_the_hub_token_is_never_printed(capsys, monkeypatch, isolated) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    code, report, both = _json_run(capsys)
    run_cli(["doctor"])
    out, err = capsys.readouterr()
    both += out + err
    for piece in (SECRET, "hf_some", "SECRETvalue", "90abcdef"):
        assert piece not in both, piece
    token = _by_name(report)["hf-token"]
    assert token["status"] == "ok" and token["detail"].startswith("a token is set (from HF_TOKEN)"), token
    assert report["facts"]["hf-token"] == {"set": True, "source": "HF_TOKEN", "oidc": False}
    assert "a token is set (from HF_TOKEN)" in out

    # from the token file `hf auth login` writes, and one with a character no header can carry
    monkeypatch.delenv("HF_TOKEN")
    (isolated / "hf").mkdir(exist_ok=True)
    (isolated / "hf" / "token").write_text(SECRET[:12] + "\u200b" + SECRET[12:])  # a zero-width space
    code, report, both = _json_run(capsys)
    token = _by_name(report)["hf-token"]
    assert token["status"] == "warn" and "the token file" in token["detail"] and "cannot have" in token["detail"]
    assert "hf_some" not in both and "SECRET" not in both


@no_gpu
def test_flash_linear_attention_is_flagged_without_cuda(capsys, monkeypatch) -> None:
    assert diagnostics.software.check_fla(print).status == "ok"  # not installed here: fine
    monkeypatch.setitem(sys.modules, "fla", types.ModuleType("fla"))
    code, report, _ = _json_run(capsys)
    fla = _by_name(report)["flash-linear-attention"]
    assert fla["status"] == "warn" and "transformers" in fla["detail"] and "crashes" in fla["detail"]
    assert "pip uninstall flash-linear-attention" in fla["fix"]
    assert report["facts"]["flash-linear-attention"]["installed"] is True
    assert code == 0  # a warning: exit 0


def test_low_disk_space_is_a_warning_naming_what_does_not_fit(capsys, monkeypatch) -> None:
    def free(gib: float):
        return lambda path: shutil._ntuple_diskusage(1 << 42, (1 << 42) - int(gib * (1 << 30)), int(gib * (1 << 30)))

    monkeypatch.setattr(shutil, "disk_usage", free(5))
    code, report, _ = _json_run(capsys)
    hub, cache = _by_name(report)["hub-cache"], _by_name(report)["cache-dir"]
    assert hub["status"] == "warn" and "not enough for the 35B 4-bit pack (18.6 GiB)" in hub["detail"]
    assert "5 GiB free" in hub["detail"] and "--dir" in hub["fix"]
    assert cache["status"] == "warn" and "bench --synthetic full" in cache["detail"]
    assert code == 0

    monkeypatch.setattr(shutil, "disk_usage", free(30))
    r = diagnostics.storage.check_hub_cache(print)
    assert r.status == "warn" and "not for the BF16 release (64.6 GiB)" in r.detail
    assert diagnostics.storage.check_cache_dir(print).status == "ok"

    monkeypatch.setattr(shutil, "disk_usage", free(200))
    assert diagnostics.storage.check_hub_cache(print).status == "ok"


def test_low_ram_is_a_warning(monkeypatch) -> None:
    from clover_local.runtime import sizes

    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 8 << 30)
    r = diagnostics.host.check_host(print)
    assert r.status == "warn" and "8 GiB available" in r.detail and "17.9 GiB" in r.detail
    assert "--bits 3" in r.fix
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 40 << 30)
    assert diagnostics.host.check_host(print).status == "ok"


def test_a_wrong_kernel_output_fails_the_check(capsys, monkeypatch) -> None:
    from clover_local.runtime import kernels

    real = kernels.linear_w4a16
    monkeypatch.setattr(kernels, "linear_w4a16", lambda *a, **k: real(*a, **k) * 1.05)
    code, report, _ = _json_run(capsys)
    dense = _by_name(report)["kernel-dense"]
    assert code == 1 and dense["status"] == "fail" and "output is wrong" in dense["detail"]
    assert report["facts"]["kernel-dense"]["max_rel_err"] > 0.04
    assert _by_name(report)["kernel-moe"]["status"] == "ok"


def test_triton_kernels_are_checked_against_the_reference(monkeypatch) -> None:
    """Where the Triton kernels run (here: interpreted), the check compares them with the reference functions."""
    pytest.importorskip("triton")
    from clover_local.runtime.kernels import w4a16

    if not torch.cuda.is_available() and not w4a16._INTERPRET:
        pytest.skip("no GPU, and TRITON_INTERPRET=1 was not in force when the kernels were defined")
    monkeypatch.setenv("CLOVER_FORCE_TRITON", "1")
    for check in (diagnostics.kernels.check_kernel_dense, diagnostics.kernels.check_kernel_moe):
        r = check(print)
        assert r.status == "ok" and r.facts["path"] == "triton", r
        assert "Triton kernel" in r.detail and "reference" in r.detail
        assert r.facts["max_rel_err"] <= r.facts["tolerance"]


@pytest.mark.skipif(torch.cuda.is_available() or torch.version.cuda is not None, reason="a CPU-only torch build")
def test_no_gpu_is_explained(monkeypatch) -> None:
    monkeypatch.setattr(diagnostics.gpu, "_nvidia_driver", lambda: "550.54.14")
    r = diagnostics.gpu.check_cuda(print)
    assert r.status == "warn" and "CPU-only build" in r.detail and "550.54.14" in r.detail
    assert diagnostics.gpu.CUDA_WHEELS in r.fix
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    r = diagnostics.gpu.check_cuda(print)
    assert "CUDA_VISIBLE_DEVICES" in r.detail and "unset CUDA_VISIBLE_DEVICES" in r.fix


def test_the_cuda_a_driver_supports_is_asked_of_the_driver(monkeypatch) -> None:
    """cuDriverGetVersion through the driver's own library (12040 → 12.4); no library, or one without the call,
    is None. Where torch is built for a newer CUDA than the driver supports, no GPU is found and doctor says to
    update the driver or install an older build, naming both versions."""
    asked = []

    class Driver:
        def cuDriverGetVersion(self, out):  # noqa: N802 - the driver API's name
            out._obj.value = 12040
            return 0

    def cdll(name):
        asked.append(name)
        if name != "libcuda.so.1" and sys.platform != "win32":
            raise OSError(f"{name}: cannot open shared object file")
        return Driver()

    monkeypatch.setattr(diagnostics.gpu.ctypes, "CDLL", cdll)
    assert diagnostics.gpu._cuda_driver_api() == "12.4" and asked[0] in ("libcuda.so.1", "nvcuda.dll")
    monkeypatch.setattr(diagnostics.gpu.ctypes, "CDLL", lambda name: types.SimpleNamespace())  # no such call
    assert diagnostics.gpu._cuda_driver_api() is None

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(diagnostics.gpu, "_nvidia_driver", lambda: "550.54.14")
    monkeypatch.setattr(diagnostics.gpu, "_cuda_driver_api", lambda: "12.4")
    r = diagnostics.gpu.check_cuda(print)
    assert r.status == "warn" and "built for CUDA 12.8" in r.detail and "supports CUDA 12.4 at most" in r.detail
    assert "update the NVIDIA driver" in r.fix and "CUDA 12.4 or older" in r.fix
    assert r.facts["driver_cuda"] == "12.4"
    monkeypatch.setattr(diagnostics.gpu, "_cuda_driver_api", lambda: "12.9")  # new enough: another cause
    r = diagnostics.gpu.check_cuda(print)
    assert "CUDA is not available" in r.detail and "at most" not in r.detail


def test_torch_arch_support_is_read_from_its_arch_list() -> None:
    """An RTX 50 card (sm_120) under a torch built up to sm_90 is the classic "no kernel image" failure."""
    old = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert not diagnostics.gpu._arch_supported(12, 0, old)
    assert diagnostics.gpu._arch_supported(12, 0, [*old, "sm_100", "sm_120"])
    assert diagnostics.gpu._arch_supported(8, 9, old)  # sm_89 runs sm_86 / sm_80 code
    assert not diagnostics.gpu._arch_supported(9, 0, ["sm_80", "sm_86"])
    assert diagnostics.gpu._arch_supported(12, 0, ["sm_80", "compute_90"])  # PTX, compiled on first use


def test_settings_that_slow_a_gpu_are_flagged_there(monkeypatch) -> None:
    monkeypatch.setenv("CLOVER_DISABLE_TRITON", "1")
    monkeypatch.setattr(diagnostics.software, "cuda_available", lambda: True)
    r = diagnostics.software.check_environment(print)
    assert r.status == "warn" and "CLOVER_DISABLE_TRITON=1" in r.detail and "CLOVER_DISABLE_TRITON" in r.fix
    monkeypatch.setattr(diagnostics.software, "cuda_available", lambda: False)
    assert diagnostics.software.check_environment(print).status == "ok"  # on the CPU they change nothing that matters


def test_the_sizes_quoted_match_what_the_code_computes() -> None:
    """PACK_BYTES and HOST_BYTES_35B are what `plan synthetic:full` works out (the synthetic pack has the real
    shapes), so the disk and RAM warnings move if the pack format does."""
    from clover_local.runtime.placement import make_plan
    from clover_local.runtime.synthetic_pack import synthetic_index

    pack = synthetic_index("full")
    on_disk = sum(t.nbytes for t in pack.tensors.values())
    assert abs(diagnostics.storage.PACK_BYTES - on_disk) / on_disk < 0.02
    host = make_plan(pack, 16 << 30, None).host_bytes
    assert abs(diagnostics.host.HOST_BYTES_35B - host) / host < 0.02


def test_help_teaches(capsys) -> None:
    assert run_cli(["doctor", "--help"]) == 0
    out = capsys.readouterr().out
    for needle in ("What it checks", "Examples:", "clover-local doctor --json", "--json", "exit status is 1"):
        assert needle in out, needle
