"""The ``flash_attention`` op: exact attention in memory linear in the sequence length."""

from __future__ import annotations

import dataclasses

from ..families.attention import AttentionOp, BlockAttentionConfig

__all__ = ["FlashAttention", "FlashAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class FlashAttentionConfig(BlockAttentionConfig):
    __doc__ = "Config of ``flash_attention``. " + (BlockAttentionConfig.__doc__ or "")


class FlashAttention(AttentionOp):
    """The ``flash_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "flash_attention"
    version = "1"
    config_cls = FlashAttentionConfig
