"""The delta rule's intra-chunk WY transform in Triton: what
:func:`ejkernel.ops.families.delta_rule_math.intra_chunk` does in JAX, one program per chunk: the
inverse ``M`` in a kernel of its own (kept for the backward), then the forward's products; the
gradient in three kernels (through W, U and T to ``dA``; through ``A``; then through Aqk, Qg, Kg
and glast). fla's ``chunk_scaled_dot_kkt`` + ``solve_tril``, ``recompute_w_u``,
``prepare_wy_repr_bwd`` and the gate terms of ``chunk_bwd_dqkwg``. A scalar gate or none
(``*_kernel``: whole key rows per program) and a per-key-channel gate (``*_pc_kernel``, KDA: key
tiles of ``_call.PC_BLOCK_K`` channels and 16-row sub-blocks, see the section below; the pair sums
a program per sub-block of rows, which stores ``S`` for the inverse and ``dβ``; the inverse from
it, a program per chunk; the gate's cumulative sums ``G`` computed once, by
``delta_intra_gate_pc_kernel``; the backward through W, U and T per chunk, then through the pair
sums per chunk and key tile).

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

from .._linear._kernel import SPAN
from .._linear._kernel import _fdot as _dot

# Rows of the sub-blocks of a per-channel gate's pair sums (below).
SUB = tl.constexpr(16)


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
        b_M = _join_blocks(b_M, b_A, same, o_c, C, B, IPREC)
    return b_M


@triton.jit
def _join_blocks(b_Md, b_A, same, o_c, C: tl.constexpr, B: tl.constexpr, IPREC: tl.constexpr):
    """``(I + A)⁻¹`` from ``Md``, the inverses of ``I + A``'s ``B × B`` diagonal blocks (``[C, C]``,
    zero off them; ``same``: whether row and column share a block): ``(I + N)⁻¹ Md`` with
    ``N = Md A_o``, ``A_o`` the blocks below the diagonal, nilpotent of order ``C / B``:
    ``(I + N)⁻¹ = (I − N)(I + N²)(I + N⁴)…``, its products as ``IPREC`` says."""
    eye = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)
    b_N = tl.dot(b_Md, tl.where(same, 0.0, b_A), input_precision=IPREC)
    b_P = eye - b_N
    for s in tl.static_range(1, 4):  # C / B = 2^m blocks (C <= 256): m - 1 doublings
        if (B << s) < C:
            b_N = tl.dot(b_N, b_N, input_precision=IPREC)
            b_P += tl.dot(b_P, b_N, input_precision=IPREC)
    return tl.dot(b_P, b_Md, input_precision=IPREC)


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


# -- a per-key-channel gate (KDA): E_ijd = exp(G_id − G_jd) -----------------------------------------
# The pair sums ``S[i, j] = Σ_d x_id y_jd E_ijd`` (``A``'s with x = y = K, Aqk's with x = Q, y = K)
# by ``SUB``-row sub-blocks (fla's KDA scheme; ``delta_rule_math.decayed_pairs`` in JAX), key tiles of
# ``BK`` channels in turn, ``G`` (the chunk's cumulative gate, float32) read from memory at any row:
#
# - pairs in different sub-blocks (``j < r <= i``, ``r`` the first row of ``i``'s sub-block): one
#   product per sub-block of ``x_i ⊙ exp(G_i − G_r)`` and ``y_j ⊙ exp(G_r − G_j)`` (both
#   exponents <= 0 for a decaying gate: no overflow, however steep);
# - pairs inside a sub-block: one product of ``x_i ⊙ exp(G_i − G_r)`` and ``y_j ⊙ exp(G_r − G_j)``
#   over all sub-blocks at once when every ``|G − G_r|`` of the key tile is within ``SPAN`` (the
#   factors and their products finite), else ``SUB`` column steps whose exponents span ``j..i``
#   only (exact for any decay).
#
# The gradient of such a pair sum, ``P = dS``: ``row_i = Σ_j P_ij y_j ⊙ E_ij``, ``col_j = Σ_i P_ij
# x_i ⊙ E_ij``; ``dx += row``, ``dy += col``, ``dG += x ⊙ row − y ⊙ col``, by the same blocking.


@triton.jit
def _tile(ptr, rows, o_k, K: tl.constexpr):
    """Rows ``rows`` (``[C]``, any order) and key channels ``o_k`` of a ``[·, K]`` tensor, float32."""
    return tl.load(ptr + rows[:, None] * K + o_k[None, :], mask=(o_k < K)[None, :], other=0.0).to(tl.float32)


@triton.jit
def _pair_tile(q, k, G, rows, base, ref, o_k, K: tl.constexpr):
    """One key tile of the pair sums: ``Q``, ``K``, ``G`` and ``d = G − G_r`` (``r`` each row's
    sub-block start), ``e^d``, and ``Q ⊙ e^d``, ``K ⊙ e^d`` (the row factors)."""
    b_q = _tile(q, rows, o_k, K)
    b_k = _tile(k, rows, o_k, K)
    b_G = _tile(G, rows, o_k, K)
    b_d = b_G - _tile(G, base + ref, o_k, K)
    b_ex = tl.exp(b_d)
    return b_q, b_k, b_G, b_d, b_ex, b_q * b_ex, b_k * b_ex


@triton.jit
def _factored(b_d):
    """Whether every ``|G − G_r|`` of the tile is within ``SPAN``: pairs inside a sub-block may then
    take one product of ``x ⊙ e^{G−G_r}`` and ``y ⊙ e^{G_r−G}``."""
    return tl.max(tl.max(tl.abs(b_d), axis=1), axis=0) <= SPAN


@triton.jit
def _earlier(G, b_G, base, o_c, o_k, r, K: tl.constexpr):
    """The rows before row ``r`` (a sub-block start) and their column factors ``e^{G_r − G_j}``
    (``j < r``, else 0): both exponents of such a pair's product are ``<= 0`` for a decay."""
    before = o_c < r
    g_r = tl.load(G + (base + r) * K + o_k, mask=o_k < K, other=0.0)
    return before, tl.exp(tl.where(before[:, None], g_r[None, :] - b_G, float("-inf")))


