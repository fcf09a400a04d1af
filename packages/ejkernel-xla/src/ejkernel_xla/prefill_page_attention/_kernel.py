"""The XLA ``prefill_page_attention``: the chunk is one packed sequence of the serving scan
(``query_start_loc = [0, chunk]``) and one row of it, all its query tokens the row's heads, so
each step is one matmul of the chunk's queries with a block of the sequence's pages.

Each step reads ``pages_per_step`` pages straight from the caches (a gather along their page
axis, the kv heads first) and folds the block's logits into the running softmax: temporary
memory is one block, never ``[chunk, context]`` logits, and the scan covers only the steps some
query's range reaches (a window's lower end skips whole steps). Keys outside a query's range are
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
        x = cache.at[:, pages[0]].get(mode="clip")  # [hk, n, page_size, d]
        return jnp.moveaxis(x.reshape(hk, -1, x.shape[-1]), 0, 1).astype(cdt)[None]  # [1, n * page_size, hk, d]

    # The chunk's tokens as the heads of one row: [1, hk, chunk * g, d], a key range per head.
    q = jnp.moveaxis(args.query.reshape(chunk, hk, g, d), 0, 1).reshape(1, hk, chunk * g, d)
    per_head = lambda x: jnp.repeat(x, g)[None]  # noqa: E731 - [chunk] -> [1, chunk * g]
    state = paged_scan(
        q.astype(cdt),
        seq[:1],
        per_head(lo),
        per_head(hi),
        args.page_indices[None],
        page_size=args.page_size,
        read_pages=lambda pages: (read(args.key_cache, pages), read(args.value_cache, pages)),
        pages_per_step=pages_per_step,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        value_dim=d,
    )
    out = finish(state).reshape(hk, chunk, g, d)
    return jnp.moveaxis(out, 0, 1).reshape(chunk, h, d).astype(args.query.dtype)
