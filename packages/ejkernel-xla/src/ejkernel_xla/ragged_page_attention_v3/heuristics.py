"""Query tokens per block and pages per step of the XLA ``ragged_page_attention_v3`` scan: v2's rule
(the same scan, the same names of shapes) making v3's configs."""

from __future__ import annotations

from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args, RaggedPageAttentionv3Config

from ..ragged_page_attention_v2 import heuristics as v2


def configs(
    args: RaggedPageAttentionv3Args, platform: str
) -> tuple[RaggedPageAttentionv3Config, list[RaggedPageAttentionv3Config]]:
    """The heuristic's config on ``platform`` and the candidates of autotuning."""
    return v2.configs(args, platform, RaggedPageAttentionv3Config)
