"""The XLA ``gated_delta_rule``."""

from .impl import XlaGatedDeltaRule

__all__ = ["XlaGatedDeltaRule"]
