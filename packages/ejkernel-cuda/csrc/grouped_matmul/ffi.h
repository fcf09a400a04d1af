// The XLA FFI handler of the grouped GEMM (grouped_matmul), defined in ffi.cc.

#pragma once

#include "xla/ffi/api/ffi.h"

#include <cstddef>

// Target "ejkernel_cuda_gmm": a, b, starts, ends -> out, workspace (see ffi.cc for the layouts and
// attributes).
XLA_FFI_DECLARE_HANDLER_SYMBOL(EjkernelGroupedMatmul);

// Bytes of the target's workspace result for one call (layout and config as the attributes).
size_t EjkernelGroupedMatmulWorkspace(int layout, bool float16, bool out_f32, int groups, int config, int m, int k, int n,
                                      int sm_count);
