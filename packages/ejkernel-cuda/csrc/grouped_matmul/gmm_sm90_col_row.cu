// The transposed grouped GEMM (tgmm, drhs): A_j = a[rows of j]ᵀ (column-major), B_j = d[rows of j] (row-major).
#include "grouped_matmul/gmm_sm90.cuh"

namespace ejkernel_cuda::gmm::sm90 {
using E = Entry<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, false>;
size_t workspace_col_row(const Problem& p, int sm_count) { return E::workspace(p, sm_count); }
std::string run_col_row(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream) {
  return E::run(p, ws, ws_size, sm_count, stream);
}
}  // namespace ejkernel_cuda::gmm::sm90
