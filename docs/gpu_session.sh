#!/usr/bin/env bash
# The runtime's checks for one GPU session, in order of value, each under its own time limit so one slow stage
# cannot eat the others (device time is scarce: 15 minutes a session). Everything lands in $OUT:
#   session.log                  machine, versions, every stage's output and exit code
#   kernels/gpu_check.json       W4A16/W8A16 kernels at real shapes through the cache's own slabs, and every dense
#                                shape of the model after the load's merges at 1/32/64/512 rows (`dense_shapes`)
#   moe_anatomy.json             one layer's routed experts at 32 rows, uniform routing (≈ 162 experts): the call's
#                                launches apart (align, gate/up, down, sum; GPU time in a graph), read-only probes of
#                                the two passes' programs (their code words, the pass's tiles and wider / K-split
#                                ones), a flat read of the same slabs, and the call with one tile knob turned at a
#                                time (stages, BLOCK_N, warps, register cap, dot orientation): where the MoE's
#                                0.9 TB/s (of 4.8) goes; written after each part
#   bench_full_16GiB.json        `bench --synthetic full --vram-budget 16GB --prefix 4096 --passes 8 --json`
#   finite/gpu_check.json        every module's output finite through a prompt, previews and a commit on the
#                                synthetic full pack; where not, the first module per pass and which piece switched
#                                off fixes it (fused hooks, W4A16 forms, optimistic passes / prefetch / host reads)
#   model/gpu_check.json         offloaded vs all-resident logits, counters, peak memory, optimistic vs syncing
#   decode/gpu_check.json        a real decode loop as chat runs it (worker thread, graphs, merged commits, host
#                                reads, sampling): graphed vs eager tokens, the loop's ms per pass vs the records'
#   bench_uniform.json           the same with `--routing uniform` (a real block's expert load)
#   bench_uniform_3bit.json      ... uniform on `--synthetic full3` (3-bit experts, `quantize --bits 3`: ≈ 15.6 GB,
#                                written first; at 16 GiB every expert resident: the pass without PCIe)
#   bench_uniform_3bit_gptq.json ... full3 with CLOVER_W3_PLANES=0 (stage full3gptq: the 3-bit experts in GPTQ's
#                                layout, the unpacking form: the before of the planes layout's after)
#   bench_prefix32k.json         ... uniform with a 32,256-token prefix (`--passes 4`): a long prompt's prefill
#                                (63 chunks over a growing window: the GDN chunk kernels, attention over up to
#                                32K keys without a mask) and peak memory at nearly the full default context
#   bench_prefix32k_chunks.json  ... the same with CLOVER_PREFILL_SPAN=512 (the prompt chunk after chunk through
#                                every layer: the before of the layer-by-layer prefill's after)
#   bench_uniform_reveal.json    ... with `--routing uniform-reveal` (revealed rows rerouted: later passes miss;
#                                their misses read in place from host memory where the load-time check passes)
#   bench_uniform_reveal_repair.json  ... and `--no-host-reads` (misses repaired: copied, the graph replayed again)
#   bench_uniform_reveal_resident.json  ... uniform-reveal with `--resident-routing` (later passes choose among
#                                resident experts: nothing read in place, repaired or waited for; what they wanted
#                                copied in behind the next pass)
#   bench_uniform_unfused.json   ... with CLOVER_DISABLE_FUSED=1 (the model's PyTorch GDN preview, attention,
#                                norms, router: the before of the fused kernels' after)
#   bench_uniform_gdnsplit.json  ... with CLOVER_GDN_PREVIEW=split (the GDN preview over (head, value slice)
#                                programs, then the gated norm: 64 programs a layer where the default has 32)
#   bench_uniform_unpacked.json  ... with CLOVER_W4A16_FORM=unpacked (the W4A16 tiles' old form: the before of
#                                the field-wise default's after)
#   bench_uniform_unfolded.json  ... with CLOVER_W4A16_FOLD=0 CLOVER_W4A16_REPACK=0 (the routed experts' form
#                                before the zero fold, dense weights in the GPTQ row order: the before of both)
#   bench_uniform_unswapped.json ... with CLOVER_W4A16_SWAP=0 (the routed experts' folded dots with the weights as
#                                the MMA's second operand: the before of the transposed default's after)
#   bench_uniform_eager.json     ... and `--no-cuda-graphs` (eager launches, for comparison)
#   routings/bench_uniform*.json the uniform, reveal, repair and resident stages' four JSONs from ONE load of the
#                                pack (`gpu_check --stages routings`: ≈ 20 s of loading each saved three times), and
#                                bench_uniform_reveal_copy.json: reveal with `--no-read-through` (host reads whose
#                                misses are copied after the pass, the before of read-through installs)
#   kernels_sweep.json           `bench_kernels --sweep small`: tile configs, cuBLAS bf16, CUDA-graph capture
#   moe_sweep.json               `bench_kernels --quick --only moe --sweep full`: the MoE kernel's tiles at 32 rows
#   tune.json, tuning_table.json `clover-local tune --synthetic full --vram-budget 16GB --quick --json` and the
#                                table it wrote (this GPU's tiles for every call of a preview pass)
#   bench_uniform_tuned.json     bench uniform with that table (every other stage runs with CLOVER_TUNING=off,
#                                so their figures stay comparable whether or not `tune` ran before them)
#   quant_scale_cuda.json        (stage quantscale, not in the default list) `python -m quantize.bench_scale --device
#                                cuda --layers 1`: one real-size GDN layer quantized on the GPU with today's defaults
#                                (seconds a layer, peak host RSS and GPU memory; on one CPU core it took 245 s)
#   compile_check.json           every kernel compiled by this machine's triton for sm_90 / sm_120 (registers,
#                                K-loop instructions per weight), run on one CPU core beside the stages
#   doctor.json                  `clover-local doctor --json` (before the stages: ≈ 3 s)
#   summary.txt                  `python docs/gpu_summary.py $OUT`: the before/after pairs of all of the above
# Before it, on the CPU machine: docs/gpu_versions_check.sh (the kernels compiled and tested with that machine's
# torch / triton, which CI does not use).
# Usage (from the repository root): OUT=/some/dir TOTAL_S=440 bash docs/gpu_session.sh
# (STAGES from: kernels anatomy finite model decode routings full3 full3gptq bench uniform longprompt longchunks reveal repair resident unfused gdnsplit
# unpacked unfolded unswapped eager sweep moesweep tune tuned quantscale,
# in the order given;
# default kernels,routings,anatomy,finite,decode,model,full3,longprompt,tune,tuned)
set -u
OUT=${OUT:-/tmp/clover-gpu}
TOTAL_S=${TOTAL_S:-470}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# the synthetic packs (20 GB full, 15.6 GB full3) in RAM where /dev/shm can hold both: writing them to the VM's disk
# took most of a stage's first minute (2026-12-04: the finite stage ran out of 139 s while writing and loading), and
# the H200 machine has 125 GiB of RAM (the pinned expert slabs take 17 GB of it)
if [ -z "${CLOVER_LOCAL_CACHE:-}" ] && [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -ge 41943040 ] 2>/dev/null; then
  export CLOVER_LOCAL_CACHE=/dev/shm/clover-local
