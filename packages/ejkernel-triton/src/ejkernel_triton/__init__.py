"""ejkernel's Triton backend: FlashAttention-2 for NVIDIA GPUs, launched through jax-triton.

Registered through the ``ejkernel.backends`` entry point (``triton = "ejkernel_triton:register"``)
at priority 100, above the XLA fallback: ``flash_attention``, ``ring_attention`` running its
blocks on that flash attention (the log-sum-exp protocol), and ``grouped_matmul`` (the MoE grouped
GEMM: ``gmm``/``tgmm`` over a device-built tile schedule), ``mean_pooling`` (split-row reduction,
broadcast backward) and ``state_space_v1`` (Mamba-1's chunked selective scan, forward and
recomputing backward). Registering is cheap and safe
everywhere: kernels are compiled only when first used on a GPU, and on other devices the
implementation is unavailable with a reason ("needs an NVIDIA GPU").

The op folder (``flash_attention/``) follows the backend vocabulary: ``impl.py`` (what it
declares, configs, entry points), ``heuristics.py``, ``_spec.py`` (the static launch spec),
``_call.py`` (host wrapper: custom VJP/VMAP, launches), ``_fwd.py`` / ``_bwd.py`` (the forward
and backward kernels) and ``_kernel.py`` (the device functions they share); ``_launch.py`` is the
jax-triton adapter.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIORITY", "register"]

PRIORITY = 100


def register(registry: Any) -> None:
    """Register the Triton implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.ring_attention import RingAttentionImpl

    from .flash_attention import TritonFlashAttention
    from .grouped_matmul import TritonGroupedMatmul
    from .mean_pooling import TritonMeanPooling
    from .state_space_v1 import TritonStateSpaceV1

    registry.register("flash_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonFlashAttention)
    registry.register("grouped_matmul", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonGroupedMatmul)
    registry.register("mean_pooling", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonMeanPooling)
    registry.register("state_space_v1", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonStateSpaceV1)
    registry.register("ring_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(RingAttentionImpl(registry))
