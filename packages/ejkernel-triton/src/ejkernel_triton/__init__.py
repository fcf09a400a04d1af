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
    from .gated_delta_rule import TritonGatedDeltaRule
    from .gla_attention import TritonGLAttention
    from .grouped_matmul import TritonGroupedMatmul
    from .kernel_delta_attention import TritonKernelDeltaAttention
    from .lightning_attention import TritonLightningAttention
    from .mean_pooling import TritonMeanPooling
    from .recurrent_attention import TritonRecurrentAttention
    from .state_space_v1 import TritonStateSpaceV1
    from .state_space_v2 import TritonStateSpaceV2

    registry.register("flash_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonFlashAttention)
    registry.register("gla_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonGLAttention)
    registry.register("lightning_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonLightningAttention)
    registry.register("recurrent_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonRecurrentAttention)
    registry.register("state_space_v2", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonStateSpaceV2)
    registry.register("kernel_delta_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(
        TritonKernelDeltaAttention
    )
    registry.register("gated_delta_rule", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonGatedDeltaRule)
    registry.register("grouped_matmul", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonGroupedMatmul)
    registry.register("mean_pooling", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonMeanPooling)
    registry.register("state_space_v1", Platform.TRITON, Backend.GPU, priority=PRIORITY)(TritonStateSpaceV1)
    registry.register("ring_attention", Platform.TRITON, Backend.GPU, priority=PRIORITY)(RingAttentionImpl(registry))
