#!/usr/bin/env bash
# The GPU machine's library versions, on a machine without a GPU: a second virtual environment with the torch and
# triton the H200 runs had (torch 2.11.0+cu130, triton 3.6.0, Python 3.12; `docs/gpu-runs/2026-11-30/*session.log`),
# then every kernel compiled for sm_90 / sm_120 / sm_89 by that triton (`compile_check --sass`: what the GPU will run, its
# registers and instructions per weight) and the test suite under those versions.
# Why: CI tests with the newest triton, but a GPU session's 15 minutes run whatever that machine has installed (it
# cannot download): an API the older triton lacks, or code it compiles worse, shows only there. This found that
# triton 3.6 compiles the routed experts' folded MoE with ~100 register moves per K step that 3.8 does not
# (BENCHMARKS.md, "The GPU machine's triton").
# numpy < 2.4: triton 3.6's interpreter turns one-element arrays into Python ints, which numpy 2.4 refuses
# (every interpreted kernel test fails with "only 0-dimensional arrays can be converted to Python scalars").
# The torch wheel is PyPI's CUDA build (≈ 3 GB with its nvidia-* libraries); it runs on the CPU.
# Usage (from the repository root): OUT=/tmp/gv bash docs/gpu_versions_check.sh [pytest arguments]
#   e.g. ... tests/test_kernels.py        (default: the whole suite)
# Writes $OUT/compile_check.json (and its summary, compile_check.txt), $OUT/pytest.log; exits with pytest's status.
set -euo pipefail
OUT=${OUT:-/tmp/clover-gpu-versions}
VENV=${VENV:-/tmp/clover-gpu-versions-venv}
TORCH=${TORCH:-2.11.0}
TRITON=${TRITON:-3.6.0}
mkdir -p "$OUT"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==$TORCH" "triton==$TRITON" "numpy<2.4"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -e ".[test]" "torch==$TORCH" "triton==$TRITON" "numpy<2.4"
"$VENV/bin/python" -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, \
'numpy', numpy.__version__)" | tee "$OUT/versions.txt"
env -u TRITON_INTERPRET "$VENV/bin/python" -m clover_local.runtime.kernels.compile_check --arch 90,120,89 --sass \
  --json >"$OUT/compile_check.json" || echo "compile_check: some kernels failed (see $OUT/compile_check.txt)"
python3 docs/gpu_summary.py "$OUT" | tee "$OUT/compile_check.txt"  # its triton, failures, the routed experts' forms
set +e
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest.log" | tail -5
exit "${PIPESTATUS[0]}"
