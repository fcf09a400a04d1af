"""``grouped_matmul``: the MoE grouped GEMM (``lax.ragged_dot`` semantics, megablox style)."""

from .api import grouped_matmul
from .op import GroupedMatmul, GroupedMatmulArgs, GroupedMatmulConfig

__all__ = ["GroupedMatmul", "GroupedMatmulArgs", "GroupedMatmulConfig", "grouped_matmul"]
