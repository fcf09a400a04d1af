"""The XLA ``flash_mla_decode``: the blocked paged scan (``families.serving.paged_scan``) with one
row per sequence whose "heads" are its query tokens × heads, all reading one latent row per token.

Each step gathers ``pages_per_step`` pages of every sequence's latent (once for all its heads and
query tokens), takes the 576-wide logits and the 512-wide values from the same gathered rows, and
folds them into an online softmax: temporary memory is one block of pages, linear in the context.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.families.serving import finish, gather_pages, paged_scan, state_lse
from ejkernel.ops.flash_mla_decode import FlashMLADecodeArgs


def flash_mla_decode(args: FlashMLADecodeArgs, tokens_per_step: int) -> Any:
    b, sq, h, d = args.query.shape
    r, page_size = args.kv_lora_rank, args.page_size
    lens = args.context_lens
    if args.causal and sq > 1:
        # Row g of sequence b is query token g // h of head g % h; its keys end at its position.
        tok = jnp.arange(sq * h, dtype=jnp.int32) // h
        hi = jnp.maximum(lens[:, None] - sq + 1 + tok[None, :], 0)
    else:  # every row of a sequence attends its whole context: one range per sequence
        hi = lens

    def read_pages(pages: jax.Array) -> tuple[jax.Array, jax.Array]:
        rows = gather_pages(args.latent_cache, pages)[:, :, None, :]  # [b, n * page_size, 1, d]
        return rows, rows[..., :r]

    state = paged_scan(
        args.query.reshape(b, 1, sq * h, d),
        jnp.arange(b, dtype=jnp.int32),
        jnp.zeros_like(hi),
        hi,
        args.block_tables,
        page_size=page_size,
        read_pages=read_pages,
        pages_per_step=max(1, tokens_per_step // page_size),
        scale=args.softmax_scale,
        soft_cap=None,
        value_dim=r,
    )
    out = finish(state).reshape(b, sq, h, r).astype(args.query.dtype)
    if args.return_lse:
        return out, state_lse(state).reshape(b, sq, h)
    return out
