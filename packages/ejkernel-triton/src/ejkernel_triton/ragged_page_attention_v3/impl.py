"""The Triton ``ragged_page_attention_v3`` implementation: the step's new keys and values
scattered into the packed cache as the XLA implementation does (``kv_cache.write_step``), then
the paged attention kernel (``ragged_page_attention_v2/_kernel.py``) over the updated cache read
in place (combined head ``c`` at element ``c * head_dim_padded`` of a slot: keys at even heads,
values at odd; only the real head dim's lanes are loaded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax

from ejkernel.ops import OpConfig
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args, RaggedPageAttentionv3Config
from ejkernel.ops.ragged_page_attention_v3.kv_cache import write_step
from ejkernel.ops.ragged_page_attention_v3.op import QUANTIZED_KV_UNSUPPORTED

from ..ragged_page_attention_v2.impl import TritonRaggedPageAttentionv2, shape_of, tiles_of


class TritonRaggedPageAttentionv3(TritonRaggedPageAttentionv2):
    """The fused cache update and ragged paged attention for NVIDIA GPUs: an XLA scatter of the
    new keys and values (in place when the cache is donated), then one Triton launch of split-K
    decode tiles and FlashAttention-2 prefill tiles over the packed cache; the decode splits are
    merged in XLA. ``chunk_prefill_size`` (a TPU tile) does not apply. Its config has v2's
    tiling fields, so v2's shape, tiles and configs serve it."""

    unsupported: ClassVar[Mapping[str, str]] = {
        **TritonRaggedPageAttentionv2.unsupported,
        "quantized_kv_cache": QUANTIZED_KV_UNSUPPORTED,
    }
    # One page per key step (many steps, page-crossing windows), 2-token prefill tiles (several
    # tiles per chunk) and 3 splits: every path of the kernel on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "page1-q2-split3": RaggedPageAttentionv3Config(
            num_kv_pages_per_block=1, num_queries_per_block=2, num_warps=4, num_stages=1, num_splits=3
        )
    }

    def run(self, args: RaggedPageAttentionv3Args, cfg: RaggedPageAttentionv3Config) -> tuple[jax.Array, jax.Array]:
        from ..ragged_page_attention_v2._call import interleaved_view, paged_attention

        cache, _ = write_step(args)
        p, ps, _, _, dp = cache.shape
        # Unquantized, the packed rows hold exactly 2 * hkv combined heads: a free reshape.
        pages = cache.reshape(p, ps, 2 * args.num_kv_heads, dp)
        view = interleaved_view(pages, head_dim=args.head_dim)
        out = paged_attention(
            args.queries, pages, pages, view, args.kv_lens, args.block_tables.reshape(args.max_num_seqs, -1),
            args.query_start_loc, args.num_seqs, args.softmax_aux,
            num_kv_heads=args.num_kv_heads, scale=args.softmax_scale, soft_cap=args.logits_soft_cap,
            window_left=None if args.sliding_window is None else args.sliding_window[0],
            tiles=tiles_of(cfg, args), prefill=shape_of(args).prefill,
        )  # fmt: skip
        return out, cache
