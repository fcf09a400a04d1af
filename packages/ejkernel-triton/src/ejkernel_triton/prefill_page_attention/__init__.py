from .impl import TritonPrefillPageAttention

__all__ = ["TritonPrefillPageAttention"]
