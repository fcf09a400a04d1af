#!/usr/bin/env bash
# The CPU figures of the foundation issue: XLA flash_attention against
# jax.nn.dot_product_attention(implementation="xla") at b=1, h=8, s=4096, d=64, float32
# (causal and not), and paged decode against the dense peers. Writes JSON (and PNG) under
# benchmarks/results/cpu/. Run: bash benchmarks/cpu.sh  (or: nox -s bench)
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/cpu
mkdir -p "$out"
ejkernel bench flash_attention --b 1 --sq 4096 --h 8 --d 64 --dtype float32 --causal both --repeats 7 \
  --json "$out/flash_attention.json" --plot "$out/flash_attention.png"
ejkernel bench page_attention --b 8 --h 32 --hk 8 --d 128 --context 1024 --context 4096 --block-size 16 \
  --dtype float32 --repeats 7 --json "$out/page_attention.json"
