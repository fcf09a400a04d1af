"""ejkernel's XLA backend: pure-JAX implementations of every op, for every device.

Registered through the ``ejkernel.backends`` entry point (``xla = "ejkernel_xla:register"``) at
priority 0, so any faster backend that accepts a call (priority > 0) wins over it. Each op has a
folder here with the backend vocabulary: ``impl.py`` (what the implementation declares, its
configs), ``heuristics.py`` (pure functions of the shapes) and its kernel files by role
(``_kernel.py``); ``_tiles.py`` holds the tile-level pieces the attention kernels share.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIORITY", "register"]

PRIORITY = 0


def register(registry: Any) -> None:
    """Register the XLA implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.ring_attention import RingAttentionImpl

    from .attention import XlaAttention
    from .flash_attention import XlaFlashAttention
    from .gated_delta_rule import XlaGatedDeltaRule
    from .gla_attention import XlaGLAttention
    from .grouped_matmul import XlaGroupedMatmul
    from .kernel_delta_attention import XlaKernelDeltaAttention
    from .lightning_attention import XlaLightningAttention
    from .mean_pooling import XlaMeanPooling
    from .page_attention import XlaPageAttention
    from .recurrent_attention import XlaRecurrentAttention
    from .scaled_dot_product_attention import XlaScaledDotProductAttention
    from .state_space_v1 import XlaStateSpaceV1
    from .state_space_v2 import XlaStateSpaceV2

    registry.register("attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaAttention)
    registry.register("flash_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaFlashAttention)
    registry.register("scaled_dot_product_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(
        XlaScaledDotProductAttention
    )
    registry.register("page_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaPageAttention)
    registry.register("state_space_v1", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaStateSpaceV1)
    registry.register("kernel_delta_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaKernelDeltaAttention)
    registry.register("gated_delta_rule", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaGatedDeltaRule)
    registry.register("mean_pooling", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaMeanPooling)
    registry.register("grouped_matmul", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaGroupedMatmul)
    registry.register("ring_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(RingAttentionImpl(registry))
    registry.register("gla_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaGLAttention)
    registry.register("lightning_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaLightningAttention)
    registry.register("recurrent_attention", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaRecurrentAttention)
    registry.register("state_space_v2", Platform.XLA, Backend.ANY, priority=PRIORITY)(XlaStateSpaceV2)
