"""``kernel_delta_attention`` (alias ``kda_attention``): the delta rule with a per-channel decay (KDA)."""

from .api import kda_attention, kernel_delta_attention
from .op import KernelDeltaAttention, KernelDeltaAttentionArgs, KernelDeltaAttentionConfig

__all__ = [
    "KernelDeltaAttention",
    "KernelDeltaAttentionArgs",
    "KernelDeltaAttentionConfig",
    "kda_attention",
    "kernel_delta_attention",
]
