#!/usr/bin/env bash
# The README's and BENCHMARKS.md's quantization tables for the shipped tiny model: twelve packs, each quantized,
# compared with the BF16 source (KL, top-1) and scored on the held-out tasks. About 10 minutes on 2 CPU cores.
# Usage: bash docs/quant_table.sh [WORKDIR]
set -euo pipefail
work=${1:-/tmp/clover-quant-table}
mkdir -p "$work"
accuracy() { python -c "import json,sys; print(json.load(open(sys.argv[1]))['accuracy'])" "$1"; }
run() {
  name=$1; shift
  rm -rf "$work/$name"
  clover-local quantize tiny --out "$work/$name" --samples 32 --seq-len 128 "$@" > "$work/$name.quant.log" 2>&1
  clover-local eval "$work/$name" --reference tiny --samples 16 --seq-len 128 --json > "$work/$name.eval.json"
  python -m clover_local.tiny.evaluate "$work/$name" --n 140 --json > "$work/$name.acc.json"
  echo "$name: $(cat "$work/$name.eval.json")"
  echo "$name: accuracy $(accuracy "$work/$name.acc.json"), $(du -sb "$work/$name" | cut -f1) bytes"
}
python -m clover_local.tiny.evaluate tiny --n 140 --json > "$work/bf16.acc.json"
echo "BF16 source: accuracy $(accuracy "$work/bf16.acc.json")"
run balanced --profile balanced
run experts-only-diffusion --profile experts-only --calib-mode diffusion
run experts-only-causal --profile experts-only --calib-mode causal
run experts-only-rtn --profile experts-only --method rtn
run compact --profile compact
run balanced-no-act-order --profile balanced --no-act-order
run balanced-no-clip --profile balanced --no-clip --no-act-order
run bits3 --bits 3
run bits3-no-act-order --bits 3 --no-act-order
run bits3-no-clip --bits 3 --no-clip --no-act-order
run bits3-asym --bits 3 --asym
run bits3-g32 --bits 3 --group-size 32
