"""The XLA ``ragged_decode_attention``: an online-softmax scan over blocks of the KV length.

Each step slices ``block`` cached tokens of every sequence straight from the caller's cache
(no padding or copy of it), computes their logits and folds them into the running softmax, so
temporary memory is one block of logits, not ``[batch, heads, kv_len]``. When ``block`` does not
divide ``kv_len`` the last step's slice is shifted back to end at ``kv_len`` and the tokens an
earlier step already counted are masked out. The scan covers only the steps some sequence's range
(and window) reaches. Tokens outside a range are masked and their values zeroed, so garbage (even
NaN) there never reaches the output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ejkernel.ops.families.serving import SoftmaxState, finish, masked_logits, merge_block, merge_sinks
from ejkernel.ops.ragged_decode_attention import RaggedDecodeAttentionArgs

F32 = jnp.float32
# Float32 at float32 accuracy (the GPU default is TF32); lower precisions at the default.
_HIGHEST = lax.Precision.HIGHEST


def ragged_decode_attention(args: RaggedDecodeAttentionArgs, block: int) -> jax.Array:
    b, h, d = args.query.shape
    hk, g, s, dv = args.num_kv_heads, args.num_groups, args.kv_len, args.value_head_dim
    block = max(1, min(block, s))
    cdt = jnp.promote_types(args.query.dtype, args.key.dtype)
    precision = _HIGHEST if cdt == F32 else None
    q = args.query.reshape(b, hk, g, d).astype(cdt)
    start, end = args.sequence_start, args.sequence_end
    lo = start
    if args.sliding_window is not None:
        lo = jnp.maximum(start, end - 1 - args.sliding_window[0])
    nonempty = end > lo
    # Steps [first, last) cover every nonempty range; none at all when every range is empty.
    last = jnp.where(jnp.any(nonempty), (jnp.max(jnp.where(nonempty, end, 0)) + block - 1) // block, 0)
    first = jnp.minimum(jnp.min(jnp.where(nonempty, lo, s)) // block, last)

    def step(i, state):
        offset = jnp.minimum(i * block, s - block)
        k_t = lax.dynamic_slice_in_dim(args.key, offset, block, axis=1).astype(cdt)  # [b, block, hk, d]
        v_t = lax.dynamic_slice_in_dim(args.value, offset, block, axis=1).astype(cdt)
        pos = offset + jnp.arange(block, dtype=jnp.int32)
        valid = (pos[None, :] >= jnp.maximum(lo, i * block)[:, None]) & (pos[None, :] < end[:, None])  # [b, block]
        v_t = jnp.where(valid[:, :, None, None], v_t, 0)
        logits = jnp.einsum("bhgd,bthd->bhgt", q, k_t, precision=precision, preferred_element_type=F32)
        logits = masked_logits(logits, valid[:, None, None, :], args.softmax_scale, args.logits_soft_cap)

        def pv(p):
            return jnp.einsum("bhgt,bthd->bhgd", p.astype(cdt), v_t, precision=precision, preferred_element_type=F32)

        return merge_block(state, logits, pv)

    state = lax.fori_loop(first.astype(jnp.int32), last.astype(jnp.int32), step, SoftmaxState.zeros((b, hk, g), dv))
    if args.softmax_aux is not None:
        state = merge_sinks(state, args.softmax_aux.reshape(1, hk, g, -1))
    out = finish(state).reshape(b, h, dv).astype(args.query.dtype)
    return out[:, None] if args.query_had_seq_axis else out
