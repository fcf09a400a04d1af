"""The Triton ``gated_delta_rule`` implementation: the shared delta rule (``ejkernel_triton._delta``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ejkernel.ops.gated_delta_rule import GatedDeltaRuleConfig

from .._delta import TritonDeltaRule


class TritonGatedDeltaRule(TritonDeltaRule):
    """``gated_delta_rule`` with Triton state-recurrence kernels (NVIDIA GPUs)."""

    config_cls = GatedDeltaRuleConfig
    # 16-token chunks, 16 value columns per program: several chunks and value blocks on small inputs.
    test_configs: ClassVar[Mapping[str, GatedDeltaRuleConfig]] = {
        "chunk16-bv16": GatedDeltaRuleConfig(chunk_size=16, chunked=True, block_v=16, num_warps=4, num_stages=1),
    }
