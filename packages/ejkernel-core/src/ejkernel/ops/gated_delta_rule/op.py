"""The ``gated_delta_rule`` op (Gated DeltaNet, Qwen3-Next): the delta rule with a scalar decay per head."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..args import array
from ..families.delta_rule import DeltaRuleArgs, DeltaRuleConfig, DeltaRuleOp

__all__ = ["GatedDeltaRule", "GatedDeltaRuleArgs", "GatedDeltaRuleConfig"]


@dataclasses.dataclass(frozen=True)
class GatedDeltaRuleConfig(DeltaRuleConfig):
    __doc__ = "Config of ``gated_delta_rule``. " + (DeltaRuleConfig.__doc__ or "")


class GatedDeltaRuleArgs(DeltaRuleArgs):
    """Canonical arguments of ``gated_delta_rule``: ``g`` is the log-space gate
    ``[batch, seq, num_value_heads, 1]`` (see :mod:`ejkernel.ops.families.delta_rule`)."""

    g: Any = array("batch", "seq", "num_value_heads", None, differentiable=True, ranks=(3,))

    GATE: ClassVar[str] = "g"


class GatedDeltaRule(DeltaRuleOp):
    """The ``gated_delta_rule`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "gated_delta_rule"
    version = "1"
    config_cls = GatedDeltaRuleConfig
    args_cls = GatedDeltaRuleArgs
    GATE = "g"
    PER_CHANNEL = False
    L2NORM_PARAM = "use_qk_l2norm_in_kernel"
