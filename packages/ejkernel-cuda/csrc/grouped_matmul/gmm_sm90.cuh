// CUTLASS 3 grouped GEMM kernels for sm_90a, instantiated per operand layout in gmm_sm90_*.cu.
// Included only by those files (they need CUTLASS's headers and the sm_90a target).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "grouped_matmul/gmm_sm90.h"

namespace ejkernel_cuda::gmm::sm90 {

using namespace cute;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
using UnderlyingShape = ProblemShape::UnderlyingProblemShape;

// The tile configs. Config 0 (shipped): a 128x256x64 CTA tile computed by two consumer warpgroups
// (cooperative: each holds 64x256 of the float32 accumulator) fed by a TMA producer warpgroup, in
// 2-CTA clusters along n that multicast the lhs tile: no alternative wins by more than 4 % on any
// benchmark shape of an H100, and each loses more elsewhere (the tile sweep of commit 1383fba,
// benchmarks/cuda_gmm_sweep.py there, at 16384x4096x2048 g8, 16384x2048x1536 g64 and
// 65536x4096x1408 g64): clusters along m (the rhs tile multicast) are 2 %
// faster on the 65536-row forward and up to 24 % slower elsewhere, 64x256 ping-pong tiles 3-85 %
// slower, and 256x128 tiles for tgmm (whose M is k: no rows wasted) 4 % faster to 2 % slower.
//
// The epilogue (how the accumulator reaches memory) is paid once per tile, after its main loop:
//   Epi: CUTLASS's TMA-store epilogue (through shared memory) or the no-smem one (each thread
//     stores its accumulator fragment: no shared memory, no store tensor map per group);
//   EpiTile: the TMA epilogue's subtile (Auto: 128x32, 8 per tile with 2 in flight);
//   kVoidC: no C operand (beta is always 0): no C tensor maps, no source buffers in shared memory.
// Shipped: no C, 128x64 subtiles, the fastest of the epilogue sweep (configs 1-4, same commit):
// against CUTLASS's default (C = D, Auto subtiles: config 1) dlhs and tgmm gain 2-5 % and the
// forward stays within 2 %; 128x128 subtiles (2) and no C with Auto subtiles (4) land in between;
// the no-smem epilogue (3) loses 16-173 % (one 2-byte store per element).
//
// Sweep config 5 (kSwap) computes the forward and dlhs transposed: out[rows of j]ᵀ = B_jᵀ ·
// a[rows of j]ᵀ, so a group's rows are the GEMM's N, tiled by 144, and out's columns its M, tiled
// by 256, in 2-CTA clusters along N that multicast the B_j tile: two tiles hold 288 rows of one
// group, which reads each B_j tile once for groups of up to 288 rows (config 0: once per 128
// rows) and computes 288 rows for groups of 256 +- 16 (config 0: 256 or 384). out is written
// column-major through [n, rows] views. Not shipped: its gain (2 % on the 16384x2048x1536 g64
// forward, same record) lives in a narrow band of m / g (about 240-260 rows a group), and it is
// 2-8 % slower on the other shapes. tgmm runs config 0 for index 5.
template <class Tile_, class Cluster_, class Epi_, class EpiTile_, bool kVoidC_, bool kSwap_ = false>
struct TileConfig {
  using Tile = Tile_;
  using Cluster = Cluster_;
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = Epi_;
  using EpiTile = EpiTile_;
  static constexpr bool kVoidC = kVoidC_;
  static constexpr bool kSwap = kSwap_;
};
using TmaEpi = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
using AutoTile = cutlass::epilogue::collective::EpilogueTileAuto;
using Tile128x256 = Shape<_128, _256, _64>;
using ClusterN2 = Shape<_1, _2, _1>;
using Config0 = TileConfig<Tile128x256, ClusterN2, TmaEpi, Shape<_128, _64>, true>;
#ifdef EJKERNEL_GMM_SWEEP  // measurement builds only (CMake: EJKERNEL_CUDA_GMM_SWEEP=1)
using Config1 = TileConfig<Tile128x256, ClusterN2, TmaEpi, AutoTile, false>;
using Config2 = TileConfig<Tile128x256, ClusterN2, TmaEpi, Shape<_128, _128>, true>;
using Config3 = TileConfig<Tile128x256, ClusterN2, cutlass::epilogue::PtrArrayNoSmemWarpSpecialized, AutoTile, true>;
using Config4 = TileConfig<Tile128x256, ClusterN2, TmaEpi, AutoTile, true>;
// 256 (out's columns) x 144 (rows) x 64, 128x48 epilogue subtiles. The wgmma of N = 144 is one of
// CuTe's extended shapes (CMake defines CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED in sweep builds):
// without it CuTe picks 64x16x16 for this tile, nine instructions for one, each re-reading the A
// tile from shared memory, which makes it 1.65-2.3x slower than config 0.
using Config5 = TileConfig<Shape<_256, _144, _64>, ClusterN2, TmaEpi, Shape<_128, _48>, true, true>;
#endif

// LayoutA / LayoutB: the operands of the product as the layout computes it (out = A · B_j). With
// Cfg::kSwap the kernel's operands are A' = B_jᵀ (M' = out's columns: column-major when B_j is
// row-major [K, N], row-major when b stores [N, K]), B' = a[rows]ᵀ (K-major) and D' = outᵀ
// (column-major); kSwap applies to the row-major-A layouts (forward, dlhs) only.
template <class Element, class ElementD, class LayoutA_, class LayoutB_, class Cfg>
struct Gemm {
  using RowMajor = cutlass::layout::RowMajor;
  using ColumnMajor = cutlass::layout::ColumnMajor;
  static constexpr bool kSwap = Cfg::kSwap;
  static_assert(!kSwap || std::is_same_v<LayoutA_, RowMajor>, "kSwap needs a row-major A (the forward layouts)");
  using LayoutA =
      std::conditional_t<kSwap, std::conditional_t<std::is_same_v<LayoutB_, RowMajor>, ColumnMajor, RowMajor>, LayoutA_>;
  using LayoutB = std::conditional_t<kSwap, ColumnMajor, LayoutB_>;
  using LayoutD = std::conditional_t<kSwap, ColumnMajor, RowMajor>;
  using ElementAcc = float;
  using ElementOut = ElementD;
  using ElementC = std::conditional_t<Cfg::kVoidC, void, ElementD>;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Tile, typename Cfg::Cluster,
      typename Cfg::EpiTile, ElementAcc, ElementAcc, ElementC, LayoutD*, kAlignD, ElementD, LayoutD*, kAlignD,
      typename Cfg::Epilogue, cutlass::epilogue::fusion::LinearCombination<ElementD, ElementAcc, ElementC>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlign, Element, LayoutB*, kAlign,
      ElementAcc, typename Cfg::Tile, typename Cfg::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Cfg::Kernel>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// The per-group arrays CUTLASS reads, carved from the workspace.
template <class G>
struct Arrays {
  UnderlyingShape* shapes;
  const void** ptr_a;
  const void** ptr_b;
  void** ptr_d;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;
  void* cutlass_workspace;
};

inline size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

template <class G>
size_t arrays_bytes(int groups) {
  const size_t g = static_cast<size_t>(groups);
  return align_up(g * sizeof(UnderlyingShape)) + 3 * align_up(g * sizeof(void*)) +
         align_up(g * sizeof(typename G::StrideA)) + align_up(g * sizeof(typename G::StrideB)) +
         align_up(g * sizeof(typename G::StrideD));
}

template <class G>
Arrays<G> carve(void* ws, int groups) {
  const size_t g = static_cast<size_t>(groups);
  char* p = static_cast<char*>(ws);
  Arrays<G> r;
  r.shapes = reinterpret_cast<UnderlyingShape*>(p);
  p += align_up(g * sizeof(UnderlyingShape));
  r.ptr_a = reinterpret_cast<const void**>(p);
  p += align_up(g * sizeof(void*));
  r.ptr_b = reinterpret_cast<const void**>(p);
  p += align_up(g * sizeof(void*));
  r.ptr_d = reinterpret_cast<void**>(p);
  p += align_up(g * sizeof(void*));
  r.stride_a = reinterpret_cast<typename G::StrideA*>(p);
  p += align_up(g * sizeof(typename G::StrideA));
  r.stride_b = reinterpret_cast<typename G::StrideB*>(p);
  p += align_up(g * sizeof(typename G::StrideB));
  r.stride_d = reinterpret_cast<typename G::StrideD*>(p);
  p += align_up(g * sizeof(typename G::StrideD));
  r.cutlass_workspace = p;
  return r;
}

// One thread per group: its problem shape and operand pointers from the device-side bounds. An
// empty group gets M = 0 (N = 0 when swapped: no tiles, the scheduler skips it).
template <class G, class Element>
__global__ void setup_kernel(Arrays<G> arr, Problem p, typename G::StrideA sa, typename G::StrideB sb,
                             typename G::StrideD sd) {
  using ElementD = typename G::ElementOut;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.groups) return;
  const int start = min(max(p.starts[j], 0), p.m);
  const int rows = max(min(p.ends[j], p.m) - start, 0);
  const Element* a = static_cast<const Element*>(p.a);
  const Element* b = static_cast<const Element*>(p.b);
  ElementD* out = static_cast<ElementD*>(p.out);
  const int64_t s = start, k = p.k, n = p.n;
  if constexpr (G::kSwap) {  // out[rows]ᵀ ([n, rows]) = B_jᵀ @ a[rows]ᵀ
    arr.shapes[j] = UnderlyingShape(p.n, rows, p.k);
    arr.ptr_a[j] = b + static_cast<int64_t>(j) * k * n;
    arr.ptr_b[j] = a + s * k;
    arr.ptr_d[j] = out + s * n;
  } else if (p.layout == Layout::kColRow) {  // out[j] ([k, n]) = a[rows]ᵀ @ b[rows]
    arr.shapes[j] = UnderlyingShape(rows > 0 ? p.k : 0, p.n, rows);
    arr.ptr_a[j] = a + s * k;
    arr.ptr_b[j] = b + s * n;
    arr.ptr_d[j] = out + static_cast<int64_t>(j) * k * n;
  } else {  // out[rows] = a[rows] @ B_j, B_j from b[j] ([k, n] or [n, k])
    arr.shapes[j] = UnderlyingShape(rows, p.n, p.k);
    arr.ptr_a[j] = a + s * k;
    arr.ptr_b[j] = b + static_cast<int64_t>(j) * k * n;
    arr.ptr_d[j] = out + s * n;
  }
  arr.stride_a[j] = sa;
  arr.stride_b[j] = sb;
  arr.stride_d[j] = sd;
}

template <class G>
typename G::Device::Arguments arguments(const Problem& p, const Arrays<G>& arr, int sm_count) {
  using Element = typename G::CollectiveMainloop::ElementA;
  using ElementD = typename G::ElementOut;
  cutlass::KernelHardwareInfo hw;
  if (::cudaGetDevice(&hw.device_id) != cudaSuccess) hw.device_id = 0;
  hw.sm_count = sm_count;
  // The epilogue's defaults: alpha = 1, beta = 0 (C is never read; with a C operand it points at D).
  typename G::Device::Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                                     {p.groups, arr.shapes, nullptr},
                                     {(const Element**)arr.ptr_a, arr.stride_a, (const Element**)arr.ptr_b, arr.stride_b},
                                     {},
                                     hw};
  using EpiArgs = decltype(args.epilogue);
  if constexpr (!std::is_void_v<typename G::ElementC>) args.epilogue.ptr_C = (const ElementD**)arr.ptr_d;
  args.epilogue.dC = reinterpret_cast<decltype(EpiArgs::dC)>(arr.stride_d);
  args.epilogue.ptr_D = (ElementD**)arr.ptr_d;
  args.epilogue.dD = arr.stride_d;
  return args;
}

