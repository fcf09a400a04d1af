"""The chunked (WY) delta rule in plain ``jnp``, in pieces every backend can reuse.

The chunked algorithm (Yang et al., "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length", 2024, §3; gated: "Gated Delta Networks", 2025; per-channel: Kimi Linear, 2025),
with ``γ`` the gate's cumulative sum inside a chunk of ``C`` tokens (per channel, or per head
broadcast over the channels):

1. **Layout** (:func:`to_chunks`): chunks ``[R, HV, NC, C, ...]``; every sequence starts a chunk
   (the tail of the last chunk, and under varlen the tail of every sequence's, is padding:
   ``k = v = q = β = g = 0``, which leaves the state unchanged).
2. **Intra-chunk** (:func:`intra_chunk`, parallel over chunks): ``A = tril(diag(β) (K Kᵀ ⊙
   exp(γ_i - γ_j)), -1)``, ``T = (I + A)⁻¹ diag(β)`` (a unit lower-triangular solve), ``W = T
   (exp(γ) ⊙ K)``, ``U = T V``, ``Aqk = tril(Q Kᵀ ⊙ exp(γ_i - γ_j))`` with ``Q`` already
   scaled, and the gated ``Q ⊙ exp(γ)``, ``K ⊙ exp(γ_last - γ)``, ``exp(γ_last)``. The
   pairwise decays are computed pair by pair (masked before ``exp``), never as a ratio of two
   exponentials, so strong decays cannot overflow.
3. **Inter-chunk** (:func:`inter_chunk`, a scan over chunks): with ``S`` the state entering a
   chunk, ``V' = U - W S``, ``S ← exp(γ_last) ⊙ S + (K ⊙ exp(γ_last - γ))ᵀ V'``.
4. **Output** (:func:`chunk_output`): ``O = (Q ⊙ exp(γ)) S + Aqk V'``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .delta_rule import l2norm, varlen_plan
from .packing import gather_rows, take_rows

__all__ = [
    "Chunks",
    "Intra",
    "chunk_output",
    "decayed_pairs",
    "from_chunks",
    "gates_factor",
    "inter_chunk",
    "intra_chunk",
    "to_chunks",
]

HIGHEST = jax.lax.Precision.HIGHEST


def product_precision(dtype: Any) -> Any:
    """The precision of the float32 products for inputs of ``dtype``: ``HIGHEST`` for float32
    inputs; ``HIGH`` for 16-bit ones (TF32 on NVIDIA GPUs, three bf16 passes on TPUs, float32 on
    CPUs: finer than the inputs either way). XLA's GPU backend autotunes float32 ``HIGHEST``
    products for minutes: the XLA ``kernel_delta_attention`` at B4 T4096 H16 D128 bf16 compiled
    for over 130 s on an H200 with them, 2.6 s (forward) and 6.6 s (forward+backward) with TF32
    products (measured at default precision, which is TF32 there as ``HIGH`` is)."""
    return HIGHEST if jnp.dtype(dtype) == jnp.float32 else jax.lax.Precision.HIGH


class Chunks(NamedTuple):
    """Chunked inputs ``[R, HV, NC, C, ...]`` (float32; q, k, v in ``to_chunks``'s ``dtype``)
    and how to undo the layout."""

    q: Any  # [R, HV, NC, C, K], scaled (and normalized)
    k: Any  # [R, HV, NC, C, K]
    v: Any  # [R, HV, NC, C, V]
    beta: Any  # [R, HV, NC, C]
    g: Any  # [R, HV, NC, C, Kg] or None
    h0: Any  # [N, HV, K, V] float32 (zeros when not given)
    plan: dict[str, Any] | None  # varlen_plan(...) under varlen
    t: int


class Intra(NamedTuple):
    w: Any  # [R, HV, NC, C, K]
    u: Any  # [R, HV, NC, C, V]
    aqk: Any  # [R, HV, NC, C, C]
    qg: Any  # [R, HV, NC, C, K]
    kg: Any  # [R, HV, NC, C, K]
    glast: Any  # [R, HV, NC, Kg] (ones without a gate)


def to_chunks(
    q: Any,
    k: Any,
    v: Any,
    beta: Any,
    gate: Any,
    h0: Any,
    cu_seqlens: Any,
    *,
    scale: float,
    use_qk_l2norm: bool,
    chunk: int,
    dtype: Any = jnp.float32,
    gather_transpose: bool = False,
) -> Chunks:
    """Canonical arguments (see :mod:`~ejkernel.ops.families.delta_rule`) → chunks: q, k, v
    normalized and scaled in float32, then stored as ``dtype`` (float32 by default; a backend
    whose kernels convert on load may keep 16-bit inputs at their width: half the bytes of this
    layout step, one rounding, as fla's L2-norm kernel writes its input's dtype); β, the gate and
    the states in float32. ``gather_transpose``: under varlen, the layout's gradient is the
    inverse gather (:func:`~ejkernel.ops.families.packing.take_rows`: a custom VJP, so reverse
    mode only; for a backend whose kernels are custom VJPs already) instead of JAX's scatter-add."""
    f32 = jnp.float32
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    q, k, v, beta = (x.astype(f32) for x in (q, k, v, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = jnp.repeat((q * scale).astype(dtype), hv // h, axis=2)
    k = jnp.repeat(k.astype(dtype), hv // h, axis=2)
    v = v.astype(dtype)
    g = gate.astype(f32) if gate is not None else None
    n = int(cu_seqlens.shape[0]) - 1 if cu_seqlens is not None else b
    h0 = jnp.zeros((n, hv, dk, dv), f32) if h0 is None else h0.astype(f32)
    xs = [q, k, v, beta[..., None]] + ([g] if g is not None else [])
    plan = None
    if cu_seqlens is None:
        nc = -(-t // chunk)
        xs = [jnp.pad(x, ((0, 0), (0, nc * chunk - t), (0, 0), (0, 0))) for x in xs]
    else:
        plan = varlen_plan(cu_seqlens, t, chunk)
        nc = plan["num_chunks"]
        if gather_transpose:
            xs = [take_rows(x[0], plan["src"], plan["dst"])[None] for x in xs]
        else:
            xs = [gather_rows(x[0], plan["src"])[None] for x in xs]
    r = xs[0].shape[0]
    xs = [jnp.moveaxis(x.reshape(r, nc, chunk, hv, x.shape[-1]), 3, 1) for x in xs]
    return Chunks(xs[0], xs[1], xs[2], xs[3][..., 0], xs[4] if g is not None else None, h0, plan, t)


SUB = 16  # rows of the sub-blocks whose pairwise decays are computed exactly (per-channel gates)
#: Nats within which every row's cumulated gates stay of the first row's for :func:`decayed_pairs`
#: to factor the decays through it (:func:`gates_factor`): ``exp(±60)`` is far from float32's limits (``exp(±87)``).
SAFE_SPAN = 60.0


def gates_factor(gam: Any) -> jax.Array:
    """Whether :func:`decayed_pairs` may take its factored form for the cumulated gates ``gam
    [..., C, K]`` (a bool scalar): every row within :data:`SAFE_SPAN` nats of the first row's, in
    every chunk. NaN or infinite gates fail it (the exact form)."""
    return jnp.max(jnp.abs(gam - gam[..., :1, :])) <= SAFE_SPAN


def decayed_pairs(x: Any, y: Any, gam: Any, mask: Any, precision: Any = HIGHEST, *, factored: bool = False) -> Any:
    """``M[i, j] = Σ_d x_i[d] y_j[d] exp(γ_i[d] - γ_j[d])`` where ``mask`` (else 0): ``[..., C, C]``.

    Per-channel gates, ``factored`` (only where :func:`gates_factor` holds; callers choose the form
    for a whole computation with ``lax.cond``, so one branch runs): one matmul of ``x_i ⊙ exp(γ_i -
    γ_0)`` and ``y_j ⊙ exp(γ_0 - γ_j)``, neither factor over ``exp(SAFE_SPAN)`` nor under its
    inverse. Otherwise the exact form for any gates (fla's KDA intra-chunk scheme): pairs in
    different ``SUB``-row sub-blocks are a matmul of ``x_i ⊙ exp(γ_i - γ_r)`` and ``y_j ⊙ exp(γ_r -
    γ_j)`` with ``r`` the first row of ``i``'s sub-block (``j < r <= i``, so both exponents are
    ``<= 0`` for a gate ``<= 0``); pairs inside a diagonal sub-block take the exact per-pair decay
    (masked before ``exp``).
    """
    if gam is None:
        return jnp.where(mask, jnp.einsum("...ik,...jk->...ij", x, y, precision=precision), 0.0)
    if gam.shape[-1] == 1:
        diff = gam[..., :, None, 0] - gam[..., None, :, 0]
        decay = jnp.exp(jnp.where(mask, diff, 0.0))
        return jnp.where(mask, jnp.einsum("...ik,...jk->...ij", x, y, precision=precision) * decay, 0.0)
    if factored:
        ref = gam[..., :1, :]
        xs, ys = x * jnp.exp(gam - ref), y * jnp.exp(ref - gam)
        return jnp.where(mask, jnp.einsum("...ik,...jk->...ij", xs, ys, precision=precision), 0.0)
    return _exact_pairs(x, y, gam, mask=mask, precision=precision)


def _exact_pairs(x: Any, y: Any, gam: Any, *, mask: Any, precision: Any) -> Any:
    """:func:`decayed_pairs` for any per-channel gates: exact per pair inside the diagonal
    sub-blocks, through the sub-block's first row elsewhere (every exponent ``<= 0``)."""
    size = x.shape[-2]
    sub = min(SUB, size)
    nb = size // sub
    lead = x.shape[:-2]
    kdim = x.shape[-1]
    blk = jnp.arange(size) // sub
    # Diagonal sub-blocks: exact pairwise decays [..., nb, sub, sub, K].
    xb, yb, gb = (a.reshape(*lead, nb, sub, a.shape[-1]) for a in (x, y, gam))
    mb = mask.reshape(nb, sub, nb, sub)[jnp.arange(nb), :, jnp.arange(nb), :]  # [nb, sub, sub]
    d = gb[..., :, None, :] - gb[..., None, :, :]
    d = jnp.exp(jnp.where(mb[..., None], d, 0.0))
    diag = jnp.where(mb, jnp.sum(xb[..., :, None, :] * yb[..., None, :, :] * d, axis=-1), 0.0)
    if nb == 1:
        return diag.reshape(*lead, size, size)
    # Off-diagonal sub-blocks through the reference row r of each row block.
    ref = gb[..., :1, :]  # [..., nb, 1, K]
    xs = (xb * jnp.exp(gb - ref)).reshape(*lead, nb, sub, kdim)
    before = blk[None, :] < jnp.arange(nb)[:, None]  # [nb, C]: column j lies in an earlier block
    e = jnp.where(before[..., None], ref - gam[..., None, :, :], 0.0)  # [..., nb, C, K]
    ys = jnp.where(before[..., None], y[..., None, :, :] * jnp.exp(e), 0.0)
    off = jnp.einsum("...bsk,...bjk->...bsj", xs, ys, precision=precision).reshape(*lead, size, size)
    eye = jnp.eye(nb, dtype=diag.dtype)
    block_diag = (diag[..., :, :, None, :] * eye[:, None, :, None]).reshape(*lead, size, size)
    full = off + block_diag
    return jnp.where(mask, full, 0.0)


def intra_chunk(c: Chunks, precision: Any = HIGHEST) -> Intra:
    """Step 2 of the module docstring, parallel over every chunk. ``precision`` of its products
    (float32 operands): ``HIGHEST`` by default; a GPU backend with 16-bit inputs may pass
    ``None`` (TF32 tensor cores, 10 mantissa bits: still finer than the inputs'). Per-channel
    gates take :func:`decayed_pairs`' factored form where :func:`gates_factor` allows it (one
    ``lax.cond`` for the call: one branch runs)."""
    body = functools.partial(_intra_chunk, precision=precision)
    gam = jnp.cumsum(c.g, axis=-2) if c.g is not None else None
    if gam is None or gam.shape[-1] == 1:
        return body(c.q, c.k, c.v, c.beta, gam, factored=False)
    return jax.lax.cond(
        gates_factor(gam),
        functools.partial(body, factored=True),
        functools.partial(body, factored=False),
        c.q, c.k, c.v, c.beta, gam,
    )  # fmt: skip


def _intra_chunk(q: Any, k: Any, v: Any, beta: Any, gam: Any, *, precision: Any, factored: bool) -> Intra:
    """``intra_chunk`` on the chunks' arrays, ``gam`` the gates cumulated within each chunk."""
    size = k.shape[-2]
    i = jnp.arange(size)
    strict, causal = i[:, None] > i[None, :], i[:, None] >= i[None, :]
    a = decayed_pairs(k, k, gam, strict, precision, factored=factored) * beta[..., :, None]
    eye = jnp.eye(size, dtype=a.dtype)
    tmat = jax.lax.linalg.triangular_solve(
        eye + a, jnp.broadcast_to(eye * beta[..., None, :], a.shape), left_side=True, lower=True, unit_diagonal=True
    )
    if gam is None:
        kd, qg, kg = k, q, k
        glast = jnp.ones((*k.shape[:3], 1), k.dtype)
    else:
        last = gam[..., -1:, :]
        kd = k * jnp.exp(gam)
        qg = q * jnp.exp(gam)
        kg = k * jnp.exp(last - gam)
        glast = jnp.exp(last[..., 0, :])
    w = jnp.einsum("...ij,...jk->...ik", tmat, kd, precision=precision)
    u = jnp.einsum("...ij,...jv->...iv", tmat, v, precision=precision)
    aqk = decayed_pairs(q, k, gam, causal, precision, factored=factored)
    return Intra(w, u, aqk, qg, kg, glast)


def inter_chunk(c: Chunks, x: Intra, precision: Any = HIGHEST) -> tuple[Any, Any, Any]:
    """Step 3: the state entering every chunk ``[R, HV, NC, K, V]``, the corrected values
    ``V'`` ``[R, HV, NC, C, V]`` and the final states ``[N, HV, K, V]`` (float32)."""
    varlen = c.plan is not None
    move = lambda a: jnp.moveaxis(a, 2, 0)  # noqa: E731
    xs: tuple[Any, ...] = (move(x.w), move(x.u), move(x.kg), move(x.glast))
    if varlen:
        xs += (c.plan["chunk_first"], c.plan["chunk_seq"])

    def step(s: Any, inp: Any) -> tuple[Any, Any]:
        w, u, kg, gl = inp[:4]
        if varlen:
            first, seq = inp[4:]
            s = jnp.where(first, c.h0[seq][None], s)
        vn = u - jnp.einsum("rhck,rhkv->rhcv", w, s, precision=precision)
        s_next = gl[..., None] * s + jnp.einsum("rhck,rhcv->rhkv", kg, vn, precision=precision)
        return s_next, (s, vn, s_next if varlen else None)

    init = jnp.zeros_like(c.h0[:1]) if varlen else c.h0
    final, (states, vn, ends) = jax.lax.scan(step, init, xs)
    if varlen:
        last = c.plan["last_chunk"]
        final = jnp.where((last >= 0)[:, None, None, None], ends[jnp.maximum(last, 0), 0], c.h0)
    return jnp.moveaxis(states, 0, 2), jnp.moveaxis(vn, 0, 2), final


def chunk_output(x: Intra, states: Any, vn: Any, precision: Any = HIGHEST) -> Any:
    """Step 4: ``[R, HV, NC, C, V]``."""
    o = jnp.einsum("...ck,...kv->...cv", x.qg, states, precision=precision)
    return o + jnp.einsum("...ij,...jv->...iv", x.aqk, vn, precision=precision)


def from_chunks(c: Chunks, o: Any, *, gather_transpose: bool = False) -> Any:
    """Chunked output ``[R, HV, NC, C, V]`` → ``[B, T, HV, V]`` (float32)."""
    r, hv, nc, size, dv = o.shape
    o = jnp.moveaxis(o, 1, 3).reshape(r, nc * size, hv, dv)
    if c.plan is None:
        return o[:, : c.t]
    if gather_transpose:  # as in to_chunks
        return take_rows(o[0], c.plan["dst"], c.plan["src"])[None]
    return gather_rows(o[0], c.plan["dst"])[None]
