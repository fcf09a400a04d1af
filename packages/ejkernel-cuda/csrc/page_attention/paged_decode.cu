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

template <int W>
__device__ inline float group_sum(float x) {  // sum over W adjacent lanes (W a power of two <= 32)
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// ---------------------------------------------------------------- cp.async helpers (sm_80+)

__device__ inline void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes) {
  // src_bytes 0: the 16 bytes are zero-filled and nothing is read. No L2::256B prefetch hint: it
  // made the decode 3-5% slower on an H200.
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ inline void cp_async_wait_dyn(int n) {  // the wait count must be an immediate
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    default: cp_async_wait<5>(); break;
  }
}

__device__ inline float exp2_or_zero(float x, float m) { return x == -INFINITY ? 0.f : exp2f(x - m); }

// Element `d` of a partition's normalized output row `row` (= its (sequence, head, split) index)
// and, once per row, its log-sum-exp; in direct mode (one partition, no sinks) the final output.
__device__ inline void write_partial(const DecodeParams& p, int64_t row, int d, int D, float value, float lse) {
  if (p.direct) {
    store_scalar(p.out, row * D + d, p.out_dtype, value);
    return;
  }
  p.part_out[row * D + d] = value;
  if (d == 0) p.part_lse[row] = lse;
}

// A partition that starts past its sequence's context (or an empty context): -inf log-sum-exp
// for the merge, or zeros (as the reference) in direct mode.
__device__ inline void empty_partition(const DecodeParams& p, int64_t stat, int heads_here, int D) {
  for (int i = threadIdx.x; i < heads_here * (p.direct ? D : 1); i += blockDim.x) {
    const int64_t row = stat + static_cast<int64_t>(p.direct ? i / D : i) * p.num_splits;
    if (p.direct)
      store_scalar(p.out, row * D + i % D, p.out_dtype, 0.f);
    else
      p.part_lse[row] = -INFINITY;
  }
}

// ---------------------------------------------------------------- pass 1: shared pieces

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The partition a pass-1 CTA serves.
struct Partition {
  int kvh, head0, heads_here, b;
  int start, n;   // first token and token count (n <= 0: the partition holds no token)
  int page0;      // first page (index into the sequence's block table)
  int64_t stat;   // (sequence, first head, split) row of the partial results
};

// Partition `split` of query-head tile `y` (KV head x tile of G heads) of sequence `b`.
template <int G>
__device__ inline Partition partition_at(const DecodeParams& p, int split, int y, int b) {
  const int tiles_per_kv = (p.groups + G - 1) / G;
  Partition part;
  part.kvh = y / tiles_per_kv;
  const int g0 = (y % tiles_per_kv) * G;
  part.heads_here = min(G, p.groups - g0);
  part.b = b;
  part.head0 = part.kvh * p.groups + g0;
  const int ctx = p.context_lens[b];
  const int lo = p.window_left >= 0 ? max(0, ctx - 1 - p.window_left) : 0;
  part.start = lo + split * p.partition;
  part.n = min(ctx, part.start + p.partition) - part.start;
  part.page0 = part.start / p.block_size;
  part.stat = (static_cast<int64_t>(b) * p.heads + part.head0) * p.num_splits + split;
  return part;
}

// Fills `part` from blockIdx = (split, KV head x query-head tile, sequence); returns false, after
// writing the empty result, when the partition holds no token.
template <int G>
__device__ inline bool partition_of(const DecodeParams& p, int D, Partition& part) {
  part = partition_at<G>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  if (part.n <= 0) {  // nothing here: an empty partition the merge skips
    empty_partition(p, part.stat, part.heads_here, D);
    return false;
  }
  return true;
}

// The partition's page indices into shared `pages`; the caller synchronizes before use.
__device__ inline void load_pages(const DecodeParams& p, const Partition& part, int32_t* pages) {
  const int num_pages = (part.start + part.n - 1) / p.block_size - part.page0 + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(part.b) * p.max_blocks;
  for (int i = threadIdx.x; i < num_pages; i += blockDim.x) pages[i] = table[part.page0 + i];
}