// Strides of the operands (the same for every group).
template <class G>
void strides(const Problem& p, typename G::StrideA* sa, typename G::StrideB* sb, typename G::StrideD* sd) {
  if constexpr (G::kSwap) {  // A' = B_jᵀ [n, k], B' = a[rows]ᵀ (K-major), D' = [n, rows] column-major
    *sa = cutlass::make_cute_packed_stride(typename G::StrideA{}, make_shape(p.n, p.k, 1));
    *sb = cutlass::make_cute_packed_stride(typename G::StrideB{}, make_shape(1, p.k, 1));
    *sd = cutlass::make_cute_packed_stride(typename G::StrideD{}, make_shape(p.n, 1, 1));
  } else if (p.layout == Layout::kColRow) {
    *sa = cutlass::make_cute_packed_stride(typename G::StrideA{}, make_shape(p.k, 1, 1));  // (M=k, K=rows)
    *sb = cutlass::make_cute_packed_stride(typename G::StrideB{}, make_shape(p.n, 1, 1));  // (N=n, K=rows)
    *sd = cutlass::make_cute_packed_stride(typename G::StrideD{}, make_shape(p.k, p.n, 1));
  } else {
    *sa = cutlass::make_cute_packed_stride(typename G::StrideA{}, make_shape(1, p.k, 1));
    *sb = cutlass::make_cute_packed_stride(typename G::StrideB{}, make_shape(p.n, p.k, 1));
    *sd = cutlass::make_cute_packed_stride(typename G::StrideD{}, make_shape(1, p.n, 1));
  }
}

