"""Triton ``state_space_v2``: the chunked kernels of ``ejkernel_triton._linear``."""

from .impl import TritonStateSpaceV2

__all__ = ["TritonStateSpaceV2"]
