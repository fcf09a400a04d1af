#!/usr/bin/env bash
# The CUDA backend on the H200: build the extension (Hopper only, to save time), run its tests and
# the shared page_attention conformance cases, sweep the partition length, and run the benchmark.
# From the repository root on the GPU machine: bash .whl/install.sh && bash benchmarks/h200/cuda_decode.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
# pytest runs several workers on the GPU: no preallocation there (benchmarks keep the default).
out=${OUT:-/tmp/out}; mkdir -p "$out"
t0=$(date +%s)
EJKERNEL_CUDA_ARCHS=${EJKERNEL_CUDA_ARCHS:-90a-real} python3 -m pip install -q --no-index --no-deps \
  --no-build-isolation -e packages/ejkernel-cuda > "$out/cuda_build.txt" 2>&1 || { tail -30 "$out/cuda_build.txt"; exit 1; }
echo "cuda build: $(( $(date +%s) - t0 )) s"
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${CUDA_TEST_S:-200} python3 -m pytest packages/ejkernel-cuda/tests tests/conformance/test_page_attention.py \
  -k "cuda or test_registered or test_extension" -q -p no:cacheprovider -o addopts="" -n 4 \
  --junitxml="$out/cuda_tests.xml" > "$out/cuda_tests.txt" 2>&1
tail -8 "$out/cuda_tests.txt"
timeout 120 python3 benchmarks/cuda_decode_sweep.py --context 8192 --out "$out/cuda_sweep_8192.json" 2>&1 | tail -8
timeout 150 python3 -m ejkernel bench page_attention --dtype bfloat16 --b 32 --h 32 --hk 8 --d 128 --block-size 16 \
  --context 1024 --context 8192 --context 32768 --repeats ${REPEATS:-10} --json "$out/page_attention.json" > "$out/page_bench.txt" 2>&1
tail -20 "$out/page_bench.txt"
