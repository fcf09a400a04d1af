"""The Triton ``state_space_v2`` implementation (kernels, heuristics and declaration in ``_linear/``)."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops import KernelImpl, OpConfig
from ejkernel.ops.state_space_v2 import StateSpaceV2Config

from .._linear.impl import TritonLinearAttention


class TritonStateSpaceV2(TritonLinearAttention, KernelImpl):
    """``state_space_v2`` on NVIDIA GPUs: chunked gated linear attention (fla's chunk_gla family)."""

    # 32-token chunks with 16-column value tiles: several value tiles per state, other chunk bounds.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "chunk32-bv16": StateSpaceV2Config(chunk_size=32, block_v=16, num_warps=4, num_stages=1)
    }
