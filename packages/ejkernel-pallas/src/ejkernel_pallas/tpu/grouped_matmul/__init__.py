"""Pallas TPU ``grouped_matmul``: megablox's gmm/tgmm."""

from .impl import PallasTpuGroupedMatmul

__all__ = ["PallasTpuGroupedMatmul"]