// Issues the cp.async copies of chunk `chunk` (kChunk tokens) of the partition into a ring slot:
// K rows to `sk`, V rows to `sv`, row r, piece c at element `place(r, c)`. Rows past the partition
// are zero-filled (never read from the cache: those slots may hold anything).
template <typename T, int D, int kChunk, typename Place>
__device__ inline void issue_chunk(const DecodeParams& p, const Partition& part, const int32_t* pages, T* sk, T* sv,
                                   int chunk, Place place) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte piece
  constexpr int kPieces = D / kVec;
  constexpr int kCopies = kChunk * kPieces / kThreads;  // copies per thread and slot, K (and V)
  static_assert((kChunk * kPieces) % kThreads == 0, "a slot must split evenly over the CTA");
  const int shift = p.block_size_log2;  // >= 0: power-of-two pages, index with shifts
  const int head_off = part.kvh * p.head_stride;  // < block_stride
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
#pragma unroll
  for (int c = 0; c < kCopies; ++c) {
    const int i = threadIdx.x + c * kThreads;
    const int row = i / kPieces, piece = i % kPieces;
    const int j = chunk * kChunk + row;
    int64_t off = 0;
    if (j < part.n) {
      const int pos = part.start + j;
      const int page = shift >= 0 ? (pos >> shift) : pos / p.block_size;
      const int in_page = shift >= 0 ? (pos & (p.block_size - 1)) : pos - page * p.block_size;
      off = static_cast<int64_t>(pages[page - part.page0]) * p.block_stride +
            (in_page * p.token_stride + head_off + piece * kVec);
    }
    const int bytes = j < part.n ? 16 : 0;
    cp_async16(sk + place(row, piece), k_cache + off, bytes);
    cp_async16(sv + place(row, piece), v_cache + off, bytes);
  }
}

// Streams the partition's K and V rows through `stages` ring slots of kChunk tokens each
// (`stages - 1` slots in flight): `after_fill()` once the first copies are issued (loads whose
// latency should overlap theirs), then for every chunk, once its slot has landed for the whole
// CTA, `consume(chunk, k_slot, v_slot)`. Returns with every copy done and the CTA synchronized,
// so that the ring can be reused.
template <typename T, int D, int kChunk, typename Place, typename AfterFill, typename Consume>
__device__ inline void stream_partition(const DecodeParams& p, const Partition& part, const int32_t* pages, T* ring,
                                        Place place, AfterFill after_fill, Consume consume) {
  const int stages = p.stages;
  const int nchunks = (part.n + kChunk - 1) / kChunk;
  auto slot = [&](int s) { return ring + static_cast<size_t>(s) * 2 * kChunk * D; };
  for (int c = 0; c < stages - 1; ++c) {
    if (c < nchunks) issue_chunk<T, D, kChunk>(p, part, pages, slot(c), slot(c) + kChunk * D, c, place);
    cp_async_commit();
  }
  after_fill();
  for (int c = 0; c < nchunks; ++c) {
    cp_async_wait_dyn(stages - 2);  // this thread's copies of chunk c landed...
    __syncthreads();                // ...everyone's, and slot (c - 1) % stages is free again
    const int next = c + stages - 1;
    if (next < nchunks) {
      T* s = slot(next % stages);
      issue_chunk<T, D, kChunk>(p, part, pages, s, s + kChunk * D, next, place);
    }
    cp_async_commit();
    const T* sk = slot(c % stages);
    consume(c, sk, sk + kChunk * D);
  }
  cp_async_wait<0>();
  __syncthreads();
}

// Merges the warps' online-softmax states, left in shared memory as ms/ls [warps][G] (running
// max, base 2, and sum) and as [warps][G][D] (unnormalized output), in a fixed order
// (deterministic), and writes the partition's result.
template <int G, int D>
__device__ inline void write_merged(const DecodeParams& p, const Partition& part, const float* ms, const float* ls,
                                    const float* as) {
  constexpr int kWarps = kThreads / 32;
  for (int i = threadIdx.x; i < part.heads_here * D; i += kThreads) {
    const int g = i / D;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, ms[w * G + g]);
    float o = 0.f, ll = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float a = exp2_or_zero(ms[w * G + g], mm);
      o = fmaf(as[w * G * D + i], a, o);
      ll = fmaf(ls[w * G + g], a, ll);
    }
    write_partial(p, part.stat + static_cast<int64_t>(g) * p.num_splits, i % D, D, o / ll, (mm + log2f(ll)) * kLn2);
  }
}

