// The grouped GEMM's entry points (gmm.h): the zero fills CUTLASS leaves to us, and the dispatch
// to the sm_90a CUTLASS kernels of each operand layout (gmm_sm90_*.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "grouped_matmul/gmm.h"
#include "grouped_matmul/gmm_sm90.h"

namespace ejkernel_cuda::gmm {

namespace {

constexpr int kRowsPerBlock = 16;

// Rows outside the local groups, [0, starts[0]) and [ends[groups - 1], m), get zeros (16-byte
// stores: n is a multiple of 8 two-byte elements). Blocks over other rows return at once.
__global__ void zero_rows_kernel(uint4* out, const int32_t* starts, const int32_t* ends, int groups, int m, int vecs_per_row) {
  const int lo = groups > 0 ? min(max(starts[0], 0), m) : m;
  const int hi = groups > 0 ? min(max(ends[groups - 1], lo), m) : m;
  const int r0 = blockIdx.x * kRowsPerBlock;
  for (int r = r0; r < min(r0 + kRowsPerBlock, m); ++r) {
    if (r >= lo && r < hi) continue;
    for (int v = threadIdx.x; v < vecs_per_row; v += blockDim.x) out[static_cast<int64_t>(r) * vecs_per_row + v] = make_uint4(0, 0, 0, 0);
  }
}

// out[j] = 0 for the empty groups (CUTLASS skips them: their problem has M = 0).
__global__ void zero_groups_kernel(uint4* out, const int32_t* starts, const int32_t* ends, int64_t vecs_per_group) {
  const int j = blockIdx.y;
  if (ends[j] - starts[j] > 0) return;
  uint4* o = out + j * vecs_per_group;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < vecs_per_group; v += static_cast<int64_t>(gridDim.x) * blockDim.x)
    o[v] = make_uint4(0, 0, 0, 0);
}

}  // namespace

int num_configs() { return sm90::kNumConfigs; }

size_t workspace_bytes(const Problem& p, int sm_count) {
  switch (p.layout) {
    case Layout::kRowCol:
      return sm90::workspace_row_col(p, sm_count);
    case Layout::kColRow:
      return sm90::workspace_col_row(p, sm_count);
    default:
      return sm90::workspace_row_row(p, sm_count);
  }
}

std::string run(const Problem& p, void* workspace, size_t workspace_size, int sm_count, cudaStream_t stream) {
  if (p.k % 8 != 0 || p.n % 8 != 0) return "k and n must be multiples of 8 (16-byte rows for TMA)";
  if (p.groups < 1) return "needs at least one local group";
  if (p.out_f32 && p.layout == Layout::kColRow) return "tgmm writes the inputs' dtype";
  const int out_bytes = p.out_f32 ? 4 : 2;
  if (p.layout == Layout::kColRow) {
    const int64_t vecs = static_cast<int64_t>(p.k) * p.n * out_bytes / 16;
    zero_groups_kernel<<<dim3(32, p.groups), 256, 0, stream>>>(static_cast<uint4*>(p.out), p.starts, p.ends, vecs);
  } else if (p.m > 0) {
    zero_rows_kernel<<<(p.m + kRowsPerBlock - 1) / kRowsPerBlock, 128, 0, stream>>>(
        static_cast<uint4*>(p.out), p.starts, p.ends, p.groups, p.m, p.n * out_bytes / 16);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("zero fill: ") + cudaGetErrorString(e);
  switch (p.layout) {
    case Layout::kRowCol:
      return sm90::run_row_col(p, workspace, workspace_size, sm_count, stream);
    case Layout::kColRow:
      return sm90::run_col_row(p, workspace, workspace_size, sm_count, stream);
    default:
      return sm90::run_row_row(p, workspace, workspace_size, sm_count, stream);
  }
}

}  // namespace ejkernel_cuda::gmm
