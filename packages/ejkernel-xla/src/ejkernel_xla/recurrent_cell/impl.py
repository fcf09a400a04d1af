"""The XLA ``recurrent_cell``: a ``lax.scan`` over time carrying both directions at once
(``ejkernel.ops.recurrent_cell.scan``), in the form that is faster on the device
(``scan_form``): on accelerators the input projection of all timesteps as one matmul first,
then the scan, which JAX differentiates; on a CPU each step projecting its own input (or, with a
small batch or a large ``w_ih``, the projection first), with a derivative of its own that
multiplies the weights' and inputs' tangents outside the loop."""

from __future__ import annotations

from typing import Any

from ejkernel.ops import DeviceInfo, KernelImpl, device_for_arrays
from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig
from ejkernel.ops.recurrent_cell.scan import recurrent_scan, scan_form


class XlaRecurrentCell(KernelImpl):
    """LSTM/GRU/RNN by ``lax.scan`` in plain JAX, any device; every feature."""

    def heuristic_cfg(self, args: RecurrentCellArgs, device: DeviceInfo) -> RecurrentCellConfig:
        # One step per scan iteration: the step is a matmul already, and unrolling multiplies the
        # compile time of long sequences. (Two steps per iteration of the stepwise form on a CPU:
        # the forward within noise of one, forward+backward slower in 7 of 7 cells, directions and
        # dtypes at b16 s256 h256.)
        return RecurrentCellConfig(unroll=1)

    def run(self, args: RecurrentCellArgs, cfg: RecurrentCellConfig) -> Any:
        form = scan_form(args, device_for_arrays([args.inputs]).platform)
        return recurrent_scan(args, unroll=cfg.unroll or 1, form=form)
