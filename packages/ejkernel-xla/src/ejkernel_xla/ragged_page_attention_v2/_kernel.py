"""The XLA ``ragged_page_attention_v2``: blocks of each sequence's query tokens scan the
sequence's pages a block at a time with an online softmax.

Each row finds its sequence (from ``query_start_loc`` and the live ``num_seqs``), its position and
the key range it attends (causal, bottom-right; the window's lower end); ``block_q`` consecutive
tokens of a sequence form one block of the scan. Each step gathers ``pages_per_step`` pages of
every block's sequence straight from the interleaved cache, splits keys (even heads) from values
(odd heads) in the gathered block, and folds the block's logits into the running softmax:
temporary memory is one block of pages per query block, never ``[tokens, context]`` logits. The
scan covers only the steps some row's range reaches. Keys outside a row's range are masked and
their values zeroed, so garbage (even NaN) in unused slots never reaches the output; rows of no
live sequence (padding) attend nothing and come out zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.families.serving import finish, gather_pages, merge_sinks, ragged_paged_scan, ragged_query_rows
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args


def ragged_page_attention_v2(args: RaggedPageAttentionv2Args, pages_per_step: int, block_q: int) -> jax.Array:
    t_all, h, d = args.queries.shape
    hk, g = args.num_kv_heads, args.num_groups
    cdt = jnp.promote_types(args.queries.dtype, args.kv_pages.dtype)
    seq, _, lo, hi = ragged_query_rows(
        args.query_start_loc, args.context_lens, args.num_seqs, t_all, window=args.sliding_window
    )

    def read_pages(pages: jax.Array) -> tuple[jax.Array, jax.Array]:
        kv = gather_pages(args.kv_pages, pages).astype(cdt)  # [tokens, block, 2 * hk, d]
        return kv[:, :, 0::2], kv[:, :, 1::2]

    state = ragged_paged_scan(
        args.queries.reshape(t_all, hk, g, d).astype(cdt),
        args.query_start_loc,
        args.num_seqs,
        seq,
        lo,
        hi,
        args.block_tables,
        block_q=block_q,
        page_size=args.page_size,
        read_pages=read_pages,
        pages_per_step=pages_per_step,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        value_dim=d,
    )
    if args.softmax_aux is not None:
        state = merge_sinks(state, args.softmax_aux.reshape(1, hk, g, -1))
    return finish(state).reshape(t_all, h, d).astype(args.queries.dtype)
