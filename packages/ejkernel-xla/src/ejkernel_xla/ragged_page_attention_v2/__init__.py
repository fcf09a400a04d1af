from .impl import XlaRaggedPageAttentionv2

__all__ = ["XlaRaggedPageAttentionv2"]
