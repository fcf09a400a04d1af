"""The Triton ``gated_delta_rule``."""

from .impl import TritonGatedDeltaRule

__all__ = ["TritonGatedDeltaRule"]
