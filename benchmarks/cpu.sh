#!/usr/bin/env bash
# The CPU records: XLA flash_attention against jax.nn.dot_product_attention(implementation="xla")
# at b1 h8 s4096 d64 float32 (causal and not), and paged decode b8 h32/8 d128 ctx 1024/4096 bs16
# against the dense peers, filed into benchmarks/results/cpu/<op>.json by records.py.
# Run: bash benchmarks/cpu.sh  (or: nox -s bench)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ejkernel bench flash_attention --b 1 --sq 4096 --h 8 --d 64 --dtype float32 --causal both --repeats 7 \
  --json "$tmp/flash_attention.json"
ejkernel bench page_attention --b 8 --h 32 --hk 8 --d 128 --context 1024 --context 4096 --block-size 16 \
  --dtype float32 --repeats 7 --json "$tmp/page_attention.json"
python benchmarks/records.py add "$tmp/flash_attention.json" "$tmp/page_attention.json"
