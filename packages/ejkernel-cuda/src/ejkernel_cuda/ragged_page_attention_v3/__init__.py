from .impl import CudaRaggedPageAttentionv3

__all__ = ["CudaRaggedPageAttentionv3"]
