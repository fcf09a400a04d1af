"""The ``kernel_delta_attention`` op (KDA, Kimi Linear): the delta rule with a per-channel decay."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..args import array
from ..families.delta_rule import DeltaRuleArgs, DeltaRuleConfig, DeltaRuleOp

__all__ = ["KernelDeltaAttention", "KernelDeltaAttentionArgs", "KernelDeltaAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class KernelDeltaAttentionConfig(DeltaRuleConfig):
    __doc__ = "Config of ``kernel_delta_attention``. " + (DeltaRuleConfig.__doc__ or "")


class KernelDeltaAttentionArgs(DeltaRuleArgs):
    """Canonical arguments of ``kernel_delta_attention``: ``decay`` is the log-space gate
    ``[batch, seq, num_value_heads, 1 or head_dim]`` (see :mod:`ejkernel.ops.families.delta_rule`)."""

    decay: Any = array("batch", "seq", "num_value_heads", None, optional=True, differentiable=True, ranks=(3, 4))

    GATE: ClassVar[str] = "decay"


class KernelDeltaAttention(DeltaRuleOp):
    """The ``kernel_delta_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "kernel_delta_attention"
    version = "1"
    aliases = ("kda_attention",)
    config_cls = KernelDeltaAttentionConfig
    args_cls = KernelDeltaAttentionArgs
    GATE = "decay"
    PER_CHANNEL = True
    L2NORM_PARAM = "use_qk_l2norm"
