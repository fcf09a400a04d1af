from .impl import TritonRaggedPageAttentionv2

__all__ = ["TritonRaggedPageAttentionv2"]
