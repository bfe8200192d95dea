"""`docs/gpu_summary.py` on the H200 runs kept in docs/gpu-runs: the figures BENCHMARKS.md quotes come out."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "gpu_summary.py"


def test_summary_reads_the_stored_h200_runs() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), str(ROOT / "docs" / "gpu-runs" / "2026-11-30")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    # run 2's graphed uniform pass: BENCHMARKS.md "26.8 ms (26.76–26.93)", the median of passes 3–8
    block = out.split("run2-graphs-bench_uniform.json")[1].split(".json")[0]
    assert "steady pass 26.781 ms" in block and "replays 7" in block
    assert "MoE 32 rows (default): 0.4735 ms" in out  # run 1's kernels stage
    assert "run2-model-gpu_check.json (model, NVIDIA H200)\n  ok False" in out  # the failed second capture


def test_summary_refuses_a_missing_folder(tmp_path) -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "usage" in res.stderr and "Traceback" not in res.stderr


def test_summary_reads_a_tune_report(tmp_path) -> None:
    import json

    report = {"model": "synthetic:full", "device": "NVIDIA H200", "date": "2026-12-02 00:00 UTC", "routing": "uniform",
              "quick": True, "kernel_us_per_pass_default": 9000.0, "kernel_us_per_pass_tuned": 8000.5,
              "saved_us_per_pass": 999.5,
              "calls": [{"key": "moe_down/r32/k512/n2048/b4/g128/top8", "calls_per_pass": 40, "default_us": 120.0,
                         "tuned_us": 95.0, "changed": {"block_n": 128}, "tried": 8, "rejected": 1, "note": ""}]}
    (tmp_path / "tune.json").write_text(json.dumps(report))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "tune.json (tune, NVIDIA H200" in res.stdout and "saves 999.5" in res.stdout
    assert "moe_down/r32/k512/n2048/b4/g128/top8 ×40: 120 → 95 µs {'block_n': 128}" in res.stdout


def test_summary_reads_host_read_figures(tmp_path) -> None:
    import json

    kernels = {"device": "NVIDIA H200", "kernels": {
        "ok": True, "h2d_gbps_64_experts": 24.5,
        "host_reads": {"ok": True, "resident_ms_cold": 0.5, "8_on_host_ms_cold": 0.9, "all_on_host_ms_cold": 4.25,
                       "all_on_host_gbps": 26.1, "ms_per_host_expert": 0.05}}}
    bench = {"device_name": "NVIDIA H200", "date": "2026-12-02", "ms_per_pass_each": [60.0, 30.0, 28.0, 29.0],
             "routing": "uniform-reveal", "misses_per_steady_pass": 3.0, "repairs_per_steady_pass": 0.0,
             "host_reads_per_steady_pass": 3.0, "host_reads": {"on": True, "error": None, "first_pass": 41}}
    merged = {"ok": True, "separate": {"ms": 55.1}, "merged_eager": {"ms": 260.0}, "merged_graphed": {"ms": 190.0},
              "merged_again": {"ms": 31.5}, "merged_again_commit_rel_err": 0.004,
              "merged_again_commit_vs_eager_rel_err": 0.0}
    model = {"device": "NVIDIA H200", "model": {"ok": True, "merged_vs_separate": merged}}
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "gpu_check.json").write_text(json.dumps(kernels))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "gpu_check.json").write_text(json.dumps(model))
    (tmp_path / "bench_uniform_reveal.json").write_text(json.dumps(bench))
    resident = bench | {"resident_routing": True, "substituted_per_steady_pass": 211.5, "misses_per_steady_pass": 0}
    (tmp_path / "bench_uniform_reveal_resident.json").write_text(json.dumps(resident))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert ("MoE host reads: ok True, cold ms resident 0.5 / 8 on host 0.9 / all on host 4.25 (26.1 GB/s; copies "
            "24.5 GB/s), 0.05 ms per host expert") in res.stdout
    assert "host reads on, read in place per steady pass 3, first pass 41" in res.stdout
    assert res.stdout.count("resident routing: 211.5 choices substituted per steady pass") == 1
    assert ("merged vs separate: separate 55.1 ms, merged_eager 260 ms, merged_graphed 190 ms, merged_again 31.5 ms; "
            "largest rel err vs separate 0.004") in res.stdout


def test_the_gpu_session_script_on_a_machine_without_a_gpu_writes_nothing_big(tmp_path) -> None:
    """`docs/gpu_session.sh` run where there is no CUDA (a dry run of its stages and summary): every stage ends
    at once and none writes the ≈ 20 GB synthetic pack (the `tune` and bench-based stages did, until
    2026-12-03: they wrote the pack before finding no GPU)."""
    import os
    import re

    import torch

    if torch.cuda.is_available():  # pragma: no cover - on a GPU these stages are the real thing
        import pytest

        pytest.skip("a GPU is present: the stages would run for real")
    stages = "finite,kernels,anatomy,routings,decode,model,longprompt,longchunks,tune,tuned,uniform"
    env = {**os.environ, "OUT": str(tmp_path / "out"), "TOTAL_S": "300", "STAGES": stages,
           "CLOVER_LOCAL_CACHE": str(tmp_path / "cache")}
    res = subprocess.run(["bash", str(ROOT / "docs" / "gpu_session.sh")], env=env, capture_output=True, text=True,
                         timeout=400, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    ended = dict(re.findall(r"== (\w+) rc=\d+ in (\d+)s", res.stdout))
    assert set(ended) == set(stages.split(",")), res.stdout[-2000:]
    assert all(int(s) < 60 for s in ended.values()), ended
    assert not (tmp_path / "cache" / "synthetic" / "full-v1").exists()
    assert (tmp_path / "out" / "summary.txt").exists()


def test_summary_reads_the_gpu_machines_compile_census(tmp_path) -> None:
    """gpu_session.sh's background `compile_check --json` on the GPU machine: its triton, a failed compile, and the
    routed experts' forms side by side (a swapped vs unswapped regression there shows in one place)."""
    import json

    census = {"ok": False, "triton": "3.6.0", "results": [
        {"kernel": "_moe_kernel", "case": "MoE 4-bit H2048 I512 gate/up", "arch": "sm_90", "ok": True, "reg": 107,
         "per_weight": 3.41},
        {"kernel": "_moe_kernel", "case": "MoE 4-bit H2048 I512 unswapped gate/up", "arch": "sm_90", "ok": True,
         "reg": 128, "per_weight": 4.14},
        {"kernel": "_moe_kernel", "case": "MoE 4-bit H2048 I512, 64 rows (merged pass) gate/up", "arch": "sm_90",
         "ok": True, "reg": 107, "per_weight": 3.41},
        {"kernel": "_partial_kernel", "case": "H16 Hkv2 D256", "arch": "sm_120", "ok": False,
         "error": "CompilationError: out of resource"}]}
    (tmp_path / "compile_check.json").write_text(json.dumps(census))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "compile_check.json (compile_check)\n  triton 3.6.0, ok False, 4 compiles" in res.stdout
    assert "FAILED sm_120 _partial_kernel H16 Hkv2 D256: CompilationError: out of resource" in res.stdout
    assert "sm_90 MoE 4-bit H2048 I512 gate/up: 3.41 per weight (107 registers)" in res.stdout
    assert "sm_90 MoE 4-bit H2048 I512 unswapped gate/up: 4.14 per weight (128 registers)" in res.stdout
    assert "merged pass" not in res.stdout


