"""The XLA ``page_attention``: decode over a paged KV cache by gathering pages a chunk at a time.

Each step gathers ``pages_per_step`` pages of every sequence (``cache[block_tables[:, chunk]]``),
computes their logits and folds them into an online softmax, so temporary memory is one chunk,
not the whole context. Pages are gathered from the cache as it is laid out (either
``cache_layout``) and the einsums name the gathered pages' axes in that order: a transposed cache
would be a copy of the whole cache on every call, where the gathered chunk is a small part of it. The loop stops after the longest context (and, with a sliding window,
starts at the earliest page any sequence still needs). Tokens past a sequence's context are
masked and their values zeroed, so garbage (even NaN) in unused pages never reaches the output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ejkernel.ops.page_attention import PageAttentionArgs

F32 = jnp.float32
# Float32 at float32 accuracy (the GPU default is TF32); lower precisions at the default.
_HIGHEST = lax.Precision.HIGHEST


def page_attention(args: PageAttentionArgs, tokens_per_step: int) -> jax.Array:
    b, h, d = args.query.shape
    hk, g, bs, dv = args.num_kv_heads, args.num_groups, args.block_size, args.value_head_dim
    pps = max(1, min(tokens_per_step // bs, args.max_blocks))  # pages per step
    steps_total = -(-args.max_blocks // pps)
    tables = jnp.pad(args.block_tables, ((0, 0), (0, steps_total * pps - args.max_blocks)))
    cdt = jnp.promote_types(args.query.dtype, args.key_cache.dtype)
    q = args.query.reshape(b, hk, g, d).astype(cdt)
    precision = _HIGHEST if cdt == F32 else None
    lens = args.context_lens
    chunk = pps * bs

    s_hi = (jnp.max(lens) + chunk - 1) // chunk
    s_lo = jnp.asarray(0, jnp.int32)
    if args.sliding_window is not None:
        first = jnp.maximum(jnp.min(jnp.where(lens > 0, lens, jnp.max(lens))) - 1 - args.sliding_window[0], 0)
        s_lo = jnp.minimum(first // chunk, s_hi).astype(jnp.int32)

    # The gathered pages as the einsums read them: this library's layout as [b, chunk, hk, d]
    # (a view of [b, pps, bs, hk, d]); the earlier one as [b, pps, hk, bs, d], tokens (p, t).
    if args.heads_major:
        kv_axes, tok_axes, tok_shape, valid_kv = "bphtd", "pt", (pps, bs), (b, pps, 1, bs, 1)
    else:
        kv_axes, tok_axes, tok_shape, valid_kv = "bthd", "t", (chunk,), (b, chunk, 1, 1)

    def gather(cache, pages, dim):
        x = cache.at[pages].get(mode="clip").astype(cdt)
        return x if args.heads_major else x.reshape(b, chunk, hk, dim)

    def step(s, carry):
        m_i, l_i, acc = carry
        pages = lax.dynamic_slice_in_dim(tables, s * pps, pps, 1)  # [b, pps]
        k_t = gather(args.key_cache, pages, d)
        v_t = gather(args.value_cache, pages, dv)
        pos = s * chunk + jnp.arange(chunk, dtype=jnp.int32)
        valid = pos[None, :] < lens[:, None]  # [b, chunk], token p * bs + t
        if args.sliding_window is not None:
            valid &= pos[None, :] >= lens[:, None] - 1 - args.sliding_window[0]
        v_t = jnp.where(valid.reshape(valid_kv), v_t, 0)
        logits = jnp.einsum(
            f"bhgd,{kv_axes}->bhg{tok_axes}", q, k_t, precision=precision, preferred_element_type=F32
        ).reshape(b, hk, g, chunk)
        logits = logits * args.softmax_scale
        if args.logits_soft_cap is not None:
            logits = args.logits_soft_cap * jnp.tanh(logits / args.logits_soft_cap)
        logits = jnp.where(valid[:, None, None, :], logits, -jnp.inf)
        m_new = jnp.maximum(m_i, logits.max(axis=-1))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        p = jnp.exp(logits - m_safe[..., None])
        alpha = jnp.exp(m_i - m_safe)
        p_tok = p.astype(cdt).reshape(b, hk, g, *tok_shape)
        pv = jnp.einsum(f"bhg{tok_axes},{kv_axes}->bhgd", p_tok, v_t, precision=precision, preferred_element_type=F32)
        return m_new, l_i * alpha + p.sum(axis=-1), acc * alpha[..., None] + pv

    init = (jnp.full((b, hk, g), -jnp.inf, F32), jnp.zeros((b, hk, g), F32), jnp.zeros((b, hk, g, dv), F32))
    if steps_total == 1:  # one step covers every context: no loop (a step over no key changes nothing)
        m_i, l_i, acc = step(0, init)
    else:
        m_i, l_i, acc = lax.fori_loop(s_lo, s_hi.astype(jnp.int32), step, init)
    if args.softmax_aux is not None:
        sinks = args.softmax_aux.astype(F32).reshape(1, hk, g, -1)
        m_new = jnp.maximum(m_i, sinks.max(axis=-1))
        alpha = jnp.exp(m_i - m_new)
        l_i = l_i * alpha + jnp.exp(sinks - m_new[..., None]).sum(axis=-1)
        acc = acc * alpha[..., None]
    out = acc / jnp.where(l_i > 0, l_i, 1.0)[..., None]
    out = out.reshape(b, h, dv).astype(args.query.dtype)
    return out[:, None] if args.query_had_seq_axis else out
