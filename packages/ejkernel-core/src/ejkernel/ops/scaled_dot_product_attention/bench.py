"""The benchmark of ``scaled_dot_product_attention``: the dense attention benchmark, with packed
sequence boundaries under this op's name for them (its ``cum_seqlens_q`` are per-example lengths)."""

from ..flash_attention.bench import DenseAttentionBench

__all__ = ["BENCH"]

BENCH = DenseAttentionBench(boundaries="cu_seqlens_q")
