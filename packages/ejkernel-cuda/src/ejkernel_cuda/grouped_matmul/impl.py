"""The CUDA ``grouped_matmul`` (Hopper): what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig
from ejkernel.ops.impl import SizeRule
from ejkernel.ops.resources import PROFILES, Need

from .. import _ffi
from . import heuristics as H

__all__ = ["CudaGroupedMatmul"]

_MULTIPLE_OF_8 = SizeRule("a multiple of 8 (16-byte rows for the TMA copies)", lambda n: n % H.ALIGN == 0)


class CudaGroupedMatmul(KernelImpl):
    """The grouped GEMM (forward, ``dlhs``, ``drhs``) as CUTLASS 3 grouped kernels on sm_90a: TMA
    loads, a producer warpgroup feeding two wgmma consumer warpgroups, 2-CTA clusters that
    multicast the shared operand tile, and a persistent scheduler over the groups whose shapes
    never leave the device."""

    version = "1"
    device_requirement = "an NVIDIA Hopper GPU (sm_90)"
    dtypes = ("bfloat16", "float16")
    allowed_sizes: ClassVar[dict[str, SizeRule]] = {"k": _MULTIPLE_OF_8, "n": _MULTIPLE_OF_8}
    # The CUTLASS epilogue has no per-column scale: scaled weights go to the Triton kernel.
    unsupported: ClassVar[Mapping[str, str]] = {
        "rhs_scale": "weight scales are applied by the Triton and XLA implementations",
        "rhs_scale_blocks": "weight scales are applied by the Triton and XLA implementations",
    }

    def available(self, device: DeviceInfo) -> str | None:
        if device.compute_capability is None:
            return f"needs an NVIDIA GPU; this call runs on {device.kind}"
        if device.compute_capability != (9, 0):
            return f"needs compute capability 9.0 (sm_90a kernels), this GPU has {device.compute_capability}"
        why = _ffi.availability()
        if why is not None:
            return why
        ext, _ = _ffi._load()
        if not getattr(ext, "has_grouped_matmul_sm90", False):
            # A build whose architectures leave 90a out compiles the other ops only (CMakeLists.txt).
            archs = getattr(ext, "cuda_architectures", "")
            built = f"built for {archs}" if archs else "built"
            return (
                f"the ejkernel_cuda extension was {built} without sm_90a, so it has no grouped GEMM; "
                "rebuild it with 90a-real in EJKERNEL_CUDA_ARCHS"
            )
        return None

    def heuristic_cfg(self, args: GroupedMatmulArgs, device: DeviceInfo) -> GroupedMatmulConfig:
        return H.heuristic(args.m, args.k, args.n, args.groups)

    def candidate_cfgs(self, args: GroupedMatmulArgs, device: DeviceInfo) -> list[GroupedMatmulConfig]:
        return H.candidates(args.m, args.k, args.n, args.groups)

    def validate_cfg(self, cfg: GroupedMatmulConfig, args: GroupedMatmulArgs, device: DeviceInfo) -> None:
        H.config_index(cfg)

    def resources(self, cfg: GroupedMatmulConfig, args: GroupedMatmulArgs, device: DeviceInfo) -> list[Need]:
        """Three warpgroups per CTA; CUTLASS sizes the operand pipeline to what sm_90 holds
        (``StageCountAutoCarveout``, checked at compile time), so each kernel takes at most the
        architecture's per-block shared memory."""
        H.config_index(cfg)
        smem = PROFILES[(9, 0)].shared_memory_per_block
        return [Need("CUTLASS grouped GEMM (forward, dlhs, drhs)", smem, H.THREADS)]

    def run(self, args: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
        from ._call import grouped_matmul

        return grouped_matmul(args, H.config_index(cfg))
