from .impl import TritonRaggedPageAttentionv3

__all__ = ["TritonRaggedPageAttentionv3"]
