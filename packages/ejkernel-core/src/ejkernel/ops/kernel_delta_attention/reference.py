"""The reference of the delta-rule ops: the recurrence token by token, float32 at HIGHEST
precision by default.

Written from the documented semantics, independently of the kernels' helpers: GVA by repeating
query/key heads, varlen by a Python loop over the sequences (``cu_seqlens`` must be concrete),
the gate broadcast over the channels when it is per head.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["HIGHEST", "delta_rule_reference", "reference"]

HIGHEST = jax.lax.Precision.HIGHEST


def _one(q, k, v, beta, g, s0, scale, dtype, precision):
    """One sequence ``[seq, heads, ...]`` from state ``s0`` ``[heads, K, V]``."""

    def step(s, x):
        q_t, k_t, v_t, b_t, g_t = x
        s = s * jnp.exp(g_t)[:, :, None]
        kv = jnp.einsum("hk,hkv->hv", k_t, s, precision=precision)
        s = s + jnp.einsum("hk,hv->hkv", k_t * b_t[:, None], v_t - kv, precision=precision)
        return s, jnp.einsum("hk,hkv->hv", q_t, s, precision=precision) * jnp.asarray(scale, dtype)

    final, o = jax.lax.scan(step, s0.astype(dtype), (q, k, v, beta, g))
    return o, final


def delta_rule_reference(
    query: Any,
    key: Any,
    value: Any,
    beta: Any,
    gate: Any = None,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    use_qk_l2norm: bool = False,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The delta rule with an optional log gate (per head ``[b, s, hv]`` or per channel
    ``[b, s, hv, head_dim]``), token by token."""
    b, t, h, dk = query.shape
    hv, dv = value.shape[2], value.shape[3]
    q, k, v, bt = (jnp.asarray(x).astype(dtype) for x in (query, key, value, beta))
    if use_qk_l2norm:
        q = q / jnp.sqrt(jnp.sum(q * q, -1, keepdims=True) + 1e-6)
        k = k / jnp.sqrt(jnp.sum(k * k, -1, keepdims=True) + 1e-6)
    q = jnp.repeat(q, hv // h, axis=2)
    k = jnp.repeat(k, hv // h, axis=2)
    if gate is None:
        g = jnp.zeros((b, t, hv, dk), dtype)
    else:
        g = jnp.asarray(gate).astype(dtype)
        g = jnp.broadcast_to(g[..., None] if g.ndim == 3 else g, (b, t, hv, dk))
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(dk)
    if cu_seqlens is None:
        outs, finals = [], []
        for r in range(b):
            s0 = initial_state[r] if initial_state is not None else jnp.zeros((hv, dk, dv), dtype)
            o, f = _one(q[r], k[r], v[r], bt[r], g[r], s0, scale, dtype, precision)
            outs.append(o)
            finals.append(f)
        out, final = jnp.stack(outs), jnp.stack(finals)
    else:
        cu = np.asarray(cu_seqlens)
        outs, finals = [], []
        for n in range(len(cu) - 1):
            lo, hi = int(cu[n]), int(cu[n + 1])
            s0 = initial_state[n] if initial_state is not None else jnp.zeros((hv, dk, dv), dtype)
            if hi == lo:
                finals.append(s0.astype(dtype))
                continue
            o, f = _one(q[0, lo:hi], k[0, lo:hi], v[0, lo:hi], bt[0, lo:hi], g[0, lo:hi], s0, scale, dtype, precision)
            outs.append(o)
            finals.append(f)
        out = jnp.concatenate(outs)[None] if outs else jnp.zeros((1, 0, hv, dv), dtype)
        final = jnp.stack(finals)
    out = out.astype(dtype)
    return (out, final.astype(jnp.float32)) if return_state else out


def reference(
    query: Any,
    key: Any,
    value: Any,
    beta: Any,
    decay: Any = None,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    *,
    softmax_scale: float | None = None,
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
    use_chunked: bool = True,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The reference of ``kernel_delta_attention`` (``chunk_size``/``use_chunked`` do not change
    the result)."""
    del chunk_size, use_chunked
    return delta_rule_reference(
        query, key, value, beta, decay, initial_state, cu_seqlens,
        softmax_scale=softmax_scale, use_qk_l2norm=use_qk_l2norm, return_state=return_state,
        dtype=dtype, precision=precision,
    )  # fmt: skip
