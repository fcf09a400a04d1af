"""Triton ``grouped_matmul``: the MoE grouped GEMM (``gmm`` forward and ``dlhs``, ``tgmm`` for ``drhs``)."""

from .impl import TritonGroupedMatmul

__all__ = ["TritonGroupedMatmul"]
