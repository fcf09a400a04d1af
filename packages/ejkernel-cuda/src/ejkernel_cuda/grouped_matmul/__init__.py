from .impl import CudaGroupedMatmul

__all__ = ["CudaGroupedMatmul"]
