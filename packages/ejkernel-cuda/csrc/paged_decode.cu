// Kernels of the paged decode (see paged_decode.cuh for the algorithm).

#include <cfloat>
#include <cmath>

#include "paged_decode.cuh"

namespace ejkernel_cuda {
namespace {

// ---------------------------------------------------------------- element conversion helpers

template <typename T>
struct Vec16;  // a 16-byte vector of T, widened to float

template <>
struct Vec16<float> {
  static constexpr int kN = 4;
  __device__ static void widen(const uint4& v, float* out) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  }
};

template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void widen(const uint4& v, float* out) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Vec16<__half> {
  static constexpr int kN = 8;
  __device__ static void widen(const uint4& v, float* out) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

// Query and output are small (one token per head): their dtype is a runtime switch.
__device__ inline float load_scalar(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ inline void store_scalar(void* base, int64_t i, DType t, float x) {
  switch (t) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(x);
      break;
    case DType::kF16:
      static_cast<__half*>(base)[i] = __float2half(x);
      break;
    default:
      static_cast<float*>(base)[i] = x;
  }
}

__device__ inline uint4 load16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

template <int W>
__device__ inline float group_sum(float x) {  // sum over W adjacent lanes (W a power of two <= 32)
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ inline float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// ---------------------------------------------------------------- pass 1: one partition

template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads, 4) paged_decode_split(const DecodeParams p) {
  // Elements of a head row per lane: 16 (two or four 16-byte loads) so that a token's dot
  // products need few shuffle levels and its index math is shared by more bytes; 8 for 8-head
  // tiles, whose G x kEpt query registers would spill otherwise; at least D / 32 (one warp).
  constexpr int kVec = Vec16<T>::kN;                        // elements per 16-byte load
  constexpr int kWant = G >= 8 ? 8 : 16;
  constexpr int kEpt0 = kWant > kVec ? kWant : kVec;
  constexpr int kEpt1 = kEpt0 < D ? kEpt0 : D;
  constexpr int kEpt = (D / 32 > kEpt1) ? D / 32 : kEpt1;
  constexpr int kNv = kEpt / kVec;                          // 16-byte loads per lane and token
  constexpr int kTpt = D / kEpt;                            // lanes per token (power of two <= 32)
  constexpr int kGroupsInFlight = kThreads / kTpt;          // tokens per pass of the CTA
  constexpr int kUnroll = kNv == 1 ? 8 : (kNv == 2 ? 4 : 2);  // tokens per lane loaded before use
  constexpr int kWarps = kThreads / 32;
  static_assert(D % kEpt == 0 && kTpt <= 32 && (kTpt & (kTpt - 1)) == 0, "unsupported head_dim");

  const int split = blockIdx.x;
  const int tiles_per_kv = (p.groups + G - 1) / G;
  const int kvh = blockIdx.y / tiles_per_kv;
  const int g0 = (blockIdx.y % tiles_per_kv) * G;
  const int heads_here = min(G, p.groups - g0);
  const int b = blockIdx.z;
  const int head0 = kvh * p.groups + g0;  // first query head of this CTA

  const int ctx = p.context_lens[b];
  const int lo = p.window_left >= 0 ? max(0, ctx - 1 - p.window_left) : 0;
  const int start = lo + split * p.partition;
  const int tid = threadIdx.x;
  const int64_t stat = (static_cast<int64_t>(b) * p.heads + head0) * p.num_splits + split;
  if (start >= ctx) {  // nothing here: an empty partition the merge skips
    if (tid < heads_here) p.part_lse[stat + static_cast<int64_t>(tid) * p.num_splits] = -INFINITY;
    return;
  }
  const int n = min(ctx, start + p.partition) - start;

  extern __shared__ float smem[];
  float* logits = smem;                  // [G][partition]
  float* acc_s = smem + G * p.partition;  // [warps][G][D]
  int32_t* pages = reinterpret_cast<int32_t*>(acc_s + kWarps * G * D);
  __shared__ float row_max[G], row_sum[G];

  const int page0 = start / p.block_size;
  const int num_pages = (start + n - 1) / p.block_size - page0 + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(b) * p.max_blocks;
  for (int i = tid; i < num_pages; i += kThreads) pages[i] = table[page0 + i];

  const int warp = tid / 32, wl = tid % 32;
  const int grp = tid / kTpt;   // which token of a pass this lane works on
  const int lane = tid % kTpt;  // which slice of the head row
  const int64_t tok_stride = static_cast<int64_t>(p.kv_heads) * D;
  const int64_t blk_stride = tok_stride * p.block_size;
  const int64_t row_off = static_cast<int64_t>(kvh) * D + lane * kEpt;

  float qr[G][kEpt];  // this lane's slice of the G query rows, scaled
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < kEpt; ++e) {
      const int64_t qi = (static_cast<int64_t>(b) * p.heads + head0 + g) * D + lane * kEpt + e;
      qr[g][e] = g < heads_here ? load_scalar(p.q, qi, p.q_dtype) * p.scale : 0.f;
    }
  }
  __syncthreads();  // pages[] ready

