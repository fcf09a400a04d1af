// XLA FFI handler of the paged decode (page_attention), registered by the module in ../ext.cc.
//
// JAX registers each handler with jax.ffi.register_ffi_target(name, capsule, platform="CUDA") and
// calls it with jax.ffi.ffi_call; XLA passes the device buffers, the attributes and the CUDA
// stream of the computation. Launch errors come back to JAX as FFI errors, not crashes.

#include "page_attention/ffi.h"

#include <cstdint>
#include <string>

#include "page_attention/paged_decode.cuh"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace ek = ejkernel_cuda;

namespace {

ffi::Error invalid(const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "ejkernel_cuda paged_decode: " + msg);
}

bool to_dtype(ffi::DataType t, ek::DType* out) {
  switch (t) {
    case ffi::DataType::F32:
      *out = ek::DType::kF32;
      return true;
    case ffi::DataType::BF16:
      *out = ek::DType::kBF16;
      return true;
    case ffi::DataType::F16:
      *out = ek::DType::kF16;
      return true;
    default:
      return false;
  }
}

std::string dims_str(ffi::AnyBuffer::Dimensions dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

ffi::Error PagedDecodeImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k_cache, ffi::AnyBuffer v_cache,
                           ffi::Buffer<ffi::S32> context_lens, ffi::Buffer<ffi::S32> block_tables,
                           ffi::Buffer<ffi::F32> sinks, ffi::Result<ffi::AnyBuffer> out,
                           ffi::Result<ffi::Buffer<ffi::F32>> part_out, ffi::Result<ffi::Buffer<ffi::F32>> part_lse,
                           float scale, float soft_cap, int32_t window_left, int32_t partition, int32_t num_sinks,
                           int32_t stages, int32_t variant, int32_t heads_major, int32_t kv_interleaved) {
  const auto qd = q.dimensions(), kd = k_cache.dimensions(), vd = v_cache.dimensions();
  if (qd.size() != 3 || kd.size() != 4 || vd.size() != 4)
    return invalid("query must be [batch, heads, head_dim] and caches [num_blocks, block_size, kv_heads, head_dim] "
                   "(heads_major: [num_blocks, kv_heads, block_size, head_dim]; kv_interleaved: one "
                   "[num_blocks, block_size, 2 * kv_heads, head_dim_padded] cache passed twice), got " +
                   dims_str(qd) + ", " + dims_str(kd) + ", " + dims_str(vd));
  if (heads_major != 0 && heads_major != 1) return invalid("heads_major must be 0 or 1, got " + std::to_string(heads_major));
  if (kv_interleaved != 0 && (kv_interleaved != 1 || heads_major))
    return invalid("kv_interleaved must be 0 or 1 (and heads_major 0 with it), got " + std::to_string(kv_interleaved));
  ek::DecodeParams p{};
  p.batch = static_cast<int>(qd[0]);
  p.heads = static_cast<int>(qd[1]);
  p.head_dim = static_cast<int>(qd[2]);
  p.block_size = static_cast<int>(heads_major ? kd[2] : kd[1]);
  p.kv_heads = static_cast<int>(heads_major ? kd[1] : (kv_interleaved ? kd[2] / 2 : kd[2]));
  // Every layout is read in place: a token's head row is contiguous, only the strides differ. The
  // interleaved cache holds key head h at combined head 2h and its value at 2h + 1, each row padded
  // to kd[3] >= head_dim elements: values start one padded row after keys.
  const int64_t row = kv_interleaved ? kd[3] : p.head_dim;
  const int64_t page_elems = static_cast<int64_t>(kd[1]) * kd[2] * kd[3];
  if (page_elems > INT32_MAX)
    return invalid("a page of key_cache " + dims_str(kd) + " has more than 2^31 - 1 elements");
  p.block_stride = static_cast<int32_t>(page_elems);
  p.head_stride = static_cast<int32_t>(heads_major ? p.block_size * row : (kv_interleaved ? 2 * row : row));
  p.token_stride = static_cast<int32_t>(heads_major ? row : kd[2] * row);
  for (int i = 0; i < 4; ++i) {
    if (vd[i] != kd[i]) return invalid("key_cache " + dims_str(kd) + " and value_cache " + dims_str(vd) + " differ");
  }
  if (kv_interleaved) {
    // 16-byte copies: each row must start 16-byte aligned (row % 8 covers bf16/fp16 and float32).
    if (kd[2] % 2 != 0 || kd[3] < p.head_dim || kd[3] % 8 != 0)
      return invalid("an interleaved cache " + dims_str(kd) + " needs an even combined head count and rows of a multiple "
                     "of 8 elements holding the query's head dim " + std::to_string(p.head_dim));
  } else if (kd[3] != p.head_dim) {
    return invalid("query " + dims_str(qd) + " and key_cache " + dims_str(kd) + " head dims differ");
  }
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return invalid("head_dim must be 64, 128 or 256, got " + std::to_string(p.head_dim));
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0)
    return invalid("heads (" + std::to_string(p.heads) + ") must be a multiple of kv_heads (" + std::to_string(p.kv_heads) + ")");
  p.groups = p.heads / p.kv_heads;
  const auto td = block_tables.dimensions();
  if (td.size() != 2 || td[0] != p.batch || context_lens.dimensions().size() != 1 || context_lens.dimensions()[0] != p.batch)
    return invalid("context_lens must be [batch] and block_tables [batch, max_blocks] for batch " + std::to_string(p.batch));
  p.max_blocks = static_cast<int>(td[1]);
  p.block_size_log2 = -1;
  if (p.block_size > 0 && (p.block_size & (p.block_size - 1)) == 0) {
    p.block_size_log2 = 0;
    while ((1 << p.block_size_log2) < p.block_size) ++p.block_size_log2;
  }
  const auto od = part_out->dimensions();
  if (od.size() != 4 || od[0] != p.batch || od[1] != p.heads || od[3] != p.head_dim)
    return invalid("partial output buffer has the wrong shape " + dims_str(od));
  p.num_splits = static_cast<int>(od[2]);
  p.partition = partition;
  p.num_sinks = num_sinks;
  if (partition <= 0 || p.num_splits <= 0) return invalid("partition and num_splits must be positive");
  if (num_sinks > 0 && (sinks.dimensions().size() != 2 || sinks.dimensions()[0] != p.heads || sinks.dimensions()[1] != num_sinks))
    return invalid("sinks must be [heads, num_sinks]");
  ek::DType cache_dtype;
  if (!to_dtype(q.element_type(), &p.q_dtype) || !to_dtype(out->element_type(), &p.out_dtype) ||
      !to_dtype(k_cache.element_type(), &cache_dtype) || k_cache.element_type() != v_cache.element_type())
    return invalid("query, caches and output must be float32, bfloat16 or float16 (caches of one dtype)");
  if (stages < ek::kMinStages || stages > ek::kMaxStages)
    return invalid("stages must be in [" + std::to_string(ek::kMinStages) + ", " + std::to_string(ek::kMaxStages) +
                   "], got " + std::to_string(stages));
  if (variant != 0 && variant != 1) return invalid("variant must be 0 or 1, got " + std::to_string(variant));
  p.stages = stages;
  p.variant = variant;
  const int elem_size = cache_dtype == ek::DType::kF32 ? 4 : 2;
  const size_t smem = ek::split_smem_bytes(p.groups, p.head_dim, p.partition, p.block_size, p.stages, elem_size, variant);
  if (smem > 200 * 1024)
    return invalid("partition " + std::to_string(partition) + " with " + std::to_string(stages) +
                   " stages needs too much shared memory");

  p.q = q.untyped_data();
  p.k_cache = k_cache.untyped_data();
  p.v_cache = v_cache.untyped_data();
  if (kv_interleaved) {
    p.v_cache = static_cast<const char*>(p.k_cache) + row * ffi::ByteWidth(k_cache.element_type());
  }
  p.context_lens = context_lens.typed_data();
  p.block_tables = block_tables.typed_data();
  p.sinks = sinks.typed_data();
  p.part_out = part_out->typed_data();
  p.part_lse = part_lse->typed_data();
  p.out = out->untyped_data();
  p.scale = scale;
  p.soft_cap = soft_cap;
  p.window_left = window_left;

  cudaError_t err;
  switch (cache_dtype) {
    case ek::DType::kBF16:
      err = ek::launch_paged_decode<__nv_bfloat16>(p, stream);
      break;
    case ek::DType::kF16:
      err = ek::launch_paged_decode<__half>(p, stream);
      break;
    default:
      err = ek::launch_paged_decode<float>(p, stream);
  }
  if (err != cudaSuccess)
    return ffi::Error(ffi::ErrorCode::kInternal, std::string("ejkernel_cuda paged_decode launch failed: ") + cudaGetErrorString(err));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(EjkernelPagedDecode, PagedDecodeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()              // query
                                  .Arg<ffi::AnyBuffer>()              // key_cache
                                  .Arg<ffi::AnyBuffer>()              // value_cache
                                  .Arg<ffi::Buffer<ffi::S32>>()       // context_lens
                                  .Arg<ffi::Buffer<ffi::S32>>()       // block_tables
                                  .Arg<ffi::Buffer<ffi::F32>>()       // sinks
                                  .Ret<ffi::AnyBuffer>()              // output
                                  .Ret<ffi::Buffer<ffi::F32>>()       // partial outputs (scratch)
                                  .Ret<ffi::Buffer<ffi::F32>>()       // partial log-sum-exps (scratch)
                                  .Attr<float>("scale")
                                  .Attr<float>("soft_cap")
                                  .Attr<int32_t>("window_left")
                                  .Attr<int32_t>("partition")
                                  .Attr<int32_t>("num_sinks")
                                  .Attr<int32_t>("stages")
                                  .Attr<int32_t>("variant")
                                  .Attr<int32_t>("heads_major")
                                  .Attr<int32_t>("kv_interleaved"));
