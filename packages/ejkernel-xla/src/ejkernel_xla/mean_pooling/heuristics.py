"""Config of the XLA ``mean_pooling``: ``split_size`` (packed rows only) picks the formulation.

``None`` (the CPU's choice): a segment sum of the rows, one pass over them. A number (GPU, TPU):
rows gathered in items of at most that many rows of one sequence and summed per item
(``_kernel``), since a segment sum of every row is a scatter with atomics there. The split keeps
the gathered rows within ~25 % of the tokens (each of the ``num_seqs + 1`` sequences pads its last
item) and at least 8 rows.
"""

from __future__ import annotations

from ejkernel.ops import DeviceInfo
from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig


def _pow2_at_most(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def heuristic(args: MeanPoolingArgs, device: DeviceInfo | None, accelerator: bool = False) -> MeanPoolingConfig:
    """``accelerator``: the split whatever the device (the autotuner's second candidate)."""
    on_cpu = device is None or device.platform == "cpu"
    if args.cu_seqlens is None or (on_cpu and not accelerator):
        return MeanPoolingConfig()
    split = _pow2_at_most(max(8, args.tokens // (4 * (args.num_seqs + 1))))
    return MeanPoolingConfig(split_size=min(split, 4096))
