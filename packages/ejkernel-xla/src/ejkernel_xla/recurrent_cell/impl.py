"""The XLA ``recurrent_cell``: the input projection of all timesteps as one matmul, then a
``lax.scan`` over time carrying both directions at once (``ejkernel.ops.recurrent_cell.scan``);
JAX differentiates the scan."""

from __future__ import annotations

from typing import Any

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig
from ejkernel.ops.recurrent_cell.scan import recurrent_scan


class XlaRecurrentCell(KernelImpl):
    """LSTM/GRU/RNN by ``lax.scan`` in plain JAX, any device; every feature."""

    def heuristic_cfg(self, args: RecurrentCellArgs, device: DeviceInfo) -> RecurrentCellConfig:
        # One step per scan iteration: the step is a matmul already, and unrolling multiplies the
        # compile time of long sequences.
        return RecurrentCellConfig(unroll=1)

    def run(self, args: RecurrentCellArgs, cfg: RecurrentCellConfig) -> Any:
        return recurrent_scan(args, unroll=cfg.unroll or 1)
