"""The benchmark of ``scaled_dot_product_attention``: the dense attention benchmark."""

from ..flash_attention.bench import BENCH

__all__ = ["BENCH"]
