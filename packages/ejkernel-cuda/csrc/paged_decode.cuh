// Paged decode attention: one query token per sequence against a paged KV cache.
//
// Pass 1 (paged_decode_split): one CTA per (context partition, KV head, query-head tile, sequence).
//   The CTA serves the G query heads that share a KV head, so every K/V byte is read once per
//   group. It scores its partition's tokens (K), takes the partition's softmax, and accumulates
//   P·V (V); it writes the partition's normalized output and log-sum-exp.
// Pass 2 (paged_decode_merge): one CTA per (sequence, head) merges the partitions by their
//   log-sum-exp (and the sinks), so long contexts spread over many CTAs (split-K).
//
// Every K/V load is a 16-byte vector: a token's head row (D elements) is split over TPT lanes,
// EPT contiguous elements each, and its dot products are reduced with warp shuffles.

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ejkernel_cuda {

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

struct DecodeParams {
  const void* q;             // [batch, heads, head_dim], q_dtype
  const void* k_cache;       // [num_blocks, block_size, kv_heads, head_dim]
  const void* v_cache;       // same layout as k_cache
  const int32_t* context_lens;  // [batch]
  const int32_t* block_tables;  // [batch, max_blocks]
  const float* sinks;        // [heads, num_sinks] (unused when num_sinks == 0)
  float* part_out;           // [batch, heads, num_splits, head_dim]
  float* part_lse;           // [batch, heads, num_splits]
  void* out;                 // [batch, heads, head_dim], out_dtype
  DType q_dtype;
  DType out_dtype;
  int batch, heads, kv_heads, groups, head_dim;
  int block_size, max_blocks, num_splits, partition, num_sinks;
  int block_size_log2;  // log2(block_size) when a power of two, else -1
  float scale;       // softmax scale
  float soft_cap;    // <= 0: no soft cap
  int window_left;   // < 0: no sliding window
};

constexpr int kThreads = 128;

// Launches both passes on `stream` for a cache of element type T (float, __nv_bfloat16, __half).
// Returns the first CUDA error (cudaSuccess when both launches were queued).
template <typename T>
cudaError_t launch_paged_decode(const DecodeParams& p, cudaStream_t stream);

// Query-head tile of pass 1 for `groups` query heads per KV head (1, 2, 4 or 8).
inline int head_tile(int groups) {
  int g = 1;
  while (g < groups && g < 8) g *= 2;
  return g;
}

// Dynamic shared memory of pass 1: logits [G][partition], the P·V reduction [warps][G][D] and
// the partition's page indices.
inline size_t split_smem_bytes(int groups, int head_dim, int partition, int block_size) {
  const int g = head_tile(groups);
  const int pages = partition / block_size + 2;
  return sizeof(float) * (static_cast<size_t>(g) * partition + static_cast<size_t>(kThreads / 32) * g * head_dim) +
         sizeof(int32_t) * pages;
}

}  // namespace ejkernel_cuda
