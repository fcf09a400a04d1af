#!/usr/bin/env bash
# The Triton backend on the H200: a tile sweep on the headline shape, then conformance.
# Run on the GPU machine from the repository root: bash .whl/install.sh && bash benchmarks/h200/triton_first.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
timeout ${BASE_S:-90} python3 benchmarks/triton_baseline.py --b 2 --s 8192 --h 16 --d 128 > "$out/baseline.txt" 2>&1
grep BEST "$out/baseline.txt"
timeout ${SWEEP_S:-280} python3 benchmarks/triton_sweep.py --b 2 --s 8192 --h 16 --d 128 --causal both \
  --max-fwd ${MAX_FWD:-26} --max-bwd ${MAX_BWD:-24} --repeats 5 --out "$out/sweep.json" > "$out/sweep.txt" 2>&1
tail -14 "$out/sweep.txt"
timeout ${CONF_S:-240} python3 -m pytest tests/conformance/test_dense_attention.py -k "flash_attention-triton" -n 12 -q \
  -p no:cacheprovider -o addopts="" --maxfail=10 --junitxml="$out/conformance.xml" > "$out/conformance.txt" 2>&1
tail -6 "$out/conformance.txt"
