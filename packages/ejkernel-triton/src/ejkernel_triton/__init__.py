"""ejkernel's Triton backend: FlashAttention-2 for NVIDIA GPUs, launched through jax-triton.

Registered through the ``ejkernel.backends`` entry point (``triton = "ejkernel_triton:register"``)
at priority 100, above the XLA fallback. Registering is cheap and safe everywhere: kernels are
compiled only when first used on a GPU, and on other devices the implementation declines with a
reason ("needs an NVIDIA GPU").
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIORITY", "register"]

PRIORITY = 100


def register(registry: Any) -> None:
    """Register the Triton implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform

    from .flash_attention import TritonFlashAttention

    registry.register("flash_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonFlashAttention)
