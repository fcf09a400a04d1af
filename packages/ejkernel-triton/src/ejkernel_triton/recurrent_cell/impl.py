"""The Triton ``recurrent_cell`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, Need, OpConfig
from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig

from .._launch import gpu_availability
from . import heuristics as H


class TritonRecurrentCell(KernelImpl):
    """LSTM/GRU/RNN forward as one persistent Triton kernel over all timesteps (the input
    projection one XLA matmul before it); the backward is XLA's ``lax.scan``, differentiated."""

    device_requirement = "an NVIDIA GPU"
    dtypes = ("float16", "bfloat16", "float32")
    unsupported: ClassVar[Mapping[str, str]] = {
        "custom_activation": "the Triton kernel compiles the named activations (tanh, relu) only; "
        "a callable runs on platform='xla'",
    }
    # 16-wide tiles: hidden sizes above 16 stream w_hh tile by tile (the heuristic keeps it resident).
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "b16-h16": RecurrentCellConfig(block_batch=16, block_hidden=16, num_warps=4)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return gpu_availability(device, min_cc=None)

    def heuristic_cfg(self, args: RecurrentCellArgs, device: DeviceInfo) -> RecurrentCellConfig:
        return H.heuristic(args)

    def candidate_cfgs(self, args: RecurrentCellArgs, device: DeviceInfo) -> list[RecurrentCellConfig]:
        return H.candidates(args)

    def validate_cfg(self, cfg: RecurrentCellConfig, args: RecurrentCellArgs, device: DeviceInfo) -> None:
        H.check(cfg)

    def resources(self, cfg: RecurrentCellConfig, args: RecurrentCellArgs, device: DeviceInfo) -> list[Need]:
        return H.needs(cfg, args)

    def run(self, args: RecurrentCellArgs, cfg: RecurrentCellConfig) -> Any:
        from ._call import recurrent_cell

        return recurrent_cell(args, cfg)
