"""The XLA ``unified_attention``: blocks of each sequence's query tokens scan the sequence's cache
blocks a step at a time with an online softmax (the shared serving scan), vLLM's biases added to
each block's logits.

Each row finds its sequence, its position and the key range it attends (causal, bottom-right; the
window's lower end); ``block_q`` consecutive tokens of a sequence form one block of the scan. Each
step gathers ``pages_per_step`` cache blocks of every query block's sequence straight from the key
and value caches and folds the block's logits into the running softmax: temporary memory is one
block of pages per query block, never ``[tokens, context]`` logits. The ALiBi and query-query biases
are computed per block from the key positions (relative to the row's context length, as vLLM's
kernel does); sinks join the denominator at the end. Keys outside a row's range are masked and
their values zeroed, so garbage (even NaN) in unused slots never reaches the output; padding rows
attend nothing and come out zero, with a ``-inf`` log-sum-exp.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ejkernel.ops.families.serving import (
    finish,
    gather_pages,
    merge_sinks,
    ragged_paged_scan,
    ragged_query_rows,
    state_lse,
)
from ejkernel.ops.unified_attention import UnifiedAttentionArgs

F32 = jnp.float32


def unified_attention(
    args: UnifiedAttentionArgs, pages_per_step: int, block_q: int
) -> jax.Array | tuple[jax.Array, jax.Array]:
    t_all, h, d = args.queries.shape
    hk, g = args.num_kv_heads, args.num_groups
    cdt = jnp.promote_types(args.queries.dtype, args.key_cache.dtype)
    qsl = args.query_start_loc
    seq, pos, lo, hi = ragged_query_rows(qsl, args.kv_lens, args.num_seqs, t_all, window=args.sliding_window)
    q_local = jnp.arange(t_all, dtype=jnp.int32) - qsl[seq]  # the row's index among its sequence's queries
    context = pos - q_local  # the sequence's tokens before this step's queries

    def read_pages(pages: jax.Array) -> tuple[jax.Array, jax.Array]:
        return gather_pages(args.key_cache, pages).astype(cdt), gather_pages(args.value_cache, pages).astype(cdt)

    def bias(tok: jax.Array, key_pos: jax.Array) -> jax.Array:  # [rows, slots], [rows, block]
        tc = jnp.minimum(tok, t_all - 1)  # an empty slot (t_all) attends nothing: any row will do
        rel = key_pos[:, None, :] - context[tc][:, :, None]  # [rows, slots, block]
        out = jnp.zeros((*tok.shape, hk, g, key_pos.shape[1]), F32)
        if args.alibi_slopes is not None:
            slopes = args.alibi_slopes.astype(F32).reshape(1, 1, hk, g, 1)
            out = out + slopes * rel[:, :, None, None, :].astype(F32)
        if args.qq_bias is not None:
            n = args.num_query_tokens
            ql = q_local[tc][:, :, None]
            inside = (rel >= 0) & (rel < n) & (ql < n)
            qq = args.qq_bias.astype(F32)[jnp.clip(ql, 0, n - 1), jnp.clip(rel, 0, n - 1)]
            out = out + jnp.where(inside, qq, 0.0)[:, :, None, None, :]
        return out

    state = ragged_paged_scan(
        args.queries.reshape(t_all, hk, g, d).astype(cdt),
        qsl,
        args.num_seqs,
        seq,
        lo,
        hi,
        args.block_tables,
        block_q=block_q,
        page_size=args.block_size,
        read_pages=read_pages,
        pages_per_step=pages_per_step,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        value_dim=d,
        bias=bias if args.alibi_slopes is not None or args.qq_bias is not None else None,
    )
    if args.softmax_aux is not None:
        state = merge_sinks(state, args.softmax_aux.reshape(1, hk, g, 1))
    out = finish(state).reshape(t_all, h, d).astype(args.queries.dtype)
    if not args.return_lse:
        return out
    live = (hi > lo)[:, None, None]  # every row of a live sequence attends at least its own token
    return out, jnp.where(live, state_lse(state), -jnp.inf).reshape(t_all, h)
