"""ejkernel's XLA backend: pure-JAX implementations of every op, for every device.

Registered through the ``ejkernel.backends`` entry point (``xla = "ejkernel_xla:register"``) at
priority 0, so any faster backend that accepts a call (priority > 0) wins over it. Each op has a
folder here with the backend vocabulary: ``impl.py`` (what the implementation declares, its
configs), ``heuristics.py`` (pure functions of the shapes) and its kernel files by role
(``_kernel.py``); ``_tiles.py`` holds the tile-level pieces the attention kernels share.

The package also ships the ``cudnn`` backend (:mod:`ejkernel_xla.cudnn`, its own entry point and
platform name): dense attention through ``jax.nn.dot_product_attention(implementation="cudnn")``,
which needs nothing beyond a CUDA jax.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPS", "PRIORITY", "register"]

PRIORITY = 0

#: The ops this backend implements: ``register`` registers exactly these (through
#: ``ejkernel.ops.support.register_declared``), and the READMEs' support tables list them from here,
#: also where the package is not installed (importing it stays cheap: no kernel module is imported).
OPS = (
    "attention",
    "flash_attention",
    "scaled_dot_product_attention",
    "page_attention",
    "ragged_decode_attention",
    "ragged_page_attention_v2",
    "ragged_page_attention_v3",
    "prefill_page_attention",
    "unified_attention",
    "state_space_v1",
    "kernel_delta_attention",
    "gated_delta_rule",
    "mean_pooling",
    "grouped_matmul",
    "ring_attention",
    "gla_attention",
    "lightning_attention",
    "recurrent_attention",
    "state_space_v2",
    "blocksparse_attention",
    "flash_mla",
    "flash_mla_decode",
    "deepseek_attn",
    "native_sparse_attention",
    "recurrent_cell",
)


def register(registry: Any) -> None:
    """Register the XLA implementations with ``registry`` (the entry point's target)."""
    from ejkernel.ops import Backend, Platform
    from ejkernel.ops.ring_attention import RingAttentionImpl
    from ejkernel.ops.support import register_declared

    from .attention import XlaAttention
    from .blocksparse_attention import XlaBlockSparseAttention
    from .deepseek_attn import XlaDeepSeekAttn
    from .flash_attention import XlaFlashAttention
    from .flash_mla import XlaFlashMLA
    from .flash_mla_decode import XlaFlashMLADecode
    from .gated_delta_rule import XlaGatedDeltaRule
    from .gla_attention import XlaGLAttention
    from .grouped_matmul import XlaGroupedMatmul
    from .kernel_delta_attention import XlaKernelDeltaAttention
    from .lightning_attention import XlaLightningAttention
    from .mean_pooling import XlaMeanPooling
    from .native_sparse_attention import XlaNativeSparseAttention
    from .page_attention import XlaPageAttention
    from .prefill_page_attention import XlaPrefillPageAttention
    from .ragged_decode_attention import XlaRaggedDecodeAttention
    from .ragged_page_attention_v2 import XlaRaggedPageAttentionv2
    from .ragged_page_attention_v3 import XlaRaggedPageAttentionv3
    from .recurrent_attention import XlaRecurrentAttention
    from .recurrent_cell import XlaRecurrentCell
    from .scaled_dot_product_attention import XlaScaledDotProductAttention
    from .state_space_v1 import XlaStateSpaceV1
    from .state_space_v2 import XlaStateSpaceV2
    from .unified_attention import XlaUnifiedAttention

    impls = {
        "attention": XlaAttention,
        "flash_attention": XlaFlashAttention,
        "scaled_dot_product_attention": XlaScaledDotProductAttention,
        "page_attention": XlaPageAttention,
        "ragged_decode_attention": XlaRaggedDecodeAttention,
        "ragged_page_attention_v2": XlaRaggedPageAttentionv2,
        "ragged_page_attention_v3": XlaRaggedPageAttentionv3,
        "prefill_page_attention": XlaPrefillPageAttention,
        "unified_attention": XlaUnifiedAttention,
        "state_space_v1": XlaStateSpaceV1,
        "kernel_delta_attention": XlaKernelDeltaAttention,
        "gated_delta_rule": XlaGatedDeltaRule,
        "mean_pooling": XlaMeanPooling,
        "grouped_matmul": XlaGroupedMatmul,
        "ring_attention": RingAttentionImpl(registry),
        "gla_attention": XlaGLAttention,
        "lightning_attention": XlaLightningAttention,
        "recurrent_attention": XlaRecurrentAttention,
        "state_space_v2": XlaStateSpaceV2,
        "blocksparse_attention": XlaBlockSparseAttention,
        "flash_mla": XlaFlashMLA,
        "flash_mla_decode": XlaFlashMLADecode,
        "deepseek_attn": XlaDeepSeekAttn,
        "native_sparse_attention": XlaNativeSparseAttention,
        "recurrent_cell": XlaRecurrentCell,
    }
    register_declared(registry, OPS, impls, Platform.XLA, Backend.ANY, PRIORITY)
