"""The Triton ``state_space_v1`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

from .._launch import gpu_availability
from . import heuristics as H


class TritonStateSpaceV1(KernelImpl):
    """Chunked selective scan in Triton (state in registers, parallel scan inside chunks,
    recomputing backward), for NVIDIA GPUs."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    max_sizes: ClassVar[Mapping[str, int]] = {"state": 256}
    # Tiny tiles: many chunks and channel blocks, ragged tails of both; the backward on one
    # channel (block_d 8) and on two (block_d 16).
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "e4-d8": StateSpaceV1Config(block_d=8, block_e=4, num_warps=2, num_stages=1),
        "e4-d16": StateSpaceV1Config(block_d=16, block_e=4, num_warps=2, num_stages=1),
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device, min_cc=None)

    def heuristic_cfg(self, args: StateSpaceV1Args, device: DeviceInfo) -> StateSpaceV1Config:
        return H.heuristic(args)

    def candidate_cfgs(self, args: StateSpaceV1Args, device: DeviceInfo) -> list[StateSpaceV1Config]:
        return H.candidates(args)

    def validate_cfg(self, cfg: StateSpaceV1Config, args: StateSpaceV1Args, device: DeviceInfo) -> None:
        H.check(cfg, args)

    def resources(self, cfg: StateSpaceV1Config, args: StateSpaceV1Args, device: DeviceInfo) -> list[Need]:
        return H.needs(cfg, args)

    def run(self, args: StateSpaceV1Args, cfg: StateSpaceV1Config) -> Any:
        from ._call import state_space_v1

        return state_space_v1(args, cfg)
