"""The cuDNN ``scaled_dot_product_attention``: the call ``jax.nn.dot_product_attention(implementation="cudnn")``
makes, so that it runs as fast as calling that directly."""

from __future__ import annotations

from ejkernel.ops import DeviceInfo
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.scaled_dot_product_attention import ScaledDotProductAttentionConfig

from .._attention import CudnnAttention


class CudnnScaledDotProductAttention(CudnnAttention):
    __doc__ = CudnnAttention.__doc__

    def heuristic_cfg(self, args: AttentionArgs, device: DeviceInfo) -> ScaledDotProductAttentionConfig:
        return ScaledDotProductAttentionConfig()
