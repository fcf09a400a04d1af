"""Triton kernels of the chunked delta rule's inter-chunk part (fla's ``chunk_gated_delta_rule_fwd_h``,
``chunk_fwd_o`` and ``chunk_gated_delta_rule_bwd_dhu`` family), on the chunk-aligned, head-major
layout of :mod:`ejkernel.ops.families.delta_rule_math` (``[R·HV, NC·C, ...]``; every sequence starts
a chunk, padding is inert).

- ``delta_fwd_h_kernel``: one program per (head row, value block) walks the chunks in order,
  keeps the state block ``S [K, BV]`` in float32 registers and writes the state entering each
  chunk, the corrected values ``V' = U - W S`` and the final state(s):
  ``S ← exp(γ_last) ⊙ S + (K ⊙ exp(γ_last - γ))ᵀ V'``.
- ``delta_fwd_o_kernel``: one program per (head row x chunk, value block):
  ``O = (Q ⊙ exp(γ)) S + Aqk V'``.
- ``delta_bwd_dh_kernel``: the reverse walk: with ``dS`` the gradient of the state leaving a
  chunk, ``dV' = Aqkᵀ dO + (K ⊙ exp(γ_last - γ)) dS`` and the gradient of the state entering
  it ``Qgᵀ dO + exp(γ_last) ⊙ dS - Wᵀ dV'``.
- ``delta_bwd_dqkw_kernel``: one program per (head row x chunk, key block): the per-chunk
  products of the backward, ``dQg``, ``dW``, ``dKg``, ``d exp(γ_last)`` and ``dAqk``.

Under varlen (``VARLEN``) the state walks run one program per (sequence, head, value block) over
that sequence's chunks only (``c_lo[n] .. c_hi[n]``), from its initial state to its final one:
the serial chain is the longest sequence's, not the packed batch's (fla's layout); with ``LPT``
the longest sequences' walks are launched first (``_walker``). Chunks past
the last sequence (at most one per sequence) are never walked: their states, ``V'`` and state
gradients are left unwritten. Every later kernel works chunk by chunk, so what it derives from
them (those chunks' outputs and gradients) stays in those chunks, whose rows are all padding:
the layout's gathers never read them.
Matmul operands are in the inputs' dtype (``IEEE``: float32 inputs, full-precision dots).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._grid import tile_and_row


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _walker(order, HV, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, VARLEN: tl.constexpr, LPT: tl.constexpr):
    """``(i_s, i_v)``: the state (head row, or under varlen sequence × head) and value block of
    this walk. ``LPT`` (varlen): a one-dimensional grid in order of decreasing sequence length
    (``order``: the sequences, longest first), the value blocks of one (sequence, head) adjacent,
    so that the longest walks start first and no long walk waits behind short ones for an SM."""
    if VARLEN and LPT:
        nv: tl.constexpr = (V + BV - 1) // BV
        p = tl.program_id(0)
        rank = p // nv
        i_v = p % nv
        i_s = tl.load(order + rank // HV).to(tl.int64) * HV + rank % HV
    else:
        i_s = tl.program_id(0).to(tl.int64)
        i_v = tl.program_id(1)
    return i_s, i_v


@triton.jit
def delta_fwd_h_kernel(
    w, u, kg, gl, h0, order, c_lo, c_hi, NC, HV,
    states, vn, final,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    VARLEN: tl.constexpr, HAS_H0: tl.constexpr, IEEE: tl.constexpr, LPT: tl.constexpr,
):  # fmt: skip
    """Program ``(i, i_v)``: head row ``i`` (``VARLEN``: sequence ``i // HV``, head ``i % HV``,
    walking only that sequence's chunks ``c_lo[n] .. c_hi[n]``) and value block ``i_v``
    (:func:`_walker`)."""
    i_s, i_v = _walker(order, HV, K, V, BV, VARLEN, LPT)  # the state's index: head row, or sequence x head
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]  # [BK, BV] offsets in a [K, V] state
    if VARLEN:  # one packed row (R = 1): head i_s % HV, this sequence's chunks
        i_rh = i_s % HV
        lo = tl.load(c_lo + i_s // HV)
        hi = tl.load(c_hi + i_s // HV) + 1  # c_hi = -1 for an empty sequence: no chunk
    else:
        i_rh = i_s
        lo = 0
        hi = NC
    b_s = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        b_s = tl.load(h0 + i_s * K * V + p_state, mask=m_kv, other=0.0).to(tl.float32)
    for i_c in range(lo, hi):
        b_s = _fwd_h_step(w, u, kg, gl, states, vn, b_s, i_rh, i_c, NC, o_k, o_v, p_state, m_kv, K, V, C, IEEE)
    tl.store(final + i_s * K * V + p_state, b_s, mask=m_kv)


@triton.jit
def _fwd_h_step(
    w, u, kg, gl, states, vn, b_s, i_rh, i_c, NC, o_k, o_v, p_state, m_kv,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Chunk ``i_c`` of head row ``i_rh``: store the state entering it and ``V' = U − W S``;
    return the state leaving it."""
    m_k = o_k < K
    m_v = o_v < V
    o_c = tl.arange(0, C)
    dt = w.dtype.element_ty
    tl.store(states + (i_rh * NC + i_c) * K * V + p_state, b_s.to(states.dtype.element_ty), mask=m_kv)
    rows = i_rh * NC * C + i_c * C + o_c  # [C]
    b_w = tl.load(w + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)  # [C, BK]
    b_u = tl.load(u + rows[:, None] * V + o_v[None, :], mask=m_v[None, :], other=0.0).to(tl.float32)
    b_vn = b_u - _dot(b_w, b_s.to(dt), IEEE)  # [C, BV]
    tl.store(vn + rows[:, None] * V + o_v[None, :], b_vn.to(vn.dtype.element_ty), mask=m_v[None, :])
    b_kg = tl.load(kg + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)  # [C, BK]
    b_gl = tl.load(gl + (i_rh * NC + i_c) * K + o_k, mask=m_k, other=0.0).to(tl.float32)  # [BK]
    return b_s * b_gl[:, None] + _dot(tl.trans(b_kg), b_vn.to(dt), IEEE)


@triton.jit
def delta_fwd_o_kernel(
    qg, states, aqk, vn, NC,
    o,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    i_c, i_rh = tile_and_row(NC)  # (head row, chunk) on axis 0: _grid
    i_c, i_rh = i_c.to(tl.int64), i_rh.to(tl.int64)
    i_v = tl.program_id(1)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    rows = i_rh * NC * C + i_c * C + o_c
    b_q = tl.load(qg + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)  # [C, BK]
    b_s = tl.load(
        states + (i_rh * NC + i_c) * K * V + o_k[:, None] * V + o_v[None, :],
        mask=m_k[:, None] & m_v[None, :], other=0.0,
    )  # fmt: skip
    b_a = tl.load(aqk + rows[:, None] * C + o_c[None, :])  # [C, C]
    b_vn = tl.load(vn + rows[:, None] * V + o_v[None, :], mask=m_v[None, :], other=0.0)  # [C, BV]
    b_o = _dot(b_q, b_s.to(b_q.dtype), IEEE) + _dot(b_a, b_vn.to(b_a.dtype), IEEE)
    tl.store(o + rows[:, None] * V + o_v[None, :], b_o.to(o.dtype.element_ty), mask=m_v[None, :])


@triton.jit
def delta_bwd_dh_kernel(
    qg, kg, w, gl, aqk, do, dfinal, order, c_lo, c_hi, NC, HV,
    dstates, dvn, dh0,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    VARLEN: tl.constexpr, IEEE: tl.constexpr, LPT: tl.constexpr,
):  # fmt: skip
    """The reverse walk, programs as in :func:`delta_fwd_h_kernel`: from the final state's
    gradient down to the initial state's."""
    i_s, i_v = _walker(order, HV, K, V, BV, VARLEN, LPT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    if VARLEN:
        i_rh = i_s % HV
        lo = tl.load(c_lo + i_s // HV)
        hi = tl.load(c_hi + i_s // HV) + 1
    else:
        i_rh = i_s
        lo = 0
        hi = NC
    b_ds = tl.load(dfinal + i_s * K * V + p_state, mask=m_kv, other=0.0).to(tl.float32)
    for j in range(hi - lo):
        b_ds = _bwd_dh_step(
            qg, kg, w, gl, aqk, do, dstates, dvn, b_ds, i_rh, hi - 1 - j, NC, o_k, o_v, p_state, m_kv,
            K, V, C, IEEE,
        )  # fmt: skip
    tl.store(dh0 + i_s * K * V + p_state, b_ds, mask=m_kv)


@triton.jit
def _bwd_dh_step(
    qg, kg, w, gl, aqk, do, dstates, dvn, b_ds, i_rh, i_c, NC, o_k, o_v, p_state, m_kv,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Chunk ``i_c``: store ``dS`` (the gradient of the state leaving it) and ``dV'``; return the
    gradient of the state entering it."""
    m_k = o_k < K
    m_v = o_v < V
    o_c = tl.arange(0, C)
    dt = w.dtype.element_ty
    tl.store(dstates + (i_rh * NC + i_c) * K * V + p_state, b_ds.to(dstates.dtype.element_ty), mask=m_kv)
    rows = i_rh * NC * C + i_c * C + o_c
    b_do = tl.load(do + rows[:, None] * V + o_v[None, :], mask=m_v[None, :], other=0.0)  # [C, BV]
    b_a = tl.load(aqk + rows[:, None] * C + o_c[None, :])  # [C, C]
    b_kg = tl.load(kg + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)  # [C, BK]
    b_dvn = _dot(tl.trans(b_a), b_do.to(dt), IEEE) + _dot(b_kg, b_ds.to(dt), IEEE)  # [C, BV]
    tl.store(dvn + rows[:, None] * V + o_v[None, :], b_dvn.to(dvn.dtype.element_ty), mask=m_v[None, :])
    b_q = tl.load(qg + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)
    b_w = tl.load(w + rows[:, None] * K + o_k[None, :], mask=m_k[None, :], other=0.0)
    b_gl = tl.load(gl + (i_rh * NC + i_c) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    return b_ds * b_gl[:, None] + _dot(tl.trans(b_q), b_do.to(dt), IEEE) - _dot(tl.trans(b_w), b_dvn.to(dt), IEEE)


@triton.jit
def delta_bwd_dqkw_kernel(
    do, vn, dvn, states, dstates, NC,
    dqg, dw, dkg, dgl, daqk,
    K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """The per-chunk products of the inter backward, one program per (head row x chunk, key
    block), walking the value dim ``BV`` columns at a time: ``dQg = dO Sᵀ``, ``dW = -dV' Sᵀ``,
    ``dKg = V' dSᵀ``, ``d exp(γ_last) = Σ_v S ⊙ dS`` over its ``BK`` key channels, and (the first
    key block only) ``dAqk = dO V'ᵀ``. ``S``/``dS``: the states entering / the gradient of the
    state leaving each chunk."""
    i_c, i_rh = tile_and_row(NC)  # (head row, chunk) on axis 0: _grid
    i_c, i_rh = i_c.to(tl.int64), i_rh.to(tl.int64)
    i_k = tl.program_id(1)
    o_c = tl.arange(0, C)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    rows = i_rh * NC * C + i_c * C + o_c
    p_state = (i_rh * NC + i_c) * K * V + o_k[:, None] * V
    dt = do.dtype.element_ty
    b_dq = tl.zeros([C, BK], dtype=tl.float32)
    b_dw = tl.zeros([C, BK], dtype=tl.float32)
    b_dk = tl.zeros([C, BK], dtype=tl.float32)
    b_dgl = tl.zeros([BK], dtype=tl.float32)
    b_da = tl.zeros([C, C], dtype=tl.float32)
    for v0 in range(0, V, BV):
        o_v = v0 + tl.arange(0, BV)
        m_v = o_v < V
        m_kv = m_k[:, None] & m_v[None, :]
        p_cv = rows[:, None] * V + o_v[None, :]
        b_do = tl.load(do + p_cv, mask=m_v[None, :], other=0.0)  # [C, BV]
        b_vn = tl.load(vn + p_cv, mask=m_v[None, :], other=0.0).to(dt)
        b_dvn = tl.load(dvn + p_cv, mask=m_v[None, :], other=0.0).to(dt)
        b_s = tl.load(states + p_state + o_v[None, :], mask=m_kv, other=0.0).to(dt)  # [BK, BV]
        b_ds = tl.load(dstates + p_state + o_v[None, :], mask=m_kv, other=0.0).to(dt)
        b_st = tl.trans(b_s)
        b_dq += _dot(b_do, b_st, IEEE)
        b_dw -= _dot(b_dvn, b_st, IEEE)
        b_dk += _dot(b_vn, tl.trans(b_ds), IEEE)
        b_dgl += tl.sum(b_s.to(tl.float32) * b_ds.to(tl.float32), axis=1)
        if i_k == 0:
            b_da += _dot(b_do, tl.trans(b_vn), IEEE)
    p_ck = rows[:, None] * K + o_k[None, :]
    tl.store(dqg + p_ck, b_dq.to(dqg.dtype.element_ty), mask=m_k[None, :])
    tl.store(dw + p_ck, b_dw.to(dw.dtype.element_ty), mask=m_k[None, :])
    tl.store(dkg + p_ck, b_dk.to(dkg.dtype.element_ty), mask=m_k[None, :])
    tl.store(dgl + (i_rh * NC + i_c) * K + o_k, b_dgl, mask=m_k)
    if i_k == 0:
        tl.store(daqk + rows[:, None] * C + o_c[None, :], b_da.to(daqk.dtype.element_ty))