// ---------------------------------------------------------------- pass 1 with FMAs

// Elements of a head row per lane on the FMA path: 8 (one 16-byte bf16 vector; two float32
// ones). Measured on an H200 against 16 (b32 h32/8 d128 ctx8192): fewer registers (128 instead of
// ~220 for 4 heads) let twice the CTAs share an SM, which outweighs the extra shuffle level.
constexpr int kFmaEpt = 8;

template <typename T, int D, int G, int EPT>
__global__ void __launch_bounds__(kThreads) paged_decode_split(const DecodeParams p) {
  constexpr int kVec = Vec16<T>::kN;                  // elements per 16-byte vector
  constexpr int kNv = EPT / kVec;                     // vectors per lane and token row
  constexpr int kTpt = D / EPT;                       // lanes per token row
  constexpr int kStep = kThreads / kTpt;              // tokens the CTA scores at once
  constexpr int kChunk = kStageBytes / 2 / (D * static_cast<int>(sizeof(T)));  // tokens per stage
  constexpr int kU = kChunk / kStep;                  // tokens per lane group and stage
  constexpr int kWarps = kThreads / 32;
  static_assert(EPT % kVec == 0 && kTpt <= 32 && (kTpt & (kTpt - 1)) == 0, "unsupported head_dim");
  static_assert(kChunk % kStep == 0 && kU >= 1, "bad stage shape");

  Partition part;
  if (!partition_of<G>(p, D, part)) return;
  const int b = part.b, head0 = part.head0, heads_here = part.heads_here, n = part.n;
  const int tid = threadIdx.x;

  // Shared memory: `stages` ring slots of [K rows | V rows] (the cross-warp merge reuses them
  // after the loop), then the partition's page indices.
  extern __shared__ __align__(16) unsigned char smem[];
  T* ring = reinterpret_cast<T*>(smem);
  int32_t* pages = reinterpret_cast<int32_t*>(smem + split_ring_bytes(G, D, p.stages, sizeof(T), 1));
  load_pages(p, part, pages);

  const int warp = tid / 32, wl = tid % 32;
  const int grp = tid / kTpt;   // which token of a step this lane scores
  const int lane = tid % kTpt;  // which slice of the head row: vectors lane, lane + kTpt, ...

  // Scores live in the log2 domain: without a soft cap, log2(e) is folded into q.
  const bool capped = p.soft_cap > 0.f;
  const float qscale = p.scale * (capped ? 1.f : kLog2e);
  float qr[G][EPT];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int v = 0; v < kNv; ++v) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int64_t qi = (static_cast<int64_t>(b) * p.heads + head0 + g) * D + (v * kTpt + lane) * kVec + e;
        qr[g][v * kVec + e] = g < heads_here ? load_scalar(p.q, qi, p.q_dtype) * qscale : 0.f;
      }
    }
  }
  __syncthreads();  // pages[] ready

  // Each lane group keeps an online softmax of the tokens it scores; the groups merge at the end.
  float m[G], l[G], acc[G][EPT];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < EPT; ++e) acc[g][e] = 0.f;
  }

  stream_partition<T, D, kChunk>(
      p, part, pages, ring, [](int row, int piece) { return row * D + piece * Vec16<T>::kN; }, [] {},
      [&](int c, const T* sk, const T* sv) {
    float s[kU][G];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int r = u * kStep + grp;
      float dot[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dot[g] = 0.f;
#pragma unroll
      for (int v = 0; v < kNv; ++v) {
        float f[kVec];
        Vec16<T>::widen(*reinterpret_cast<const uint4*>(sk + r * D + (v * kTpt + lane) * kVec), f);
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot[g] = fmaf(qr[g][v * kVec + e], f[e], dot[g]);
        }
      }
      const bool valid = c * kChunk + r < n;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float x = group_sum<kTpt>(dot[g]);
        if (capped) x = p.soft_cap * tanhf(x / p.soft_cap) * kLog2e;
        s[u][g] = valid ? x : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = s[0][g];
#pragma unroll
      for (int u = 1; u < kU; ++u) mx = fmaxf(mx, s[u][g]);
      if (mx > m[g]) {  // rescale only when the running max grows
        const float a = exp2_or_zero(m[g], mx);
        l[g] *= a;
#pragma unroll
        for (int e = 0; e < EPT; ++e) acc[g][e] *= a;
        m[g] = mx;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        s[u][g] = exp2_or_zero(s[u][g], m[g]);
        l[g] += s[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int r = u * kStep + grp;
#pragma unroll
      for (int v = 0; v < kNv; ++v) {
        float f[kVec];
        Vec16<T>::widen(*reinterpret_cast<const uint4*>(sv + r * D + (v * kTpt + lane) * kVec), f);
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[g][v * kVec + e] = fmaf(s[u][g], f[e], acc[g][v * kVec + e]);
        }
      }
    }
      });  // the ring is free again: the merge scratch below reuses it

  // Merge the lane groups in a fixed order (deterministic output): first within a warp with
  // shuffles, then the warps through shared memory.
