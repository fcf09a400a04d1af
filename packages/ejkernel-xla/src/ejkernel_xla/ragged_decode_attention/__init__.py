from .impl import XlaRaggedDecodeAttention

__all__ = ["XlaRaggedDecodeAttention"]
