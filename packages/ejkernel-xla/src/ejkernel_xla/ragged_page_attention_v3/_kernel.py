"""The XLA ``ragged_page_attention_v3``: a scatter of the step's new keys and values into the
packed cache, then blocks of each sequence's query tokens scan the sequence's pages a block at a
time with an online softmax.

Each row finds its sequence (from ``query_start_loc`` and ``num_seqs = distribution[2]``; the
decode/prefill split is not needed here), its position and the key range it attends (causal,
bottom-right; the window's lower end); ``kv_cache.write_step`` scatters the new keys and values
(shared with the GPU implementations). ``block_q`` consecutive tokens of a sequence form one
block of the scan, which gathers ``pages_per_step`` pages of every block's sequence straight from
the updated cache, unpacks keys and values (a reshape and slices: the head-dim padding is never
attended) and folds the block's logits into the running softmax: temporary memory is one block
of pages per query block, never ``[tokens, context]`` logits. Keys outside a row's range are
masked and their values zeroed, so garbage (even NaN) in unused slots never reaches the output;
rows of no live sequence attend nothing and come out zero.
"""

from __future__ import annotations

import jax

from ejkernel.ops.families.serving import finish, gather_pages, merge_sinks, ragged_paged_scan
from ejkernel.ops.ragged_page_attention_v3 import RaggedPageAttentionv3Args
from ejkernel.ops.ragged_page_attention_v3.kv_cache import unpack_heads, write_step


def ragged_page_attention_v3(
    args: RaggedPageAttentionv3Args, pages_per_step: int, block_q: int
) -> tuple[jax.Array, jax.Array]:
    t_all, h, d = args.queries.shape
    hk, g, ps, m = args.num_kv_heads, args.num_groups, args.page_size, args.max_num_seqs
    cache, (seq, _, lo, hi) = write_step(args)
    tables = args.block_tables.reshape(m, args.pages_per_seq)

    def read_pages(pages: jax.Array) -> tuple[jax.Array, jax.Array]:
        return unpack_heads(gather_pages(cache, pages), hk, d)  # [tokens, block, hk, d] each

    state = ragged_paged_scan(
        args.queries.reshape(t_all, hk, g, d),
        args.query_start_loc,
        args.num_seqs,
        seq,
        lo,
        hi,
        tables,
        block_q=block_q,
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
