#!/usr/bin/env bash
# grouped_matmul (issue 19), mean_pooling (issue 19) and state_space_v1 (issue 18) on one H100/H200,
# in stages (STAGES picks them, in this order), each call within DEADLINE_S (default 480 s):
#   env    GPU, driver, versions, commit                                    -> gpu.txt
#   conf   the shared conformance cases of the three ops' Triton kernels (forward and the gradient
#          of every input), junit XML; in parallel with
#   gpu    tests/gpu/test_moe_pool_ssm1_gpu.py: the heuristics' tiles at realistic sizes, the
#          persistent grid, ssm1 at 65536 tokens, ssm1 memory linear in T    -> conformance.xml/.txt, gpu_tests.xml/.txt
#   gmm    `ejkernel bench grouped_matmul`, bf16, the issue's 4 shapes: (16384,4096,2048,8),
#          (16384,2048,1536,64), (65536,4096,1408,64) multinomial, (8192,7168,2048,256) Zipf;
#          ejkernel Triton vs lax.ragged_dot vs a dense matmul of the same FLOPs, fwd and fwd+bwd
#                                                                          -> gmm_{small,large,zipf}.json
#   pool   `ejkernel bench mean_pooling`, (262144, 4096) bf16 in 64 packed sequences: GB/s against
#          a device copy (the HBM peak measured in the same run)          -> mean_pooling.json
#   ssm    `ejkernel bench state_space_v1`, b1 T4096 d_inner4096 d_state16 bf16: Triton vs the XLA
#          chunked path vs the whole-sequence lax.associative_scan formulation  -> state_space_v1.json
#   sum    the bars of both issues from those records                     -> summary.txt
# Default: the benchmarks (env gmm pool ssm sum, ~400 s); the tests need a call of their own:
#   STAGES="env conf gpu" bash benchmarks/h200/wave2_moe_pool_ssm1.sh
# (Measured on an H100, heuristic configs: the two small grouped_matmul shapes with their peers
# 73 s, the 65536-row shape 58 s (lax.ragged_dot 154 ms a call; its backward runs out of memory),
# the Zipf shape more than 55 s, mean_pooling with its XLA path and peer more than 35 s,
# state_space_v1 ~35 s; the conformance of the three ops with the linear family 117 s on 14 workers.)
# `ejkernel bench --json` rewrites its file after every record: a stage cut by its limit keeps
# the records it measured.
# Optional stages, not in the default list: pooldense (the dense [512, 512, 4096] form of the
# pooling bench, ~45 s), sweep (Triton tile sweeps of the three ops: up to 300 s, a call of its
# own, e.g. STAGES="env sweep").
#
# From the repository root on the GPU machine:
#   bash .whl/install.sh >/dev/null 2>&1 && bash benchmarks/h200/wave2_moe_pool_ssm1.sh
# Each stage runs under its own `timeout` (the *_S variables), cut to what is left of DEADLINE_S
# (default 480 s from the start, leaving room for `.whl/install.sh` in the same 600 s call);
# results are written to $OUT (default /tmp/out) as each stage ends.
# CPU check of the script itself (tiny shapes, the XLA implementation instead of Triton):
#   SMOKE=1 OUT=/tmp/smoke bash benchmarks/h200/wave2_moe_pool_ssm1.sh
#   SMOKE=1 STAGES=sweep TRITON_INTERPRET=1 PYTHON=<python with triton and torch> bash benchmarks/h200/wave2_moe_pool_ssm1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 EJKERNEL_AUTOTUNE=0
out=${OUT:-/tmp/out}; mkdir -p "$out"
stages=" ${STAGES:-env gmm pool ssm sum} "
t_start=$(date +%s)
deadline=${DEADLINE_S:-480}
py=${PYTHON:-python3}
smoke=${SMOKE:-0}

left() { echo $(( deadline - ($(date +%s) - t_start) )); }
# stage NAME LIMIT_S CMD...: run CMD (a program or one of the functions below) under `timeout`,
# which signals its whole process group (xdist workers too), cut to the time left; log its exit
# status and duration.
stage() {
  local name=$1 want=$2 t0 rc lim
  shift 2
  lim=$(( $(left) - 3 ))
  (( want < lim )) && lim=$want
  if (( lim < 15 )); then
    echo "== $name: skipped ($(left) s left of ${deadline})" | tee -a "$out/stages.txt"
    return 0
  fi
  t0=$(date +%s)
  if declare -F "$1" > /dev/null; then
    timeout -k 5 "$lim" bash -c "$1 \"\$@\"" _ "${@:2}"
  else
    timeout -k 5 "$lim" "$@"
  fi
  rc=$?
  echo "== $name: rc=$rc ($([[ $rc == 124 || $rc == 137 ]] && echo 'TIMED OUT, ')$(( $(date +%s) - t0 )) s, limit $lim s)" \
    | tee -a "$out/stages.txt"
  return 0
}
on() { [[ $stages == *" $1 "* ]]; }

# Shapes and implementation: the issue's on the GPU; tiny ones on the XLA path for SMOKE=1.
if [[ $smoke == 1 ]]; then
  impl=xla
  gmm_small=(--shape 96,32,48,4 --shape 80,24,40,8)
  gmm_large=(--shape 128,40,24,8)
  gmm_zipf=(--dist zipf --shape 64,48,32,16)
  pool_args=(--tokens 4096 --hidden 64 --seqs 8)
  pool_dense=(--tokens 1024 --hidden 64 --seqs 0)
  ssm_args=(--b 1 --s 64 --d 32 --n 4)
  conf_k="(grouped_matmul or mean_pooling or state_space_v1) and triton"  # declined on the CPU: checks the selection