  const int shift = p.block_size_log2;  // >= 0: power-of-two pages, index with shifts
  auto token_ptr = [&](const void* cache, int j) {
    const int pos = start + j;
    const int page = shift >= 0 ? (pos >> shift) : pos / p.block_size;
    const int slot = shift >= 0 ? (pos & (p.block_size - 1)) : pos - page * p.block_size;
    const int64_t blk = pages[page - page0];
    const int64_t off = blk * blk_stride + static_cast<int64_t>(slot) * tok_stride + row_off;
    return static_cast<const T*>(cache) + off;
  };

  // Scores: s = q·k (scaled), soft-capped.
  for (int j0 = 0; j0 < n; j0 += kGroupsInFlight * kUnroll) {
    uint4 kv[kUnroll][kNv];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kGroupsInFlight + grp;
      if (j < n) {
        const T* ptr = token_ptr(p.k_cache, j);
#pragma unroll
        for (int v = 0; v < kNv; ++v) kv[u][v] = load16(ptr + v * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kGroupsInFlight + grp;
      float dot[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dot[g] = 0.f;
      if (j < n) {
#pragma unroll
        for (int v = 0; v < kNv; ++v) {
          float f[kVec];
          Vec16<T>::widen(kv[u][v], f);
#pragma unroll
          for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) dot[g] = fmaf(qr[g][v * kVec + e], f[e], dot[g]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = group_sum<kTpt>(dot[g]);
        if (p.soft_cap > 0.f) s = p.soft_cap * tanhf(s / p.soft_cap);
        if (lane == 0 && j < n) logits[g * p.partition + j] = s;
      }
    }
  }
  __syncthreads();

  // The partition's softmax: one warp per head row.
  for (int g = warp; g < G; g += kThreads / 32) {
    float* row = logits + g * p.partition;
    float m = -INFINITY;
    for (int j = wl; j < n; j += 32) m = fmaxf(m, row[j]);
    m = warp_max(m);
    float l = 0.f;
    for (int j = wl; j < n; j += 32) {
      const float e = __expf(row[j] - m);
      row[j] = e;
      l += e;
    }
    l = group_sum<32>(l);
    if (wl == 0) {
      row_max[g] = m;
      row_sum[g] = l;
    }
  }
  __syncthreads();

  // Output: acc = Σ p·v over the partition.
  float acc[G][kEpt];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < kEpt; ++e) acc[g][e] = 0.f;
  }
  for (int j0 = 0; j0 < n; j0 += kGroupsInFlight * kUnroll) {
    uint4 kv[kUnroll][kNv];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kGroupsInFlight + grp;
      if (j < n) {
        const T* ptr = token_ptr(p.v_cache, j);
#pragma unroll
        for (int v = 0; v < kNv; ++v) kv[u][v] = load16(ptr + v * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * kGroupsInFlight + grp;
      if (j < n) {  // never touch slots past the context: they may hold anything
#pragma unroll
        for (int v = 0; v < kNv; ++v) {
          float f[kVec];
          Vec16<T>::widen(kv[u][v], f);
#pragma unroll
          for (int g = 0; g < G; ++g) {
            const float pj = logits[g * p.partition + j];
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[g][v * kVec + e] = fmaf(pj, f[e], acc[g][v * kVec + e]);
          }
        }
      }
    }
  }
  // Sum the token groups in a fixed order (deterministic output): first the groups of a warp
  // with shuffles, then the warps through shared memory.
#pragma unroll
  for (int o = kTpt; o < 32; o *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < kEpt; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
    }
  }
  if (wl < kTpt) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < kEpt; ++e) acc_s[(warp * G + g) * D + lane * kEpt + e] = acc[g][e];
    }
  }
  __syncthreads();

  for (int i = tid; i < heads_here * D; i += kThreads) {
    const int g = i / D;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += acc_s[w * G * D + i];
    p.part_out[(stat + static_cast<int64_t>(g) * p.num_splits) * D + i % D] = o / row_sum[g];
  }
  if (tid < heads_here) p.part_lse[stat + static_cast<int64_t>(tid) * p.num_splits] = row_max[tid] + logf(row_sum[tid]);
}

