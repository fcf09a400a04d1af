#!/usr/bin/env bash
# The Triton backend on the H200: conformance, autotune persistence across processes, and the
# issue's benchmark (bf16, BSHD; peers jax.nn.dot_product_attention cudnn and xla).
# From the repository root on the GPU machine: bash .whl/install.sh && bash benchmarks/h200/triton_bench.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
# pytest runs several workers on the GPU: no preallocation there (benchmarks keep the default).
out=${OUT:-/tmp/out}; mkdir -p "$out"
if [ "${SKIP_CONF:-0}" != 1 ]; then
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${CONF_S:-200} python3 -m pytest tests/conformance/test_dense_attention.py -k "flash_attention-triton" \
    -n 8 -q -p no:cacheprovider -o addopts="" --maxfail=10 --junitxml="$out/triton_conformance.xml" \
    > "$out/triton_conformance.txt" 2>&1
  tail -6 "$out/triton_conformance.txt"
  [ "${SKIP_TUNE:-0}" = 1 ] || XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${TUNE_S:-200} python3 -m pytest tests/gpu/test_autotune_gpu.py -k "not fwdbwd" -s -q -p no:cacheprovider \
    -o addopts="" > "$out/triton_autotune.txt" 2>&1
  grep -E "autotune|passed|failed" "$out/triton_autotune.txt" | tail -4
fi
# BENCH_ARGS: e.g. "--impl triton" to leave the (slow) XLA implementation out.
bench() { timeout ${BENCH_S:-200} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats ${REPEATS:-10} ${BENCH_ARGS:-} "$@"; }
bench --shape 8,2048,16,128 --shape 2,8192,16,128 --shape 16,1024,16,64 --causal both \
  --json "$out/flash_attention.json" > "$out/flash_bench.txt" 2>&1; tail -40 "$out/flash_bench.txt"
bench --shape 4,4096,4096,32,8,128 --causal both --json "$out/flash_attention_gqa.json" > "$out/flash_gqa.txt" 2>&1
tail -12 "$out/flash_gqa.txt"
bench --shape 1,16384,16,128 --varlen 8 --causal yes --json "$out/flash_attention_varlen.json" > "$out/flash_varlen.txt" 2>&1
tail -8 "$out/flash_varlen.txt"
