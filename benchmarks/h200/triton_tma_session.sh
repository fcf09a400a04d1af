#!/usr/bin/env bash
# The Triton flash attention with the Hopper TMA forward on one H200: forward tile sweep next to
# cuDNN, the bar-shape benchmark, the TMA kernel's GPU tests and the log-sum-exp protocol
# tests (PART=a), then the shared Triton conformance cases and the other benchmark shapes (PART=b).
# From the repository root on the GPU machine:
#   bash .whl/install.sh && PART=a bash benchmarks/h200/triton_tma_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
bench() { timeout ${BENCH_S:-200} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats ${REPEATS:-5} --impl triton "$@"; }
# pytest runs several workers on the GPU: no preallocation there (benchmarks keep the default).
gpu_pytest() { XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$1" python3 -m pytest "${@:2}" -q -p no:cacheprovider -o addopts="" -rf; }
if [ "${PART:-a}" = a ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
  timeout ${SWEEP_S:-150} python3 benchmarks/triton_fwd_sweep.py --configs "${CONFIGS:-128x64x4x2,128x64x8x2,128x128x8x2}" \
    --out "$out/triton_fwd_sweep_tma.json" 2>&1 | grep -E "cudnn|TFLOP|Error"
  bench --shape 2,8192,16,128 --causal both --json "$out/flash_attention_8192.json" > "$out/bench_8192.txt" 2>&1
  tail -10 "$out/bench_8192.txt"
  gpu_pytest ${TMA_S:-200} tests/gpu/test_triton_tma_gpu.py -n 8 > "$out/tma_tests.txt" 2>&1
  grep -E "passed|failed|FAILED|Error" "$out/tma_tests.txt" | tail -8
  gpu_pytest ${LSE_S:-100} tests/distributed/test_lse_protocol.py -n 2 > "$out/lse.txt" 2>&1
  grep -E "passed|failed|FAILED" "$out/lse.txt" | tail -4
else
  gpu_pytest ${CONF_S:-330} tests/conformance/test_dense_attention.py -k "flash_attention-triton" -n 12 --maxfail=10 \
    --junitxml="$out/triton_conformance.xml" > "$out/triton_conformance.txt" 2>&1
  grep -E "passed|failed|FAILED" "$out/triton_conformance.txt" | tail -8
  bench --shape 8,2048,16,128 --shape 16,1024,16,64 --shape 4,4096,4096,32,8,128 --causal both \
    --json "$out/flash_attention.json" > "$out/bench_shapes.txt" 2>&1
  tail -16 "$out/bench_shapes.txt"
fi
