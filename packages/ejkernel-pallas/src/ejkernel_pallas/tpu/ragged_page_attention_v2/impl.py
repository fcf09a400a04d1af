"""The Pallas TPU ``ragged_page_attention_v2`` implementation: what it declares, its configs, its entry."""

from __future__ import annotations

from typing import ClassVar

import jax

from ejkernel.ops import DeviceInfo, KernelImpl, OpConfig
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args, RaggedPageAttentionv2Config

from .._tiling import tpu_decline
from . import heuristics as H


class PallasTpuRaggedPageAttentionv2(KernelImpl):
    """Ragged paged attention (mixed prefill and decode) as a Mosaic TPU Pallas kernel (TPU v4
    and newer): query blocks of packed rows, scalar-prefetched schedule and block tables,
    double-buffered page DMAs from the interleaved cache, GQA/MQA, soft cap, sliding window and
    sinks."""

    version = "1"
    device_requirement = "a TPU"
    # The queries' dtype (the op requires the cache to share it). No float16: TPUs have no fast
    # float16 path.
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    # Every feature of the op is supported (sinks, sliding window, soft cap, GQA).
    unsupported: ClassVar[dict[str, str]] = {}
    # 8-row query blocks and 3 pages per step: on the small conformance cases, sequences span
    # several query blocks and blocks hold several sequences, walks take several steps whose last
    # one copies fewer pages than the slot holds (stale slots), and prefetches cross sequences
    # and query blocks.
    test_configs: ClassVar[dict[str, OpConfig]] = {
        "q8-pages3": RaggedPageAttentionv2Config(num_kv_pages_per_block=3, num_queries_per_block=8)
    }

    def available(self, device: DeviceInfo) -> str | None:
        return tpu_decline(device)

    def _shape(self, args: RaggedPageAttentionv2Args) -> tuple:
        sinks = 0 if args.softmax_aux is None else int(args.softmax_aux.shape[1])
        return (args.page_size, args.num_heads, args.num_kv_heads, args.head_dim, args.dtype, sinks)

    def _pages(self, cfg: RaggedPageAttentionv2Config, args: RaggedPageAttentionv2Args) -> int | None:
        # A step never needs more pages than a table holds.
        n = cfg.num_kv_pages_per_block
        return None if n is None else min(n, args.pages_per_seq)

    def heuristic_cfg(self, args: RaggedPageAttentionv2Args, device: DeviceInfo) -> RaggedPageAttentionv2Config:
        pages, block_q = H.heuristic(args.total_tokens, args.max_num_seqs, args.pages_per_seq, *self._shape(args))
        return RaggedPageAttentionv2Config(num_kv_pages_per_block=pages, num_queries_per_block=block_q)

    def candidate_cfgs(self, args: RaggedPageAttentionv2Args, device: DeviceInfo) -> list[RaggedPageAttentionv2Config]:
        return [
            RaggedPageAttentionv2Config(num_kv_pages_per_block=p, num_queries_per_block=q)
            for p, q in H.candidates(args.total_tokens, args.max_num_seqs, args.pages_per_seq, *self._shape(args))
        ]

    def validate_cfg(
        self, cfg: RaggedPageAttentionv2Config, args: RaggedPageAttentionv2Args, device: DeviceInfo
    ) -> None:
        H.check(self._pages(cfg, args), cfg.num_queries_per_block, *self._shape(args))

    def run(self, args: RaggedPageAttentionv2Args, cfg: RaggedPageAttentionv2Config) -> jax.Array:
        from ._kernel import ragged_page_attention

        pages, block_q = self._pages(cfg, args), cfg.num_queries_per_block
        assert pages is not None and block_q is not None
        return ragged_page_attention(
            args.queries,
            args.kv_pages,
            args.context_lens,
            args.block_tables,
            args.query_start_loc,
            args.num_seqs,
            args.softmax_aux,
            scale=float(args.softmax_scale),
            soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            pages_per_block=pages,
            block_q=block_q,
        )
