// Paged decode attention: one query token per sequence against a paged KV cache.
//
// Pass 1 (paged_decode_split): one CTA per (context partition, KV head, query-head tile, sequence).
//   The CTA serves the G query heads that share a KV head, so every K/V byte is read once per
//   group. It streams its partition's K and V rows through a ring of shared-memory stages with
//   cp.async (16-byte copies, `stages - 1` chunks in flight while one is consumed), scores each
//   token against the G heads, and keeps an online softmax per lane group; the groups merge at the
//   end. It writes the partition's normalized output and log-sum-exp.
// Pass 2 (paged_decode_merge): one CTA per (sequence, head) merges the partitions by their
//   log-sum-exp (and the sinks), so long contexts spread over many CTAs (split-K).
//
// A token's head row (D elements) is split over TPT lanes, EPT elements each, read from shared
// memory as 16-byte vectors (lane i takes vectors i, i + TPT, ...: conflict-free), and its dot
// products are reduced with warp shuffles.

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ejkernel_cuda {

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

struct DecodeParams {
  const void* q;             // [batch, heads, head_dim], q_dtype
  const void* k_cache;       // [num_blocks, block_size, kv_heads, head_dim] or [num_blocks, kv_heads, block_size, head_dim]
  const void* v_cache;       // same layout as k_cache (both read through the strides below)
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
  int stages;   // shared-memory ring slots of pass 1 (2..6)
  int variant;  // 0: tensor cores for bf16/fp16 caches (head dim <= 128); 1: FMAs (the float32 path)
  int direct;   // set by the launcher: one partition and no sinks, pass 1 writes `out` (no merge)
  int block_size_log2;  // log2(block_size) when a power of two, else -1
  // Element strides of a cache's page, token and kv head (a head's D elements are contiguous):
  // either layout is read in place, never transposed. 32-bit (a page is under 2^31 elements; the
  // FFI handler checks), widened where a page index multiplies them: 64-bit strides cost the
  // tensor-core kernel, at its 168-register bound, extra spills.
  int32_t block_stride, token_stride, head_stride;
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

// Pass 1 has two paths. bf16/fp16 caches of head dim <= 128 (variant 0) score and accumulate on the tensor cores
// (mma.sync m16n8k16: the G query heads are the rows of a 16-row tile, each warp takes 16 tokens
// of a 64-token ring slot); the rest (and variant 1) use FMAs, a lane group per token.
constexpr int kStageBytes = 16 * 1024;  // FMA path: K and V rows of a slot, 8 KiB each
constexpr int kMmaTokens = 64;          // tensor-core path: tokens per slot (16 per warp)
constexpr int kMinStages = 2, kMaxStages = 6;

// Head dim 256 stays on the FMA path: its 16x256 float32 accumulator tile would spill.
inline constexpr bool uses_mma(int elem_size, int variant, int head_dim) {
  return elem_size == 2 && variant != 1 && head_dim <= 128;
}

inline constexpr size_t stage_bytes(int head_dim, int elem_size, int variant) {
  return uses_mma(elem_size, variant, head_dim) ? static_cast<size_t>(2) * kMmaTokens * head_dim * elem_size
                                                : kStageBytes;
}

// The ring (reused after the loop by the cross-warp merge: m, l and acc of each warp).
inline constexpr size_t split_ring_bytes(int g, int head_dim, int stages, int elem_size, int variant) {
  const size_t ring = static_cast<size_t>(stages) * stage_bytes(head_dim, elem_size, variant);
  const size_t merge = sizeof(float) * static_cast<size_t>(kThreads / 32) * g * (head_dim + 2);
  return ring > merge ? ring : merge;
}

// Dynamic shared memory of pass 1: the ring, then the partition's page indices.
inline size_t split_smem_bytes(int groups, int head_dim, int partition, int block_size, int stages, int elem_size,
                               int variant) {
  const int pages = partition / block_size + 2;
  return split_ring_bytes(head_tile(groups), head_dim, stages, elem_size, variant) + sizeof(int32_t) * pages;
}

}  // namespace ejkernel_cuda
