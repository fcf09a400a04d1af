#!/usr/bin/env bash
# One single-H200 session: the CUDA decode (build, tests, sweeps, benchmark) and the Triton
# log-sum-exp protocol on the GPU. Records to $OUT, logs to /tmp/logs (their tails print).
# bash .whl/install.sh >/dev/null 2>&1; bash benchmarks/h200/session_single.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 LOGS=/tmp/logs
mkdir -p "$LOGS"
bash benchmarks/h200/cuda_decode.sh
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${LSE_S:-120} python3 -m pytest tests/distributed/test_lse_protocol.py \
  -q -p no:cacheprovider -o addopts="" -n 2 -rf > "$LOGS/lse.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$LOGS/lse.txt" | tail -8
