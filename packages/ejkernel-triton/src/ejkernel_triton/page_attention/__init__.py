from .impl import TritonPageAttention

__all__ = ["TritonPageAttention"]
