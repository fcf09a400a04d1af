"""XLA ``grouped_matmul``: a tiled loop over chunks of one group's rows (the CPU's form), or
``jax.lax.ragged_dot``."""

from .impl import XlaGroupedMatmul

__all__ = ["XlaGroupedMatmul"]
