from .impl import CudaRaggedPageAttentionv2

__all__ = ["CudaRaggedPageAttentionv2"]
