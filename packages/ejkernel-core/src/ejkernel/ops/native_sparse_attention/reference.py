"""The reference of ``native_sparse_attention``: each sequence on its own, every branch as dense
attention under an explicit ``[seq, seq]`` (or ``[seq, blocks]``) mask, the selection as a sort of
each token's block importances (float32 at HIGHEST precision by default; the selection always in
float32). ``cu_seqlens``, ``block_indices`` and ``block_counts`` must be concrete."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..flash_attention.reference import HIGHEST
from .op import DEFAULT_BLOCK_SIZE

__all__ = ["dense_sequence", "native_sparse_attention_reference", "reference"]

F32 = jnp.float32


def _attend(q: Any, k: Any, v: Any, mask: Any, scale: float, dtype: Any, precision: Any) -> jax.Array:
    """Dense softmax attention ``q [L, hq, d]`` over ``k, v [N, hq, d]`` where ``mask [L, hq, N]``;
    rows with no key give zeros."""
    logits = jnp.einsum("lhd,nhd->lhn", q.astype(dtype), k.astype(dtype), precision=precision).astype(F32) * scale
    logits = jnp.where(mask, logits, -jnp.inf)
    m = jnp.max(logits, axis=-1, keepdims=True)
    p = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0.0))
    denom = jnp.sum(p, axis=-1, keepdims=True)
    p = p / jnp.where(denom > 0, denom, 1.0)
    return jnp.einsum("lhn,nhd->lhd", p.astype(dtype), v.astype(dtype), precision=precision).astype(F32)


def _pool(x: Any, bs: int) -> jax.Array:
    n, h, d = x.shape
    nb = -(-n // bs)
    padded = jnp.zeros((nb * bs, h, d), F32).at[:n].set(x.astype(F32))
    counts = np.minimum(bs, n - np.arange(nb) * bs).astype(np.float32)
    return padded.reshape(nb, bs, h, d).sum(axis=1) / counts[:, None, None]


def dense_sequence(q, k, v, g_cmp, g_slc, g_swa, idx, counts, *, bs, scale, window, dtype, precision):
    """One sequence, float32 ``[L, hq, dv]``: ``q [L, hq, d]``, ``k [L, h, d]``, ``v [L, h, dv]``,
    gates ``[L, hq]``, ``idx [L, h, S]`` or ``None`` (then selected from the compressed branch,
    traceable), ``counts [L, h]``; products in ``dtype`` at ``precision``."""
    n, hq, _ = q.shape
    h = k.shape[1]
    g = hq // h
    nb = -(-n // bs)
    t = np.arange(n)
    c = np.arange(nb)
    rep = lambda x: jnp.repeat(x, g, axis=1)  # noqa: E731  kv heads -> query heads
    out = jnp.zeros((n, hq, v.shape[-1]), F32)
    if g_cmp is not None:
        kc, vc = _pool(k, bs), _pool(v, bs)
        done = (c[None, :] + 1) * bs <= t[:, None] + 1  # [L, nb]
        done_h = jnp.broadcast_to(jnp.asarray(done)[:, None, :], (n, hq, nb))
        o_cmp = _attend(q, rep(kc), rep(vc), done_h, scale, dtype, precision)
        out = out + g_cmp.astype(F32)[..., None] * o_cmp
        # Selection, in float32 and not differentiated.
        logits = (
            jnp.einsum(
                "lhd,nhd->lhn", jax.lax.stop_gradient(q).astype(F32), jax.lax.stop_gradient(rep(kc)), precision=HIGHEST
            )
            * scale
        )
        logits = jnp.where(done_h, logits, -jnp.inf)
        m = jnp.max(logits, axis=-1, keepdims=True)
        p = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0.0))
        p = p / jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), jnp.finfo(F32).tiny)
        imp = p.reshape(n, h, g, nb).sum(axis=2)  # [L, h, nb]
        cur = (t // bs)[:, None, None]
        imp = jnp.where(c[None, None, :] < cur, imp, -jnp.inf)
        imp = jnp.where(c[None, None, :] == cur, jnp.inf, imp)
        order = jnp.argsort(-imp, axis=-1, stable=True)
        rank = jnp.argsort(order, axis=-1, stable=True)
        chosen = (rank < jnp.asarray(counts)[..., None]) & (imp > -jnp.inf)
    else:
        idx = np.asarray(idx)
        slot = np.arange(idx.shape[-1])
        live = (slot[None, None, :] < np.asarray(counts)[..., None]) & (idx >= 0) & (idx * bs <= t[:, None, None])
        chosen_np = np.zeros((n, h, nb), bool)
        for ti, hi, si in zip(*np.nonzero(live), strict=True):
            chosen_np[ti, hi, idx[ti, hi, si]] = True
        chosen = jnp.asarray(chosen_np)
    key_block = t // bs
    causal = t[None, :] <= t[:, None]  # [L(query), L(key)]
    slc_mask = chosen[:, :, key_block] & causal[:, None, :]  # [L, h, L]
    o_slc = _attend(q, rep(k), rep(v), rep(slc_mask), scale, dtype, precision)
    out = out + (1.0 if g_slc is None else g_slc.astype(F32)[..., None]) * o_slc
    if window is not None:
        win = causal & (t[None, :] > t[:, None] - window)
        o_swa = _attend(
            q, rep(k), rep(v), jnp.broadcast_to(jnp.asarray(win)[:, None, :], (n, hq, n)), scale, dtype, precision
        )
        out = out + g_swa.astype(F32)[..., None] * o_swa
    return out


def native_sparse_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    g_cmp: Any = None,
    g_slc: Any = None,
    block_indices: Any = None,
    block_counts: Any = 16,
    cu_seqlens: Any = None,
    g_swa: Any = None,
    *,
    softmax_scale: float | None = None,
    block_size: int | None = None,
    window_size: int | None = None,
    dtype: Any = F32,
    precision: Any = HIGHEST,
) -> jax.Array:
    """NSA computed naively, sequence by sequence (see the module docstring); ``[batch, seq,
    num_heads, value_head_dim]`` in ``dtype``, rows outside every sequence zero."""
    b, s, hq, d = query.shape
    h = key.shape[2]
    bs = block_size or DEFAULT_BLOCK_SIZE
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    counts = np.asarray(block_counts) if not isinstance(block_counts, int) else np.full((b, s, h), block_counts)
    if cu_seqlens is None:
        spans = [(i, 0, s) for i in range(b)]
    else:
        cu = np.asarray(cu_seqlens)
        spans = [(0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
    out = jnp.zeros((b, s, hq, value.shape[-1]), F32)
    for row, lo, hi in spans:
        if hi <= lo:
            continue
        sl = lambda x, row=row, lo=lo, hi=hi: None if x is None else x[row, lo:hi]  # noqa: E731
        o = dense_sequence(
            sl(query),
            sl(key),
            sl(value),
            sl(g_cmp),
            sl(g_slc),
            sl(g_swa),
            None if g_cmp is not None else np.asarray(block_indices)[row, lo:hi],
            counts[row, lo:hi],
            bs=bs,
            scale=scale,
            window=window_size,
            dtype=dtype,
            precision=precision,
        )
        out = out.at[row, lo:hi].set(o)
    return out.astype(dtype)


reference = native_sparse_attention_reference