#pragma unroll
  for (int o = kTpt; o < 32; o *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mn = fmaxf(m[g], mo);
      const float a = exp2_or_zero(m[g], mn), a2 = exp2_or_zero(mo, mn);
      l[g] = l[g] * a + lo2 * a2;
#pragma unroll
      for (int e = 0; e < EPT; ++e) acc[g][e] = acc[g][e] * a + __shfl_xor_sync(0xffffffffu, acc[g][e], o) * a2;
      m[g] = mn;
    }
  }
  float* ms = reinterpret_cast<float*>(smem);  // [warps][G]
  float* ls = ms + kWarps * G;                 // [warps][G]
  float* as = ls + kWarps * G;                 // [warps][G][D]
  if (wl < kTpt) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int v = 0; v < kNv; ++v) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) as[(warp * G + g) * D + (v * kTpt + lane) * kVec + e] = acc[g][v * kVec + e];
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        ms[warp * G + g] = m[g];
        ls[warp * G + g] = l[g];
      }
    }
  }
  __syncthreads();
  write_merged<G, D>(p, part, ms, ls, as);
}

// ---------------------------------------------------------------- pass 1 on the tensor cores

template <typename T>
__device__ inline uint32_t pack2(float lo, float hi);  // two floats as a T pair (lo in the low half)
template <>
__device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// D (16x8, f32) += A (16x16, row) * B (16x8, col); A rows 8..15 are zero here (a1 = a3 = 0).
template <typename T>
__device__ inline void mma16816(float* d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1);
template <>
__device__ inline void mma16816<__nv_bfloat16>(float* d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma16816<__half>(float* d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

__device__ inline void ldmatrix_x4(uint32_t* r, const void* smem_row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t* r, const void* smem_row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// A ring slot row (one token, D elements) is stored in 16-byte pieces, piece c of row r at
// position c ^ (r % 8): the 8 rows an ldmatrix reads then fall in different banks.
template <int D>
__device__ inline int swz(int row, int piece) {
  return row * D + ((piece ^ (row & 7)) << 3);
}

// One warp's online softmax on the tensor cores: S = Q Kᵀ with the G query heads as rows 0..G-1
// of a 16-row tile (rows >= G are zero), P V accumulated the same way. Each warp owns 16 tokens
// of a 64-token slot; the warps merge at the end of a partition as in the FMA path.
template <typename T, int D>
struct MmaSoftmax {
  static constexpr int kK = D / 16;  // k-steps of Q Kᵀ
  static constexpr int kN = D / 8;   // n-tiles of P V (and 16-byte pieces per row)
  float m, l;                        // row gid's running max (base 2) and this lane's share of the sum
  float o[kN][4];

  __device__ inline void reset() {
    m = -INFINITY;
    l = 0.f;
#pragma unroll
    for (int nd = 0; nd < kN; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  }

  // Tokens `valid` onwards of the slot are past the partition (masked).
  __device__ inline void chunk(const DecodeParams& p, const uint32_t (&qa)[kK][2], const T* sk, const T* sv,
                               int valid) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tig = lane & 3;
    const int tb = warp * 16;  // this warp's first token (row) in the slot
    if (tb >= valid) return;   // this warp's tokens are all past the partition
    const bool capped = p.soft_cap > 0.f;
    const float qk_scale = p.scale * kLog2e;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      // Matrices: tokens tb+0..7 / tb+8..15 (lane / 16) x d pieces 2kk / 2kk+1 ((lane / 8) % 2).
      uint32_t kb[4];
      const int row = tb + (lane >> 4) * 8 + (lane & 7);
      ldmatrix_x4(kb, sk + swz<D>(row, 2 * kk + ((lane >> 3) & 1)));
      mma16816<T>(s[0], qa[kk][0], qa[kk][1], kb[0], kb[1]);
      mma16816<T>(s[1], qa[kk][0], qa[kk][1], kb[2], kb[3]);
    }
    // Scores of row gid, tokens tb + 8 nt + 2 tig + e (s[nt][2..3]: rows >= 8, unused).
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = s[nt][e];
        x = capped ? p.soft_cap * tanhf(x * p.scale / p.soft_cap) * kLog2e : x * qk_scale;
        if (tb + 8 * nt + 2 * tig + e >= valid) x = -INFINITY;
        s[nt][e] = x;
        mx = fmaxf(mx, x);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float alpha = exp2_or_zero(m, m_new);
    m = m_new;
    float ps[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) ps[nt][e] = exp2_or_zero(s[nt][e], m_new);
    }
    l = l * alpha + (ps[0][0] + ps[0][1]) + (ps[1][0] + ps[1][1]);
    const uint32_t pa0 = pack2<T>(ps[0][0], ps[0][1]), pa2 = pack2<T>(ps[1][0], ps[1][1]);
#pragma unroll
    for (int nd = 0; nd < kN; nd += 2) {
      // Matrices (transposed): tokens tb+0..7 / tb+8..15 ((lane / 8) % 2) x d pieces nd / nd+1 (lane / 16).
      uint32_t vb[4];
      const int row = tb + ((lane >> 3) & 1) * 8 + (lane & 7);
      ldmatrix_x4_trans(vb, sv + swz<D>(row, nd + (lane >> 4)));
      o[nd][0] *= alpha;
      o[nd][1] *= alpha;
      o[nd + 1][0] *= alpha;
      o[nd + 1][1] *= alpha;
      mma16816<T>(o[nd], pa0, pa2, vb[0], vb[1]);
      mma16816<T>(o[nd + 1], pa0, pa2, vb[2], vb[3]);
    }
  }

  // Leaves this warp's state in shared memory for write_merged: ms/ls [warps][G], as [warps][G][D].
  template <int G>
  __device__ inline void stash(float* scratch) {
    constexpr int kWarps = kThreads / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float* ms = scratch;
    float* ls = ms + kWarps * G;
    float* as = ls + kWarps * G;
    if (gid < G) {
#pragma unroll
      for (int nd = 0; nd < kN; ++nd) {
        as[(warp * G + gid) * D + 8 * nd + 2 * tig] = o[nd][0];
        as[(warp * G + gid) * D + 8 * nd + 2 * tig + 1] = o[nd][1];
      }
      if (tig == 0) {
        ms[warp * G + gid] = m;
        ls[warp * G + gid] = l;
      }
    }
  }
};

template <int G, int D>
__device__ inline void write_merged_from(const DecodeParams& p, const Partition& part, const float* scratch) {
  constexpr int kWarps = kThreads / 32;
  write_merged<G, D>(p, part, scratch, scratch + kWarps * G, scratch + 2 * kWarps * G);
}

// Q rows head0.. of sequence b as A fragments (row gid; columns 16 kk + 2 tig (+8)), rows past
// heads_here zero; unscaled: the scale applies to S in float32.
template <typename T, int D>
__device__ inline void load_q_fragments(const DecodeParams& p, const Partition& part, uint32_t (&qa)[D / 16][2]) {
  const int lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
  const bool row_ok = gid < part.heads_here;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = 16 * kk + 8 * h + 2 * tig;
      const int64_t qi = (static_cast<int64_t>(part.b) * p.heads + part.head0 + gid) * D + d;
      qa[kk][h] =
          pack2<T>(row_ok ? load_scalar(p.q, qi, p.q_dtype) : 0.f, row_ok ? load_scalar(p.q, qi + 1, p.q_dtype) : 0.f);
    }
  }
}