template <class G>
size_t workspace_bytes_of(const Problem& p, int sm_count) {
  Arrays<G> arr = carve<G>(nullptr, p.groups);
  auto args = arguments<G>(p, arr, sm_count);
  return arrays_bytes<G>(p.groups) + G::Device::get_workspace_size(args) + 256;
}

template <class G>
std::string run_with(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream) {
  using Element = typename G::CollectiveMainloop::ElementA;
  // The workspace is an XLA buffer, whose alignment XLA does not promise beyond 16 bytes; its
  // size has 256 bytes of slack (workspace_bytes_of) for aligning the arrays and CUTLASS's
  // tensor maps (which need 64) to 256.
  const uintptr_t raw = reinterpret_cast<uintptr_t>(ws);
  const size_t pad = static_cast<size_t>((256 - raw % 256) % 256);
  if (ws_size < workspace_bytes_of<G>(p, sm_count) || ws_size < pad) return "workspace too small";
  Arrays<G> arr = carve<G>(reinterpret_cast<void*>(raw + pad), p.groups);
  typename G::StrideA sa;
  typename G::StrideB sb;
  typename G::StrideD sd;
  strides<G>(p, &sa, &sb, &sd);
  setup_kernel<G, Element><<<(p.groups + 127) / 128, 128, 0, stream>>>(arr, p, sa, sb, sd);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("setup: ") + cudaGetErrorString(e);
  auto args = arguments<G>(p, arr, sm_count);
  typename G::Device gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) return std::string("CUTLASS cannot run it: ") + cutlassGetStatusString(st);
  st = gemm.initialize(args, arr.cutlass_workspace, stream);
  if (st != cutlass::Status::kSuccess) return std::string("CUTLASS initialize: ") + cutlassGetStatusString(st);
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) return std::string("CUTLASS run: ") + cutlassGetStatusString(st);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("launch: ") + cudaGetErrorString(e);
  return {};
}

