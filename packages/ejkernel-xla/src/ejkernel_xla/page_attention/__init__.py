from .impl import XlaPageAttention

__all__ = ["XlaPageAttention"]