@triton.jit
def delta_intra_gate_pc_kernel(g, G, C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """``G``: the gate's cumulative sum inside each chunk (per key channel), float32."""
    i = tl.program_id(0).to(tl.int64)
    o_k = tl.program_id(1) * BK + tl.arange(0, BK)
    rows = i * C + tl.arange(0, C)
    p = rows[:, None] * K + o_k[None, :]
    tl.store(G + p, tl.cumsum(_tile(g, rows, o_k, K), axis=0), mask=(o_k < K)[None, :])


@triton.jit
def delta_intra_pairs_pc_kernel(
    q, k, G,
    se, aqk,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, GPREC: tl.constexpr,
):  # fmt: skip
    """Per (``SUB``-row block, chunk): the block's rows of ``S = tril(K Kᵀ ⊙ E, −1)`` (stored for
    the inverse and the backward's ``dβ``) and of ``Aqk = tril(Q Kᵀ ⊙ E)``, the pair sums over the
    key tiles in turn: one ``[SUB, BK] × [BK, C]`` product each, of the rows' ``x ⊙ e^{G − G_r}``
    and the columns' ``y ⊙ e^{G_r − G}`` up to the block's end when the tile is factored, else up
    to its start and the block's own pairs column by column. A program per row block keeps the
    products at the rows that need them; the chunk's blocks are neighbours in the one-axis grid
    (program ``i · C/SUB + block``; the second and third grid axes stop at 65535), so its columns
    are read from L2."""
    pid = tl.program_id(0)
    r = (pid % (C // SUB)) * SUB
    i = (pid // (C // SUB)).to(tl.int64)
    o_c = tl.arange(0, C)
    o_s = tl.arange(0, SUB)
    base = i * C
    rows = base + r + o_s
    cols = base + o_c
    acc_kk = tl.zeros([SUB, C], dtype=tl.float32)
    acc_qk = tl.zeros([SUB, C], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q = _tile(q, rows, o_k, K)
        b_k = _tile(k, rows, o_k, K)
        b_G = _tile(G, rows, o_k, K)
        g_r = tl.load(G + (base + r) * K + o_k, mask=m_k, other=0.0)
        b_d = b_G - g_r[None, :]
        b_ex = tl.exp(b_d)
        lim = tl.where(_factored(b_d), r + SUB, r)  # columns the product takes
        m_c = (o_c < lim)[:, None] & m_k[None, :]
        p_c = cols[:, None] * K + o_k[None, :]
        b_Gc = tl.load(G + p_c, mask=m_c, other=0.0)
        b_z = tl.load(k + p_c, mask=m_c, other=0.0).to(tl.float32)
        b_z *= tl.exp(tl.where(m_c, g_r[None, :] - b_Gc, float("-inf")))
        acc_kk += _dot(b_k * b_ex, tl.trans(b_z), GPREC)
        acc_qk += _dot(b_q * b_ex, tl.trans(b_z), GPREC)
        if lim == r:  # the block's own pairs, column by column: exponents spanning j..i only
            for s in range(SUB):
                p_j = (base + r + s) * K + o_k
                b_e = tl.exp(
                    tl.where((o_s >= s)[:, None], b_G - tl.load(G + p_j, mask=m_k, other=0.0)[None, :], float("-inf"))
                )
                b_ke = tl.load(k + p_j, mask=m_k, other=0.0).to(tl.float32)[None, :] * b_e
                sel = o_c[None, :] == r + s
                acc_kk = tl.where(sel, acc_kk + tl.sum(b_k * b_ke, axis=1)[:, None], acc_kk)
                acc_qk = tl.where(sel, acc_qk + tl.sum(b_q * b_ke, axis=1)[:, None], acc_qk)
    row = r + o_s
    p_o = rows[:, None] * C + o_c[None, :]
    tl.store(se + p_o, tl.where(row[:, None] > o_c[None, :], acc_kk, 0.0))
    tl.store(aqk + p_o, tl.where(row[:, None] >= o_c[None, :], acc_qk, 0.0).to(aqk.dtype.element_ty))


@triton.jit
def delta_intra_solve_kernel(se, beta, m, C: tl.constexpr, IPREC: tl.constexpr):
    """Per chunk: ``M = (I + A)⁻¹``, ``A = diag(β) S`` of the stored strictly lower ``S``. The
    ``SUB × SUB`` diagonal blocks' inverses first, all blocks side by side in one ``[SUB, C]``
    tile (``Md[t, b·SUB + j] = (M_b)_tj``), by forward substitution whose step ``s`` reads row
    ``s`` of every block from memory, arranged against ``Md``'s rows: one reduction per step over
    ``SUB`` rows, where :func:`_unit_lower_inverse` takes two over ``C``. They are written
    block-diagonally into ``m`` and read back (a barrier between: the program's threads exchange
    them through memory) for the products that join the blocks."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    o_s = tl.arange(0, SUB)
    base = i * C
    rows = base + o_c
    start = (o_c // SUB) * SUB  # each column's block start
    b_Md = tl.where(o_s[:, None] == (o_c - start)[None, :], 1.0, 0.0)
    for s in tl.static_range(1, SUB):
        # a[t, c] = A[start(c) + s, start(c) + t] for t < s
        p_a = (base + start[None, :] + s) * C + start[None, :] + o_s[:, None]
        b_a = tl.load(se + p_a, mask=(o_s < s)[:, None], other=0.0) * tl.load(beta + base + start + s)[None, :]
        b_row = tl.sum(b_a * b_Md, axis=0)
        b_Md = tl.where((o_s == s)[:, None], b_Md - b_row[None, :], b_Md)
    p_c = rows[:, None] * C + o_c[None, :]
    if C > SUB:
        tl.store(m + (base + start[None, :] + o_s[:, None]) * C + o_c[None, :], b_Md)
        tl.debug_barrier()
        same = start[:, None] == start[None, :]
        b_M = tl.where(same, tl.load(m + p_c), 0.0)
        b_A = tl.load(se + p_c) * tl.load(beta + rows)[:, None]
        tl.debug_barrier()  # every thread has read Md before M overwrites it
        tl.store(m + p_c, _join_blocks(b_M, b_A, same, o_c, C, SUB, IPREC))
    else:
        tl.store(m + p_c, b_Md)


@triton.jit
def delta_intra_fwd_pc_kernel(
    q, k, v, beta, G, m,
    w, u, qg, kg, glast,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    OPS: tl.constexpr,
):  # fmt: skip
    """Per chunk: ``W = T (K ⊙ e^G)``, ``U = T V``, ``Qg``, ``Kg`` and ``glast`` by key and value tiles."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    rows = i * C + o_c
    b_b = tl.load(beta + rows)
    b_T = tl.load(m + rows[:, None] * C + o_c[None, :]) * b_b[None, :]
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        p_k = rows[:, None] * K + o_k[None, :]
        b_k = _tile(k, rows, o_k, K)
        b_G = _tile(G, rows, o_k, K)
        b_Gl = tl.load(G + (i * C + C - 1) * K + o_k, mask=m_k, other=0.0)
        b_eG = tl.exp(b_G)
        tl.store(w + p_k, _dot(b_T, b_k * b_eG, OPS).to(w.dtype.element_ty), mask=m_k[None, :])
        tl.store(kg + p_k, (b_k * tl.exp(b_Gl[None, :] - b_G)).to(kg.dtype.element_ty), mask=m_k[None, :])
        tl.store(qg + p_k, (_tile(q, rows, o_k, K) * b_eG).to(qg.dtype.element_ty), mask=m_k[None, :])
        tl.store(glast + i * K + o_k, tl.exp(b_Gl), mask=m_k)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        p_v = rows[:, None] * V + o_v[None, :]
        b_u = _dot(b_T, _tile(v, rows, o_v, V), OPS)
        tl.store(u + p_v, b_u.to(u.dtype.element_ty), mask=(o_v < V)[None, :])


@triton.jit
def delta_intra_bwd_wy_pc_kernel(
    k, v, beta, G, m, se, dw, du,
    dk, dv, dbeta, dG, dp,
    C: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    OPS: tl.constexpr,
):  # fmt: skip
    """Per chunk, the gradient through ``W``, ``U`` and ``T``: ``dV``; ``dK`` and ``dG`` through
    ``K ⊙ e^G``; ``dβ``; and ``P = diag(β) dA`` (strictly lower), the gradient of ``S``, for
    :func:`delta_intra_bwd_qk_pc_kernel`."""
    i = tl.program_id(0).to(tl.int64)
    o_c = tl.arange(0, C)
    rows = i * C + o_c
    p_c = rows[:, None] * C + o_c[None, :]
    b_b = tl.load(beta + rows)
    b_M = tl.load(m + p_c)
    b_T = b_M * b_b[None, :]
    b_dT = tl.zeros([C, C], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):  # U = T V
        o_v = i_v * BV + tl.arange(0, BV)
        b_du = _tile(du, rows, o_v, V)
        b_dT += _dot(b_du, tl.trans(_tile(v, rows, o_v, V)), OPS)
        p_v = rows[:, None] * V + o_v[None, :]
        tl.store(dv + p_v, _dot(tl.trans(b_T), b_du, OPS).to(dv.dtype.element_ty), mask=(o_v < V)[None, :])
    for i_k in range(tl.cdiv(K, BK)):  # W = T (K ⊙ e^G)
        o_k = i_k * BK + tl.arange(0, BK)
        p_k = rows[:, None] * K + o_k[None, :]
        m_k = (o_k < K)[None, :]
        b_eG = tl.exp(_tile(G, rows, o_k, K))
        b_kd = _tile(k, rows, o_k, K) * b_eG
        b_dw = _tile(dw, rows, o_k, K)
        b_dT += _dot(b_dw, tl.trans(b_kd), OPS)
        b_dkd = _dot(tl.trans(b_T), b_dw, OPS)
        tl.store(dk + p_k, b_dkd * b_eG, mask=m_k)
        tl.store(dG + p_k, b_dkd * b_kd, mask=m_k)
    # T = M diag(β); M = (I + A)⁻¹, A = diag(β) S: dA = −Mᵀ dM Mᵀ, strictly lower
    b_dA = -_dot(_dot(tl.trans(b_M), b_dT * b_b[None, :], OPS), tl.trans(b_M), OPS)
    b_dA = tl.where(o_c[:, None] > o_c[None, :], b_dA, 0.0)
    tl.store(dbeta + rows, tl.sum(b_dT * b_M, axis=0) + tl.sum(b_dA * tl.load(se + p_c), axis=1))
    tl.store(dp + p_c, b_dA * b_b[:, None])


@triton.jit
def delta_intra_bwd_qk_pc_kernel(
    q, k, G, dp, daqk, dqg, dkg, dglast, dk_wy, dG_wy,
    dq, dk, dg,
    C: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, GPREC: tl.constexpr,
):  # fmt: skip
    """Per (chunk, key tile): the gradient through ``S`` (``P``), ``Aqk``, ``Qg``, ``Kg`` and
    ``glast``, added to the WY parts: ``dQ``, ``dK`` and the gate's ``dg`` (the reverse cumulative
    sum of ``dG`` inside the chunk)."""
    i = tl.program_id(0).to(tl.int64)
    o_k = tl.program_id(1) * BK + tl.arange(0, BK)
    m_k = (o_k < K)[None, :]
    o_c = tl.arange(0, C)
    base = i * C
    rows = base + o_c
    ref = (o_c // SUB) * SUB
    pos = o_c - ref
    p_c = rows[:, None] * C + o_c[None, :]
    causal = o_c[:, None] >= o_c[None, :]
    b_P = tl.load(dp + p_c)  # strictly lower
    b_R = tl.where(causal, tl.load(daqk + p_c).to(tl.float32), 0.0)
    b_q, b_k, b_G, b_d, b_ex, b_xq, b_xk = _pair_tile(q, k, G, rows, base, ref, o_k, K)
    b_rowP = tl.zeros([C, BK], dtype=tl.float32)
    b_rowR = tl.zeros([C, BK], dtype=tl.float32)
    b_colP = tl.zeros([C, BK], dtype=tl.float32)
    b_colR = tl.zeros([C, BK], dtype=tl.float32)
    for blk in tl.static_range(1, C // SUB):  # pairs (i in sub-block blk, j before it)
        before, b_z = _earlier(G, b_G, base, o_c, o_k, blk * SUB, K)
        keep = (ref == blk * SUB)[:, None] & before[None, :]
        b_Pb = tl.where(keep, b_P, 0.0)
        b_Rb = tl.where(keep, b_R, 0.0)
        b_y = b_k * b_z
        b_rowP += _dot(b_Pb, b_y, GPREC)  # times e^{G_i − G_r} below
        b_rowR += _dot(b_Rb, b_y, GPREC)
        b_colP += b_z * _dot(tl.trans(b_Pb), b_xk, GPREC)
        b_colR += b_z * _dot(tl.trans(b_Rb), b_xq, GPREC)
    b_rowP *= b_ex
    b_rowR *= b_ex
    if _factored(b_d):  # pairs inside a sub-block
        same = ref[:, None] == ref[None, :]
        b_Pd = tl.where(same, b_P, 0.0)
        b_Rd = tl.where(same, b_R, 0.0)
        b_iex = tl.exp(-b_d)
        b_yd = b_k * b_iex
        b_rowP += b_ex * _dot(b_Pd, b_yd, GPREC)
        b_rowR += b_ex * _dot(b_Rd, b_yd, GPREC)
        b_colP += b_iex * _dot(tl.trans(b_Pd), b_xk, GPREC)
        b_colR += b_iex * _dot(tl.trans(b_Rd), b_xq, GPREC)
    else:  # step s: row i's pair with ref_i + s (rows), and column j's pair with ref_j + s (columns)
        for s in range(SUB):
            other = base + ref + s
            b_Gs = _tile(G, other, o_k, K)
            b_ks = _tile(k, other, o_k, K)
            lo = (pos >= s)[:, None]
            hi = (pos <= s)[:, None]
            b_er = tl.exp(tl.where(lo, b_G - b_Gs, float("-inf")))  # e^{G_i − G_{ref+s}}, ref + s <= i
            b_ec = tl.exp(tl.where(hi, b_Gs - b_G, float("-inf")))  # e^{G_{ref+s} − G_j}, j <= ref + s
            p_row = rows * C + ref + s
            p_col = other * C + o_c
            b_pr = tl.load(dp + p_row)
            b_rr = tl.where(pos >= s, tl.load(daqk + p_row).to(tl.float32), 0.0)
            b_pc = tl.load(dp + p_col)
            b_rc = tl.where(pos <= s, tl.load(daqk + p_col).to(tl.float32), 0.0)
            b_rowP += b_pr[:, None] * b_ks * b_er
            b_rowR += b_rr[:, None] * b_ks * b_er
            b_colP += b_pc[:, None] * b_ks * b_ec
            b_colR += b_rc[:, None] * _tile(q, other, o_k, K) * b_ec
    # Qg = Q e^G, Kg = K e^{G_C − G}, glast = e^{G_C}
    b_Gl = tl.load(G + (base + C - 1) * K + o_k, mask=o_k < K, other=0.0)
    b_eG = tl.exp(b_G)
    b_ekg = tl.exp(b_Gl[None, :] - b_G)
    p_k = rows[:, None] * K + o_k[None, :]
    b_dqg = _tile(dqg, rows, o_k, K)
    b_dkg = _tile(dkg, rows, o_k, K)
    b_x = b_dkg * b_k * b_ekg
    b_dG = _tile(dG_wy, rows, o_k, K) + b_k * (b_rowP - b_colP - b_colR) + b_q * (b_rowR + b_dqg * b_eG) - b_x
    b_dGl = tl.sum(b_x, axis=0) + tl.load(dglast + i * K + o_k, mask=o_k < K, other=0.0) * tl.exp(b_Gl)
    b_dG += tl.where((o_c == C - 1)[:, None], b_dGl[None, :], 0.0)
    tl.store(dq + p_k, (b_rowR + b_dqg * b_eG).to(dq.dtype.element_ty), mask=m_k)
    b_dk = _tile(dk_wy, rows, o_k, K) + b_rowP + b_colP + b_colR + b_dkg * b_ekg
    tl.store(dk + p_k, b_dk.to(dk.dtype.element_ty), mask=m_k)
    tl.store(dg + p_k, tl.cumsum(b_dG, axis=0, reverse=True), mask=m_k)
