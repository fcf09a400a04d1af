"""ejkernel's Pallas backend: Mosaic TPU kernels (``tpu/``), with room for Mosaic GPU (``gpu/``).

Registered through the ``ejkernel.backends`` entry point (``pallas = "ejkernel_pallas:register"``)
at priority 100, above the XLA fallback. Registering is cheap and safe everywhere: nothing is
traced or compiled until a kernel is first used on a TPU, and on other devices the
implementations decline with a reason ("needs a TPU"). On a machine without a TPU the kernels
still run in Pallas' TPU interpret mode (see :func:`ejkernel_pallas.tpu.interpret_mode`), which
is how the test suite checks them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIORITY", "register"]

PRIORITY = 100


def register(registry: Any) -> None:
    """Register the Pallas implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform

    from .tpu.flash_attention import PallasTpuFlashAttention
    from .tpu.grouped_matmul import PallasTpuGroupedMatmul
    from .tpu.page_attention import PallasTpuPageAttention

    registry.register("flash_attention", Platform.PALLAS, Backend.TPU, priority=PRIORITY)(PallasTpuFlashAttention)
    registry.register("page_attention", Platform.PALLAS, Backend.TPU, priority=PRIORITY)(PallasTpuPageAttention)
    registry.register("grouped_matmul", Platform.PALLAS, Backend.TPU, priority=PRIORITY)(PallasTpuGroupedMatmul)
    # No ring_attention: the flash kernels do not provide the log-sum-exp protocol
    # (AttentionImpl.supports_lse) that ejkernel.ops.ring_attention.RingAttentionImpl combines.
