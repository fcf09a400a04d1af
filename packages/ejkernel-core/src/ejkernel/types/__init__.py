"""Types of ejkernel's public API."""

from . import mask
from ._mask_ops import get_debug_mode, set_debug_mode
from .mask_info import MaskInfo, canonical_window

__all__ = ["MaskInfo", "canonical_window", "get_debug_mode", "mask", "set_debug_mode"]
