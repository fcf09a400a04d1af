"""Conformance cases of ``scaled_dot_product_attention``: the dense attention cases."""

from ..flash_attention.cases import ARG_SPECS, CASES, FULL_CASES

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES"]
