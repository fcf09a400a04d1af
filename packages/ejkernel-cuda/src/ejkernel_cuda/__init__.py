"""ejkernel's CUDA backend: CUDA C++ kernels exposed to JAX as XLA FFI targets.

Registered through the ``ejkernel.backends`` entry point (``cuda = "ejkernel_cuda:register"``).
Registration imports nothing heavy: the compiled extension is loaded, and its FFI targets
registered with JAX, the first time a kernel is lowered on an NVIDIA GPU. Without the extension
(an sdist built without nvcc) or without a GPU, the implementations decline with the reason.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIORITY", "register"]

# Above the XLA (0) and Triton backends: a hand-written CUDA kernel wins where it accepts a call.
PRIORITY = 30


def register(registry: Any) -> None:
    """Register the CUDA implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform

    from .page_attention import CudaPageAttention

    registry.register("page_attention", Platform.CUDA, Backend.GPU, priority=PRIORITY)(CudaPageAttention)
