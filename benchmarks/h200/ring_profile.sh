#!/usr/bin/env bash
# Where the 4-GPU ring's step time goes (kind nvidia-h200-x4): weak scaling at 1 and 4 GPUs with
# a profiler trace of 3 forward + backward calls per scale, summarized per kernel for GPU 0
# (benchmarks/gpu_trace_summary.py); then the 4-GPU scale again under $XLA_FLAGS_B, if set, and
# with TESTS=1 the ring and log-sum-exp GPU tests.
# bash .whl/install.sh >/dev/null 2>&1; bash benchmarks/h200/ring_profile.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
run() {  # name, extra args...
  local name=$1; shift
  timeout ${RING_S:-240} python3 benchmarks/ring_weak_scaling.py --devices 4 --repeats 5 --profile /tmp/trace_$name \
    --out "$out/ring_profile_$name.json" "$@" 2>&1 | grep -v "^WARNING"
}
run a --scales 1,4
if [ -n "${XLA_FLAGS_B:-}" ]; then XLA_FLAGS="$XLA_FLAGS_B" run b --scales 4 --no-flash-baseline; fi
if [ "${TESTS:-0}" = 1 ]; then
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${RING_TEST_S:-200} python3 -m pytest tests/gpu/test_ring_gpu.py \
    tests/distributed/test_lse_protocol.py -q -p no:cacheprovider -o addopts="" -n 4 -rf 2>&1 | tail -5
fi
