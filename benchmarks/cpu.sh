#!/usr/bin/env bash
# The CPU records: every op's XLA path beside its plain-JAX peer (`ejkernel bench <op> --impl xla`:
# forward, forward+backward where the op trains, compile seconds), at shapes a CPU runs in seconds
# (the ops' default bench shapes where they do, the GPU-sized ones scaled down), float32, filed
# into benchmarks/results/cpu/<op>.json by records.py. One op at a time on an otherwise idle machine.
# Run: bash benchmarks/cpu.sh [OP ...]  (or: nox -s bench). REPEATS=N sets the timing repeats (7).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
linear="--shape 1,2048,8,64"
declare -A args=(
  [flash_attention]="--b 1 --sq 4096 --h 8 --d 64 --causal both"
  [scaled_dot_product_attention]=""
  [attention]=""
  [ring_attention]=""
  [blocksparse_attention]=""
  [native_sparse_attention]="--s 1024"
  [deepseek_attn]=""
  [flash_mla]=""
  [flash_mla_decode]="--b 8 --context 2048"
  [page_attention]="--b 8 --h 32 --hk 8 --d 128 --context 1024 --context 4096 --block-size 16"
  [ragged_decode_attention]=""
  [ragged_page_attention_v2]=""
  [ragged_page_attention_v3]=""
  [unified_attention]=""
  [prefill_page_attention]=""
  [grouped_matmul]="--shape 4096,1024,1024,8"
  [mean_pooling]=""
  [recurrent_cell]="--batch 16 --seq 256 --input-dim 256 --hidden 256"
  [state_space_v1]="--b 1 --s 2048 --d 512 --n 16"
  [state_space_v2]="$linear"
  [gla_attention]="$linear"
  [lightning_attention]="$linear"
  [recurrent_attention]="$linear"
  [gated_delta_rule]="$linear"
  [kernel_delta_attention]="$linear"
)
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(flash_attention scaled_dot_product_attention attention ring_attention blocksparse_attention
  native_sparse_attention deepseek_attn flash_mla flash_mla_decode page_attention ragged_decode_attention
  ragged_page_attention_v2 ragged_page_attention_v3 unified_attention prefill_page_attention grouped_matmul
  mean_pooling recurrent_cell state_space_v1 state_space_v2 gla_attention lightning_attention recurrent_attention
  gated_delta_rule kernel_delta_attention)
for op in "${ops[@]}"; do
  # shellcheck disable=SC2086 # the shape arguments are words
  ejkernel bench "$op" --impl xla --dtype float32 --repeats "${REPEATS:-7}" ${args[$op]-} --json "$tmp/$op.json"
done
python benchmarks/records.py add "$tmp"/*.json
