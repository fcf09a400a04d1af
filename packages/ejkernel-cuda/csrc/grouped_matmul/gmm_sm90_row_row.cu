// The grouped GEMM with A [rows, K] and B_j [K, N] both row-major (forward; dlhs of a [g, n, k] rhs).
#include "grouped_matmul/gmm_sm90.cuh"

namespace ejkernel_cuda::gmm::sm90 {
using E = Entry<cutlass::layout::RowMajor, cutlass::layout::RowMajor, true>;
size_t workspace_row_row(const Problem& p, int sm_count) { return E::workspace(p, sm_count); }
std::string run_row_row(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream) {
  return E::run(p, ws, ws_size, sm_count, stream);
}
}  // namespace ejkernel_cuda::gmm::sm90
