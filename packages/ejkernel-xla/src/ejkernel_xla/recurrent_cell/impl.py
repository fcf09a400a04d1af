"""The XLA ``recurrent_cell``: the input projection of all timesteps as one matmul, then a
``lax.scan`` over time carrying both directions at once (``ejkernel.ops.recurrent_cell.scan``);
JAX differentiates the scan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig
from ejkernel.ops.recurrent_cell.scan import recurrent_scan


class XlaRecurrentCell(KernelImpl):
    """LSTM/GRU/RNN by ``lax.scan`` in plain JAX, any device; every feature."""

    test_configs: ClassVar[Mapping[str, OpConfig]] = {"unroll3": RecurrentCellConfig(unroll=3)}

    def heuristic_cfg(self, args: RecurrentCellArgs, device: DeviceInfo) -> RecurrentCellConfig:
        # One step per scan iteration: the step is a matmul already, and unrolling multiplies the
        # compile time of long sequences.
        return RecurrentCellConfig(unroll=1)

    def run(self, args: RecurrentCellArgs, cfg: RecurrentCellConfig) -> Any:
        return recurrent_scan(args, unroll=cfg.unroll or 1)
