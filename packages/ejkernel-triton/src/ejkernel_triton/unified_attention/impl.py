"""The Triton ``unified_attention`` implementation: the paged attention kernel
(``ragged_page_attention_v2/_kernel.py``) over vLLM's separate key and value caches
``[num_blocks, block_size, hkv, d]``, read in place."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import OpConfig
from ejkernel.ops.unified_attention import UnifiedAttentionArgs, UnifiedAttentionConfig

from ..ragged_page_attention_v2 import heuristics as H
from ..ragged_page_attention_v2.heuristics import Tiles, _pow2
from ..ragged_page_attention_v2.impl import TritonPaged


def shape_of(args: UnifiedAttentionArgs) -> H.Shape:
    g = args.num_groups
    return H.Shape(
        tokens=args.total_tokens,
        max_seqs=args.num_seqs,
        kv_heads=args.num_kv_heads,
        groups=g,
        head_dim=args.head_dim,
        value_head_dim=args.head_dim,
        page_size=args.block_size,
        max_context=args.max_blocks_per_seq * args.block_size,
        itemsize=jnp.dtype(args.dtype).itemsize,
        # With no more tokens than a decode takes, no sequence can be a prefill.
        prefill=args.total_tokens > H.decode_q(g),
    )


def tiles_of(cfg: UnifiedAttentionConfig, args: UnifiedAttentionArgs) -> Tiles:
    """The kernel's tiles: ``block_dim`` keys per step (rounded up to a power of two) and
    ``num_par_softmax_segments`` decode splits; the prefill tile, which the op's config does not
    hold, is the heuristic's for an unknown GPU (a function of the shapes only, so the declared
    needs are those of the launch)."""
    assert cfg.block_dim and cfg.num_par_softmax_segments and cfg.num_warps and cfg.num_stages
    return dataclasses.replace(
        H.heuristic(shape_of(args), None),
        block_n=_pow2(cfg.block_dim),
        num_splits=cfg.num_par_softmax_segments,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def config_of(t: Tiles) -> UnifiedAttentionConfig:
    # The op's segments are a power of two: the heuristic's split count rounded down.
    segments = 1 << (t.num_splits.bit_length() - 1)
    return UnifiedAttentionConfig(
        block_dim=t.block_n, num_par_softmax_segments=segments, num_warps=t.num_warps, num_stages=t.num_stages
    )


class TritonUnifiedAttention(TritonPaged):
    """Unified attention in Triton for NVIDIA GPUs: the paged kernel's FlashAttention-2 prefill
    tiles and split-K decode tiles (a GQA group's query heads as the rows), two launches over the
    separate caches, the decode splits merged in XLA. A sequence decodes when it has at most
    ``16 // groups`` queries, whatever the batch holds (``seq_threshold_3d`` does not apply)."""

    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256}
    unsupported: ClassVar[Mapping[str, str]] = {
        **TritonPaged.unsupported,
        "alibi_slopes": "the paged kernel adds no position bias (ALiBi)",
        "qq_bias": "the paged kernel adds no query-query bias",
        "return_lse": "the paged kernel does not return the log-sum-exp",
    }
    # 16-token steps (several per context, page-crossing windows) and 4 segments.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "step16-split4": UnifiedAttentionConfig(block_dim=16, num_par_softmax_segments=4, num_warps=4, num_stages=1)
    }

    def shape(self, args: UnifiedAttentionArgs) -> H.Shape:
        return shape_of(args)

    def tiles(self, cfg: UnifiedAttentionConfig, args: UnifiedAttentionArgs) -> Tiles:
        return tiles_of(cfg, args)

    def config(self, t: Tiles, args: UnifiedAttentionArgs) -> UnifiedAttentionConfig:
        return config_of(t)

    def run(self, args: UnifiedAttentionArgs, cfg: UnifiedAttentionConfig) -> jax.Array:
        from ..ragged_page_attention_v2._call import paged_attention, separate_view

        view = separate_view(args.key_cache, args.value_cache)
        aux = None if args.softmax_aux is None else args.softmax_aux[:, None]  # one sink per head
        return paged_attention(
            args.queries, args.key_cache, args.value_cache, view, args.kv_lens, args.block_tables,
            args.query_start_loc, args.num_seqs, aux,
            num_kv_heads=args.num_kv_heads, scale=args.softmax_scale, soft_cap=args.logits_soft_cap,
            # The op binds a window of w tokens as (w - 1, 0): keys >= position - (w - 1).
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            tiles=tiles_of(cfg, args), prefill=shape_of(args).prefill,
        )  # fmt: skip
