#!/usr/bin/env bash
# The CUDA backend on the H200: build the extension (Hopper only, to save time), run its tests and
# the shared page_attention conformance cases, sweep the launch configs, and run the benchmark.
# From the repository root on the GPU machine: bash .whl/install.sh && bash benchmarks/h200/cuda_decode.sh
# JSON records go to $OUT (or /tmp/out), text logs to $LOGS (default: the same folder).
# SWEEP=0 skips both sweeps (SWEEP_LONG=0 the 32k one; SWEEP_ARGS / SWEEP_ARGS_LONG add options), BENCH=0 the benchmark.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; logs=${LOGS:-$out}; mkdir -p "$out" "$logs"
t0=$(date +%s)
EJKERNEL_CUDA_ARCHS=${EJKERNEL_CUDA_ARCHS:-90a-real} python3 -m pip install -q --no-index --no-deps \
  --no-build-isolation -e packages/ejkernel-cuda > "$logs/cuda_build.txt" 2>&1 || { tail -30 "$logs/cuda_build.txt"; exit 1; }
echo "cuda build: $(( $(date +%s) - t0 )) s"
# pytest runs several workers on the GPU: no preallocation there (benchmarks keep the default).
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${CUDA_TEST_S:-200} python3 -m pytest packages/ejkernel-cuda/tests tests/conformance/test_page_attention.py \
  -k "cuda or test_registered or test_extension" -q -p no:cacheprovider -o addopts="" -n 4 -rf \
  > "$logs/cuda_tests.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$logs/cuda_tests.txt" | tail -8
[ "${SWEEP:-1}" = 1 ] && timeout ${SWEEP_S:-100} python3 benchmarks/cuda_decode_sweep.py --context 8192 ${SWEEP_ARGS:-} --out "$out/cuda_sweep_8192.json" 2>&1 | tail -45
[ "${SWEEP:-1}${SWEEP_LONG:-1}" = 11 ] && timeout 90 python3 benchmarks/cuda_decode_sweep.py --context 32768 --partitions 1024,2048,4096 \
  --stages 2,3,4 --repeats 10 ${SWEEP_ARGS_LONG:-} --out "$out/cuda_sweep_32768.json" 2>&1 | tail -16
[ "${BENCH:-1}" = 1 ] || exit 0
timeout ${BENCH_S:-150} python3 -m ejkernel bench page_attention --dtype bfloat16 --b 32 --h 32 --hk 8 --d 128 --block-size 16 \
  --context 1024 --context 8192 --context 32768 --repeats ${REPEATS:-10} --json "$out/page_attention.json" > "$logs/page_bench.txt" 2>&1
tail -20 "$logs/page_bench.txt"
