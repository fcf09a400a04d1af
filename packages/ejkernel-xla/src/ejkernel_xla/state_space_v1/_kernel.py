"""Mamba-1's selective scan in plain JAX: a ``lax.scan`` over chunks of ``chunk`` tokens, each
chunk scanned in parallel (``lax.associative_scan`` of the affine maps ``h -> a h + b`` along its
tokens), the chunk body rematerialized in the backward (``jax.checkpoint``).

Memory is linear in the sequence: the forward keeps one ``[batch, intermediate, state]`` float32
state per chunk for the backward, and a chunk's ``[batch, chunk, intermediate, state]``
intermediates live only while that chunk runs (forward, and again in the backward).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

F32 = jnp.float32


def _combine(left: tuple[jax.Array, jax.Array], right: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Composition of ``h -> a1 h + b1`` then ``h -> a2 h + b2``."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def _chunk(A: jax.Array, h: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
    x, dt, B, C = xs  # [b, L, d], [b, L, d], [b, L, n], [b, L, n] (float32)
    da = jnp.exp(dt[..., None] * A)  # [b, L, d, n]
    dbx = (dt * x)[..., None] * B[:, :, None, :]
    dbx = dbx.at[:, 0].add(da[:, 0] * h)  # the state carried in enters with the first token
    _, hs = jax.lax.associative_scan(_combine, (da, dbx), axis=1)
    y = jnp.sum(hs * C[:, :, None, :], axis=-1)  # [b, L, d]
    return hs[:, -1], y


def selective_scan(
    x: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    D: jax.Array,
    dt: jax.Array,
    h0: jax.Array | None,
    chunk: int,
) -> tuple[jax.Array, jax.Array]:
    """Ungated ``y [b, s, d]`` (``x``'s dtype) and the final state ``[b, d, n]`` (float32)."""
    b, s, d = x.shape
    n = A.shape[1]
    h = jnp.zeros((b, d, n), F32) if h0 is None else h0.astype(F32)
    if s == 1:  # a decode step: no scan at all
        dt0, x0 = dt[:, 0].astype(F32), x[:, 0].astype(F32)
        h = jnp.exp(dt0[..., None] * A.astype(F32)) * h + (dt0 * x0)[..., None] * B[:, 0, None, :].astype(F32)
        y = jnp.sum(h * C[:, 0, None, :].astype(F32), axis=-1) + D.astype(F32) * x0
        return y[:, None].astype(x.dtype), h
    chunk = max(1, min(chunk, s))
    pad = -s % chunk
    nc = (s + pad) // chunk

    def chunks(a: jax.Array) -> jax.Array:
        # Padding tokens have dt = 0: exp(0) = 1 and no input, so they leave the state unchanged.
        a = jnp.pad(a.astype(F32), ((0, 0), (0, pad), (0, 0)))
        return jnp.moveaxis(a.reshape(b, nc, chunk, a.shape[-1]), 1, 0)  # [nc, b, L, .]

    body = jax.checkpoint(lambda h, xs: _chunk(A.astype(F32), h, xs))
    h, ys = jax.lax.scan(body, h, tuple(chunks(a) for a in (x, dt, B, C)))
    y = jnp.moveaxis(ys, 0, 1).reshape(b, nc * chunk, d)[:, :s]
    y = y + D.astype(F32) * x.astype(F32)
    return y.astype(x.dtype), h