// The entry of one operand layout: picks the dtype and the config.
// kFloatOut: also the float32-output kernels (the forward's default preferred_element_type).
template <class LayoutA, class LayoutB, bool kFloatOut>
struct Entry {
  template <class Element, class ElementD, class Cfg>
  using G = Gemm<Element, ElementD, LayoutA, LayoutB, Cfg>;

  template <class Element, class ElementD, class F>
  static auto by_config(int config, F&& f) {
#ifdef EJKERNEL_GMM_SWEEP
    // The sweep measures bf16 (fp16 inputs run config 0 whatever the index); config 5 (the
    // transposed product) applies to the row-major-A layouts, and tgmm runs config 0 for it.
    if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
      switch (config) {
        case 1:
          return f(static_cast<G<Element, ElementD, Config1>*>(nullptr));
        case 2:
          return f(static_cast<G<Element, ElementD, Config2>*>(nullptr));
        case 3:
          return f(static_cast<G<Element, ElementD, Config3>*>(nullptr));
        case 4:
          return f(static_cast<G<Element, ElementD, Config4>*>(nullptr));
        case 5:
          if constexpr (std::is_same_v<LayoutA, cutlass::layout::RowMajor>) {
            return f(static_cast<G<Element, ElementD, Config5>*>(nullptr));
          }
          break;
        default:
          break;
      }
    }
#endif
    (void)config;
    return f(static_cast<G<Element, ElementD, Config0>*>(nullptr));
  }

  template <class Element, class F>
  static auto by_out(const Problem& p, F&& f) {
    if constexpr (kFloatOut) {
      if (p.out_f32) return by_config<Element, float>(p.config, f);
    }
    return by_config<Element, Element>(p.config, f);
  }

  template <class F>
  static auto dispatch(const Problem& p, F&& f) {
    if (p.dtype == DType::kF16) return by_out<cutlass::half_t>(p, f);
    return by_out<cutlass::bfloat16_t>(p, f);
  }

  static size_t workspace(const Problem& p, int sm_count) {
    return dispatch(p, [&](auto* g) { return workspace_bytes_of<std::remove_pointer_t<decltype(g)>>(p, sm_count); });
  }
  static std::string run(const Problem& p, void* ws, size_t ws_size, int sm_count, cudaStream_t stream) {
    return dispatch(p, [&](auto* g) {
      return run_with<std::remove_pointer_t<decltype(g)>>(p, ws, ws_size, sm_count, stream);
    });
  }
};

}  // namespace ejkernel_cuda::gmm::sm90
