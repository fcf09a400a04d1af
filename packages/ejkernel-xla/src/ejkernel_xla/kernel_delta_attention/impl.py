"""The XLA ``kernel_delta_attention`` implementation: the shared delta rule (``ejkernel_xla._delta``)."""

from __future__ import annotations

from typing import ClassVar

from ejkernel.ops.kernel_delta_attention import KernelDeltaAttentionConfig

from .._delta import XlaDeltaRule


class XlaKernelDeltaAttention(XlaDeltaRule):
    """``kernel_delta_attention`` in plain JAX (chunked WY algorithm; the step path for decode), any device."""

    config_cls = KernelDeltaAttentionConfig
    # 16-token chunks: many chunks (and several per sequence) on the small conformance inputs.
    test_configs: ClassVar[dict[str, KernelDeltaAttentionConfig]] = {
        "chunk16": KernelDeltaAttentionConfig(chunk_size=16, chunked=True),
        "recurrent": KernelDeltaAttentionConfig(chunked=False),
    }
