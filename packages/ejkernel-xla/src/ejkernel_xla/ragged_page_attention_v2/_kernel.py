"""The XLA ``ragged_page_attention_v2``: every query row scans its own sequence's pages a block at
a time with an online softmax.

Each row finds its sequence (from ``query_start_loc`` and the live ``num_seqs``), its position and
the key range it attends (causal, bottom-right; the window's lower end). Each step gathers
``pages_per_step`` pages of every row's sequence straight from the interleaved cache, splits keys
(even heads) from values (odd heads) in the gathered block, and folds the block's logits into the
running softmax: temporary memory is one block per row, never ``[tokens, context]`` logits. The
scan covers only the steps some row's range reaches. Keys outside a row's range are masked and
their values zeroed, so garbage (even NaN) in unused slots never reaches the output; rows of no
live sequence (padding) attend nothing and come out zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ejkernel.ops.families.serving import SoftmaxState, finish, gather_pages, masked_logits, merge_block, merge_sinks
from ejkernel.ops.ragged_page_attention_v2 import RaggedPageAttentionv2Args

F32 = jnp.float32
# Float32 at float32 accuracy (the GPU default is TF32); lower precisions at the default.
_HIGHEST = lax.Precision.HIGHEST


def row_ranges(args: RaggedPageAttentionv2Args) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each query row's sequence and the half-open key range ``[lo, hi)`` it attends (empty for
    padding rows)."""
    t_all, m = args.total_tokens, args.max_num_seqs
    qsl, n = args.query_start_loc, args.num_seqs
    tok = jnp.arange(t_all, dtype=jnp.int32)
    live = jnp.arange(m) < n
    seq = jnp.sum(live[None, :] & (qsl[None, 1:] <= tok[:, None]), axis=1).astype(jnp.int32)
    in_batch = (tok >= qsl[0]) & (tok < qsl[n])
    seq = jnp.minimum(seq, m - 1)
    pos = args.context_lens[seq] - qsl[seq + 1] + tok  # the row's position in its context
    hi = jnp.where(in_batch, pos + 1, 0)
    lo = jnp.zeros_like(hi)
    if args.sliding_window is not None:
        lo = jnp.where(in_batch, jnp.maximum(pos - args.sliding_window[0], 0), 0)
    return seq, lo, hi


def ragged_page_attention_v2(args: RaggedPageAttentionv2Args, pages_per_step: int) -> jax.Array:
    t_all, h, d = args.queries.shape
    hk, g, ps = args.num_kv_heads, args.num_groups, args.page_size
    pps = max(1, min(pages_per_step, args.pages_per_seq))
    steps_total = -(-args.pages_per_seq // pps)
    chunk = pps * ps
    cdt = jnp.promote_types(args.queries.dtype, args.kv_pages.dtype)
    precision = _HIGHEST if cdt == F32 else None
    q = args.queries.reshape(t_all, hk, g, d).astype(cdt)

    seq, lo, hi = row_ranges(args)
    tables = jnp.pad(args.block_tables, ((0, 0), (0, steps_total * pps - args.pages_per_seq)))
    attends = hi > lo
    s_hi = (jnp.max(jnp.where(attends, hi, 0)) + chunk - 1) // chunk
    s_lo = jnp.minimum(jnp.min(jnp.where(attends, lo, steps_total * chunk)) // chunk, s_hi)

    def step(s, state):
        pages = lax.dynamic_slice_in_dim(tables, s * pps, pps, 1)[seq]  # [tokens, pps]
        kv = gather_pages(args.kv_pages, pages).astype(cdt)  # [tokens, chunk, 2 * hk, d]
        k_t, v_t = kv[:, :, 0::2], kv[:, :, 1::2]
        pos = s * chunk + jnp.arange(chunk, dtype=jnp.int32)
        valid = (pos[None, :] >= lo[:, None]) & (pos[None, :] < hi[:, None])  # [tokens, chunk]
        v_t = jnp.where(valid[:, :, None, None], v_t, 0)
        logits = jnp.einsum("thgd,tchd->thgc", q, k_t, precision=precision, preferred_element_type=F32)
        logits = masked_logits(logits, valid[:, None, None, :], args.softmax_scale, args.logits_soft_cap)

        def pv(p):
            return jnp.einsum("thgc,tchd->thgd", p.astype(cdt), v_t, precision=precision, preferred_element_type=F32)

        return merge_block(state, logits, pv)

    state = lax.fori_loop(s_lo.astype(jnp.int32), s_hi.astype(jnp.int32), step, SoftmaxState.zeros((t_all, hk, g), d))
    if args.softmax_aux is not None:
        state = merge_sinks(state, args.softmax_aux.reshape(1, hk, g, -1))
    return finish(state).reshape(t_all, h, d).astype(args.queries.dtype)
