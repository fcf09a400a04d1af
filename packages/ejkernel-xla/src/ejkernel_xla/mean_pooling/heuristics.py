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


def split_size(args: MeanPoolingArgs) -> int:
    """Rows per item of the gathered formulation: a power of two (512 at the H200 measurement's
    262144 tokens in 64 sequences)."""
    rows = max(8, args.tokens // (4 * (args.num_seqs + 1)))
    return min(4096, 1 << (rows.bit_length() - 1))


def heuristic(args: MeanPoolingArgs, device: DeviceInfo) -> MeanPoolingConfig:
    if args.cu_seqlens is None or device.platform == "cpu":
        return MeanPoolingConfig()
    return MeanPoolingConfig(split_size=split_size(args))
