"""ejkernel's Triton backend: kernels for NVIDIA GPUs, launched through jax-triton.

Registered through the ``ejkernel.backends`` entry point (``triton = "ejkernel_triton:register"``)
at priority 100, above the XLA fallback. The ops it implements are :data:`OPS` (also listed,
from there, in the package's README and ``ejkernel info --support-table``); ``ring_attention``
runs its blocks on this backend's flash attention (the log-sum-exp protocol). Registering is
cheap and safe everywhere: kernels are compiled only when first used on a GPU, and on other
devices the implementation is unavailable with a reason ("needs an NVIDIA GPU").

Each op folder follows the backend vocabulary: ``impl.py`` (what it declares, configs, entry
points), ``heuristics.py`` and its kernel files by role; in ``flash_attention/``: ``_spec.py``
(the static launch spec), ``_call.py`` (host wrapper: custom VJP/VMAP, launches), ``_fwd.py`` /
``_bwd.py`` (the forward and backward kernels) and ``_kernel.py`` (the device functions they
share). ``_launch.py`` is the jax-triton adapter.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPS", "PRIORITY", "register"]

PRIORITY = 100

#: The ops this backend implements: ``register`` registers exactly these (through
#: ``ejkernel.ops.support.register_declared``), and the READMEs' support tables list them from here,
#: also where the package is not installed (importing it stays cheap: no kernel module is imported).
OPS = (
    "flash_attention",
    "gla_attention",
    "lightning_attention",
    "recurrent_attention",
    "state_space_v2",
    "kernel_delta_attention",
    "gated_delta_rule",
    "grouped_matmul",
    "mean_pooling",
    "state_space_v1",
    "ring_attention",
    "ragged_page_attention_v2",
    "page_attention",
    "ragged_page_attention_v3",
    "unified_attention",
    "prefill_page_attention",
    "blocksparse_attention",
    "native_sparse_attention",
    "recurrent_cell",
    "flash_mla_decode",
    "deepseek_attn",
)


def register(registry: Any) -> None:
    """Register the Triton implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.ring_attention import RingAttentionImpl
    from ejkernel.ops.support import register_declared

    from .blocksparse_attention import TritonBlockSparseAttention
    from .deepseek_attn import TritonDeepSeekAttn
    from .flash_attention import TritonFlashAttention
    from .flash_mla_decode import TritonFlashMLADecode
    from .gated_delta_rule import TritonGatedDeltaRule
    from .gla_attention import TritonGLAttention
    from .grouped_matmul import TritonGroupedMatmul
    from .kernel_delta_attention import TritonKernelDeltaAttention
    from .lightning_attention import TritonLightningAttention
    from .mean_pooling import TritonMeanPooling
    from .native_sparse_attention import TritonNativeSparseAttention
    from .page_attention import TritonPageAttention
    from .prefill_page_attention import TritonPrefillPageAttention
    from .ragged_page_attention_v2 import TritonRaggedPageAttentionv2
    from .ragged_page_attention_v3 import TritonRaggedPageAttentionv3
    from .recurrent_attention import TritonRecurrentAttention
    from .recurrent_cell import TritonRecurrentCell
    from .state_space_v1 import TritonStateSpaceV1
    from .state_space_v2 import TritonStateSpaceV2
    from .unified_attention import TritonUnifiedAttention

    impls = {
        "flash_attention": TritonFlashAttention,
        "gla_attention": TritonGLAttention,
        "lightning_attention": TritonLightningAttention,
        "recurrent_attention": TritonRecurrentAttention,
        "state_space_v2": TritonStateSpaceV2,
        "kernel_delta_attention": TritonKernelDeltaAttention,
        "gated_delta_rule": TritonGatedDeltaRule,
        "grouped_matmul": TritonGroupedMatmul,
        "mean_pooling": TritonMeanPooling,
        "native_sparse_attention": TritonNativeSparseAttention,
        "state_space_v1": TritonStateSpaceV1,
        "ring_attention": RingAttentionImpl(registry),
        "ragged_page_attention_v2": TritonRaggedPageAttentionv2,
        "page_attention": TritonPageAttention,
        "ragged_page_attention_v3": TritonRaggedPageAttentionv3,
        "unified_attention": TritonUnifiedAttention,
        "prefill_page_attention": TritonPrefillPageAttention,
        "blocksparse_attention": TritonBlockSparseAttention,
        "recurrent_cell": TritonRecurrentCell,
        "flash_mla_decode": TritonFlashMLADecode,
        "deepseek_attn": TritonDeepSeekAttn,
    }
    register_declared(registry, OPS, impls, Platform.TRITON, Backend.GPU, PRIORITY)
