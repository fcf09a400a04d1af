"""Types of ejkernel's public API."""

from .mask_info import MaskInfo, canonical_window

__all__ = ["MaskInfo", "canonical_window"]
