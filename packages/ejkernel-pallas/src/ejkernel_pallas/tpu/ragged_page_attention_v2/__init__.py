from .impl import PallasTpuRaggedPageAttentionv2

__all__ = ["PallasTpuRaggedPageAttentionv2"]
