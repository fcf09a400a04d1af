"""The XLA ``ragged_page_attention_v3``: a scatter of the step's new keys and values into the
packed cache, then every query row scans its own sequence's pages a block at a time with an
online softmax.

Each row finds its sequence (from ``query_start_loc`` and ``num_seqs = distribution[2]``; the
decode/prefill split is not needed here), its position and the key range it attends (causal,
bottom-right; the window's lower end). Its key and value, packed as the cache packs them, go to
its slot in one scatter; padding rows aim past the last page and are dropped, so they write
nothing. Under ``jit`` with the cache donated the scatter updates it in place. The scan then
gathers ``pages_per_step`` pages of every row's sequence straight from the updated cache,
unpacks keys and values (a reshape and slices: the head-dim padding is never attended) and
folds the block's logits into the running softmax: temporary memory is one block per row,
never ``[tokens, context]`` logits. Keys outside a row's range are masked and their values
zeroed, so garbage (even NaN) in unused slots never reaches the output; rows of no live
sequence attend nothing and come out zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.families.serving import finish, gather_pages, merge_sinks, paged_scan, ragged_query_rows
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args
from ejkernel.ops.ragged_page_attention_v3.kv_cache import pack_heads, unpack_heads


def ragged_page_attention_v3(args: RaggedPageAttentionv3Args, pages_per_step: int) -> tuple[jax.Array, jax.Array]:
    t_all, h, d = args.queries.shape
    hk, g, ps, m = args.num_kv_heads, args.num_groups, args.page_size, args.max_num_seqs
    tables = args.block_tables.reshape(m, args.pages_per_seq)
    seq, pos, lo, hi = ragged_query_rows(
        args.query_start_loc, args.kv_lens, args.num_seqs, t_all, window=args.sliding_window
    )
    # A row of a live sequence attends at least its own position; padding rows attend nothing.
    live = hi > lo
    page = jnp.where(live, tables[seq, jnp.clip(pos, 0) // ps], args.num_pages)
    new = pack_heads(args.keys, args.values, args.kv_cache.dtype)  # [tokens, packed rows, packing, dp]
    cache = args.kv_cache.at[page, jnp.clip(pos, 0) % ps].set(new, mode="drop")

    def read_pages(pages: jax.Array) -> tuple[jax.Array, jax.Array]:
        return unpack_heads(gather_pages(cache, pages), hk, d)  # [tokens, block, hk, d] each

    state = paged_scan(
        args.queries.reshape(t_all, hk, g, d),
        seq,
        lo,
        hi,
        tables,
        page_size=ps,
        read_pages=read_pages,
        pages_per_step=pages_per_step,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        value_dim=d,
    )
    if args.softmax_aux is not None:
        state = merge_sinks(state, args.softmax_aux.reshape(1, hk, g, -1))
    return finish(state).reshape(t_all, h, d).astype(args.queries.dtype), cache
