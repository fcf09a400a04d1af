"""ejkernel's CUDA backend: CUDA C++ kernels exposed to JAX as XLA FFI targets.

Registered through the ``ejkernel.backends`` entry point (``cuda = "ejkernel_cuda:register"``).
Registration imports nothing heavy: the compiled extension is loaded, and its FFI targets
registered with JAX, the first time a kernel is lowered on an NVIDIA GPU. Without the extension
(an sdist built without nvcc) or without a GPU, the implementations decline with the reason.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPS", "PRIORITY", "register"]

# Above the XLA (0) and Triton (100) backends: a hand-written CUDA kernel wins where it accepts a
# call (for grouped_matmul on an H100: forward+backward 1.5-10 % faster than Triton on the four
# benchmark shapes; benchmarks/results/h100/grouped_matmul.json).
PRIORITY = 110

#: The ops this backend implements: ``register`` registers exactly these (through
#: ``ejkernel.ops.support.register_declared``), and the READMEs' support tables list them from here,
#: also where the package is not installed (importing it stays cheap: no kernel module is imported).
OPS = (
    "page_attention",
    "grouped_matmul",
    "ragged_page_attention_v2",
    "ragged_page_attention_v3",
)


def register(registry: Any) -> None:
    """Register the CUDA implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.support import register_declared

    from .grouped_matmul import CudaGroupedMatmul
    from .page_attention import CudaPageAttention
    from .ragged_page_attention_v2 import CudaRaggedPageAttentionv2
    from .ragged_page_attention_v3 import CudaRaggedPageAttentionv3

    impls = {
        "page_attention": CudaPageAttention,
        "grouped_matmul": CudaGroupedMatmul,
        "ragged_page_attention_v2": CudaRaggedPageAttentionv2,
        "ragged_page_attention_v3": CudaRaggedPageAttentionv3,
    }
    register_declared(registry, OPS, impls, Platform.CUDA, Backend.GPU, PRIORITY)
