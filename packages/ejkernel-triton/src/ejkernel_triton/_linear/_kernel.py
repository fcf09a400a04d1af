"""Chunked gated linear attention in Triton (fla's ``chunk_gla`` family; GLA, Yang et al. 2024, §4).

Tokens are ``[total_tokens, heads, dim]`` (batch rows or packed sequences back to back); chunk
``c`` covers rows ``[chunk_start[c], chunk_end[c])`` of one sequence (a sequence's chunks start at
its first token, so no chunk crosses a boundary: varlen needs no padding). ``g`` is the float32
log gate per key channel, ``[tokens, heads, K]``, or with ``SCALAR`` one per token and head,
``[tokens, heads]`` (lightning, Mamba2's SSD, ``g_gamma``: loaded as a ``[BT, 1]`` column that
broadcasts over the key channels, and its gradient reduced in the kernel). Within a chunk ``G``
is its inclusive cumulative sum from the chunk's start (``tl.cumsum``), ``G_C`` the chunk's total.

- ``linear_fwd_h_kernel``: per (sequence, head, K tile, V tile), the chunk-state recurrence
  ``S ← diag(exp(G_C)) S + (k ⊙ exp(G_C − G))ᵀ v``, storing the state entering every chunk.
- ``linear_fwd_o_kernel``: per (chunk, head), ``o = (q ⊙ exp(G)) S_in + A v`` (V tiles in turn) with the
  intra-chunk scores ``A[t, s] = Σ_i q_t,i k_s,i exp(G_t,i − G_s,i)`` (``s <= t``): one product
  (``FPREC``) ``(q e^{G − G_r}) (k e^{G_r − G})ᵀ`` factored through the chunk's middle row ``r`` when
  every ``|G − G_r| <= SPAN`` (30 nats: no factor or product overflows), else built column by
  column, every exponent spanning positions ``s..t`` only (exact for any decay; factoring through
  the chunk's start overflows once a chunk decays by ~88 nats). A scalar gate (``SCALAR``: one
  number per token and head) needs neither: ``A = (q kᵀ) ⊙ exp(G_t − G_s)``.
- ``linear_bwd_dh_kernel``: the reverse recurrence of the state gradients,
  ``dS ← diag(exp(G_C)) dS + (q ⊙ exp(G))ᵀ do``, storing the gradient leaving every chunk.
- ``linear_bwd_dv_kernel``: per (chunk, head), dv from the state gradients and the intra-chunk
  scores (as in the forward).
- ``linear_bwd_dqk_kernel``: per (key tile, chunk, head), dq and dk from the recomputed states and
  the state gradients, the intra-chunk part factored or column by column as in the forward.

The dqk kernel also writes the gate gradient, chunk by chunk (see its comments): the usual
``dg_u = Σ_{t >= u} (q_t dq_t − k_t dk_t)`` over the whole sequence subtracts terms of order one
that cancel exactly (each pair s = t, each key's path to the final state); their rounding, summed
over a sequence, swamps the small true gradient of a steeply decayed gate.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_rows(ptr, rows, m_rows, heads, head, cols, m_cols, DIM: tl.constexpr):
    """``[rows, cols]`` of a ``[tokens, heads, DIM]`` tensor (zeros outside the masks)."""
    offs = (rows[:, None] * heads + head) * DIM + cols[None, :]
    return tl.load(ptr + offs, mask=m_rows[:, None] & m_cols[None, :], other=0.0)


@triton.jit
def _gate_sums(g, rows, m_t, heads, head, cols, m_cols, DIM: tl.constexpr, SCALAR: tl.constexpr):
    """The chunk's cumulative log gate ``G [BT, BK]`` and its total ``G_C [BK]`` from a
    ``[tokens, heads, DIM]`` float32 gate; with ``SCALAR`` (one gate per token and head, a
    ``[tokens, heads]`` tensor) ``G [BT, 1]`` and ``G_C [1]``, which broadcast over the key
    channels wherever the per-channel ones are read. (The scan runs on the 1-D gate: Triton 3.6
    fails to lower a ``tl.cumsum`` over a ``[BT, 1]`` tile for sm_90.)"""
    if SCALAR:
        b_g = tl.load(g + rows * heads + head, mask=m_t, other=0.0)
        b_G = tl.cumsum(b_g, axis=0)[:, None]
        b_gl = tl.sum(b_g[:, None], axis=0)
    else:
        b_g = _load_rows(g, rows, m_t, heads, head, cols, m_cols, DIM)
        b_G = tl.cumsum(b_g, axis=0)
        b_gl = tl.sum(b_g, axis=0)
    return b_G, b_gl


@triton.jit
def _state_ptrs(ptr, index, head, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, o_k, o_v):
    """Pointers of a ``[BK, BV]`` tile of state ``index`` of a ``[n, H, K, V]`` tensor."""
    return ptr + ((index * H + head) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :]


@triton.jit
def _row(x, o_t, j):
    """Row ``j`` of a ``[BT, D]`` tile, as a ``[D]`` vector."""
    return tl.sum(tl.where((o_t == j)[:, None], x, 0.0), axis=0)


@triton.jit
def linear_fwd_h_kernel(
    k, v, g, h0, cu, choff,
    hs, ht,
    H: tl.constexpr, HKV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, SCALAR: tl.constexpr,
):  # fmt: skip
    i_nh, i_k, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h = i_nh // H, i_nh % H
    i_hk = i_h // (H // HKV)
    bos = tl.load(cu + i_n).to(tl.int64)
    eos = tl.load(cu + i_n + 1).to(tl.int64)
    c0 = tl.load(choff + i_n)
    n_chunks = tl.load(choff + i_n + 1) - c0
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    b_h = tl.load(_state_ptrs(h0, i_n, i_h, H, K, V, o_k, o_v), mask=m_kv, other=0.0).to(tl.float32)  # [BK, BV]
    for i in range(n_chunks):
        tl.store(_state_ptrs(hs, c0 + i, i_h, H, K, V, o_k, o_v), b_h.to(hs.dtype.element_ty), mask=m_kv)
        rows = bos + i * BT + o_t
        m_t = rows < eos
        b_k = _load_rows(k, rows, m_t, HKV, i_hk, o_k, m_k, K)  # [BT, BK]
        b_v = _load_rows(v, rows, m_t, HKV, i_hk, o_v, m_v, V)  # [BT, BV]
        b_G, b_gl = _gate_sums(g, rows, m_t, H, i_h, o_k, m_k, K, SCALAR)  # [BT, BK], [BK] float32
        b_kg = (b_k.to(tl.float32) * tl.exp(b_gl[None, :] - b_G)).to(b_v.dtype)
        b_h = b_h * tl.exp(b_gl)[:, None] + tl.dot(tl.trans(b_kg), b_v, input_precision=PREC)
    tl.store(_state_ptrs(ht, i_n, i_h, H, K, V, o_k, o_v), b_h, mask=m_kv)


# The intra-chunk products factor through the chunk's middle row r when every exponent of the
# factors stays within +-SPAN (per channel, |G_t - G_r| <= SPAN): e^(G_t - G_s) = e^(G_t - G_r)
# e^(G_r - G_s), each factor and every product of two (<= e^(2 SPAN) ~ 1e26, also for the pairs
# s > t that are masked afterwards) finite in float32. Those chunks take one product of float32
# factors (``_fdot``: exact float32 for float32 inputs, TF32 for 16-bit ones) instead of BT column
# steps; a chunk that decays more (or grows: gates may be positive) keeps the column
# steps, whose every exponent spans positions s..t only.
SPAN = tl.constexpr(30.0)


@triton.jit
def _middle_offsets(b_G, o_t, BT: tl.constexpr):
    """``G - G_r`` (``[BT, BK]``, r the chunk's middle row) and whether it stays within ``SPAN``."""
    b_d = b_G - _row(b_G, o_t, BT // 2)[None, :]
    return b_d, tl.max(tl.max(tl.abs(b_d), axis=1), axis=0) <= SPAN


@triton.jit
def _scalar_decay(b_G, o_t, STRICT: tl.constexpr, TRANS: tl.constexpr):
    """``D [BT, BT]``: ``exp(G_t − G_s)`` for ``s <= t`` (``s < t`` with ``STRICT``), else 0, of a
    scalar gate (``b_G [BT, 1]``): each exponent a difference of two scalars, exact for any decay.
    ``TRANS``: ``Dᵀ`` (row ``s``, column ``t``)."""
    b_gs = tl.sum(b_G, axis=1)
    if TRANS:
        b_gt, b_gs = b_gs[None, :], b_gs[:, None]
        o_r, o_c = o_t[None, :], o_t[:, None]
    else:
        b_gt, b_gs = b_gs[:, None], b_gs[None, :]
        o_r, o_c = o_t[:, None], o_t[None, :]
    if STRICT:
        keep = o_r > o_c
    else:
        keep = o_r >= o_c
    return tl.exp(tl.where(keep, b_gt - b_gs, float("-inf")))


@triton.jit
def _fdot(a, b, FPREC: tl.constexpr):
    """``a @ b`` of float32 operands, float32 accumulation: ``"ieee"`` exact float32 (FMA units),
    ``"tf32"`` or ``"tf32x3"`` on tensor cores, ``"bf16"`` both rounded to bfloat16 (fla's choice;
    float32's exponent range, so the factors of ``SPAN`` cannot overflow as in float16)."""
    if FPREC == "bf16":
        r = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    else:
        r = tl.dot(a, b, input_precision=FPREC)
    return r


@triton.jit
def _gate_scores(b_q, b_k, b_G, o_t, BT: tl.constexpr, FPREC: tl.constexpr):
    """``A [BT, BT]``: ``A[t, s] = Σ_i q_t,i k_s,i exp(G_t,i − G_s,i)`` for ``s <= t``, else 0
    (float32 ``b_q``, ``b_k``), of a per-channel gate: factored through the middle row within
    ``SPAN``, else column by column. (A scalar gate needs neither: ``A = (q kᵀ) ⊙ D``.)"""
    b_d, factored = _middle_offsets(b_G, o_t, BT)
    if factored:
        b_A = _fdot(b_q * tl.exp(b_d), tl.trans(b_k * tl.exp(-b_d)), FPREC)
        b_A = tl.where(o_t[:, None] >= o_t[None, :], b_A, 0.0)
    else:
        b_A = tl.zeros([BT, BT], dtype=tl.float32)
        for j in range(BT):
            b_kj = _row(b_k, o_t, j)
            b_gj = _row(b_G, o_t, j)
            b_e = tl.exp(tl.where((o_t >= j)[:, None], b_G - b_gj[None, :], float("-inf")))
            col = tl.sum(b_q * b_kj[None, :] * b_e, axis=1)
            b_A = tl.where((o_t == j)[None, :], col[:, None], b_A)
    return b_A


@triton.jit
def linear_fwd_o_kernel(
    q, k, v, g, hs, cstart, cend, scale,
    o,
    H: tl.constexpr, HKV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, SCALAR: tl.constexpr,
    FPREC: tl.constexpr,
):  # fmt: skip
    # One program per (chunk, head): the intra-chunk scores are built once and applied to every
    # value tile in turn.
    i_c, i_h = tl.program_id(0), tl.program_id(1)
    i_hk = i_h // (H // HKV)
    t0 = tl.load(cstart + i_c).to(tl.int64)
    t1 = tl.load(cend + i_c).to(tl.int64)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    rows = t0 + o_t
    m_t = rows < t1
    b_q = _load_rows(q, rows, m_t, H, i_h, o_k, m_k, K)  # [BT, BK]
    b_k = _load_rows(k, rows, m_t, HKV, i_hk, o_k, m_k, K)
    b_G, _ = _gate_sums(g, rows, m_t, H, i_h, o_k, m_k, K, SCALAR)
    dt = v.dtype.element_ty
    if SCALAR:  # A = (q kᵀ) ⊙ D (the inputs' dtype, float32 accumulation); the gate scales rows
        b_A = tl.dot(b_q.to(dt), tl.trans(b_k.to(dt)), input_precision=PREC)
        b_A = (b_A * (scale * _scalar_decay(b_G, o_t, False, False))).to(dt)
        b_qg = b_q.to(dt)
        b_rs = scale * tl.exp(b_G)  # [BT, 1]
    else:
        b_qf = b_q.to(tl.float32) * scale
        b_A = _gate_scores(b_qf, b_k.to(tl.float32), b_G, o_t, BT, FPREC).to(dt)
        b_qg = (b_qf * tl.exp(b_G)).to(dt)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_v = _load_rows(v, rows, m_t, HKV, i_hk, o_v, m_v, V)  # [BT, BV]
        b_h = tl.load(_state_ptrs(hs, i_c, i_h, H, K, V, o_k, o_v), mask=m_k[:, None] & m_v[None, :], other=0.0)
        b_o = tl.dot(b_qg, b_h.to(dt), input_precision=PREC)
        if SCALAR:
            b_o = b_o * b_rs
        b_o += tl.dot(b_A, b_v.to(dt), input_precision=PREC)
        p_o = o + (rows[:, None] * H + i_h) * V + o_v[None, :]
        tl.store(p_o, b_o.to(o.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


@triton.jit
def linear_bwd_dh_kernel(
    q, g, do, dht, cu, choff, scale,
    dhs, dh0,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, SCALAR: tl.constexpr,
):  # fmt: skip
    i_nh, i_k, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_n, i_h = i_nh // H, i_nh % H
    bos = tl.load(cu + i_n).to(tl.int64)
    eos = tl.load(cu + i_n + 1).to(tl.int64)
    c0 = tl.load(choff + i_n)
    n_chunks = tl.load(choff + i_n + 1) - c0
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    b_dh = tl.load(_state_ptrs(dht, i_n, i_h, H, K, V, o_k, o_v), mask=m_kv, other=0.0).to(tl.float32)
    for i in range(n_chunks):
        ic = n_chunks - 1 - i
        tl.store(_state_ptrs(dhs, c0 + ic, i_h, H, K, V, o_k, o_v), b_dh.to(dhs.dtype.element_ty), mask=m_kv)
        rows = bos + ic * BT + o_t
        m_t = rows < eos
        b_q = _load_rows(q, rows, m_t, H, i_h, o_k, m_k, K).to(tl.float32) * scale
        b_G, b_gl = _gate_sums(g, rows, m_t, H, i_h, o_k, m_k, K, SCALAR)
        b_do = _load_rows(do, rows, m_t, H, i_h, o_v, m_v, V)  # [BT, BV]
        b_qg = (b_q * tl.exp(b_G)).to(b_do.dtype)
        b_dh = b_dh * tl.exp(b_gl)[:, None] + tl.dot(tl.trans(b_qg), b_do, input_precision=PREC)
    tl.store(_state_ptrs(dh0, i_n, i_h, H, K, V, o_k, o_v), b_dh, mask=m_kv)


@triton.jit
def linear_bwd_dv_kernel(
    q, k, g, do, dhs, cstart, cend, scale,
    dv,
    H: tl.constexpr, HKV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, SCALAR: tl.constexpr,
    FPREC: tl.constexpr,
):  # fmt: skip
    """Per (chunk, head): ``dv = (k ⊙ exp(G_C − G)) dS_out + Aᵀ do`` (per query head), the
    intra-chunk scores ``A`` built once over the whole key dimension, the value tiles in turn."""
    i_c, i_h = tl.program_id(0), tl.program_id(1)
    i_hk = i_h // (H // HKV)
    t0 = tl.load(cstart + i_c).to(tl.int64)
    t1 = tl.load(cend + i_c).to(tl.int64)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    rows = t0 + o_t
    m_t = rows < t1
    dt = k.dtype.element_ty
    b_q = _load_rows(q, rows, m_t, H, i_h, o_k, m_k, K)  # [BT, BK]
    b_k = _load_rows(k, rows, m_t, HKV, i_hk, o_k, m_k, K)
    b_G, b_gl = _gate_sums(g, rows, m_t, H, i_h, o_k, m_k, K, SCALAR)
    if SCALAR:  # Aᵀ = (k qᵀ) ⊙ Dᵀ (the inputs' dtype, float32 accumulation); the gate scales rows
        b_At = tl.dot(b_k.to(dt), tl.trans(b_q.to(dt)), input_precision=PREC)
        b_At = (b_At * (scale * _scalar_decay(b_G, o_t, False, True))).to(dt)
        b_kg = b_k.to(dt)
        b_rs = tl.exp(b_gl[None, :] - b_G)  # [BT, 1]
    else:
        b_qf = b_q.to(tl.float32) * scale
        b_kf = b_k.to(tl.float32)
        b_At = tl.trans(_gate_scores(b_qf, b_kf, b_G, o_t, BT, FPREC)).to(dt)
        b_kg = (b_kf * tl.exp(b_gl[None, :] - b_G)).to(dt)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_do = _load_rows(do, rows, m_t, H, i_h, o_v, m_v, V).to(dt)
        b_dh = tl.load(_state_ptrs(dhs, i_c, i_h, H, K, V, o_k, o_v), mask=m_k[:, None] & m_v[None, :], other=0.0)
        b_dv = tl.dot(b_kg, b_dh.to(dt), input_precision=PREC)
        if SCALAR:
            b_dv = b_dv * b_rs
        b_dv += tl.dot(b_At, b_do, input_precision=PREC)
        p_dv = dv + (rows[:, None] * H + i_h) * V + o_v[None, :]
        tl.store(p_dv, b_dv.to(dv.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


@triton.jit
def _intra_dqk(b_dq, b_dA, b_q, b_kf, b_G, o_t, BT: tl.constexpr, BK: tl.constexpr, FPREC: tl.constexpr):
    """The intra-chunk pairs ``s < t`` of a per-channel gate added to ``dq`` and returned as
    ``dk``: factored through the middle row within ``SPAN``, else column by column."""
    b_d, factored = _middle_offsets(b_G, o_t, BT)
    if factored:  # see SPAN
        b_dAs = tl.where(o_t[:, None] > o_t[None, :], b_dA, 0.0)
        b_dq += tl.exp(b_d) * _fdot(b_dAs, b_kf * tl.exp(-b_d), FPREC)
        b_dk = tl.exp(-b_d) * _fdot(tl.trans(b_dAs), b_q * tl.exp(b_d), FPREC)
    else:
        b_dk = tl.zeros([BT, BK], dtype=tl.float32)
        for j in range(BT):
            b_kj = _row(b_kf, o_t, j)
            b_gj = _row(b_G, o_t, j)
            b_e = tl.exp(tl.where((o_t >= j)[:, None], b_G - b_gj[None, :], float("-inf")))  # [BT, BK]
            b_dAj = tl.sum(tl.where((o_t == j)[None, :] & (o_t > j)[:, None], b_dA, 0.0), axis=1)  # [BT]
            b_dq += b_dAj[:, None] * b_kj[None, :] * b_e
            b_dkj = tl.sum(b_dAj[:, None] * b_q * b_e, axis=0)  # [BK]
            b_dk += tl.where((o_t == j)[:, None], b_dkj[None, :], 0.0)
    return b_dq, b_dk


@triton.jit
def linear_bwd_dqk_kernel(
    q, k, v, g, do, hs, dhs, cstart, cend, scale,
    dq, dk, dg,
    H: tl.constexpr, HKV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, SCALAR: tl.constexpr,
    FPREC: tl.constexpr,
):  # fmt: skip
    """Per (key tile, chunk, head): ``dq``, ``dk`` and the gate gradient of the key channels
    ``[i_k·BK, (i_k+1)·BK)``. Every term is per key channel except ``dA = do vᵀ``, which each key
    tile forms again (a [BT, BT] product): splitting the key dimension halves the live tiles at
    head dim 128 (the one-kernel form spilled registers)."""
    i_c, i_k, i_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_hk = i_h // (H // HKV)
    t0 = tl.load(cstart + i_c).to(tl.int64)
    t1 = tl.load(cend + i_c).to(tl.int64)
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    rows = t0 + o_t
    m_t = rows < t1
    b_qn = _load_rows(q, rows, m_t, H, i_h, o_k, m_k, K)  # [BT, BK]
    b_q = b_qn.to(tl.float32) * scale
    b_k = _load_rows(k, rows, m_t, HKV, i_hk, o_k, m_k, K)
    b_G, b_gl = _gate_sums(g, rows, m_t, H, i_h, o_k, m_k, K, SCALAR)
    dt = b_k.dtype
    b_dA = tl.zeros([BT, BT], dtype=tl.float32)
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_hdh = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        m_kv = m_k[:, None] & m_v[None, :]
        b_v = _load_rows(v, rows, m_t, HKV, i_hk, o_v, m_v, V)  # [BT, BV]
        b_do = _load_rows(do, rows, m_t, H, i_h, o_v, m_v, V)
        b_h = tl.load(_state_ptrs(hs, i_c, i_h, H, K, V, o_k, o_v), mask=m_kv, other=0.0).to(dt)  # [BK, BV]
        b_dh = tl.load(_state_ptrs(dhs, i_c, i_h, H, K, V, o_k, o_v), mask=m_kv, other=0.0).to(dt)
        b_dA += tl.dot(b_do, tl.trans(b_v), input_precision=PREC)
        b_dq += tl.dot(b_do, tl.trans(b_h), input_precision=PREC)
        b_dk += tl.dot(b_v, tl.trans(b_dh), input_precision=PREC)
        b_hdh += tl.sum(b_h.to(tl.float32) * b_dh.to(tl.float32), axis=1)
    b_dq = b_dq * tl.exp(b_G)
    b_dko = b_dk * tl.exp(b_gl[None, :] - b_G)  # through the state leaving the chunk
    b_kf = b_k.to(tl.float32)
    # Gate gradient, per chunk (no cancellation between chunks): gate u of the chunk carries
    # (a)+(b) queries t >= u of the chunk: Σ_{t>=u} q_t·dq_t (intra pairs s < u and the entering
    #         state), less Σ_{s>=u} k_s·dk_s^intra (intra pairs with both ends after u);
    # (c)     keys s < u of the chunk reaching past it: Σ_{s<u} k_s·dk_s^out;
    # (d)     the entering state reaching past it: exp(G_C) Σ_j S_in ⊙ dS_out.
    # A scalar gate's gradient is the sum of these over the key channels: summed first, so no
    # [BT, BK] gradient tile stays live through the intra products.
    if SCALAR:
        b_kdo = tl.sum(b_kf * b_dko, axis=1)  # [BT]
        b_dg = tl.cumsum(b_kdo, axis=0) - b_kdo + tl.sum(tl.exp(b_gl) * b_hdh, axis=0)
    else:
        b_kdo = b_kf * b_dko
        b_dg = tl.cumsum(b_kdo, axis=0) - b_kdo + (tl.exp(b_gl) * b_hdh)[None, :]
    b_dA = tl.where(o_t[:, None] >= o_t[None, :], b_dA, 0.0)
    # The intra part of dq and dk, pairs s < t only: the diagonal (s = t) adds q_t k_t dA_tt to
    # both q·dq and k·dk, which cancel in the gate gradient; it joins dq and dk below, after dg.
    if SCALAR:  # products in the inputs' dtype (float32 accumulation), as the forward's
        b_dAD = (b_dA * _scalar_decay(b_G, o_t, True, False)).to(dt)
        b_dq += tl.dot(b_dAD, b_k, input_precision=PREC)
        b_dk = tl.dot(tl.trans(b_dAD), b_qn.to(dt), input_precision=PREC) * scale
    else:
        b_dq, b_dk = _intra_dqk(b_dq, b_dA, b_q, b_kf, b_G, o_t, BT, BK, FPREC)
    m_tk = m_t[:, None] & m_k[None, :]
    if SCALAR:  # one gate per token and head: this key tile's share, [tokens, H, cdiv(K, BK)]
        b_dg += tl.cumsum(tl.sum(b_q * b_dq - b_kf * b_dk, axis=1), axis=0, reverse=True)
        p_dg = dg + (rows * H + i_h) * tl.cdiv(K, BK) + i_k
        tl.store(p_dg, b_dg, mask=m_t)
    else:
        b_dg += tl.cumsum(b_q * b_dq - b_kf * b_dk, axis=0, reverse=True)
        p_dg = dg + (rows[:, None] * H + i_h) * K + o_k[None, :]
        tl.store(p_dg, b_dg, mask=m_tk)
    b_dAd = tl.sum(tl.where(o_t[:, None] == o_t[None, :], b_dA, 0.0), axis=1)  # [BT]
    b_dq += b_dAd[:, None] * b_kf
    b_dk += b_dAd[:, None] * b_q + b_dko
    p_dq = dq + (rows[:, None] * H + i_h) * K + o_k[None, :]
    tl.store(p_dq, (b_dq * scale).to(dq.dtype.element_ty), mask=m_tk)
    p_dk = dk + (rows[:, None] * H + i_h) * K + o_k[None, :]
    tl.store(p_dk, b_dk.to(dk.dtype.element_ty), mask=m_tk)
