"""The XLA ``attention`` (plain attention returning the weights)."""

from .impl import XlaAttention

__all__ = ["XlaAttention"]
