"""Config of the XLA ``mean_pooling``: it reduces whole sequences and has no tiles to choose."""

from __future__ import annotations

from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig


def heuristic(args: MeanPoolingArgs) -> MeanPoolingConfig:
    del args
    return MeanPoolingConfig()