// Built for 3 CTAs per SM (at most 168 registers; ptxas -v, sm_90a: 163 at d128 without spills
// since the cache strides are 32-bit). Measured on an H200 (b32 h32/8 d128 ctx8192, 2 CTAs x 3
// slots per SM either way), when d128 still spilled a few words: 1-2% faster than the unbounded
// build (~180 registers).
template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads, 3) paged_decode_split_mma(const DecodeParams p) {
  constexpr int kChunk = kMmaTokens;  // tokens per ring slot
  static_assert(kChunk == 16 * (kThreads / 32) && D / 8 >= 8 && G <= 8, "shape");

  Partition part;
  if (!partition_of<G>(p, D, part)) return;

  extern __shared__ __align__(16) unsigned char smem[];
  T* ring = reinterpret_cast<T*>(smem);
  int32_t* pages = reinterpret_cast<int32_t*>(smem + split_ring_bytes(G, D, p.stages, 2, 0));
  load_pages(p, part, pages);
  __syncthreads();  // pages[] ready

  MmaSoftmax<T, D> st;
  st.reset();
  uint32_t qa[D / 16][2];
  // Q is loaded once the ring's first copies are issued, so that their latencies overlap.
  stream_partition<T, D, kChunk>(
      p, part, pages, ring, [](int row, int piece) { return swz<D>(row, piece); },
      [&] { load_q_fragments<T, D>(p, part, qa); },
      [&](int c, const T* sk, const T* sv) { st.chunk(p, qa, sk, sv, part.n - c * kChunk); });
  // The ring is free again: the merge scratch reuses it.
  float* scratch = reinterpret_cast<float*>(smem);
  st.template stash<G>(scratch);
  __syncthreads();
  write_merged_from<G, D>(p, part, scratch);
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

template <typename Kernel>
cudaError_t launch_pass1(Kernel kernel, const DecodeParams& p, int g, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.num_splits, p.kv_heads * ((p.groups + g - 1) / g), p.batch);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D, int G>
cudaError_t launch_split_g(const DecodeParams& p, cudaStream_t stream) {
  const size_t smem = split_smem_bytes(p.groups, D, p.partition, p.block_size, p.stages, sizeof(T), p.variant);
  if constexpr (sizeof(T) == 2 && D <= 128) {
    if (uses_mma(sizeof(T), p.variant, D)) return launch_pass1(paged_decode_split_mma<T, D, G>, p, G, smem, stream);
  }
  return launch_pass1(paged_decode_split<T, D, G, kFmaEpt>, p, G, smem, stream);
}

template <typename T, int D>
cudaError_t launch_split_d(const DecodeParams& p, cudaStream_t stream) {
  switch (head_tile(p.groups)) {
    case 1:
      return launch_split_g<T, D, 1>(p, stream);
    case 2:
      return launch_split_g<T, D, 2>(p, stream);
    case 4:
      return launch_split_g<T, D, 4>(p, stream);
    default:
      return launch_split_g<T, D, 8>(p, stream);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_paged_decode(const DecodeParams& params, cudaStream_t stream) {
  DecodeParams p = params;
  p.direct = p.num_splits == 1 && p.num_sinks == 0;  // pass 1 writes the output: no merge pass
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
  if (err != cudaSuccess || p.direct) return err;
  const size_t smem = sizeof(float) * p.num_splits;
  paged_decode_merge<<<p.batch * p.heads, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template cudaError_t launch_paged_decode<float>(const DecodeParams&, cudaStream_t);
template cudaError_t launch_paged_decode<__nv_bfloat16>(const DecodeParams&, cudaStream_t);
template cudaError_t launch_paged_decode<__half>(const DecodeParams&, cudaStream_t);

}  // namespace ejkernel_cuda
