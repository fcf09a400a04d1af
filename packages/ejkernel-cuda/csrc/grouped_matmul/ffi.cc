// XLA FFI handler of the grouped GEMM (grouped_matmul), registered by the module in ../ext.cc.
//
// Operands by the `layout` attribute (gmm.h):
//   0 (row-row), 1 (row-col): a [m, k], b [g, k, n] (0) or [g, n, k] (1), out [m, n]:
//       out[rows of j] = a[rows of j] @ b[j] (or b[j]ᵀ); rows outside the groups are zeros.
//   2 (col-row, tgmm): a [m, k], b [m, n], out [g, k, n]: out[j] = a[rows of j]ᵀ @ b[rows of j].
// starts / ends [g] (int32) bound each local group's rows. The per-group problem arrays and
// CUTLASS's workspace live in the second result, a uint8 buffer of gmm::workspace_bytes (the
// Python side asks the module for its size: ejkernel_cuda._ext.gmm_workspace_bytes).

#include "grouped_matmul/ffi.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "grouped_matmul/gmm.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace gmm = ejkernel_cuda::gmm;

namespace {

ffi::Error invalid(const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "ejkernel_cuda grouped_matmul: " + msg);
}

std::string dims_str(ffi::AnyBuffer::Dimensions dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

ffi::Error GroupedMatmulImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Buffer<ffi::S32> starts,
                             ffi::Buffer<ffi::S32> ends, ffi::Result<ffi::AnyBuffer> out,
                             ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t layout, int32_t config,
                             int32_t sm_count) {
  const auto ad = a.dimensions(), bd = b.dimensions(), od = out->dimensions();
  if (layout < 0 || layout > 2) return invalid("layout must be 0, 1 or 2, got " + std::to_string(layout));
  if (config < 0 || config >= gmm::num_configs())
    return invalid("config must be in [0, " + std::to_string(gmm::num_configs()) + "), got " + std::to_string(config));
  if (a.element_type() != b.element_type()) return invalid("a and b must share one dtype");
  gmm::Problem p{};
  p.out_f32 = out->element_type() == ffi::DataType::F32;
  if (out->element_type() != a.element_type() && !(p.out_f32 && layout != 2))
    return invalid("out must have the inputs' dtype (or float32 for layouts 0 and 1)");
  switch (a.element_type()) {
    case ffi::DataType::BF16:
      p.dtype = gmm::DType::kBF16;
      break;
    case ffi::DataType::F16:
      p.dtype = gmm::DType::kF16;
      break;
    default:
      return invalid("dtype must be bfloat16 or float16");
  }
  if (starts.dimensions().size() != 1 || ends.dimensions().size() != 1 || starts.dimensions()[0] != ends.dimensions()[0])
    return invalid("starts and ends must be [groups]");
  p.groups = static_cast<int>(starts.dimensions()[0]);
  if (ad.size() != 2) return invalid("a must be [m, k], got " + dims_str(ad));
  p.m = static_cast<int>(ad[0]);
  p.k = static_cast<int>(ad[1]);
  p.layout = static_cast<gmm::Layout>(layout);
  if (layout == 2) {
    p.n = static_cast<int>(bd.size() == 2 ? bd[1] : -1);
    if (bd.size() != 2 || bd[0] != p.m || od.size() != 3 || od[0] != p.groups || od[1] != p.k || od[2] != p.n)
      return invalid("tgmm takes a [m, k], b [m, n] and out [g, k, n]; got " + dims_str(ad) + ", " + dims_str(bd) + ", " + dims_str(od));
  } else {
    p.n = static_cast<int>(od.size() == 2 ? od[1] : -1);
    const bool kn = layout == 0;
    if (bd.size() != 3 || bd[0] != p.groups || bd[kn ? 1 : 2] != p.k || bd[kn ? 2 : 1] != p.n || od.size() != 2 || od[0] != p.m)
      return invalid("gmm takes a [m, k], b [g, k, n] (layout 0) or [g, n, k] (layout 1) and out [m, n]; got " + dims_str(ad) +
                     ", " + dims_str(bd) + ", " + dims_str(od) + " with layout " + std::to_string(layout));
  }
  p.a = a.untyped_data();
  p.b = b.untyped_data();
  p.starts = starts.typed_data();
  p.ends = ends.typed_data();
  p.out = out->untyped_data();
  p.config = config;
  // The SM count the Python side sized the workspace with (ext.sm_count()): CUTLASS's workspace
  // and persistent grid depend on it, so both sides use the same number.
  const int sms = sm_count;
  if (sms <= 0) return invalid("sm_count must be positive, got " + std::to_string(sms));
  const size_t bytes = gmm::workspace_bytes(p, sms);
  if (workspace->size_bytes() < bytes)
    return invalid("the workspace has " + std::to_string(workspace->size_bytes()) + " bytes, the call needs " + std::to_string(bytes));
  const std::string err = gmm::run(p, workspace->untyped_data(), workspace->size_bytes(), sms, stream);
  if (!err.empty()) return ffi::Error(ffi::ErrorCode::kInternal, "ejkernel_cuda grouped_matmul: " + err);
  return ffi::Error::Success();
}

}  // namespace

size_t EjkernelGroupedMatmulWorkspace(int layout, bool float16, bool out_f32, int groups, int config, int m, int k, int n,
                                      int sm_count) {
  gmm::Problem p{};
  p.layout = static_cast<gmm::Layout>(layout);
  p.dtype = float16 ? gmm::DType::kF16 : gmm::DType::kBF16;
  p.out_f32 = out_f32;
  p.groups = groups;
  p.config = config;
  p.m = m;
  p.k = k;
  p.n = n;
  return gmm::workspace_bytes(p, sm_count);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(EjkernelGroupedMatmul, GroupedMatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()         // a
                                  .Arg<ffi::AnyBuffer>()         // b
                                  .Arg<ffi::Buffer<ffi::S32>>()  // starts
                                  .Arg<ffi::Buffer<ffi::S32>>()  // ends
                                  .Ret<ffi::AnyBuffer>()         // out
                                  .Ret<ffi::Buffer<ffi::U8>>()   // workspace
                                  .Attr<int32_t>("layout")
                                  .Attr<int32_t>("config")
                                  .Attr<int32_t>("sm_count"));