def test_summary_reads_the_dense_shapes_check(tmp_path) -> None:
    """The kernels stage's `dense_shapes`: the count, any failing call named with its error, the timed calls."""
    import json

    shapes = {"attention qkv 2048->9216 8-bit 32 rows": {"rel_err": 0.00002, "finite": True, "split_k": 2,
                                                          "block_n": 128, "ms": 0.051, "graph_us": 12.5,
                                                          "gbps": 1523.4},
              "attention qkv 2048->9216 8-bit 1 rows": {"rel_err": 1.0, "finite": False, "split_k": 3,
                                                         "block_n": 128}}
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "gpu_check.json").write_text(json.dumps(
        {"device": "NVIDIA H200", "kernels": {"ok": False, "dense_shapes": {"ok": False, "shapes": shapes}}}))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "dense shapes: ok False, 2 calls, failing: attention qkv 2048->9216 8-bit 1 rows (err 1, finite False)" \
        in res.stdout
    assert ("timed (ms eager / µs graph): attention qkv 2048->9216 8-bit 32 rows 0.051 / 12.5 µs (1523.4 GB/s)"
            in res.stdout)


def test_summary_lists_the_components_by_gpu_time_with_the_moe_split_by_launch(tmp_path) -> None:
    import json

    comps = [{"component": "routed experts: gate/up", "calls": 40, "ms": 30.0, "graph_ms": 9.5, "bytes": 7_000_000_000,
              "floor_ms": 1.46},
             {"component": "routed experts: down", "calls": 40, "ms": 20.0, "graph_ms": 4.25, "bytes": 3_500_000_000,
              "floor_ms": 0.73},
             {"component": "GDN core", "calls": 30, "ms": 45.0, "graph_ms": 2.0, "bytes": 63_000_000, "floor_ms": 0.01}]
    bench = {"device_name": "NVIDIA H200", "date": "2026-12-05", "ms_per_pass_each": [60.0, 30.0, 28.0, 29.0],
             "routing": "uniform", "components": comps}
    (tmp_path / "bench_uniform.json").write_text(json.dumps(bench))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = [ln.strip() for ln in res.stdout.splitlines() if " calls, eager " in ln]
    assert lines == [  # by graph time, not by the eager time (mostly launch cost)
        "routed experts: gate/up: 9.5 ms (graph) over 40 calls, eager 30 ms, 7000000000 B, floor 1.46 ms",
        "routed experts: down: 4.25 ms (graph) over 40 calls, eager 20 ms, 3500000000 B, floor 0.73 ms",
        "GDN core: 2 ms (graph) over 30 calls, eager 45 ms, 63000000 B, floor 0.01 ms"]


