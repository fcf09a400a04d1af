#!/usr/bin/env bash
# Nsight Compute on the CUDA paged decode (kind nvidia-h200; its Firecracker runtime lets ncu read
# the counters): b32 h32/8 d128 bs16 bf16, ctx 8192, one launch per config of $CONFIGS
# ("partition:stages ..."). Reports to $OUT/ncu_<partition>_<stages>.txt; key lines print.
# bash .whl/install.sh >/dev/null 2>&1; bash benchmarks/h200/decode_ncu.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
EJKERNEL_CUDA_ARCHS=${EJKERNEL_CUDA_ARCHS:-90a-real} python3 -m pip install -q --no-index --no-deps \
  --no-build-isolation -e packages/ejkernel-cuda > "$out/cuda_build.txt" 2>&1 || { tail -30 "$out/cuda_build.txt"; exit 1; }
for cfg in ${CONFIGS:-8192:3 2048:3}; do
  p=${cfg%:*}; s=${cfg#*:}
  timeout ${NCU_S:-150} ncu --clock-control none --kernel-name regex:paged_decode --launch-skip ${SKIP:-4} --launch-count ${COUNT:-2} \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    python3 benchmarks/cuda_decode_sweep.py --context ${CONTEXT:-8192} --partitions "$p" --stages "$s" --variants 0 --repeats 1 \
    > "$out/ncu_${p}_${s}.txt" 2>&1
  echo "== partition $p stages $s"
  grep -E "paged_decode|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Shared Memory Configuration Size|Dynamic Shared|Block Limit|Waves Per SM|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\)" "$out/ncu_${p}_${s}.txt" | head -60
done
