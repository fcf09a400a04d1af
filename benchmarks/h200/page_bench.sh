#!/usr/bin/env bash
# The page_attention benchmark on one H200 (b32 h32/8 d128 bs16 bf16, ctx 1024/8192/32768):
# build ejkernel-cuda for Hopper, then `ejkernel bench` with the heuristic configs, JSON to $OUT.
# bash .whl/install.sh >/dev/null 2>&1; bash benchmarks/h200/page_bench.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
EJKERNEL_CUDA_ARCHS=${EJKERNEL_CUDA_ARCHS:-90a-real} python3 -m pip install -q --no-index --no-deps \
  --no-build-isolation -e packages/ejkernel-cuda > /tmp/cuda_build.txt 2>&1 || { tail -30 /tmp/cuda_build.txt; exit 1; }
timeout ${PAGE_S:-240} python3 -m ejkernel bench page_attention --dtype bfloat16 --b 32 --h 32 --hk 8 --d 128 --block-size 16 \
  --context 1024 --context 8192 --context 32768 --repeats ${REPEATS:-10} --json "$out/page_attention.json" 2>&1 | tail -18