fi
export CLOVER_TUNING=off  # the heuristic tiles everywhere but the `tuned` stage
export CLOVER_TRACEBACK=1  # a command's one-line error (a CloverError, running out of memory) with where it came from
log="$OUT/session.log"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max \
    --format=csv
  python3 -c "import torch, triton, platform; print('torch', torch.__version__, 'triton', triton.__version__, \
'python', platform.python_version())"
  echo "cpus $(nproc)"; free -g | head -2; df -h "$HOME" | tail -1; df -h /dev/shm 2>/dev/null | tail -1
  echo "CLOVER_LOCAL_CACHE=${CLOVER_LOCAL_CACHE:-(default)}"
} >>"$log" 2>&1
# `clover-local doctor` (≈ 3 s): its CUDA branches (device facts, pinned copy, Triton kernels vs the reference,
# the 35B fit at the default budget) have only run on CPU machines so far
timeout 60 python3 -m clover_local doctor --json >"$OUT/doctor.json" 2>>"$log"; echo "== doctor rc=$?" >>"$log"

stage() {  # stage NAME CAP_S COMMAND...: run under min(cap, time left - 5 s)
  local name=$1 cap=$2; shift 2
  local left=$((TOTAL_S - SECONDS - 5))
  local lim=$((cap < left ? cap : left))
  if [ "$lim" -lt 20 ]; then echo "== $name skipped: ${left}s left" | tee -a "$log"; return; fi
  echo "== $name (limit ${lim}s, at ${SECONDS}s)" | tee -a "$log"
  local t0=$SECONDS
  timeout -k 5 "$lim" "$@"
  echo "== $name rc=$? in $((SECONDS - t0))s" | tee -a "$log"
}