else
  impl=triton
  gmm_small=(--shape 16384,4096,2048,8 --shape 16384,2048,1536,64)
  gmm_large=(--shape 65536,4096,1408,64)
  gmm_zipf=(--dist zipf --shape 8192,7168,2048,256)
  pool_args=(--tokens 262144 --hidden 4096 --seqs 64)
  pool_dense=(--tokens 262144 --hidden 4096 --seqs 0)
  ssm_args=(--b 1 --s 4096 --d 4096 --n 16)
  conf_k="(grouped_matmul or mean_pooling or state_space_v1) and triton"
fi
conf_k=${CONF_K:-$conf_k}
reps=${REPEATS:-3}
workers() {  # pytest-xdist when the image has it
  if "$py" -c "import xdist" 2>/dev/null; then echo "-n $1"; fi
}
# The project's addopts are dropped (the image's pytest plugins differ); its marker filter is kept.
# pytest_gpu NAME ARGS...: output to $out/NAME.txt, junit XML to $out/NAME.xml.
pytest_gpu() {
  local name=$1
  shift
  XLA_PYTHON_CLIENT_PREALLOCATE=false "$py" -m pytest -q -p no:cacheprovider -o addopts="" -rf --durations=8 \
    --junitxml="$out/$name.xml" "$@" > "$out/$name.txt" 2>&1
}
bench() {  # bench OP NAME ARGS...: `ejkernel bench` with JSON records ($out/NAME.json) and a log
  local op=$1 name=$2
  shift 2
  "$py" -m ejkernel bench "$op" --dtype bfloat16 --repeats "$reps" --json "$out/$name.json" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  grep -v "^ejkernel bench:" "$out/$name.txt" | tail -16
  return $rc
}
export py out reps
export -f pytest_gpu bench

if on env; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
    "$py" -c "import sys, jax, jaxlib; print('python', sys.version.split()[0], 'jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
    "$py" -c "import triton, jax_triton; print('triton', triton.__version__, 'jax_triton', jax_triton.__version__)" 2>&1 | tail -1
    git log -1 --format="HEAD %h (%s)" 2>/dev/null
    git status --short 2>/dev/null | grep -c . | sed 's/^/uncommitted files: /'
    echo "stages:$stages smoke=$smoke deadline=${deadline}s"
  } 2>&1 | tee "$out/gpu.txt"
fi

# conf and gpu run side by side (compiles are CPU-bound; 16 cores), each with its own limit.
pids=()
if on conf; then
  # shellcheck disable=SC2046  # workers: zero or two words
  stage conf "${CONF_S:-300}" pytest_gpu conformance tests/conformance/test_conformance.py -m "${CONF_MARK:-not full and not packaging}" \
    -k "$conf_k" $(workers "${CONF_WORKERS:-8}") &
  pids+=($!)
fi
if on gpu; then
  # shellcheck disable=SC2046
  stage gpu "${GPU_S:-300}" pytest_gpu gpu_tests tests/gpu/test_moe_pool_ssm1_gpu.py $(workers "${GPU_WORKERS:-6}") &
  pids+=($!)
fi
for p in ${pids[@]+"${pids[@]}"}; do wait "$p"; done
for f in conformance gpu_tests; do
  [[ -f $out/$f.txt ]] && { echo "-- $f:"; grep -E "passed|failed|FAILED|Error|skipped" "$out/$f.txt" | tail -12; }
done

if on gmm; then
  # lax.ragged_dot costs ~groups x the dense matmul (90+ ms a call on the 64- and 256-expert large shapes).
  stage gmm-small "${GMM_SMALL_S:-100}" bench grouped_matmul gmm_small --impl "$impl" "${gmm_small[@]}"
  stage gmm-large "${GMM_LARGE_S:-80}" bench grouped_matmul gmm_large --impl "$impl" "${gmm_large[@]}"
  stage gmm-zipf "${GMM_ZIPF_S:-90}" bench grouped_matmul gmm_zipf --impl "$impl" "${gmm_zipf[@]}"
fi
if on pool; then
  # Both implementations (Triton, XLA) and the XLA segment-sum peer; the bar is the copy's GB/s.
  stage pool "${POOL_S:-70}" bench mean_pooling mean_pooling --repeats 5 "${pool_args[@]}"
fi
if on pooldense; then
  stage pooldense "${POOLDENSE_S:-45}" bench mean_pooling mean_pooling_dense --repeats 5 "${pool_dense[@]}"
fi
if on ssm; then
  stage ssm "${SSM_S:-50}" bench state_space_v1 state_space_v1 "${ssm_args[@]}"
fi
if on sweep; then
  if [[ $smoke == 1 ]]; then  # the gmm sweep needs Triton's interpreter here: PYTHON with torch, TRITON_INTERPRET=1
    sweep_gmm=(--interpret --dtype float16 --shape 96,32,48,4,zipf --quick)
    sweep_pool=(--tiny --platform xla)
  else
    sweep_gmm=(--shapes 0,1 --quick)
    sweep_pool=(--quick)
  fi
  stage sweep-gmm "${SWEEP_GMM_S:-150}" "$py" benchmarks/grouped_matmul_sweep.py "${sweep_gmm[@]}" --json "$out/gmm_sweep.json"
  stage sweep-pool-ssm "${SWEEP_S:-150}" "$py" benchmarks/pool_ssm1/sweep.py "${sweep_pool[@]}" --out "$out/pool_ssm1_sweep.jsonl"
fi
if on sum; then
  stage sum 15 "$py" benchmarks/h200/wave2_moe_pool_ssm1_summary.py "$out" --impl "$impl"
fi
echo "total $(( $(date +%s) - t_start )) s" | tee -a "$out/stages.txt"
