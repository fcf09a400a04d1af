from .impl import CudaPageAttention

__all__ = ["CudaPageAttention"]
