"""The XLA ``state_space_v1`` implementation."""

from __future__ import annotations

from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

from . import heuristics as H
from ._kernel import selective_scan


class XlaStateSpaceV1(KernelImpl):
    """Chunked selective scan in plain JAX (associative scan inside chunks, ``lax.scan`` across
    them, rematerialized backward), any device."""

    # 4-token chunks: many chunks, a ragged last one.
    test_configs: ClassVar[dict[str, OpConfig]] = {"chunk4": StateSpaceV1Config(block_e=4)}

    def heuristic_cfg(self, args: StateSpaceV1Args, device: DeviceInfo) -> StateSpaceV1Config:
        return H.heuristic(args, device)

    def candidate_cfgs(self, args: StateSpaceV1Args, device: DeviceInfo) -> list[StateSpaceV1Config]:
        return H.candidates(args, device)

    def validate_cfg(self, cfg: StateSpaceV1Config, args: StateSpaceV1Args, device: DeviceInfo) -> None:
        if cfg.block_e is None:
            raise ValueError("xla state_space_v1 needs block_e (tokens per chunk)")

    def run(self, args: StateSpaceV1Args, cfg: StateSpaceV1Config) -> Any:
        assert cfg.block_e is not None
        y, h = selective_scan(
            args.hidden_states, args.A, args.B, args.C, args.D, args.dt, args.initial_state, cfg.block_e
        )
        return args.finish(y, h)
