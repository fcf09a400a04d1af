// The sm_90a CUTLASS kernels of each operand layout (defined in gmm_sm90_<layout>.cu from the
// templates of gmm_sm90.cuh), as gmm.cu dispatches to them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "grouped_matmul/gmm.h"

namespace ejkernel_cuda::gmm::sm90 {

// Tile configs compiled in (gmm_sm90.cuh): one, or the measurement set of a build with
// EJKERNEL_GMM_SWEEP (CMake: EJKERNEL_CUDA_GMM_SWEEP=1 in the environment).
#ifdef EJKERNEL_GMM_SWEEP
inline constexpr int kNumConfigs = 6;
#else
inline constexpr int kNumConfigs = 1;
#endif

size_t workspace_row_row(const Problem& p, int sm_count);
std::string run_row_row(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream);
size_t workspace_row_col(const Problem& p, int sm_count);
std::string run_row_col(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream);
size_t workspace_col_row(const Problem& p, int sm_count);
std::string run_col_row(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream);

}  // namespace ejkernel_cuda::gmm::sm90
