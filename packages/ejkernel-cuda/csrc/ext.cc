// The Python module of ejkernel-cuda (``ejkernel_cuda._ext``): hands every op's XLA FFI handler to
// JAX (jax.ffi.register_ffi_target(name, capsule, platform="CUDA")) and reports the CUDA devices.
// Each op's handler lives with its kernels in csrc/<op>/.

#include <cuda_runtime.h>
#include <pybind11/pybind11.h>

#include "page_attention/ffi.h"
#ifdef EJKERNEL_CUDA_GMM_SM90
#include "grouped_matmul/ffi.h"
#endif

namespace {

pybind11::capsule capsule(void* fn) { return pybind11::capsule(fn); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace

PYBIND11_MODULE(_ext, m) {
  m.doc() = "ejkernel-cuda: CUDA kernels as XLA FFI handlers";
  m.def("registrations", []() {
    pybind11::dict d;
    d["ejkernel_cuda_paged_decode"] = capsule(reinterpret_cast<void*>(EjkernelPagedDecode));
#ifdef EJKERNEL_CUDA_GMM_SM90
    d["ejkernel_cuda_gmm"] = capsule(reinterpret_cast<void*>(EjkernelGroupedMatmul));
#endif
    return d;
  }, "FFI target name -> handler capsule, for jax.ffi.register_ffi_target(..., platform='CUDA').");
  m.def("cuda_device_count", &cuda_device_count, "CUDA devices visible to this process (0 without a driver).");
  m.def("sm_count", &sm_count, "Streaming multiprocessors of the current CUDA device (0 without one).");
  m.attr("cuda_runtime_version") = CUDART_VERSION;
  m.attr("cuda_architectures") = EJKERNEL_CUDA_ARCHITECTURES;  // CMAKE_CUDA_ARCHITECTURES, comma-separated
#ifdef EJKERNEL_CUDA_GMM_SM90
  m.attr("has_grouped_matmul_sm90") = true;  // built with 90a among the architectures
  m.def("gmm_workspace_bytes", &EjkernelGroupedMatmulWorkspace, pybind11::arg("layout"), pybind11::arg("float16"),
        pybind11::arg("out_f32"), pybind11::arg("groups"), pybind11::arg("config"), pybind11::arg("m"), pybind11::arg("k"),
        pybind11::arg("n"), pybind11::arg("sm_count"),
        "Bytes of ejkernel_cuda_gmm's workspace result for one call.");
#else
  m.attr("has_grouped_matmul_sm90") = false;
#endif
}
