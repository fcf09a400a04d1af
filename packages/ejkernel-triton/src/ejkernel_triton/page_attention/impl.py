"""The Triton ``page_attention`` implementation: the decode path of the paged attention kernel
(``ragged_page_attention_v2/_kernel.py``), one query per sequence, over separate key and value
caches in either layout, read in place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import OpConfig
from ejkernel.ops.page_attention import PageAttentionArgs, PageAttentionConfig

from ..ragged_page_attention_v2 import heuristics as H
from ..ragged_page_attention_v2.heuristics import Tiles, _pow2
from ..ragged_page_attention_v2.impl import TritonPaged


def shape_of(args: PageAttentionArgs) -> H.Shape:
    return H.Shape(
        tokens=args.batch,
        max_seqs=args.batch,
        kv_heads=args.num_kv_heads,
        groups=args.num_groups,
        head_dim=args.head_dim,
        value_head_dim=args.value_head_dim,
        page_size=args.block_size,
        max_context=args.max_blocks * args.block_size,
        itemsize=jnp.dtype(args.dtype).itemsize,
        prefill=False,
    )


def tiles_of(cfg: PageAttentionConfig, args: PageAttentionArgs) -> Tiles:
    """The kernel's tiles: ``tokens_per_block`` keys per step (rounded up to a power of two);
    ``num_splits`` programs per sequence and kv head."""
    assert cfg.tokens_per_block and cfg.num_warps and cfg.num_stages and cfg.num_splits
    return Tiles(
        block_n=_pow2(cfg.tokens_per_block),
        block_q=1,
        decode_q=H.decode_q(args.num_groups),
        num_splits=cfg.num_splits,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def config_of(t: Tiles) -> PageAttentionConfig:
    return PageAttentionConfig(
        tokens_per_block=t.block_n, num_splits=t.num_splits, num_warps=t.num_warps, num_stages=t.num_stages
    )


class TritonPageAttention(TritonPaged):
    """Paged decode in Triton for NVIDIA GPUs: split-K over the context, a GQA group's query
    heads as the rows of one tile (each page read once per group), splits merged in XLA."""

    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256, "value_head_dim": 256}
    # 16-token steps and 3 splits: several steps and splits on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "step16-split3": PageAttentionConfig(tokens_per_block=16, num_splits=3, num_warps=4, num_stages=1)
    }

    def shape(self, args: PageAttentionArgs) -> H.Shape:
        return shape_of(args)

    def tiles(self, cfg: PageAttentionConfig, args: PageAttentionArgs) -> Tiles:
        return tiles_of(cfg, args)

    def config(self, t: Tiles, args: PageAttentionArgs) -> PageAttentionConfig:
        return config_of(t)

    def run(self, args: PageAttentionArgs, cfg: PageAttentionConfig) -> jax.Array:
        from ..ragged_page_attention_v2._call import paged_attention, separate_view

        b = args.batch
        view = separate_view(args.key_cache, args.value_cache, (0, 2, 1) if args.heads_major else (0, 1, 2))
        out = paged_attention(
            args.query, args.key_cache, args.value_cache, view, args.context_lens, args.block_tables,
            jnp.arange(b + 1, dtype=jnp.int32), b, args.softmax_aux,
            num_kv_heads=args.num_kv_heads, scale=args.softmax_scale, soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            tiles=tiles_of(cfg, args), prefill=False,
        )  # fmt: skip
        return out[:, None] if args.query_had_seq_axis else out