def test_summary_reads_the_moe_anatomy(tmp_path) -> None:
    import json

    anatomy = {"device": "NVIDIA H200", "ok": True, "finite": True,
               "shape": {"distinct": 162, "experts": 256, "runs": 162, "rows": 32},
               "segments_us": {"align": 9.5, "gate/up": 180.25, "down": 70.0, "sum": 4.0, "call": 264.0},
               "call_us": 265.0, "call_gbps": 996.2,
               "tiles": [{"pass": "gate/up", "block_n": 64, "split": 1, "num_warps": 4, "xor_ok": True, "us": 60.5,
                          "gbps": 2808.1},
                         {"pass": "gate/up", "block_n": 256, "split": 1, "num_warps": 8, "error": "OutOfResources: x"},
                         {"pass": "down", "block_n": 64, "split": 1, "num_warps": 4, "xor_ok": False, "us": 30.0,
                          "gbps": 2831.2}],
               "flat": {"us": 70.0, "gbps": 3900.5, "xor_ok": True},
               "configs": {"num_stages 5": {"rel_err_vs_default": 0.0, "align": 9.0, "gate/up": 120.5, "down": 60.0,
                                            "sum": 4.0, "call": 195.0},
                           "maxnreg 128": {"error": "CompilationError: x"}}}
    (tmp_path / "moe_anatomy.json").write_text(json.dumps(anatomy))
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "moe_anatomy.json (MoE anatomy, NVIDIA H200)" in out
    assert "call 265 µs (996.2 GB/s); launches: align 9.5, gate/up 180.25, down 70, sum 4, call 264" in out
    assert "read gate/up block_n 64 split 1 warps 4: 60.5 µs, 2808.1 GB/s\n" in out
    assert "read gate/up block_n 256 split 1 warps 8: FAILED OutOfResources: x" in out
    assert "read down block_n 64 split 1 warps 4: 30 µs, 2831.2 GB/s (WRONG WORDS)" in out
    assert "flat read of the slabs: 70 µs, 3900.5 GB/s" in out
    assert "num_stages 5: call 195 µs, gate/up 120.5, down 60 (rel err vs default 0)" in out
    assert "maxnreg 128: FAILED CompilationError: x" in out
