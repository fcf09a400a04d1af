// The XLA FFI handler of the paged decode (page_attention), defined in ffi.cc.

#pragma once

#include "xla/ffi/api/ffi.h"

// Target "ejkernel_cuda_paged_decode": query, caches, context_lens, block_tables, sinks ->
// output and the split-K scratch (see ffi.cc for the attributes).
XLA_FFI_DECLARE_HANDLER_SYMBOL(EjkernelPagedDecode);