# kernels first (its dense-shapes check says whether the split-K fix of 2026-12-04 holds at every real shape), then
# the bench figures (routings: the must-show pass), the MoE's anatomy (≈ 40–90 s: where its time goes); finite after
# them: quick where the passes are finite, the diagnosis where they are not
STAGES=${STAGES:-kernels,routings,anatomy,finite,decode,model,full3,longprompt,tune,tuned}
# this machine's triton compiling every kernel (`compile_check --sass`: no GPU used, one CPU core, niced) beside the
# stages: the census of the compiler that runs here, which may not be the one CI or the CPU machine has
if command -v nvidia-smi >/dev/null 2>&1; then  # (a dry run on a CPU machine skips it)
  (nice -n 19 timeout 600 env -u TRITON_INTERPRET python3 -m clover_local.runtime.kernels.compile_check --arch 90,120 \
    --jobs 1 --sass --json >"$OUT/compile_check.part" 2>>"$OUT/compile_check.err" \
    && mv "$OUT/compile_check.part" "$OUT/compile_check.json" &)
fi
B="python3 -m clover_local bench --synthetic full --vram-budget 16GB --prefix 4096 --passes 8 --json --device cuda"
# stages run in the order STAGES lists them: put first what the session most needs
for s in ${STAGES//,/ }; do
  case $s in
    kernels) stage kernels 180 bash -c \
      "python3 -m clover_local.runtime.gpu_check --out '$OUT/kernels' --stages kernels >>'$log' 2>&1" ;;
    anatomy) stage anatomy 90 bash -c "python3 -m clover_local.runtime.kernels.moe_anatomy \
      --out '$OUT/moe_anatomy.json' >>'$log' 2>&1" ;;
    finite) stage finite 240 bash -c \
      "python3 -m clover_local.runtime.gpu_check --out '$OUT/finite' --stages finite >>'$log' 2>&1" ;;
    model) stage model 180 bash -c \
      "python3 -m clover_local.runtime.gpu_check --out '$OUT/model' --stages model >>'$log' 2>&1" ;;
    decode) stage decode 150 bash -c \
      "python3 -m clover_local.runtime.gpu_check --out '$OUT/decode' --stages decode >>'$log' 2>&1" ;;
    routings) stage routings 240 bash -c \
      "python3 -m clover_local.runtime.gpu_check --out '$OUT/routings' --stages routings >>'$log' 2>&1" ;;
    full3) stage full3 200 bash -c "${B/--synthetic full/--synthetic full3} --routing uniform \
      >'$OUT/bench_uniform_3bit.json' 2>>'$log'" ;;
    full3gptq) stage full3gptq 200 bash -c "CLOVER_W3_PLANES=0 ${B/--synthetic full/--synthetic full3} --routing uniform \
      >'$OUT/bench_uniform_3bit_gptq.json' 2>>'$log'" ;;
    bench) stage bench 150 bash -c "$B >'$OUT/bench_full_16GiB.json' 2>>'$log'" ;;
    uniform) stage uniform 150 bash -c "$B --routing uniform >'$OUT/bench_uniform.json' 2>>'$log'" ;;
    longprompt) stage longprompt 150 bash -c "${B/--prefix 4096 --passes 8/--prefix 32256 --passes 4} --routing uniform \
      >'$OUT/bench_prefix32k.json' 2>>'$log'" ;;
    longchunks) stage longchunks 150 bash -c "CLOVER_PREFILL_SPAN=512 ${B/--prefix 4096 --passes 8/--prefix 32256 \
--passes 4} --routing uniform >'$OUT/bench_prefix32k_chunks.json' 2>>'$log'" ;;
    reveal) stage reveal 150 bash -c "$B --routing uniform-reveal >'$OUT/bench_uniform_reveal.json' 2>>'$log'" ;;
    repair) stage repair 150 bash -c "$B --routing uniform-reveal --no-host-reads \
      >'$OUT/bench_uniform_reveal_repair.json' 2>>'$log'" ;;
    resident) stage resident 150 bash -c "$B --routing uniform-reveal --resident-routing \
      >'$OUT/bench_uniform_reveal_resident.json' 2>>'$log'" ;;
    unfused) stage unfused 150 bash -c "CLOVER_DISABLE_FUSED=1 $B --routing uniform \
      >'$OUT/bench_uniform_unfused.json' 2>>'$log'" ;;
    gdnsplit) stage gdnsplit 150 bash -c "CLOVER_GDN_PREVIEW=split $B --routing uniform \
      >'$OUT/bench_uniform_gdnsplit.json' 2>>'$log'" ;;
    unpacked) stage unpacked 150 bash -c "CLOVER_W4A16_FORM=unpacked $B --routing uniform \
      >'$OUT/bench_uniform_unpacked.json' 2>>'$log'" ;;
    unfolded) stage unfolded 150 bash -c "CLOVER_W4A16_FOLD=0 CLOVER_W4A16_REPACK=0 $B --routing uniform \
      >'$OUT/bench_uniform_unfolded.json' 2>>'$log'" ;;
    unswapped) stage unswapped 150 bash -c "CLOVER_W4A16_SWAP=0 $B --routing uniform \
      >'$OUT/bench_uniform_unswapped.json' 2>>'$log'" ;;
    eager) stage eager 150 bash -c \
      "$B --routing uniform --no-cuda-graphs >'$OUT/bench_uniform_eager.json' 2>>'$log'" ;;
    sweep) stage sweep 150 bash -c "python3 -m clover_local.runtime.kernels.bench_kernels --sweep small \
      --out '$OUT/kernels_sweep.json' >/dev/null 2>>'$log'" ;;
    moesweep) stage moesweep 120 bash -c "python3 -m clover_local.runtime.kernels.bench_kernels --quick \
      --only moe --sweep full --out '$OUT/moe_sweep.json' >/dev/null 2>>'$log'" ;;
    tune) stage tune 240 bash -c "python3 -m clover_local tune --synthetic full --vram-budget 16GB --quick --json \
      >'$OUT/tune.json' 2>>'$log' && python3 -c \"import json,shutil; shutil.copy(json.load(open('$OUT/tune.json'))\
['table'], '$OUT/tuning_table.json')\"" ;;
    tuned) stage tuned 150 bash -c "CLOVER_TUNING=on $B --routing uniform >'$OUT/bench_uniform_tuned.json' \
      2>>'$log'" ;;
    quantscale) stage quantscale 300 bash -c "python3 -m quantize.bench_scale --work /tmp/clover-scale --device cuda \
      --layers 1 --json >'$OUT/quant_scale_cuda.json' 2>>'$log'" ;;
    *) echo "== unknown stage $s (known: kernels anatomy finite model decode routings full3 full3gptq bench uniform longprompt longchunks reveal repair resident \
unfused gdnsplit unpacked unfolded unswapped eager sweep moesweep tune tuned quantscale)" | tee -a "$log" ;;
  esac
done
nvidia-smi --query-gpu=memory.used,temperature.gpu --format=csv >>"$log" 2>&1
cat "$log"
python3 docs/gpu_summary.py "$OUT" >"$OUT/summary.txt" 2>&1; cat "$OUT/summary.txt"
