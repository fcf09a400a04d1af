"""The plain-JAX peers ``ejkernel bench`` times beside the XLA implementations on the same inputs:
the formulations a user would write in ``jnp`` (no custom VJP, no rematerialization).

- :func:`softmax_attention`: ``softmax(scale · q kᵀ) v`` with every logit materialized, returning
  the weights too. ``attention``.

The linear-recurrence ops' chunked forms:

- :func:`ssd_chunked`: Mamba-2's SSD chunked form with one scalar log decay per token and head
  (Dao & Gu, "Transformers are SSMs", 2024, the ``ssd_minimal`` listing): the intra-chunk decays
  ``exp(segsum)`` masked before the exponential, the chunk states combined by one matmul with the
  chunk-to-chunk decays. ``state_space_v2`` and ``lightning_attention``.
- :func:`gla_chunked`: gated linear attention with a log decay per key channel, the chunked form
  of Yang et al. 2024 §4 with the intra-chunk product factored as ``(q ⊙ exp(G)) (k ⊙ exp(-G))ᵀ``
  (``G`` the cumulative gate from the chunk's start) and a ``lax.scan`` over the chunk states.
  The factoring overflows once a chunk decays by ~80 nats in one channel; the benchmark's gates
  (``log_sigmoid(N(0, 1) + 2)``, 64-token chunks) stay far from it. ``gla_attention`` and
  ``recurrent_attention``.
- :func:`delta_rule_chunked`: the chunked WY delta rule (Yang et al. 2024, gated: Gated DeltaNet
  2025, per channel: Kimi Linear 2025) with the pairwise decays ``exp(γ_i - γ_j)`` materialized
  per pair (and channel), a triangular solve for ``(I + A)⁻¹`` and a ``lax.scan`` over chunks.
  ``gated_delta_rule`` (scalar gate) and ``kernel_delta_attention`` (per-channel gate).

Sparse attention:

- :func:`nsa_dense`: native sparse attention as the paper describes it, each branch a dense
  attention under its ``[seq, seq]`` (or ``[seq, blocks]``) mask: mean-pooled block keys, the
  top ``block_count`` blocks by the compressed branch's probabilities (summed over a key head's
  query heads; the current block always, the future never), a sliding window; the three gated.
  ``native_sparse_attention``.

The chunked forms take ``[batch, seq, heads, dim]`` with as many key heads as value heads (callers repeat
GQA heads); the sequence is padded to a whole number of chunks with zero inputs and gates (which
leave the state unchanged). Float32 inside; outputs float32; their products at ``precision``
(the benches pass the XLA implementations' own, :func:`~ejkernel.ops.families.delta_rule_math.product_precision`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..ops.families.delta_rule import l2norm

__all__ = ["delta_rule_chunked", "gla_chunked", "nsa_dense", "softmax_attention", "ssd_chunked"]

F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST


def softmax_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
) -> tuple[Any, Any]:
    """``(softmax(scale · q kᵀ) v, weights)``: ``q [b, sq, h, d]``, ``k [b, sk, hk, d]``, ``v [b, sk,
    hk, dv]`` (each key head serving ``h / hk`` query heads) → ``(output [b, sq, h, dv], weights
    [b, h, sq, sk])`` in ``q``'s dtype. Query ``i`` sits at position ``i + sk - sq`` (aligned to
    the keys' end): ``causal`` keeps keys at or before it, ``window (left, right)`` keys within
    ``left`` before and ``right`` after. The softmax is in float32; a row that sees no key gets
    zero weights. ``scale`` defaults to ``1/sqrt(d)``."""
    sq, h, d = q.shape[1:]
    sk, hk = k.shape[1], k.shape[2]
    scale = d**-0.5 if scale is None else scale
    k, v = (jnp.repeat(x, h // hk, axis=2) for x in (k, v))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=F32) * scale
    i = jnp.arange(sq)[:, None] + (sk - sq)
    j = jnp.arange(sk)[None, :]
    mask = jnp.ones((sq, sk), bool)
    if causal:
        mask &= j <= i
    if window is not None:
        mask &= (j >= i - window[0]) & (j <= i + window[1])
    weights = jax.nn.softmax(jnp.where(mask, logits, jnp.finfo(F32).min), axis=-1) * mask
    weights = weights.astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v.astype(q.dtype)), weights


def _chunks(x: Any, chunk: int) -> Any:
    """``[b, t, ...]`` float32 → ``[b, nc, chunk, ...]`` (zero-padded)."""
    b, t = x.shape[:2]
    nc = -(-t // chunk)
    x = jnp.pad(x.astype(F32), ((0, 0), (0, nc * chunk - t)) + ((0, 0),) * (x.ndim - 2))
    return x.reshape(b, nc, chunk, *x.shape[2:])


def _unchunk(y: Any, t: int) -> Any:
    return y.reshape(y.shape[0], -1, *y.shape[3:])[:, :t]


def _segsum(x: Any) -> Any:
    """``out[..., i, j] = Σ_{j < m <= i} x[..., m]`` for ``j <= i``, ``-inf`` above the diagonal."""
    size = x.shape[-1]
    cs = jnp.cumsum(x, axis=-1)
    diff = cs[..., :, None] - cs[..., None, :]
    mask = jnp.tril(jnp.ones((size, size), bool))
    return jnp.where(mask, diff, -jnp.inf)


def ssd_chunked(
    q: Any, k: Any, v: Any, log_decay: Any, *, scale: float = 1.0, chunk: int = 64, precision: Any = HIGHEST
) -> Any:
    """``o_t = scale · q_t S_t``, ``S_t = exp(a_t) S_{t-1} + k_tᵀ v_t``: ``q, k [b, t, h, n]``,
    ``v [b, t, h, p]``, ``log_decay a [b, t, h]`` → ``[b, t, h, p]`` float32."""
    t = q.shape[1]
    qc, kc, vc = (_chunks(x, chunk) for x in (q, k, v))  # [b, c, l, h, .]
    a = jnp.moveaxis(_chunks(log_decay, chunk), 3, 1)  # [b, h, c, l]
    a_cum = jnp.cumsum(a, axis=-1)
    decay = jnp.exp(_segsum(a))  # [b, h, c, l, l]
    y_diag = jnp.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", qc, kc, decay, vc, precision=precision)
    to_end = jnp.exp(a_cum[..., -1:] - a_cum)  # [b, h, c, l]
    states = jnp.einsum("bclhn,bhcl,bclhp->bchpn", kc, to_end, vc, precision=precision)
    states = jnp.concatenate([jnp.zeros_like(states[:, :1]), states], axis=1)
    chunk_decay = jnp.exp(_segsum(jnp.pad(a_cum[..., -1], ((0, 0), (0, 0), (1, 0)))))  # [b, h, c+1, c+1]
    states = jnp.einsum("bhzc,bchpn->bzhpn", chunk_decay, states, precision=precision)[:, :-1]
    y_off = jnp.einsum("bclhn,bchpn,bhcl->bclhp", qc, states, jnp.exp(a_cum), precision=precision)
    return _unchunk(y_diag + y_off, t) * scale


def gla_chunked(q: Any, k: Any, v: Any, gk: Any, *, scale: float, chunk: int = 64, precision: Any = HIGHEST) -> Any:
    """``o_t = scale · q_t S_t``, ``S_t = diag(exp(g_t)) S_{t-1} + k_tᵀ v_t``: ``q, k, gk
    [b, t, h, dk]``, ``v [b, t, h, dv]`` → ``[b, t, h, dv]`` float32."""
    t = q.shape[1]
    qc, kc, vc, gc = (_chunks(x, chunk) for x in (q, k, v, gk))  # [b, c, l, h, .]
    g = jnp.cumsum(gc, axis=2)
    last = g[:, :, -1:]
    qg, kg = qc * scale * jnp.exp(g), kc * jnp.exp(-g)
    causal = jnp.tril(jnp.ones((chunk, chunk), bool))
    att = jnp.where(causal[:, :, None], jnp.einsum("bclhd,bcshd->bclsh", qg, kg, precision=precision), 0.0)
    y = jnp.einsum("bclsh,bcshv->bclhv", att, vc, precision=precision)
    delta = jnp.einsum("bclhd,bclhv->bchdv", kc * jnp.exp(last - g), vc, precision=precision)

    def step(s: Any, inp: Any) -> tuple[Any, Any]:
        d, gl = inp
        return jnp.exp(gl)[..., None] * s + d, s

    b, _, _, h, dk = qc.shape
    s0 = jnp.zeros((b, h, dk, vc.shape[-1]), F32)
    _, entering = jax.lax.scan(step, s0, (jnp.moveaxis(delta, 1, 0), jnp.moveaxis(last[:, :, 0], 1, 0)))
    y = y + jnp.einsum("bclhd,bchdv->bclhv", qg, jnp.moveaxis(entering, 0, 1), precision=precision)
    return _unchunk(y, t)


def delta_rule_chunked(
    q: Any,
    k: Any,
    v: Any,
    beta: Any,
    gate: Any,
    *,
    scale: float,
    use_qk_l2norm: bool = True,
    chunk: int = 64,
    precision: Any = HIGHEST,
) -> Any:
    """``S_t = exp(g_t) S_{t-1}``, ``S_t ← S_t + β_t k_tᵀ (v_t - k_t S_t)``, ``o_t = scale · q_t
    S_t`` (``exp(g_t)`` a diagonal over key channels when ``gate`` is ``[b, t, h, dk]``, a scalar
    when ``[b, t, h]``): ``q, k [b, t, h, dk]``, ``v [b, t, h, dv]``, ``beta [b, t, h]`` →
    ``[b, t, h, dv]`` float32."""
    t = q.shape[1]
    q, k = q.astype(F32), k.astype(F32)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    gate = gate.astype(F32)
    if gate.ndim == 3:
        gate = gate[..., None]
    # [b, h, c, l, .]
    qc, kc, vc, gc = (jnp.moveaxis(_chunks(x, chunk), 3, 1) for x in (q * scale, k, v, gate))
    bc = jnp.moveaxis(_chunks(beta, chunk), 3, 1)
    g = jnp.cumsum(gc, axis=3)
    strict = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    causal = jnp.tril(jnp.ones((chunk, chunk), bool))
    # exp(γ_i - γ_j) per pair and channel, masked before the exponential (no overflow).
    diff = g[..., :, None, :] - g[..., None, :, :]
    decay = jnp.exp(jnp.where(causal[..., None], diff, -jnp.inf))  # [b, h, c, l, l, dk or 1]

    def pair(x: Any, y: Any) -> Any:
        if decay.shape[-1] == 1:
            return jnp.einsum("...id,...jd->...ij", x, y, precision=precision) * decay[..., 0]
        return jnp.einsum("...id,...jd,...ijd->...ij", x, y, decay, precision=precision)

    kk = pair(kc, kc)
    a = jnp.where(strict, kk, 0.0) * bc[..., :, None]
    eye = jnp.eye(chunk, dtype=F32)
    tmat = jax.lax.linalg.triangular_solve(
        eye + a, jnp.broadcast_to(eye * bc[..., None, :], a.shape), left_side=True, lower=True, unit_diagonal=True
    )
    w = jnp.einsum("...ij,...jd->...id", tmat, kc * jnp.exp(g), precision=precision)
    u = jnp.einsum("...ij,...jv->...iv", tmat, vc, precision=precision)
    aqk = jnp.where(causal, pair(qc, kc), 0.0)
    last = g[..., -1:, :]
    kg = kc * jnp.exp(last - g)
    qg = qc * jnp.exp(g)

    def step(s: Any, inp: Any) -> tuple[Any, Any]:
        w, u, kg, qg, aqk, gl = inp
        vn = u - jnp.einsum("bhld,bhdv->bhlv", w, s, precision=precision)
        o = jnp.einsum("bhld,bhdv->bhlv", qg, s, precision=precision) + jnp.einsum(
            "bhls,bhsv->bhlv", aqk, vn, precision=precision
        )
        s = jnp.exp(gl)[..., :, None] * s + jnp.einsum("bhld,bhlv->bhdv", kg, vn, precision=precision)
        return s, o

    b, h = qc.shape[:2]
    s0 = jnp.zeros((b, h, kc.shape[-1], vc.shape[-1]), F32)
    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (w, u, kg, qg, aqk, last[..., 0, :]))
    _, o = jax.lax.scan(step, s0, xs)  # [c, b, h, l, v]
    o = jnp.moveaxis(o, 0, 2)  # [b, h, c, l, v]
    return _unchunk(jnp.moveaxis(o, 1, 3), t)


def nsa_dense(
    q: Any,
    k: Any,
    v: Any,
    g_cmp: Any,
    g_slc: Any,
    g_swa: Any,
    *,
    block_count: int,
    block_size: int,
    window: int,
    scale: float | None = None,
) -> Any:
    """NSA's three branches dense (module docstring): ``q [b, s, hq, d]``, ``k, v [b, s, h, d]``,
    gates ``[b, s, hq]`` → ``[b, s, hq, d]`` in ``q``'s dtype; products in it (float32 logits of
    the selection)."""
    import numpy as np

    from ..ops.native_sparse_attention.reference import dense_sequence

    s, h = k.shape[1], k.shape[2]
    counts = np.full((s, h), block_count)
    scale = q.shape[-1] ** -0.5 if scale is None else scale

    def one(q: Any, k: Any, v: Any, gc: Any, gs: Any, gw: Any) -> Any:
        return dense_sequence(
            q, k, v, gc, gs, gw, None, counts,
            bs=block_size, scale=scale, window=window, dtype=q.dtype, precision=None,
        )  # fmt: skip

    return jax.vmap(one)(q, k, v, g_cmp, g_slc, g_swa).astype(q.dtype)
