// The grouped GEMM with A [rows, K] and B_j = b[j]ᵀ with b[j] [N, K] row-major (dlhs; forward of a [g, n, k] rhs).
#include "grouped_matmul/gmm_sm90.cuh"

namespace ejkernel_cuda::gmm::sm90 {
using E = Entry<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, true>;
size_t workspace_row_col(const Problem& p, int sm_count) { return E::workspace(p, sm_count); }
std::string run_row_col(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream) {
  return E::run(p, ws, ws_size, sm_count, stream);
}
}  // namespace ejkernel_cuda::gmm::sm90
