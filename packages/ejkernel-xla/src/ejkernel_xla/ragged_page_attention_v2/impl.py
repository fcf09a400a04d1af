"""The XLA ``ragged_page_attention_v2`` implementation: what it declares, its configs, its entry point."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.families.serving import query_block_size
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

from . import heuristics as H
from ._kernel import ragged_page_attention_v2


class XlaRaggedPageAttentionv2(KernelImpl):
    """Ragged paged attention in plain JAX (per-row page gathers + online softmax), any device."""

    # One page per step: many steps, ranges that start and end inside pages; blocks of 3 query
    # tokens: sequences whose last block is partly empty, blocks that straddle no sequence.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "page1": RaggedPageAttentionv2Config(num_kv_pages_per_block=1, num_queries_per_block=1),
        "q3": RaggedPageAttentionv2Config(num_kv_pages_per_block=1, num_queries_per_block=3),
    }

    def heuristic_cfg(self, args: RaggedPageAttentionv2Args, device: DeviceInfo) -> RaggedPageAttentionv2Config:
        return H.configs(args, device.platform)[0]

    def candidate_cfgs(self, args: RaggedPageAttentionv2Args, device: DeviceInfo) -> list[RaggedPageAttentionv2Config]:
        return H.configs(args, device.platform)[1]

    def validate_cfg(
        self, cfg: RaggedPageAttentionv2Config, args: RaggedPageAttentionv2Args, device: DeviceInfo
    ) -> None:
        if cfg.num_kv_pages_per_block is None:
            raise ValueError("xla ragged_page_attention_v2 needs num_kv_pages_per_block (pages per step)")

    def run(self, args: RaggedPageAttentionv2Args, cfg: RaggedPageAttentionv2Config) -> jax.Array:
        assert cfg.num_kv_pages_per_block is not None
        block_q = cfg.num_queries_per_block or query_block_size(args.total_tokens, args.max_num_seqs)
        return ragged_page_attention_v2(args, cfg.num_kv_pages_per_block, block_q)
