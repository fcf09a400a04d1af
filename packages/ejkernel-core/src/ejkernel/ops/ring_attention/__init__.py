"""``ring_attention``: exact attention over a sequence sharded across devices (sequence parallelism)."""

from .api import ring_attention
from .impl import RingAttentionImpl, block_probes
from .layout import LAYOUTS, zigzag_permute, zigzag_unpermute
from .op import RingAttention, RingAttentionArgs, RingAttentionConfig

__all__ = [
    "LAYOUTS",
    "RingAttention",
    "RingAttentionArgs",
    "RingAttentionConfig",
    "RingAttentionImpl",
    "block_probes",
    "ring_attention",
    "zigzag_permute",
    "zigzag_unpermute",
]
