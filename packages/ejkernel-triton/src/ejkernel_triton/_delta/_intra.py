"""The delta rule's intra-chunk WY transform in Triton: what
:func:`ejkernel.ops.families.delta_rule_math.intra_chunk` does in JAX, one program per chunk: the
inverse ``M`` in a kernel of its own (kept for the backward), then the forward's products; the
gradient in three kernels (through W, U and T to ``dA``; through ``A``; then through Aqk, Qg, Kg
and glast; the per-channel WY part in one). fla's
``chunk_scaled_dot_kkt`` + ``solve_tril``, ``recompute_w_u``, ``prepare_wy_repr_bwd`` and the
gate terms of ``chunk_bwd_dqkwg``. A scalar gate or none (``*_kernel``) and a per-key-channel gate
(``*_pc_kernel``, KDA; not used by the op yet: they spill at head dim 128).

With ``G`` the gate's cumulative sum inside the chunk, ``E_ij = exp(G_i − G_j)`` (masked before
the ``exp``: exact for any decay), ``S = K Kᵀ``:

- ``A = tril(diag(β) (S ⊙ E), −1)``, ``M = (I + A)⁻¹`` (:func:`_unit_lower_inverse`),
  ``T = M diag(β)``, ``W = T (K ⊙ e^G)``, ``U = T V``, ``Aqk = tril((Q Kᵀ) ⊙ E)``,
  ``Qg = Q ⊙ e^G``, ``Kg = K ⊙ e^{G_C − G}``, ``glast = e^{G_C}``.
- Backward: ``dT = dW (K ⊙ e^G)ᵀ + dU Vᵀ``; ``dβ_j = Σ_i dT_ij M_ij + Σ_k dA_jk (S ⊙ E)_jk``;
  ``dA = −Mᵀ (dT diag(β)) Mᵀ`` (strictly lower); ``dK`` from ``W``, ``S`` (both sides), ``Aqk``
  and ``Kg``; the gate from every ``E`` (``dG_i += Σ_j dA_ij A_ij``, ``dG_j −= ...``), ``e^G``
  and ``e^{G_C}``, then ``dg`` the reverse cumulative sum of ``dG``.

Inputs are the chunks ``[N, C, ·]`` of ``delta_rule_math.to_chunks`` flattened over ``(R, HV, NC)``
(q, k, v in the op's dtype or float32, converted to float32 on load; β and the gate float32), and
their gradients are written in the same dtypes; W, U, Aqk, Qg and Kg are stored in their arrays'
dtype (the inter-chunk kernels'),
``M`` and ``glast`` in float32; products as ``OPS`` (``_linear._kernel._fdot``): exact float32 for
float32 inputs, ``_call.INTRA_OPERANDS`` for bfloat16, TF32 for float16.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._linear._kernel import _fdot as _dot
from .._linear._kernel import _gate_scores, _intra_dqk


@triton.jit
def _decay(b_G, o_c, STRICT: tl.constexpr):
    """``E [C, C]``: ``exp(G_i − G_j)`` for ``i > j`` (``i >= j`` unless ``STRICT``), else 0."""
    if STRICT:
        keep = o_c[:, None] > o_c[None, :]
    else:
        keep = o_c[:, None] >= o_c[None, :]
    return tl.exp(tl.where(keep, b_G[:, None] - b_G[None, :], float("-inf")))


@triton.jit
def _unit_lower_inverse(b_A, o_c, C: tl.constexpr, IPREC: tl.constexpr):
    """``(I + A)⁻¹`` of a strictly lower-triangular ``[C, C]`` ``A``, in float32 (fla's
    ``solve_tril`` blocking): the ``B × B`` diagonal blocks' inverses ``Md`` by forward substitution,
    all blocks at once (step ``r`` forms row ``r`` of every block: the blocks' rows have disjoint
    columns, so one pair of reductions serves them all; ``B − 1`` serial steps, not ``C − 1``), then
    ``(I + A)⁻¹ = (I + N)⁻¹ Md`` with ``N = Md A_o`` (``A_o`` the blocks below the diagonal),
    nilpotent of order ``C / B``: ``(I + N)⁻¹ = (I − N)(I + N²)(I + N⁴)…``, its products as ``IPREC``
    says (``"ieee"``: exact float32 on the FMA units, for float32 inputs; ``"tf32"``: tensor
    cores, for 16-bit inputs)."""
    B: tl.constexpr = 16 if C > 16 else C
    blk = o_c // B
    same = blk[:, None] == blk[None, :]
    eye = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)
    b_Ad = tl.where(same, b_A, 0.0)
    b_M = eye
    for r in range(1, B):
        sel = (o_c % B) == r
        a_r = tl.sum(tl.where(sel[:, None], b_Ad, 0.0), axis=0)  # row r of every block
        b_row = tl.sum(a_r[:, None] * b_M, axis=0)
        b_M = tl.where(sel[:, None] & same, eye - b_row[None, :], b_M)
    if C > B:
        b_N = tl.dot(b_M, tl.where(same, 0.0, b_A), input_precision=IPREC)
        b_P = eye - b_N
        for s in tl.static_range(1, 4):  # C / B = 2^m blocks (C <= 256): m - 1 doublings
            if (B << s) < C:
                b_N = tl.dot(b_N, b_N, input_precision=IPREC)
                b_P += tl.dot(b_P, b_N, input_precision=IPREC)
        b_M = tl.dot(b_P, b_M, input_precision=IPREC)
    return b_M


@triton.jit
def _load_gate(g, rows, o_c, C: tl.constexpr, HAS_G: tl.constexpr):
    """``G`` (the chunk's cumulative scalar gate, ``[C]``) and ``G_C``."""
    if HAS_G:
        b_G = tl.cumsum(tl.load(g + rows), axis=0)
    else:
        b_G = tl.zeros([C], dtype=tl.float32)
    return b_G, tl.sum(tl.where(o_c == C - 1, b_G, 0.0), axis=0)


@triton.jit
def delta_intra_inverse_kernel(
    k, beta, g,
    m,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, HAS_G: tl.constexpr, OPS: tl.constexpr,
    IPREC: tl.constexpr,
):  # fmt: skip
    """``M = (I + A)⁻¹``, ``A = tril(diag(β) (K Kᵀ ⊙ E), −1)``: kept for the forward and the
    backward (a kernel of its own: the inverse's registers do not add to the products')."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    rows = i * C + o_c
    b_k = tl.load(k + rows[:, None] * K + o_k[None, :], mask=(o_k < K)[None, :], other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows)
    b_G, _ = _load_gate(g, rows, o_c, C, HAS_G)
    b_A = _dot(b_k, tl.trans(b_k), OPS) * _decay(b_G, o_c, True) * b_b[:, None]
    tl.store(m + rows[:, None] * C + o_c[None, :], _unit_lower_inverse(b_A, o_c, C, IPREC))


@triton.jit
def delta_intra_fwd_kernel(
    q, k, v, beta, g, m,
    w, u, aqk, qg, kg, glast,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_G: tl.constexpr, OPS: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    p_v = rows[:, None] * V + o_v[None, :]
    m_k = (o_k < K)[None, :]
    m_v = (o_v < V)[None, :]
    b_b = tl.load(beta + rows)
    b_G, b_Gl = _load_gate(g, rows, o_c, C, HAS_G)
    b_eG = tl.exp(b_G)
    b_T = tl.load(m + rows[:, None] * C + o_c[None, :]) * b_b[None, :]
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    tl.store(w + p_k, _dot(b_T, b_k * b_eG[:, None], OPS).to(w.dtype.element_ty), mask=m_k)
    tl.store(
        u + p_v, _dot(b_T, tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32), OPS).to(u.dtype.element_ty), mask=m_v
    )
    tl.store(kg + p_k, (b_k * tl.exp(b_Gl - b_G)[:, None]).to(kg.dtype.element_ty), mask=m_k)
    b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_aqk = _dot(b_q, tl.trans(b_k), OPS) * _decay(b_G, o_c, False)
    tl.store(aqk + rows[:, None] * C + o_c[None, :], b_aqk.to(aqk.dtype.element_ty))
    tl.store(qg + p_k, (b_q * b_eG[:, None]).to(qg.dtype.element_ty), mask=m_k)
    tl.store(glast + i, tl.exp(b_Gl))


@triton.jit
def delta_intra_bwd_wy_kernel(
    k, v, beta, g, m, dw, du,
    dk, dv, dbeta, dG, da,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_G: tl.constexpr, OPS: tl.constexpr,
):  # fmt: skip
    """The gradient through ``W``, ``U`` and ``T``: ``dV``, and of ``dK``, ``dβ``, ``dG`` the
    parts through ``K ⊙ e^G`` and ``T = M diag(β)``; ``dA`` (strictly lower) for
    :func:`delta_intra_bwd_a_kernel`."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    p_v = rows[:, None] * V + o_v[None, :]
    p_c = rows[:, None] * C + o_c[None, :]
    m_k = (o_k < K)[None, :]
    m_v = (o_v < V)[None, :]
    b_b = tl.load(beta + rows)
    b_G, _ = _load_gate(g, rows, o_c, C, HAS_G)
    b_eG = tl.exp(b_G)
    b_M = tl.load(m + p_c)
    b_T = b_M * b_b[None, :]
    # U = T V, then W = T Kd (each pair of [C, ·] tiles dead after its products)
    b_du = tl.load(du + p_v, mask=m_v, other=0.0).to(tl.float32)
    b_dT = _dot(b_du, tl.trans(tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32)), OPS)
    tl.store(dv + p_v, _dot(tl.trans(b_T), b_du, OPS).to(dv.dtype.element_ty), mask=m_v)
    b_kd = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32) * b_eG[:, None]
    b_dw = tl.load(dw + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dT += _dot(b_dw, tl.trans(b_kd), OPS)
    b_dkd = _dot(tl.trans(b_T), b_dw, OPS)
    tl.store(dk + p_k, b_dkd * b_eG[:, None], mask=m_k)
    tl.store(dG + rows, tl.sum(b_dkd * b_kd, axis=1))
    # T = M diag(β); M = (I + A)^-1: dA = -Mᵀ dM Mᵀ, strictly lower
    tl.store(dbeta + rows, tl.sum(b_dT * b_M, axis=0))
    b_dA = -_dot(_dot(tl.trans(b_M), b_dT * b_b[None, :], OPS), tl.trans(b_M), OPS)
    tl.store(da + p_c, tl.where(o_c[:, None] > o_c[None, :], b_dA, 0.0))


@triton.jit
def delta_intra_bwd_a_kernel(
    k, beta, g, da, dk_wy, db_wy, dG_wy,
    dk, dbeta, dG,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, HAS_G: tl.constexpr, OPS: tl.constexpr,
):  # fmt: skip
    """The gradient through ``A = diag(β) (S ⊙ E)``, ``S = K Kᵀ``, added to the WY parts:
    ``dK``, ``dβ`` and ``dG`` (per row)."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    m_k = (o_k < K)[None, :]
    b_b = tl.load(beta + rows)
    b_G, _ = _load_gate(g, rows, o_c, C, HAS_G)
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_Es = _decay(b_G, o_c, True)
    b_SE = _dot(b_k, tl.trans(b_k), OPS) * b_Es  # S ⊙ E, strictly lower
    b_dA = tl.load(da + rows[:, None] * C + o_c[None, :])
    tl.store(dbeta + rows, tl.load(db_wy + rows) + tl.sum(b_dA * b_SE, axis=1))
    b_P = b_dA * b_b[:, None]  # gradient of S ⊙ E
    b_PA = b_P * b_SE  # dA ⊙ A: the gate through E
    tl.store(dG + rows, tl.load(dG_wy + rows) + tl.sum(b_PA, axis=1) - tl.sum(b_PA, axis=0))
    b_dS = b_P * b_Es  # S = K Kᵀ: dK = (dS + dSᵀ) K
    b_dk = tl.load(dk_wy + p_k, mask=m_k, other=0.0) + _dot(b_dS + tl.trans(b_dS), b_k, OPS)
    tl.store(dk + p_k, b_dk, mask=m_k)


@triton.jit
def delta_intra_bwd_qk_kernel(
    q, k, g, daqk, dqg, dkg, dglast, dk_wy, dG_wy,
    dq, dk, dg,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, HAS_G: tl.constexpr, OPS: tl.constexpr,
):  # fmt: skip
    """The gradient through ``Aqk``, ``Qg``, ``Kg`` and ``glast``, added to the WY part: ``dQ``,
    ``dK`` and the gate's ``dg``."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    m_k = (o_k < K)[None, :]
    b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_G, b_Gl = _load_gate(g, rows, o_c, C, HAS_G)
    b_eG = tl.exp(b_G)
    # Aqk = (Q Kᵀ) ⊙ E, causal
    b_R = tl.load(daqk + rows[:, None] * C + o_c[None, :]).to(tl.float32) * _decay(b_G, o_c, False)
    b_dq = _dot(b_R, b_k, OPS)
    b_dk = tl.load(dk_wy + p_k, mask=m_k, other=0.0) + _dot(tl.trans(b_R), b_q, OPS)
    b_RA = b_R * _dot(b_q, tl.trans(b_k), OPS)
    b_dG = tl.load(dG_wy + rows) + tl.sum(b_RA, axis=1) - tl.sum(b_RA, axis=0)
    # Qg = Q e^G, Kg = K e^{G_C - G}, glast = e^{G_C}
    b_dqg = tl.load(dqg + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dq += b_dqg * b_eG[:, None]
    b_dG += tl.sum(b_dqg * b_q, axis=1) * b_eG
    b_ekg = tl.exp(b_Gl - b_G)
    b_dkg = tl.load(dkg + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dk += b_dkg * b_ekg[:, None]
    b_x = tl.sum(b_dkg * b_k, axis=1) * b_ekg
    b_dG -= b_x
    b_dGl = tl.sum(b_x, axis=0) + tl.load(dglast + i) * tl.exp(b_Gl)
    b_dG += tl.where(o_c == C - 1, b_dGl, 0.0)
    tl.store(dq + p_k, b_dq.to(dq.dtype.element_ty), mask=m_k)
    tl.store(dk + p_k, b_dk.to(dk.dtype.element_ty), mask=m_k)
    if HAS_G:  # G = cumsum(g): dg_t = Σ_{i >= t} dG_i
        tl.store(dg + rows, tl.cumsum(b_dG, axis=0, reverse=True))


# -- a per-channel gate (KDA): E_ijd = exp(G_id − G_jd) -------------------------------------------
# The pair sums Σ_d x_id y_jd E_ijd are the linear-attention kernels' intra-chunk scores
# (``_linear._kernel._gate_scores``: one product, as ``GPREC``, factored through the chunk's
# middle row within ``SPAN``, else column by column) and their gradients (``_intra_dqk``): with ``P`` the
# gradient of such a pair sum, ``row_i = Σ_j P_ij y_j ⊙ E_ij`` and ``col_j = Σ_i P_ij x_i ⊙ E_ij``
# give ``dx += row``, ``dy += col`` and the gate ``dG += x ⊙ row − y ⊙ col``.


@triton.jit
def _last_row(x, o_c, C: tl.constexpr):
    return tl.sum(tl.where((o_c == C - 1)[:, None], x, 0.0), axis=0)


@triton.jit
def delta_intra_inverse_pc_kernel(
    k, beta, g,
    m,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, OPS: tl.constexpr, GPREC: tl.constexpr,
    IPREC: tl.constexpr,
):  # fmt: skip
    """:func:`delta_intra_inverse_kernel` of a per-channel gate."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    m_k = (o_k < K)[None, :]
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows)
    b_G = tl.cumsum(tl.load(g + p_k, mask=m_k, other=0.0), axis=0)  # [C, BK]
    b_A = tl.where(o_c[:, None] > o_c[None, :], _gate_scores(b_k, b_k, b_G, o_c, C, GPREC), 0.0) * b_b[:, None]
    tl.store(m + rows[:, None] * C + o_c[None, :], _unit_lower_inverse(b_A, o_c, C, IPREC))


@triton.jit
def delta_intra_fwd_pc_kernel(
    q, k, v, beta, g, m,
    w, u, aqk, qg, kg, glast,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    OPS: tl.constexpr, GPREC: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    p_v = rows[:, None] * V + o_v[None, :]
    m_k = (o_k < K)[None, :]
    m_v = (o_v < V)[None, :]
    b_b = tl.load(beta + rows)
    b_T = tl.load(m + rows[:, None] * C + o_c[None, :]) * b_b[None, :]
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_G = tl.cumsum(tl.load(g + p_k, mask=m_k, other=0.0), axis=0)  # [C, BK]
    b_Gl = _last_row(b_G, o_c, C)
    b_eG = tl.exp(b_G)
    tl.store(w + p_k, _dot(b_T, b_k * b_eG, OPS).to(w.dtype.element_ty), mask=m_k)
    tl.store(
        u + p_v, _dot(b_T, tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32), OPS).to(u.dtype.element_ty), mask=m_v
    )
    tl.store(kg + p_k, (b_k * tl.exp(b_Gl[None, :] - b_G)).to(kg.dtype.element_ty), mask=m_k)
    b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_aqk = _gate_scores(b_q, b_k, b_G, o_c, C, GPREC)
    tl.store(aqk + rows[:, None] * C + o_c[None, :], b_aqk.to(aqk.dtype.element_ty))
    tl.store(qg + p_k, (b_q * b_eG).to(qg.dtype.element_ty), mask=m_k)
    tl.store(glast + i * K + o_k, tl.exp(b_Gl), mask=o_k < K)


@triton.jit
def delta_intra_bwd_wy_pc_kernel(
    k, v, beta, g, m, dw, du,
    dk, dv, dbeta, dG,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    OPS: tl.constexpr, GPREC: tl.constexpr,
):  # fmt: skip
    """:func:`delta_intra_bwd_wy_kernel` of a per-channel gate (``dG`` per row and channel)."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    p_v = rows[:, None] * V + o_v[None, :]
    m_k = (o_k < K)[None, :]
    m_v = (o_v < V)[None, :]
    b_b = tl.load(beta + rows)
    b_M = tl.load(m + rows[:, None] * C + o_c[None, :])
    b_T = b_M * b_b[None, :]
    # U = T V, then W = T Kd (each pair of [C, ·] tiles dead after its products)
    b_du = tl.load(du + p_v, mask=m_v, other=0.0).to(tl.float32)
    b_dT = _dot(b_du, tl.trans(tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32)), OPS)
    tl.store(dv + p_v, _dot(tl.trans(b_T), b_du, OPS).to(dv.dtype.element_ty), mask=m_v)
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_G = tl.cumsum(tl.load(g + p_k, mask=m_k, other=0.0), axis=0)
    b_eG = tl.exp(b_G)
    b_kd = b_k * b_eG
    b_dw = tl.load(dw + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dT += _dot(b_dw, tl.trans(b_kd), OPS)
    b_dkd = _dot(tl.trans(b_T), b_dw, OPS)
    b_dk = b_dkd * b_eG
    b_dG = b_dkd * b_kd
    b_SE = tl.where(o_c[:, None] > o_c[None, :], _gate_scores(b_k, b_k, b_G, o_c, C, GPREC), 0.0)
    b_db = tl.sum(b_dT * b_M, axis=0)
    b_dA = -_dot(_dot(tl.trans(b_M), b_dT * b_b[None, :], OPS), tl.trans(b_M), OPS)
    b_dA = tl.where(o_c[:, None] > o_c[None, :], b_dA, 0.0)
    b_db += tl.sum(b_dA * b_SE, axis=1)
    b_row, b_col = _intra_dqk(
        tl.zeros([C, BK], dtype=tl.float32), b_dA * b_b[:, None], b_k, b_k, b_G, o_c, C, BK, GPREC
    )
    b_dk += b_row + b_col
    b_dG += b_k * (b_row - b_col)
    tl.store(dk + p_k, b_dk, mask=m_k)
    tl.store(dbeta + rows, b_db)
    tl.store(dG + p_k, b_dG, mask=m_k)


@triton.jit
def delta_intra_bwd_qk_pc_kernel(
    q, k, g, daqk, dqg, dkg, dglast, dk_wy, dG_wy,
    dq, dk, dg,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, OPS: tl.constexpr, GPREC: tl.constexpr,
):  # fmt: skip
    """:func:`delta_intra_bwd_qk_kernel` of a per-channel gate."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    rows = i * C + o_c
    p_k = rows[:, None] * K + o_k[None, :]
    m_k = (o_k < K)[None, :]
    b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_G = tl.cumsum(tl.load(g + p_k, mask=m_k, other=0.0), axis=0)
    b_Gl = _last_row(b_G, o_c, C)
    b_eG = tl.exp(b_G)
    # Aqk: the pairs s < t through _intra_dqk; the diagonal (E = 1) adds to dq and dk only (its
    # two gate terms cancel)
    b_R = tl.load(daqk + rows[:, None] * C + o_c[None, :]).to(tl.float32)
    b_row, b_col = _intra_dqk(tl.zeros([C, BK], dtype=tl.float32), b_R, b_q, b_k, b_G, o_c, C, BK, GPREC)
    b_Rd = tl.sum(tl.where(o_c[:, None] == o_c[None, :], b_R, 0.0), axis=1)
    b_dq = b_row + b_Rd[:, None] * b_k
    b_dk = tl.load(dk_wy + p_k, mask=m_k, other=0.0) + b_col + b_Rd[:, None] * b_q
    b_dG = tl.load(dG_wy + p_k, mask=m_k, other=0.0) + b_q * b_row - b_k * b_col
    # Qg = Q e^G, Kg = K e^{G_C - G}, glast = e^{G_C}
    b_dqg = tl.load(dqg + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dq += b_dqg * b_eG
    b_dG += b_dqg * b_q * b_eG
    b_ekg = tl.exp(b_Gl[None, :] - b_G)
    b_dkg = tl.load(dkg + p_k, mask=m_k, other=0.0).to(tl.float32)
    b_dk += b_dkg * b_ekg
    b_x = b_dkg * b_k * b_ekg
    b_dG -= b_x
    b_dGl = tl.sum(b_x, axis=0) + tl.load(dglast + i * K + o_k, mask=o_k < K, other=0.0) * tl.exp(b_Gl)
    b_dG += tl.where((o_c == C - 1)[:, None], b_dGl[None, :], 0.0)
    tl.store(dq + p_k, b_dq.to(dq.dtype.element_ty), mask=m_k)
    tl.store(dk + p_k, b_dk.to(dk.dtype.element_ty), mask=m_k)
    tl.store(dg + p_k, tl.cumsum(b_dG, axis=0, reverse=True), mask=m_k)
