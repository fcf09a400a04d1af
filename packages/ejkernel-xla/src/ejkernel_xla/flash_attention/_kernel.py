"""FlashAttention-2 in XLA: tiled forward and backward as nested loops.

Forward (Dao 2023, Algorithm 1): for each query tile, loop over the key tiles it needs, keeping
the running max ``m_i``, denominator ``l_i`` and unnormalized output ``acc`` (online softmax);
sinks join the denominator at the end; the log-sum-exp is saved for the backward.

Backward (Algorithm 2, with one pass): for each query tile and each key tile it needs, recompute
``P = exp(S - lse)`` from the saved log-sum-exp, then ``dV += Pᵀ dO``, ``dP = dO Vᵀ``,
``dS = P ∘ (dP - D)`` with ``D = rowsum(dO ∘ O)``, ``dQ += dS K``, ``dK += dSᵀ Q``. dK/dV
accumulate in float32 buffers of the key length, so memory stays linear in the sequence length.

Tiles above the causal diagonal, outside a sliding window or outside a varlen sequence are not
visited at all (the key-tile range of each query tile is computed from the rows' key ranges).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import key_bounds, vary_like

from .. import _tiles as T
from .._tiles import F32, TileSpec


def flash_attention(args: AttentionArgs, fwd_blocks: tuple[int, int], bwd_blocks: tuple[int, int]) -> jax.Array:
    """Run the tiled kernel on canonical arguments with (q, kv) tile sizes per pass."""
    lo, hi = key_bounds(args)
    fwd = T.tile_spec(args, *fwd_blocks)
    bwd = T.tile_spec(args, *bwd_blocks)
    return _flash(
        (fwd, bwd),
        args.query,
        args.key,
        args.value,
        args.bias,
        args.softmax_aux,
        lo,
        hi,
        args.q_segment_ids,
        args.kv_segment_ids,
        args.attention_mask,
        args.dropout_seed,
    )


def forward_with_lse(args: AttentionArgs, blocks: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """The lse protocol's forward (``KernelImpl.forward_lse``): float32 output ``[b, sq, h, dv]``
    and log-sum-exp ``[b, h, sq]`` (-inf for rows that see no key), no custom VJP."""
    lo, hi = key_bounds(args)
    ts = T.tile_spec(args, *blocks)
    out, lse = _forward(ts, *_operands(args), lo, hi, *_mask_operands(args), out_dtype=F32)
    return out, lse.reshape(args.batch, args.num_heads, args.seq_q)


def backward_from_lse(
    args: AttentionArgs, blocks: tuple[int, int], out: jax.Array, lse: jax.Array, dout: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """The lse protocol's backward (``KernelImpl.backward_lse``): this call's float32 ``dq``,
    ``dk``, ``dv`` (and ``dbias``) given the *global* ``out`` and ``lse [b, h, sq]``."""
    lo, hi = key_bounds(args)
    ts = T.tile_spec(args, *blocks)
    q, k, v, bias, aux = _operands(args)
    lse = lse.astype(F32).reshape(args.batch, args.num_kv_heads, args.num_groups, args.seq_q)
    residuals = (q, k, v, bias, aux, lo, hi, *_mask_operands(args), out, lse)
    dq, dk, dv, dbias, _ = _backward(ts, residuals, dout, grad_dtype=F32)
    return dq, dk, dv, dbias


def _operands(args: AttentionArgs) -> tuple:
    return args.query, args.key, args.value, args.bias, args.softmax_aux


def _mask_operands(args: AttentionArgs) -> tuple:
    return args.q_segment_ids, args.kv_segment_ids, args.attention_mask, args.dropout_seed


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(specs, q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed):
    out, _ = _forward(specs[0], q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed)
    return out


def _flash_fwd(specs, q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed):
    out, lse = _forward(specs[0], q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed)
    return out, (q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed, out, lse)


def _flash_bwd(specs, residuals, dout):
    dq, dk, dv, dbias, daux = _backward(specs[1], residuals, dout)
    return dq, dk, dv, dbias, daux, None, None, None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def _forward(ts: TileSpec, q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed, out_dtype=None):
    """Returns the output ``[b, sq, h, dv]`` (in ``out_dtype``, default the query's) and the
    log-sum-exp ``[b, hk, g, sq]`` (-inf: empty row)."""
    ops = T.prepare(ts, q, k, v, bias, lo, hi, q_seg, kv_seg, mask, seed)
    # Loop carries vary over the manual mesh axes that the operands vary over (shard_map).
    operands = (q, k, v, bias, lo, hi, q_seg, kv_seg, mask, seed)
    b, hk, g, bq, bk = q.shape[0], ts.num_kv_heads, ts.groups, ts.block_q, ts.block_k
    dv = v.shape[-1]
    sinks = T.sink_logits(ts, aux)
    inv_keep = 1.0 / (1.0 - ts.dropout_prob)

    def q_step(_, i):
        q0, q_t, lo_t, hi_t, q_seg_t = T.query_tile_operands(ts, ops, i)
        j_lo, j_hi = T.kv_tile_range(ts, ops, lo_t, hi_t, q_seg_t)

        def kv_step(j, carry):
            m_i, l_i, acc = carry
            k0 = j * bk
            k_t, v_t = T.dslice(ops.k, k0, bk, 2), T.dslice(ops.v, k0, bk, 2)
            s, _ = T.logits(ts, q_t, k_t, T.bias_tile(ts, ops, q0, k0))  # [b, hk, g, bq, bk]
            s = T.masked(s, T.valid_tile(ts, ops, lo_t, hi_t, q_seg_t, q0, k0))
            m_new = jnp.maximum(m_i, s.max(axis=-1))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
            p = jnp.exp(s - m_safe[..., None])
            alpha = jnp.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(axis=-1)
            keep = T.keep_tile(ts, ops, b, q0, k0)
            if keep is not None:
                p = jnp.where(keep, p * inv_keep, 0.0)
            pv = T.dot("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v_t)
            return m_new, l_i, acc * alpha[..., None] + pv

        init = (
            jnp.full((b, hk, g, bq), -jnp.inf, F32),
            jnp.zeros((b, hk, g, bq), F32),
            jnp.zeros((b, hk, g, bq, dv), F32),
        )
        m_i, l_i, acc = T.loop(j_lo, j_hi, kv_step, vary_like(init, operands))
        if sinks is not None:
            m_new = jnp.maximum(m_i, sinks.max(axis=-1))
            alpha = jnp.exp(m_i - m_new)
            l_i = l_i * alpha + jnp.exp(sinks - m_new[..., None]).sum(axis=-1)
            acc = acc * alpha[..., None]
            m_i = m_new
        l_safe = jnp.where(l_i > 0, l_i, 1.0)
        out_t = acc / l_safe[..., None]
        lse_t = jnp.where(l_i > 0, m_i + jnp.log(l_safe), -jnp.inf)
        return None, (out_t, lse_t)

    n_q = ts.seq_q_padded // bq
    _, (out, lse) = lax.scan(q_step, None, jnp.arange(n_q, dtype=jnp.int32))
    # out: [n_q, b, hk, g, bq, dv] → [b, sq, h, dv]; lse: [n_q, b, hk, g, bq] → [b, hk, g, sq]
    out = out.transpose(1, 0, 4, 2, 3, 5).reshape(b, ts.seq_q_padded, hk * g, dv)[:, : ts.seq_q]
    lse = lse.transpose(1, 2, 3, 0, 4).reshape(b, hk, g, ts.seq_q_padded)[..., : ts.seq_q]
    return out.astype(out_dtype or q.dtype), lse


def _backward(ts: TileSpec, residuals, dout, grad_dtype=None):
    """Gradients of q, k, v, bias and sinks, in their own dtypes (``grad_dtype`` overrides it
    for q, k, v and bias)."""
    q, k, v, bias, aux, lo, hi, q_seg, kv_seg, mask, seed, out, lse = residuals
    ops = T.prepare(ts, q, k, v, bias, lo, hi, q_seg, kv_seg, mask, seed)
    operands = (q, k, v, bias, lo, hi, q_seg, kv_seg, mask, seed, out, lse, dout)
    b, hk, g, bq, bk = q.shape[0], ts.num_kv_heads, ts.groups, ts.block_q, ts.block_k
    d, dv = q.shape[-1], v.shape[-1]
    sq_p, sk_p = ts.seq_q_padded, ts.seq_k_padded
    inv_keep = 1.0 / (1.0 - ts.dropout_prob)

    do = T.to_head_major(T.pad_to(dout, 1, sq_p), ts)  # [b, hk, g, sq_p, dv]
    o = T.to_head_major(T.pad_to(out, 1, sq_p), ts)
    delta = (do.astype(F32) * o.astype(F32)).sum(axis=-1)  # D = rowsum(dO ∘ O), exact float32
    # Empty rows (lse = -inf) and padding rows get +inf: exp(s - lse) is then exactly 0.
    lse_b = T.pad_to(jnp.where(lse == -jnp.inf, jnp.inf, lse), 3, sq_p, jnp.inf)

    def q_step(carry, i):
        dk_acc, dv_acc, db_acc = carry
        q0, q_t, lo_t, hi_t, q_seg_t = T.query_tile_operands(ts, ops, i)
        do_t = T.dslice(do, q0, bq, 3)  # [b, hk, g, bq, dv]
        lse_t = T.dslice(lse_b, q0, bq, 3)  # [b, hk, g, bq]
        delta_t = T.dslice(delta, q0, bq, 3)
        j_lo, j_hi = T.kv_tile_range(ts, ops, lo_t, hi_t, q_seg_t)

        def kv_step(j, c):
            dq_t, dk_acc, dv_acc, db_acc = c
            k0 = j * bk
            k_t, v_t = T.dslice(ops.k, k0, bk, 2), T.dslice(ops.v, k0, bk, 2)
            s, tanh_t = T.logits(ts, q_t, k_t, T.bias_tile(ts, ops, q0, k0))
            s = T.masked(s, T.valid_tile(ts, ops, lo_t, hi_t, q_seg_t, q0, k0))
            p = jnp.exp(s - lse_t[..., None])  # [b, hk, g, bq, bk]
            dp = T.dot("bhgqd,bhkd->bhgqk", do_t, v_t)
            keep = T.keep_tile(ts, ops, b, q0, k0)
            p_drop = p if keep is None else jnp.where(keep, p * inv_keep, 0.0)
            if keep is not None:
                dp = jnp.where(keep, dp * inv_keep, 0.0)
            dv_t = T.dot("bhgqk,bhgqd->bhkd", p_drop.astype(do.dtype), do_t)
            ds = p * (dp - delta_t[..., None])  # gradient of the (biased) logits
            if db_acc is not None:
                part = T.reduce_to_bias(ts, ds, ops.bias.shape)
                starts = (0, 0, q0 if ops.bias.shape[2] > 1 else 0, k0 if ops.bias.shape[3] > 1 else 0)
                db_acc = lax.dynamic_update_slice(db_acc, lax.dynamic_slice(db_acc, starts, part.shape) + part, starts)
            if tanh_t is not None:
                ds = ds * (1.0 - tanh_t * tanh_t)
            ds = (ds * ts.scale).astype(q.dtype)
            dq_t = dq_t + T.dot("bhgqk,bhkd->bhgqd", ds, k_t)
            dk_t = T.dot("bhgqk,bhgqd->bhkd", ds, q_t)
            dk_acc = lax.dynamic_update_slice_in_dim(dk_acc, T.dslice(dk_acc, k0, bk, 2) + dk_t, k0, 2)
            dv_acc = lax.dynamic_update_slice_in_dim(dv_acc, T.dslice(dv_acc, k0, bk, 2) + dv_t, k0, 2)
            return dq_t, dk_acc, dv_acc, db_acc

        init = (vary_like(jnp.zeros((b, hk, g, bq, d), F32), operands), dk_acc, dv_acc, db_acc)
        dq_t, dk_acc, dv_acc, db_acc = T.loop(j_lo, j_hi, kv_step, init)
        return (dk_acc, dv_acc, db_acc), dq_t

    db0 = None
    if bias is not None:
        db0 = jnp.zeros(
            (bias.shape[0], bias.shape[1], sq_p if bias.shape[2] > 1 else 1, sk_p if bias.shape[3] > 1 else 1), F32
        )
    init = (jnp.zeros((b, hk, sk_p, d), F32), jnp.zeros((b, hk, sk_p, dv), F32), db0)
    (dk, dvv, db), dq = lax.scan(q_step, vary_like(init, operands), jnp.arange(sq_p // bq, dtype=jnp.int32))
    # dq: [n_q, b, hk, g, bq, d] → [b, sq, h, d]; dk/dv: [b, hk, sk_p, d] → [b, sk, hk, d]
    dq = dq.transpose(1, 0, 4, 2, 3, 5).reshape(b, sq_p, hk * g, d)[:, : ts.seq_q].astype(grad_dtype or q.dtype)
    dk = dk.transpose(0, 2, 1, 3)[:, : ts.seq_k].astype(grad_dtype or k.dtype)
    dvv = dvv.transpose(0, 2, 1, 3)[:, : ts.seq_k].astype(grad_dtype or v.dtype)
    dbias = None if db is None else db[:, :, : bias.shape[2], : bias.shape[3]].astype(grad_dtype or bias.dtype)
    daux = None
    if aux is not None:
        # d(sink) = -Σ_rows P_sink · D, with P_sink = exp(sink - lse).
        sinks = T.sink_logits(ts, aux)  # [1, hk, g, 1, n]
        p_sink = jnp.exp(sinks - lse_b[..., None])  # [b, hk, g, sq_p, n]
        daux = -(p_sink * delta[..., None]).sum(axis=(0, 3)).reshape(ts.num_heads, -1).astype(aux.dtype)
    return dq, dk, dvv, dbias, daux
