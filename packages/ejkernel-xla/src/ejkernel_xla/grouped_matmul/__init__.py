"""XLA ``grouped_matmul``: ``jax.lax.ragged_dot`` with the op's validation."""

from .impl import XlaGroupedMatmul

__all__ = ["XlaGroupedMatmul"]
