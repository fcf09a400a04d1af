#!/usr/bin/env bash
# Runs gpu_suites.sh once per GPU of a multi-GPU machine, in parallel: each argument is one lane's
# environment (e.g. "STAGES=conf CONF_TESTS='tests/ops/attention/test_conformance.py'"), lane i on GPU i
# with its records in $OUT/lane<i>, packed into $OUT/lane<i>.tgz (the device returns few files).
# ejkernel-cuda is built once first when BUILD=1. From the repository root:
#   bash .whl/install.sh && BUILD=1 bash benchmarks/h200/lanes.sh "STAGES=conf" "STAGES=gpu"
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
here=$(dirname "$0")
if [[ ${BUILD:-0} == 1 ]]; then OUT=$out STAGES=build bash "$here/gpu_suites.sh" || exit 1; fi
i=0
for lane in "$@"; do
  mkdir -p "$out/lane$i"
  # LANE_S bounds a lane, so its records are packed before the caller's own time limit.
  (env CUDA_VISIBLE_DEVICES=$i OUT="$out/lane$i" timeout ${LANE_S:-3600} bash -c "export $lane; bash $here/gpu_suites.sh" \
    > "$out/lane$i/suite.txt" 2>&1; tar -czf "$out/lane$i.tgz" -C "$out" "lane$i") &
  i=$((i + 1))
done
wait
for ((j = 0; j < i; j++)); do echo "== lane $j"; tail -n 25 "$out/lane$j/suite.txt"; rm -rf "$out/lane$j"; done
