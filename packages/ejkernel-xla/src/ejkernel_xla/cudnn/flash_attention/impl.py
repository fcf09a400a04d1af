"""The cuDNN ``flash_attention`` implementation: cuDNN's fused flash attention, forward and backward."""

from __future__ import annotations

from ejkernel.ops import DeviceInfo
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.flash_attention import FlashAttentionConfig

from .._attention import CudnnAttention


class CudnnFlashAttention(CudnnAttention):
    __doc__ = CudnnAttention.__doc__

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> FlashAttentionConfig:
        return FlashAttentionConfig()
