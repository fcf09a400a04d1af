from .impl import XlaPrefillPageAttention

__all__ = ["XlaPrefillPageAttention"]
