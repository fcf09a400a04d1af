from .impl import PallasTpuPageAttention

__all__ = ["PallasTpuPageAttention"]
