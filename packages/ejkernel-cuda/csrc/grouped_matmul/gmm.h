// The grouped GEMM of grouped_matmul on Hopper (sm_90a): CUTLASS 3 grouped kernels (TMA loads,
// warp-specialized producer / consumers, persistent tile scheduler over the groups, 2-CTA
// clusters with TMA multicast). Group sizes stay on the device: a setup kernel turns the group
// bounds into CUTLASS's per-group problem shapes and pointers, so nothing is copied to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ejkernel_cuda::gmm {

enum class DType { kBF16, kF16 };

// The three operand layouts of the forward, dlhs and drhs products.
enum class Layout {
  kRowRow = 0,  // A [rows, K] row-major, B_j = b[j] as [K, N] row-major          (forward; dlhs of [g, n, k] rhs)
  kRowCol = 1,  // A [rows, K] row-major, B_j = b[j]ᵀ, b[j] stored [N, K]          (dlhs; forward of [g, n, k] rhs)
  kColRow = 2,  // A_j = a[rows of j]ᵀ (M = a's columns), B_j = d[rows of j]       (tgmm: drhs)
};

// out[rows of j] = a[rows of j] @ B_j for the local groups j < groups (kRowRow / kRowCol), rows
// [starts[j], ends[j]) (contiguous groups); rows outside every group are zeroed.
// kColRow: out[j] = a[rows of j]ᵀ @ b[rows of j] ([k, n] per group, a is [m, k], b is [m, n]);
// empty groups get zeros.
struct Problem {
  Layout layout;
  DType dtype;
  const void* a;
  const void* b;
  const int32_t* starts;
  const int32_t* ends;
  void* out;
  int m;       // rows of a
  int k;       // a's columns
  int n;       // out's columns
  int groups;  // local groups (>= 1)
  bool out_f32;  // float32 output (forward layouts only); else the inputs' dtype
  int config;    // tile config index (gmm_sm90.cuh; 0 is the only one)
};

// Device memory the call needs besides its operands (shapes, pointers, strides, CUTLASS's
// workspace), for an allocation by the caller.
size_t workspace_bytes(const Problem& p, int sm_count);

// Runs the grouped GEMM on `stream`; returns an empty string or what went wrong.
std::string run(const Problem& p, void* workspace, size_t workspace_size, int sm_count, cudaStream_t stream);

// How many tile configs exist (for candidates / validation).
int num_configs();

}  // namespace ejkernel_cuda::gmm
