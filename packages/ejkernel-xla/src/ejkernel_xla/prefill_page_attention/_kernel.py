"""The XLA ``prefill_page_attention``: the chunk is one packed sequence of the serving scan
(``query_start_loc = [0, chunk]``), its rows scanning the sequence's pages a block at a time with
an online softmax.

Each step reads ``pages_per_step`` pages straight from the caches (a gather along their page
axis, the kv heads first) and folds the block's logits into the running softmax: temporary
memory is one block, never ``[chunk, context]`` logits, and the scan covers only the steps some
row's range reaches (a window's lower end skips whole steps). Every row belongs to the one
sequence, so a block is gathered once and shared by the rows. Keys outside a row's range are
masked and their values zeroed, so garbage (even NaN) in unused slots never reaches the output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.families.serving import finish, paged_scan, ragged_query_rows
from ejkernel.ops.prefill_page_attention import PrefillPageAttentionArgs


def prefill_page_attention(args: PrefillPageAttentionArgs, pages_per_step: int) -> jax.Array:
    chunk, h, d = args.query.shape
    hk, g = args.num_kv_heads, args.num_groups
    cdt = jnp.promote_types(args.query.dtype, args.key_cache.dtype)
    qsl = jnp.array([0, chunk], jnp.int32)
    seq, _, lo, hi = ragged_query_rows(qsl, args.context_len, 1, chunk, window=args.sliding_window)

    def read(cache: jax.Array, pages: jax.Array) -> jax.Array:
        x = cache.at[:, pages[0]].get(mode="clip")  # [hk, n, page_size, d]: the rows' common pages
        x = jnp.moveaxis(x.reshape(hk, -1, x.shape[-1]), 0, 1).astype(cdt)  # [n * page_size, hk, d]
        return jnp.broadcast_to(x, (pages.shape[0], *x.shape))

    state = paged_scan(
        args.query.reshape(chunk, hk, g, d).astype(cdt),
        seq,
        lo,
        hi,
        args.page_indices[None],
        page_size=args.page_size,
        read_pages=lambda pages: (read(args.key_cache, pages), read(args.value_cache, pages)),
        pages_per_step=pages_per_step,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        value_dim=d,
    )
    return finish(state).reshape(chunk, h, d).astype(args.query.dtype)
