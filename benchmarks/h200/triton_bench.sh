#!/usr/bin/env bash
# The Triton backend on one H200, everything its issue asks for, in stages (STAGES picks them, in
# this order; one device call of 10 minutes holds about two of them):
#   conf   the shared conformance cases of the Triton implementations (flash and ring; forward, gradients)
#   dims   every head dim of the issue (64 ... 256) in every dtype, forward and gradients
#   tma    the Hopper TMA forwards' own GPU tests and the log-sum-exp protocol tests
#   tune   autotune persistence across processes, forward and forward+backward (times printed)
#   bench  the benchmark in one run: bf16, BSHD, the three dense shapes causal and not,
#          the GQA shape; peers jax.nn.dot_product_attention cudnn and xla
#   varlen the same for the varlen batch
# From the repository root on the GPU machine:
#   bash .whl/install.sh && STAGES="conf tma" bash benchmarks/h200/triton_bench.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
stages=" ${STAGES:-conf dims tma tune bench varlen} "
# pytest runs several workers on the GPU: no preallocation there (benchmarks keep the default).
gpu_pytest() { XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$1" python3 -m pytest -q -p no:cacheprovider -o addopts="" -rf "${@:2}"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
if [[ $stages == *" conf "* ]]; then
  gpu_pytest ${CONF_S:-450} tests/conformance -k "triton" -n ${WORKERS:-14} \
    --maxfail=10 --durations=10 --junitxml="$out/triton_conformance.xml" > "$out/triton_conformance.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/triton_conformance.txt" | tail -8
fi
if [[ $stages == *" dims "* ]]; then
  gpu_pytest ${DIMS_S:-330} tests/gpu/test_triton_head_dims_gpu.py -n ${WORKERS:-14} --durations=5 > "$out/head_dims.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/head_dims.txt" | tail -12
fi
if [[ $stages == *" tma "* ]]; then
  gpu_pytest ${TMA_S:-330} tests/gpu/test_triton_tma_gpu.py -n ${WORKERS:-14} --durations=5 > "$out/tma_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/tma_tests.txt" | tail -8
  gpu_pytest ${LSE_S:-120} tests/distributed/test_lse_protocol.py -n 2 > "$out/lse.txt" 2>&1
  grep -E "passed|failed|FAILED" "$out/lse.txt" | tail -4
fi
if [[ $stages == *" tune "* ]]; then
  # The two modes in parallel: each test runs its two processes one after the other.
  gpu_pytest ${TUNE_S:-300} tests/gpu/test_autotune_gpu.py -rfP -n 2 > "$out/triton_autotune.txt" 2>&1
  grep -E "\[autotune|passed|failed" "$out/triton_autotune.txt" | tail -6
fi
# BENCH_ARGS: e.g. "--impl triton" to leave the (slow) XLA implementation of ejkernel out.
bench() { timeout ${BENCH_S:-300} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats ${REPEATS:-5} ${BENCH_ARGS:-} "$@"; }
if [[ $stages == *" bench "* ]]; then
  # BENCH_SHAPES / BENCH_NAME split the dense shapes over device calls (the ratios to cuDNN are
  # per shape, measured in the same process either way).
  bench ${BENCH_SHAPES:---shape 8,2048,16,128 --shape 2,8192,16,128 --shape 16,1024,16,64 --shape 4,4096,4096,32,8,128} \
    --causal both --json "$out/${BENCH_NAME:-flash_attention}.json" > "$out/flash_bench.txt" 2>&1
  tail -40 "$out/flash_bench.txt"
fi
if [[ $stages == *" varlen "* ]]; then
  bench --shape 1,16384,16,128 --varlen 8 --causal yes --json "$out/flash_attention_varlen.json" > "$out/flash_varlen.txt" 2>&1
  tail -8 "$out/flash_varlen.txt"
fi