// ---------------------------------------------------------------- pass 2: merge the partitions

__global__ void __launch_bounds__(kThreads) paged_decode_merge(const DecodeParams p) {
  extern __shared__ float weight[];  // [num_splits]
  const int bh = blockIdx.x;
  const int b = bh / p.heads, h = bh % p.heads;
  const int D = p.head_dim;
  const int64_t out0 = static_cast<int64_t>(bh) * D;
  if (p.context_lens[b] <= 0) {  // no context: zeros (as the reference), sinks or not
    for (int d = threadIdx.x; d < D; d += blockDim.x) store_scalar(p.out, out0 + d, p.out_dtype, 0.f);
    return;
  }
  const float* lse = p.part_lse + static_cast<int64_t>(bh) * p.num_splits;
  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, lse[s]);
  for (int s = 0; s < p.num_sinks; ++s) m = fmaxf(m, p.sinks[h * p.num_sinks + s]);
  for (int s = threadIdx.x; s < p.num_splits; s += blockDim.x) weight[s] = lse[s] == -INFINITY ? 0.f : __expf(lse[s] - m);
  __syncthreads();
  float denom = 0.f;
  for (int s = 0; s < p.num_splits; ++s) denom += weight[s];
  for (int s = 0; s < p.num_sinks; ++s) denom += __expf(p.sinks[h * p.num_sinks + s] - m);
  const float inv = 1.f / denom;
  const float* part = p.part_out + static_cast<int64_t>(bh) * p.num_splits * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.f;
    for (int s = 0; s < p.num_splits; ++s) {
      if (weight[s] != 0.f) o = fmaf(weight[s], part[static_cast<int64_t>(s) * D + d], o);
    }
    store_scalar(p.out, out0 + d, p.out_dtype, o * inv);
  }
}

template <typename T, int D, int G>
cudaError_t launch_split(const DecodeParams& p, cudaStream_t stream) {
  const size_t smem = split_smem_bytes(p.groups, D, p.partition, p.block_size);
  auto kernel = paged_decode_split<T, D, G>;
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.num_splits, p.kv_heads * ((p.groups + G - 1) / G), p.batch);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_split_d(const DecodeParams& p, cudaStream_t stream) {
  switch (head_tile(p.groups)) {
    case 1:
      return launch_split<T, D, 1>(p, stream);
    case 2:
      return launch_split<T, D, 2>(p, stream);
    case 4:
      return launch_split<T, D, 4>(p, stream);
    default:
      return launch_split<T, D, 8>(p, stream);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_paged_decode(const DecodeParams& p, cudaStream_t stream) {
  cudaError_t err;
  switch (p.head_dim) {
    case 64:
      err = launch_split_d<T, 64>(p, stream);
      break;
    case 128:
      err = launch_split_d<T, 128>(p, stream);
      break;
    case 256:
      err = launch_split_d<T, 256>(p, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;
  const size_t smem = sizeof(float) * p.num_splits;
  paged_decode_merge<<<p.batch * p.heads, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template cudaError_t launch_paged_decode<float>(const DecodeParams&, cudaStream_t);
template cudaError_t launch_paged_decode<__nv_bfloat16>(const DecodeParams&, cudaStream_t);
template cudaError_t launch_paged_decode<__half>(const DecodeParams&, cudaStream_t);

}  // namespace ejkernel_cuda
