from .impl import XlaRaggedPageAttentionv3

__all__ = ["XlaRaggedPageAttentionv3"]
