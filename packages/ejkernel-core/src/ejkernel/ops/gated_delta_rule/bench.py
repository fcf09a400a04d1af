"""The benchmark of ``gated_delta_rule``: the delta-rule benchmark (see
:mod:`ejkernel.ops.kernel_delta_attention.bench`) with a scalar gate per head."""

from ..kernel_delta_attention.bench import DeltaRuleBench

__all__ = ["BENCH"]

BENCH = DeltaRuleBench("gated_delta_rule")
