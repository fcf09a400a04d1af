"""Query tokens per block and pages per step of the XLA ``ragged_page_attention_v2`` scan (and v3's,
whose shapes have the same names): the serving family's rule
(:func:`ejkernel.ops.families.serving.ragged_scan_configs`) on this op's shapes."""

from __future__ import annotations

from typing import Any

from ejkernel.ops.families.serving import ragged_scan_configs
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Config


def configs(args: Any, platform: str, config: type = RaggedPageAttentionv2Config) -> tuple[Any, list[Any]]:
    """The heuristic's ``config`` on ``platform`` and the candidates of autotuning."""
    return ragged_scan_configs(
        args, platform, lambda n, b: config(num_kv_pages_per_block=n, num_queries_per_block=b),
        max_seqs=args.max_num_seqs, page_size=args.page_size, max_pages=args.pages_per_seq,
    )  # fmt: skip
