from .impl import PallasTpuBlockSparseAttention

__all__ = ["PallasTpuBlockSparseAttention"]
