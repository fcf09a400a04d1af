from .impl import PallasGpuFlashAttention

__all__ = ["PallasGpuFlashAttention"]
