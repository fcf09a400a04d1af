"""The Triton ``prefill_page_attention`` implementation: the paged attention kernel
(``ragged_page_attention_v2/_kernel.py``) over one sequence, its caches ``[hkv, total_pages,
page_size, d]`` read in place."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import OpConfig
from ejkernel.ops.prefill_page_attention import PrefillPageAttentionArgs, PrefillPageAttentionConfig

from ..ragged_page_attention_v2 import heuristics as H
from ..ragged_page_attention_v2.heuristics import Tiles, _pow2
from ..ragged_page_attention_v2.impl import TritonPaged


def shape_of(args: PrefillPageAttentionArgs) -> H.Shape:
    return H.Shape(
        tokens=args.chunk_size,
        max_seqs=1,
        kv_heads=args.num_kv_heads,
        groups=args.num_groups,
        head_dim=args.head_dim,
        value_head_dim=args.head_dim,
        page_size=args.page_size,
        max_context=args.num_pages * args.page_size,
        itemsize=jnp.dtype(args.dtype).itemsize,
        # A chunk of no more queries than a decode takes runs the split-K decode path.
        prefill=args.chunk_size > H.decode_q(args.num_groups),
    )


def tiles_of(cfg: PrefillPageAttentionConfig, args: PrefillPageAttentionArgs) -> Tiles:
    """The kernel's tiles: ``block_k`` keys per step (rounded up to a power of two); the query
    tile and the split count, which the op's config does not hold, are the heuristic's for an
    unknown GPU (a function of the shapes only, so the declared needs are those of the launch)."""
    assert cfg.block_k and cfg.num_warps and cfg.num_stages
    base = H.heuristic(shape_of(args), None)
    return dataclasses.replace(base, block_n=_pow2(cfg.block_k), num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def config_of(t: Tiles) -> PrefillPageAttentionConfig:
    return PrefillPageAttentionConfig(block_k=t.block_n, num_warps=t.num_warps, num_stages=t.num_stages)


class TritonPrefillPageAttention(TritonPaged):
    """Prefill over pages in Triton for NVIDIA GPUs: FlashAttention-2 tiles of the chunk (a GQA
    group's query heads as the rows of one tile), the head-major caches read in place through
    the page indices; a chunk no longer than a decode takes the split-K decode path."""

    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256}
    # 16-token steps: several steps (and page-crossing windows) on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "step16": PrefillPageAttentionConfig(block_k=16, num_warps=4, num_stages=1)
    }

    def shape(self, args: PrefillPageAttentionArgs) -> H.Shape:
        return shape_of(args)

    def tiles(self, cfg: PrefillPageAttentionConfig, args: PrefillPageAttentionArgs) -> Tiles:
        return tiles_of(cfg, args)

    def config(self, t: Tiles, args: PrefillPageAttentionArgs) -> PrefillPageAttentionConfig:
        return config_of(t)

    def run(self, args: PrefillPageAttentionArgs, cfg: PrefillPageAttentionConfig) -> jax.Array:
        from ..ragged_page_attention_v2._call import paged_attention, separate_view

        chunk = args.chunk_size
        view = separate_view(args.key_cache, args.value_cache, (1, 2, 0))
        return paged_attention(
            args.query, args.key_cache, args.value_cache, view, args.context_len, args.page_indices[None],
            jnp.array([0, chunk], jnp.int32), 1, None,
            num_kv_heads=args.num_kv_heads, scale=args.softmax_scale, soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            tiles=tiles_of(cfg, args), prefill=shape_of(args).prefill,
        )  # fmt: skip
