"""The Triton ``ragged_page_attention_v3`` implementation: the step's new keys and values
scattered into the packed cache as the XLA implementation does (``kv_cache.write_step``), then
the paged attention kernel (``ragged_page_attention_v2/_kernel.py``) over the updated cache read
in place (combined head ``c`` at element ``c * head_dim_padded`` of a slot: keys at even heads,
values at odd; only the real head dim's lanes are loaded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, Need, OpConfig
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args, RaggedPageAttentionv3Config
from ejkernel.ops.ragged_page_attention_v3.kv_cache import write_step
from ejkernel.ops.ragged_page_attention_v3.op import QUANTIZED_KV_UNSUPPORTED

from ..ragged_page_attention_v2 import heuristics as H
from ..ragged_page_attention_v2.heuristics import Tiles, _pow2
from ..ragged_page_attention_v2.impl import TritonPaged


def shape_of(args: RaggedPageAttentionv3Args) -> H.Shape:
    g = args.num_groups
    return H.Shape(
        tokens=args.total_tokens,
        max_seqs=args.max_num_seqs,
        kv_heads=args.num_kv_heads,
        groups=g,
        head_dim=args.head_dim,
        value_head_dim=args.head_dim,
        page_size=args.page_size,
        max_context=args.pages_per_seq * args.page_size,
        itemsize=jnp.dtype(args.dtype).itemsize,
        # With no more tokens than a decode takes, no sequence can be a prefill.
        prefill=args.total_tokens > H.decode_q(g),
    )


def tiles_of(cfg: RaggedPageAttentionv3Config, args: RaggedPageAttentionv3Args) -> Tiles:
    """The kernel's tiles: the key step is ``num_kv_pages_per_block`` pages rounded up to a power
    of two of tokens (any page size works: each token finds its page)."""
    assert cfg.num_kv_pages_per_block and cfg.num_queries_per_block and cfg.num_warps and cfg.num_stages
    assert cfg.num_splits
    return Tiles(
        block_n=_pow2(cfg.num_kv_pages_per_block * args.page_size),
        block_q=cfg.num_queries_per_block,
        decode_q=H.decode_q(args.num_groups),
        num_splits=cfg.num_splits,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def config_of(t: Tiles, page_size: int) -> RaggedPageAttentionv3Config:
    return RaggedPageAttentionv3Config(
        num_kv_pages_per_block=max(1, t.block_n // page_size),
        num_queries_per_block=t.block_q,
        num_warps=t.num_warps,
        num_stages=t.num_stages,
        num_splits=t.num_splits,
    )


class TritonRaggedPageAttentionv3(TritonPaged):
    """The fused cache update and ragged paged attention for NVIDIA GPUs: an XLA scatter of the
    new keys and values (in place when the cache is donated), then one Triton launch of split-K
    decode tiles and FlashAttention-2 prefill tiles over the packed cache; the decode splits are
    merged in XLA. ``chunk_prefill_size`` (a TPU tile) does not apply."""

    max_sizes: ClassVar[Mapping[str, int]] = {"head_dim": 256}
    unsupported: ClassVar[Mapping[str, str]] = {"quantized_kv_cache": QUANTIZED_KV_UNSUPPORTED}
    # One page per key step (many steps, page-crossing windows), 2-token prefill tiles (several
    # tiles per chunk) and 3 splits: every path of the kernel on the small cases.
    test_configs: ClassVar[Mapping[str, OpConfig]] = {
        "page1-q2-split3": RaggedPageAttentionv3Config(
            num_kv_pages_per_block=1, num_queries_per_block=2, num_warps=4, num_stages=1, num_splits=3
        )
    }

    def heuristic_cfg(self, args: RaggedPageAttentionv3Args, device: DeviceInfo) -> RaggedPageAttentionv3Config:
        s, cc = shape_of(args), device.compute_capability
        t = H.heuristic(s, cc)
        # The key step as whole pages (a page larger than the step: one page).
        t = tiles_of(config_of(t, s.page_size), args)
        return config_of(H.fit(s, t, cc), s.page_size)

    def candidate_cfgs(self, args: RaggedPageAttentionv3Args, device: DeviceInfo) -> list[RaggedPageAttentionv3Config]:
        s = shape_of(args)
        return list(dict.fromkeys(config_of(t, s.page_size) for t in H.candidates(s, device.compute_capability)))

    def validate_cfg(
        self, cfg: RaggedPageAttentionv3Config, args: RaggedPageAttentionv3Args, device: DeviceInfo
    ) -> None:
        H.check(tiles_of(cfg, args))

    def resources(
        self, cfg: RaggedPageAttentionv3Config, args: RaggedPageAttentionv3Args, device: DeviceInfo
    ) -> list[Need]:
        return H.needs(shape_of(args), tiles_of(cfg, args))

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
