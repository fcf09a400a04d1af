from .impl import PallasTpuFlashAttention

__all__ = ["PallasTpuFlashAttention"]
