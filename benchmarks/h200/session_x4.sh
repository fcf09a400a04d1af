#!/usr/bin/env bash
# One 4-GPU H200 session (kind nvidia-h200-x4): ring attention weak scaling on 1, 2 and 4 GPUs,
# the ring's correctness on all 4 (Triton inner blocks), and the Triton varlen benchmark on GPU 0.
# Records to $OUT, logs to /tmp/logs (their tails print).
# bash .whl/install.sh >/dev/null 2>&1; bash benchmarks/h200/session_x4.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp/out}; logs=/tmp/logs; mkdir -p "$out" "$logs"
nvidia-smi --query-gpu=index,name --format=csv,noheader
timeout ${RING_S:-330} python3 benchmarks/ring_weak_scaling.py --devices 4 --scales 1,2,4 --time-budget ${RING_BUDGET:-240} \
  --out "$out/ring_weak_scaling_h200.json" 2>&1 | grep -v "^WARNING" | tail -14
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${RING_TEST_S:-200} python3 -m pytest tests/gpu/test_ring_gpu.py tests/distributed/test_lse_protocol.py \
  -q -p no:cacheprovider -o addopts="" -n 4 -rf > "$logs/ring_tests.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$logs/ring_tests.txt" | tail -12
CUDA_VISIBLE_DEVICES=0 timeout ${VARLEN_S:-150} python3 -m ejkernel bench flash_attention --dtype bfloat16 --repeats 10 \
  --shape 1,16384,16,128 --varlen 8 --causal yes --json "$out/flash_attention_varlen.json" > "$logs/flash_varlen.txt" 2>&1
tail -10 "$logs/flash_varlen.txt"
