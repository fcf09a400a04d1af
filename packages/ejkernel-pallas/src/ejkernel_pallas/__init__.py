"""ejkernel's Pallas backend: Mosaic TPU kernels (``tpu/``) and Mosaic GPU kernels for Hopper (``gpu/``).

Registered through the ``ejkernel.backends`` entry point (``pallas = "ejkernel_pallas:register"``)
at priority 100, above the XLA fallback. Registering is cheap and safe everywhere: nothing is
traced or compiled until a kernel is first used on a TPU, and on other devices the
implementations decline with a reason ("needs a TPU"). On a machine without a TPU the kernels
still run in Pallas' TPU interpret mode (see :func:`ejkernel_pallas.tpu.interpret_mode`), which
is how the test suite checks them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GPU_PRIORITY", "OPS", "PRIORITY", "register"]

PRIORITY = 100
#: The Mosaic GPU kernels' priority: above the XLA fallback, below Triton and cuDNN (whose rates on
#: the H200 are recorded) until the GPU kernels' own are.
GPU_PRIORITY = 50

#: The ops this backend implements: ``register`` registers exactly these (through
#: ``ejkernel.ops.support.register_declared``), and the READMEs' support tables list them from here,
#: also where the package is not installed (importing it stays cheap: no kernel module is imported).
OPS = (
    "flash_attention",
    "blocksparse_attention",
    "page_attention",
    "grouped_matmul",
    "ragged_page_attention_v2",
)


def register(registry: Any) -> None:
    """Register the Pallas implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.support import register_declared

    from .tpu.blocksparse_attention import PallasTpuBlockSparseAttention
    from .tpu.flash_attention import PallasTpuFlashAttention
    from .tpu.grouped_matmul import PallasTpuGroupedMatmul
    from .tpu.page_attention import PallasTpuPageAttention
    from .tpu.ragged_page_attention_v2 import PallasTpuRaggedPageAttentionv2

    impls = {
        "flash_attention": PallasTpuFlashAttention,
        "blocksparse_attention": PallasTpuBlockSparseAttention,
        "page_attention": PallasTpuPageAttention,
        "grouped_matmul": PallasTpuGroupedMatmul,
        "ragged_page_attention_v2": PallasTpuRaggedPageAttentionv2,
    }
    # No ring_attention: the flash kernels do not provide the log-sum-exp protocol
    # (AttentionImpl.supports_lse) that ejkernel.ops.ring_attention.RingAttentionImpl combines.
    register_declared(registry, OPS, impls, Platform.PALLAS, Backend.TPU, PRIORITY)

    from .gpu.flash_attention import PallasGpuFlashAttention

    registry.register("flash_attention", Platform.PALLAS, Backend.GPU, GPU_PRIORITY, name="pallas_gpu")(
        PallasGpuFlashAttention
    )
