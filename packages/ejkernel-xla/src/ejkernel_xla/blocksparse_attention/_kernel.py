"""Block-sparse FlashAttention-2 in XLA over the block schedule of :mod:`ejkernel.ops.blocksparse_attention.mask`.

Forward (Dao 2023, Algorithm 1, restricted to the schedule): for each query tile, a loop over
the key tiles it visits only (``kv_index[:, i, :kv_count[:, i]]``), each key/value tile gathered
by index, with the online softmax (``m_i``, ``l_i``, ``acc``); sinks join the denominator at the
end and the log-sum-exp is saved. A visited tile applies a fine mask only when its flags say it
is partial (``lax.cond``: full tiles build no mask at all).

Backward (Algorithm 2, one pass, under ``jax.custom_vjp``): the same schedule; per visited tile
``P = exp(S - lse)``, ``dV += Pᵀ dO``, ``dS = P ∘ (dO Vᵀ - D)``, ``dQ += dS K``, ``dK += dSᵀ Q``,
dK/dV accumulated in float32 buffers of the key length at the tile's index. Memory is linear in
the sequence; work follows the number of visited tiles.

When the schedule is shared by every example (no segment ids, no per-example mask) the tiles are
dynamic slices; otherwise each example gathers its own tile (``vmap`` over the batch).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs
from ejkernel.ops.blocksparse_attention.mask import FLAG_ATTENTION_MASK, FLAG_SEGMENTS, FLAG_STATIC, BlockLayout

from .. import _tiles as T
from .._tiles import F32, TileSpec, round_up


def _spec(args: BlockSparseAttentionArgs, block_q: int, block_k: int) -> TileSpec:
    # Tiles never exceed the (8-rounded) sequence: short sequences are one tile.
    return TileSpec(
        block_q=min(block_q, round_up(args.seq_q, 8)),
        block_k=min(block_k, round_up(args.seq_k, 8)),
        seq_q=args.seq_q,
        seq_k=args.seq_k,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        dropout_prob=0.0,
        interval=False,
    )


def blocksparse_attention(
    args: BlockSparseAttentionArgs, fwd_blocks: tuple[int, int], bwd_blocks: tuple[int, int]
) -> jax.Array:
    """Run the kernel on canonical arguments with (q, kv) tile sizes per pass."""
    fwd, bwd = _spec(args, *fwd_blocks), _spec(args, *bwd_blocks)
    layouts = (args.layout(fwd.block_q, fwd.block_k), args.layout(bwd.block_q, bwd.block_k))
    masks = (args.q_segment_ids, args.kv_segment_ids, args.attention_mask)
    return _bsa((fwd, bwd), args.query, args.key, args.value, args.softmax_aux, layouts, masks)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bsa(specs, q, k, v, aux, layouts, masks):
    out, _ = _forward(specs[0], layouts[0], q, k, v, aux, masks)
    return out


def _bsa_fwd(specs, q, k, v, aux, layouts, masks):
    out, lse = _forward(specs[0], layouts[0], q, k, v, aux, masks)
    return out, (q, k, v, aux, layouts, masks, out, lse)


def _bsa_bwd(specs, residuals, dout):
    q, k, v, aux, layouts, masks, out, lse = residuals
    dq, dk, dv, daux = _backward(specs[1], layouts[1], q, k, v, aux, masks, out, lse, dout)
    zero_ints = jax.tree.map(lambda x: None, (layouts, masks))
    return (dq, dk, dv, daux, *zero_ints)


_bsa.defvjp(_bsa_fwd, _bsa_bwd)


# -- tiles -----------------------------------------------------------------------------------------


def _take(x: Any, idx: Any, size: int, axis: int) -> Any:
    """Tile ``idx`` (``[Bm]`` tile indices, one per example or one shared) of ``size`` along ``axis``
    of ``x`` (batch first, of the call's batch or 1)."""
    if idx.shape[0] == 1:
        return T.dslice(x, idx[0] * size, size, axis)
    if x.shape[0] == 1:
        return jax.vmap(lambda i: T.dslice(x[0], i * size, size, axis - 1))(idx)
    return jax.vmap(lambda xb, i: T.dslice(xb, i * size, size, axis - 1))(x, idx)


def _add_at(acc: Any, idx: Any, upd: Any, size: int) -> Any:
    """``acc[:, :, tile idx] += upd`` for ``acc [b, hk, sk_p, d]`` (``idx`` as in :func:`_take`)."""
    if idx.shape[0] == 1:
        start = idx[0] * size
        return lax.dynamic_update_slice_in_dim(acc, T.dslice(acc, start, size, 2) + upd, start, 2)

    def one(a: Any, i: Any, u: Any) -> Any:
        return lax.dynamic_update_slice_in_dim(a, T.dslice(a, i * size, size, 1) + u, i * size, 1)

    return jax.vmap(one)(acc, idx, upd)


class _Operands:
    """Padded operands in tile layout: ``q [b, hk, g, sq_p, d]``, ``k``/``v`` ``[b, hk, sk_p, d]``,
    segment ids padded with ``-1``, the pairwise mask ``[B1, hk|1, g|1, sq_p, sk_p]``."""

    def __init__(self, ts: TileSpec, q: Any, k: Any, v: Any, masks: tuple[Any, Any, Any]):
        b, d = q.shape[0], q.shape[3]
        sq_p, sk_p = ts.seq_q_padded, ts.seq_k_padded
        self.q = T.pad_to(q, 2, sq_p).reshape(b, ts.num_kv_heads, ts.groups, sq_p, d)
        self.k = T.pad_to(k, 2, sk_p)
        self.v = T.pad_to(v, 2, sk_p)
        q_seg, kv_seg, mask = masks
        self.q_seg = None if q_seg is None else T.pad_to(q_seg, 1, sq_p, -1)
        self.kv_seg = None if kv_seg is None else T.pad_to(kv_seg, 1, sk_p, -1)
        self.mask = None
        if mask is not None:
            mask = T.pad_to(T.pad_to(mask, 2, sq_p, False), 3, sk_p, False)
            b1, h1 = mask.shape[:2]
            self.mask = mask[:, :, None] if h1 == 1 else mask.reshape(b1, ts.num_kv_heads, ts.groups, sq_p, sk_p)


def _valid(ts: TileSpec, lay: BlockLayout, ops: _Operands, i: Any, t: Any, q_seg_t: Any, idx: Any) -> Any:
    """Which logits of slot ``t`` of query tile ``i`` may be attended, ``[b|1, hk|1, g|1, bq, bk]``:
    nothing past the tile's count, and the fine masks its flags ask for (none on a full tile)."""
    b = ops.q.shape[0]
    count = lay.kv_count[:, i]
    active = (t < count)[:, None, None, None, None]
    flags = lay.kv_flags[:, i, t]
    heads = ops.mask is not None and ops.mask.shape[1] > 1
    shape = (b, ts.num_kv_heads if heads else 1, ts.groups if heads else 1, ts.block_q, ts.block_k)

    def fine(_: Any) -> Any:
        out = jnp.ones(shape, bool)
        use = flags & FLAG_STATIC
        tile = lay.partial_masks[lay.kv_mask_index[:, i, t]]  # [Bm, bq, bk]
        out &= (tile | (use == 0)[:, None, None])[:, None, None]
        if ops.q_seg is not None:
            kv_seg_t = _take(ops.kv_seg, idx, ts.block_k, 1)  # [b, bk]
            same = (q_seg_t[:, :, None] == kv_seg_t[:, None, :]) & (q_seg_t[:, :, None] >= 0)
            out &= (same | ((flags & FLAG_SEGMENTS) == 0)[:, None, None])[:, None, None]
        if ops.mask is not None:
            rows = T.dslice(ops.mask, i * ts.block_q, ts.block_q, 3)
            m_t = _take(rows, idx, ts.block_k, 4)
            use = ((flags & FLAG_ATTENTION_MASK) == 0)[:, None, None, None, None]
            out &= m_t | use
        return out

    partial = lax.cond(jnp.any(flags != 0), fine, lambda _: jnp.ones(shape, bool), None)
    return partial & active


def _slot_tiles(ts: TileSpec, lay: BlockLayout, ops: _Operands, i: Any, t: Any) -> tuple[Any, Any, Any]:
    idx = lay.kv_index[:, i, t]
    return idx, _take(ops.k, idx, ts.block_k, 2), _take(ops.v, idx, ts.block_k, 2)


def _sinks(ts: TileSpec, aux: Any) -> Any:
    return T.sink_logits(ts, aux)


# -- forward ---------------------------------------------------------------------------------------


def _forward(ts: TileSpec, lay: BlockLayout, q, k, v, aux, masks):
    """Output ``[b, h, sq, dv]`` (query dtype) and log-sum-exp ``[b, hk, g, sq]`` (``-inf``: empty row)."""
    ops = _Operands(ts, q, k, v, masks)
    b, hk, g, bq = q.shape[0], ts.num_kv_heads, ts.groups, ts.block_q
    dv = v.shape[-1]
    sinks = _sinks(ts, aux)

    def q_step(_, i):
        q_t = T.dslice(ops.q, i * bq, bq, 3)
        q_seg_t = None if ops.q_seg is None else T.dslice(ops.q_seg, i * bq, bq, 1)

        def kv_step(t, carry):
            m_i, l_i, acc = carry
            idx, k_t, v_t = _slot_tiles(ts, lay, ops, i, t)
            s, _ = T.logits(ts, q_t, k_t, None)  # [b, hk, g, bq, bk]
            s = T.masked(s, _valid(ts, lay, ops, i, t, q_seg_t, idx))
            m_new = jnp.maximum(m_i, s.max(axis=-1))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
            p = jnp.exp(s - m_safe[..., None])
            alpha = jnp.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(axis=-1)
            pv = T.dot("bhgqk,bhkd->bhgqd", p.astype(v.dtype), v_t)
            return m_new, l_i, acc * alpha[..., None] + pv

        init = (
            jnp.full((b, hk, g, bq), -jnp.inf, F32),
            jnp.zeros((b, hk, g, bq), F32),
            jnp.zeros((b, hk, g, bq, dv), F32),
        )
        m_i, l_i, acc = lax.fori_loop(0, jnp.max(lay.kv_count[:, i]), kv_step, init)
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
    # out: [n_q, b, hk, g, bq, dv] → [b, h, sq, dv]; lse: [n_q, b, hk, g, bq] → [b, hk, g, sq]
    out = out.transpose(1, 2, 3, 0, 4, 5).reshape(b, hk * g, ts.seq_q_padded, dv)[:, :, : ts.seq_q]
    lse = lse.transpose(1, 2, 3, 0, 4).reshape(b, hk, g, ts.seq_q_padded)[..., : ts.seq_q]
    return out.astype(q.dtype), lse


# -- backward --------------------------------------------------------------------------------------


def _backward(ts: TileSpec, lay: BlockLayout, q, k, v, aux, masks, out, lse, dout):
    ops = _Operands(ts, q, k, v, masks)
    b, hk, g, bq, bk = q.shape[0], ts.num_kv_heads, ts.groups, ts.block_q, ts.block_k
    d, dv = q.shape[-1], v.shape[-1]
    sq_p, sk_p = ts.seq_q_padded, ts.seq_k_padded

    def head_major(x: Any) -> Any:
        return T.pad_to(x, 2, sq_p).reshape(b, hk, g, sq_p, x.shape[-1])

    do, o = head_major(dout), head_major(out)
    delta = (do.astype(F32) * o.astype(F32)).sum(axis=-1)  # D = rowsum(dO ∘ O), exact float32
    # Empty rows (lse = -inf) and padding rows get +inf: exp(s - lse) is then exactly 0.
    lse_b = T.pad_to(jnp.where(lse == -jnp.inf, jnp.inf, lse), 3, sq_p, jnp.inf)

    def q_step(carry, i):
        dk_acc, dv_acc = carry
        q0 = i * bq
        q_t = T.dslice(ops.q, q0, bq, 3)
        q_seg_t = None if ops.q_seg is None else T.dslice(ops.q_seg, q0, bq, 1)
        do_t, lse_t, delta_t = (T.dslice(x, q0, bq, 3) for x in (do, lse_b, delta))

        def kv_step(t, c):
            dq_t, dk_acc, dv_acc = c
            idx, k_t, v_t = _slot_tiles(ts, lay, ops, i, t)
            s, tanh_t = T.logits(ts, q_t, k_t, None)
            s = T.masked(s, _valid(ts, lay, ops, i, t, q_seg_t, idx))
            p = jnp.exp(s - lse_t[..., None])  # [b, hk, g, bq, bk]
            dp = T.dot("bhgqd,bhkd->bhgqk", do_t, v_t)
            dv_t = T.dot("bhgqk,bhgqd->bhkd", p.astype(do.dtype), do_t)
            ds = p * (dp - delta_t[..., None])
            if tanh_t is not None:
                ds = ds * (1.0 - tanh_t * tanh_t)
            ds = (ds * ts.scale).astype(q.dtype)
            dq_t = dq_t + T.dot("bhgqk,bhkd->bhgqd", ds, k_t)
            dk_t = T.dot("bhgqk,bhgqd->bhkd", ds, q_t)
            return dq_t, _add_at(dk_acc, idx, dk_t, bk), _add_at(dv_acc, idx, dv_t, bk)

        init = (jnp.zeros((b, hk, g, bq, d), F32), dk_acc, dv_acc)
        dq_t, dk_acc, dv_acc = lax.fori_loop(0, jnp.max(lay.kv_count[:, i]), kv_step, init)
        return (dk_acc, dv_acc), dq_t

    init = (jnp.zeros((b, hk, sk_p, d), F32), jnp.zeros((b, hk, sk_p, dv), F32))
    (dk, dvv), dq = lax.scan(q_step, init, jnp.arange(sq_p // bq, dtype=jnp.int32))
    # dq: [n_q, b, hk, g, bq, d] → [b, h, sq, d]
    dq = dq.transpose(1, 2, 3, 0, 4, 5).reshape(b, hk * g, sq_p, d)[:, :, : ts.seq_q].astype(q.dtype)
    dk = dk[:, :, : ts.seq_k].astype(k.dtype)
    dvv = dvv[:, :, : ts.seq_k].astype(v.dtype)
    daux = None
    if aux is not None:
        # d(sink) = -Σ_rows P_sink · D, with P_sink = exp(sink - lse).
        p_sink = jnp.exp(_sinks(ts, aux) - lse_b[..., None])  # [b, hk, g, sq_p, n]
        daux = -(p_sink * delta[..., None]).sum(axis=(0, 3)).reshape(ts.num_heads, -1).astype(aux.dtype)
    return dq, dk, dvv, daux
