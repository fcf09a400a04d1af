"""ejkernel's cuDNN backend: dense attention through NVIDIA's fused attention (cuDNN), as
``jax.nn.dot_product_attention(..., implementation="cudnn")`` runs it. It ships in ``ejkernel-xla``
(it needs nothing beyond a CUDA jax) under its own entry point and platform name,
``cudnn = "ejkernel_xla.cudnn:register"``: ``platform="cudnn"`` asks for it, ``EJKERNEL_BACKENDS=-cudnn``
turns it off.

It accepts what cuDNN computes exactly as the op defines it and declines the rest with the reason
(float32, sinks, soft cap, dropout, bias, masks and segments, packed sequences, windows reaching
right, bottom-right alignment with seq_q != seq_k, head dims cuDNN rejects); another backend then
serves the call. :data:`PRIORITY` puts it above Triton on NVIDIA GPUs because it measured faster
there on every benchmarked shape (``heuristics.py`` holds the measurements it is derived from).

Each op folder follows the backend vocabulary (``impl.py``); ``_attention.py`` holds what the two
ops share: the declaration and the call of ``jax.nn.dot_product_attention``.
"""

from __future__ import annotations

from typing import Any

from .heuristics import PRIORITY

__all__ = ["OPS", "PRIORITY", "register"]

#: The ops this backend implements (``register`` registers exactly these; the support tables list
#: them from here).
OPS = ("flash_attention", "scaled_dot_product_attention")


def register(registry: Any) -> None:
    """Register the cuDNN implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.support import register_declared

    from .flash_attention import CudnnFlashAttention
    from .scaled_dot_product_attention import CudnnScaledDotProductAttention

    impls = {
        "flash_attention": CudnnFlashAttention,
        "scaled_dot_product_attention": CudnnScaledDotProductAttention,
    }
    register_declared(registry, OPS, impls, Platform.CUDNN, Backend.GPU, PRIORITY)
