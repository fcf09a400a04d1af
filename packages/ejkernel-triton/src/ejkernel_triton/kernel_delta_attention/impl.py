"""The Triton ``kernel_delta_attention`` implementation: the shared delta rule (``ejkernel_triton._delta``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ejkernel.ops.kernel_delta_attention import KernelDeltaAttentionConfig

from .._delta import TritonDeltaRule


class TritonKernelDeltaAttention(TritonDeltaRule):
    """``kernel_delta_attention`` with Triton state-recurrence kernels (NVIDIA GPUs)."""

    config_cls = KernelDeltaAttentionConfig
    # 16-token chunks, 16 value columns per program: several chunks and value blocks on small inputs.
    test_configs: ClassVar[Mapping[str, KernelDeltaAttentionConfig]] = {
        "chunk16-bv16": KernelDeltaAttentionConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4, num_stages=1),
    }
