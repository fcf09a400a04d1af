"""Triton kernels of ``state_space_v1``: Mamba-1's selective scan, forward and backward.

Follows ``mamba_ssm``'s selective-scan CUDA kernel (Gu & Dao 2023, "Mamba", section 3.3 and
appendix D) in the forward: one program per (channel block, batch element) walks the sequence in
chunks of ``BLOCK_T`` tokens, the state ``h [BLOCK_D, BLOCK_N]`` in registers; inside a chunk the
affine maps ``h -> a h + b`` (``a = exp(dt A)``, ``b = dt x B``) are composed by a parallel scan
along the tokens (``tl.associative_scan``, Blelloch-style), so a chunk costs a few dependent
steps, not ``BLOCK_T``. The forward writes ``y``, the final state and the state at each chunk start.

The backward is chunk-parallel. The adjoint ``g_t = dL/dh_t = C_t dy_t + a_{t+1} g_{t+1}`` enters a
chunk ``c`` through one carry ``G_c`` (``dL/dh`` at the chunk's end from everything after it), and
the carries obey a recurrence over chunks, ``G_{c-1} = L_c + exp(A Σ_{t∈c} dt_t) G_c`` with
``L_c = Σ_{t∈c} exp(A (dt_first + … + dt_t)) C_t dy_t`` (the chunk's own adjoint at its start):
``ssm1_bwd_sum_kernel`` writes every chunk's ``L_c`` and ``Σ dt`` (parallel over chunks),
``ssm1_bwd_carry_kernel`` runs the recurrence (a multiply-add per chunk; the last carry is the
initial state's gradient), and ``ssm1_bwd_kernel`` — one program per (chunk, channel group,
batch element), all independent — recomputes the chunk's states from its start state, runs the
adjoint with a reverse scan from the carry, and writes every gradient. A program walks its
group's channel blocks one after another and sums ``dB`` and ``dC`` (reductions over channels)
across them in registers: the host adds one partial per group in a fixed order (deterministic,
memory bounded by the number of programs, not the channels); ``dA`` and ``dD`` (reductions over
tokens) are written per chunk and added on the host.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _affine_combine(a1, b1, a2, b2):
    # h -> a1 h + b1, then h -> a2 h + b2
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _channels(A_ptr, o_d, DIM: tl.constexpr, DSTATE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Channels ``o_d``: their mask, the offsets and mask of their ``[d, n]`` tile, and ``A`` there
    (float32)."""
    o_n = tl.arange(0, BLOCK_N)
    m_d = o_d < DIM
    m_dn = m_d[:, None] & (o_n < DSTATE)[None, :]
    o_dn = o_d[:, None] * DSTATE + o_n[None, :]
    return m_d, m_dn, o_dn, tl.load(A_ptr + o_dn, mask=m_dn, other=0.0).to(tl.float32)


@triton.jit
def ssm1_fwd_kernel(
    x_ptr,  # [b, s, d]
    dt_ptr,  # [b, s, d]
    A_ptr,  # [d, n]
    B_ptr,  # [b, s, n]
    C_ptr,  # [b, s, n]
    D_ptr,  # [d]
    h0_ptr,  # [b, d, n] (HAS_H0)
    seqlen,
    y_ptr,  # out: [b, s, d]
    hT_ptr,  # out: [b, d, n] float32
    states_ptr,  # out: [b, num_chunks, d, n] float32: the state before each chunk (STORE_STATES)
    DIM: tl.constexpr,
    DSTATE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_STATES: tl.constexpr,
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    o_n = tl.arange(0, BLOCK_N)
    o_r = tl.arange(0, BLOCK_T)
    m_n = o_n < DSTATE
    m_d, m_dn, o_dn, b_A = _channels(A_ptr, o_d, DIM, DSTATE, BLOCK_N)  # o_dn: [BLOCK_D, BLOCK_N]
    b_A2 = b_A * LOG2E
    b_Dv = tl.load(D_ptr + o_d, mask=m_d, other=0.0).to(tl.float32)
    if HAS_H0:
        b_h = tl.load(h0_ptr + i_b * DIM * DSTATE + o_dn, mask=m_dn, other=0.0).to(tl.float32)
    else:
        b_h = tl.zeros([BLOCK_D, BLOCK_N], dtype=tl.float32)
    num_chunks = tl.cdiv(seqlen, BLOCK_T)
    for c in range(0, num_chunks):
        if STORE_STATES:
            tl.store(states_ptr + ((i_b * num_chunks + c) * DIM) * DSTATE + o_dn, b_h, mask=m_dn)
        o_t = c * BLOCK_T + o_r
        m_t = o_t < seqlen
        row = i_b * seqlen + o_t  # [BLOCK_T] int64
        m_td = m_t[:, None] & m_d[None, :]
        m_tn = m_t[:, None] & m_n[None, :]
        p_td = row[:, None] * DIM + o_d[None, :]
        p_tn = row[:, None] * DSTATE + o_n[None, :]
        b_x = tl.load(x_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_D]
        b_dt = tl.load(dt_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_B = tl.load(B_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_N]
        b_C = tl.load(C_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)
        # Padding tokens have dt = 0, x = 0: a = 1, b = 0 leaves the state unchanged.
        b_a = tl.exp2(b_dt[:, :, None] * b_A2[None, :, :])  # [BLOCK_T, BLOCK_D, BLOCK_N]
        b_b = (b_dt * b_x)[:, :, None] * b_B[:, None, :]
        a_cum, b_cum = tl.associative_scan((b_a, b_b), 0, _affine_combine)
        b_hs = a_cum * b_h[None, :, :] + b_cum  # h_t for every token of the chunk
        b_y = tl.sum(b_hs * b_C[:, None, :], axis=2) + b_Dv[None, :] * b_x
        tl.store(y_ptr + p_td, b_y.to(y_ptr.dtype.element_ty), mask=m_td)
        b_h = tl.sum(tl.where((o_r == BLOCK_T - 1)[:, None, None], b_hs, 0.0), axis=0)
    tl.store(hT_ptr + i_b * DIM * DSTATE + o_dn, b_h, mask=m_dn)


@triton.jit
def ssm1_bwd_sum_kernel(
    dt_ptr,  # [b, s, d]
    A_ptr,  # [d, n]
    C_ptr,  # [b, s, n]
    dy_ptr,  # [b, s, d]
    seqlen,
    L_ptr,  # out: [b, num_chunks, d, n] float32: Σ_t exp(A (dt_first + … + dt_t)) C_t dy_t
    sdt_ptr,  # out: [b, num_chunks, d] float32: Σ_t dt_t
    DIM: tl.constexpr,
    DSTATE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    c = tl.program_id(0)
    i_d = tl.program_id(1)
    i_b = tl.program_id(2).to(tl.int64)
    num_chunks = tl.num_programs(0)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < DSTATE
    m_d, m_dn, o_dn, b_A = _channels(A_ptr, o_d, DIM, DSTATE, BLOCK_N)
    b_A2 = b_A * LOG2E
    o_t = c * BLOCK_T + tl.arange(0, BLOCK_T)
    m_t = o_t < seqlen
    row = i_b * seqlen + o_t
    p_td = row[:, None] * DIM + o_d[None, :]
    m_td = m_t[:, None] & m_d[None, :]
    b_dt = tl.load(dt_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
    b_dy = tl.load(dy_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
    b_C = tl.load(C_ptr + row[:, None] * DSTATE + o_n[None, :], mask=m_t[:, None] & m_n[None, :], other=0.0)
    # exp(A · Σ_{s<=t} dt_s) = Π_{s<=t} a_s: the decay from the chunk's start through token t
    b_w = tl.exp2(tl.cumsum(b_dt, axis=0)[:, :, None] * b_A2[None, :, :])  # [BLOCK_T, BLOCK_D, BLOCK_N]
    b_L = tl.sum(b_w * (b_C.to(tl.float32)[:, None, :] * b_dy[:, :, None]), axis=0)
    base = (i_b * num_chunks + c) * DIM
    tl.store(L_ptr + base * DSTATE + o_dn, b_L, mask=m_dn)
    tl.store(sdt_ptr + base + o_d, tl.sum(b_dt, axis=0), mask=m_d)


@triton.jit
def ssm1_bwd_carry_kernel(
    A_ptr,  # [d, n]
    L_ptr,  # [b, num_chunks, d, n] float32
    sdt_ptr,  # [b, num_chunks, d] float32
    dhT_ptr,  # [b, d, n] float32: the final state's cotangent
    num_chunks,
    G_ptr,  # out: [b, num_chunks, d, n] float32: dL/dh at each chunk's end from everything after it
    dh0_ptr,  # out: [b, d, n] float32
    DIM: tl.constexpr,
    DSTATE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """``G_{c-1} = L_c + P_c G_c`` (``P_c = exp(A Σ_{t∈c} dt_t)``) from ``G_{last} = dhT`` down to
    ``G_{-1} = dh0``, ``BLOCK_C`` chunks at a time: a reverse scan of the maps ``G -> P_c G + L_c``
    over the block (rows before chunk 0 are the identity), the block's incoming carry entering at its
    last row."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    o_r = tl.arange(0, BLOCK_C)
    m_d, m_dn, o_dn, b_A = _channels(A_ptr, o_d, DIM, DSTATE, BLOCK_N)
    b_A2 = b_A * LOG2E
    b_G = tl.load(dhT_ptr + i_b * DIM * DSTATE + o_dn, mask=m_dn, other=0.0)  # [BLOCK_D, BLOCK_N]
    tl.store(G_ptr + ((i_b + 1) * num_chunks - 1) * DIM * DSTATE + o_dn, b_G, mask=m_dn)
    for k in range(0, tl.cdiv(num_chunks, BLOCK_C)):
        hi = num_chunks - k * BLOCK_C  # this block: chunks hi - BLOCK_C .. hi - 1
        o_c = hi - BLOCK_C + o_r
        m_c = o_c >= 0
        base = (i_b * num_chunks + o_c) * DIM  # [BLOCK_C]
        m_cdn = m_c[:, None, None] & m_dn[None, :, :]
        p_cdn = base[:, None, None] * DSTATE + o_dn[None, :, :]
        b_L = tl.load(L_ptr + p_cdn, mask=m_cdn, other=0.0)
        b_s = tl.load(sdt_ptr + base[:, None] + o_d[None, :], mask=m_c[:, None] & m_d[None, :], other=0.0)
        b_P = tl.exp2(b_s[:, :, None] * b_A2[None, :, :])  # 1 where masked
        b_L += tl.where((o_r == BLOCK_C - 1)[:, None, None], b_P * b_G[None, :, :], 0.0)
        _, b_out = tl.associative_scan((b_P, b_L), 0, _affine_combine, reverse=True)  # row r: G_{o_c - 1}
        # (row 0's is the next block's carry, entering at its last row)
        tl.store(G_ptr + p_cdn - DIM * DSTATE, b_out, mask=m_cdn & (o_c >= 1)[:, None, None])
        b_G = tl.sum(tl.where((o_r == 0)[:, None, None], b_out, 0.0), axis=0)
    tl.store(dh0_ptr + i_b * DIM * DSTATE + o_dn, b_G, mask=m_dn)


@triton.jit
def ssm1_bwd_kernel(
    x_ptr,
    dt_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    D_ptr,
    states_ptr,  # [b, num_chunks, d, n] float32: the state at each chunk's start (forward)
    G_ptr,  # [b, num_chunks, d, n] float32: the carry at each chunk's end (ssm1_bwd_carry_kernel)
    dy_ptr,  # [b, s, d]
    seqlen,
    group_d,  # channels per group: a multiple of BLOCK_D
    dx_ptr,  # out: [b, s, d]
    ddt_ptr,  # out: [b, s, d]
    dB_ptr,  # out: [b, groups, s, n] float32 (this channel group's share)
    dC_ptr,  # out: [b, groups, s, n] float32
    dA_ptr,  # out: [b, num_chunks, d, n] float32 (this chunk's share)
    dD_ptr,  # out: [b, num_chunks, d] float32
    DIM: tl.constexpr,
    DSTATE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    c = tl.program_id(0)
    i_g = tl.program_id(1)
    i_b = tl.program_id(2).to(tl.int64)
    num_chunks = tl.num_programs(0)
    groups = tl.num_programs(1)
    o_n = tl.arange(0, BLOCK_N)
    o_r = tl.arange(0, BLOCK_T)
    m_n = o_n < DSTATE
    o_t = c * BLOCK_T + o_r
    m_t = o_t < seqlen
    m_next = (o_t + 1) < seqlen
    row = i_b * seqlen + o_t
    m_tn = m_t[:, None] & m_n[None, :]
    p_tn = row[:, None] * DSTATE + o_n[None, :]
    b_B = tl.load(B_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_N]
    b_C = tl.load(C_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)
    # The carry enters at the chunk's last token.
    at_last = (o_r == tl.minimum(BLOCK_T, seqlen - c * BLOCK_T) - 1)[:, None, None]
    acc_dB = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    acc_dC = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    chunk = (i_b * num_chunks + c) * DIM
    for j in range(0, group_d, BLOCK_D):
        o_d = i_g * group_d + j + tl.arange(0, BLOCK_D)
        m_d, m_dn, o_dn, b_A = _channels(A_ptr, o_d, DIM, DSTATE, BLOCK_N)
        b_A2 = b_A * LOG2E
        b_Dv = tl.load(D_ptr + o_d, mask=m_d, other=0.0).to(tl.float32)
        b_h0 = tl.load(states_ptr + chunk * DSTATE + o_dn, mask=m_dn, other=0.0)
        b_G = tl.load(G_ptr + chunk * DSTATE + o_dn, mask=m_dn, other=0.0)
        m_td = m_t[:, None] & m_d[None, :]
        p_td = row[:, None] * DIM + o_d[None, :]
        b_x = tl.load(x_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_dt = tl.load(dt_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_dtn = tl.load(dt_ptr + p_td + DIM, mask=m_next[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        b_dy = tl.load(dy_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        # Recompute the chunk's states from its start state (padding tokens: dt = 0, x = 0).
        b_a = tl.exp2(b_dt[:, :, None] * b_A2[None, :, :])  # [BLOCK_T, BLOCK_D, BLOCK_N]
        b_b = (b_dt * b_x)[:, :, None] * b_B[:, None, :]
        a_cum, b_cum = tl.associative_scan((b_a, b_b), 0, _affine_combine)
        b_hs = a_cum * b_h0[None, :, :] + b_cum
        acc_dC += tl.sum(b_hs * b_dy[:, :, None], axis=1)
        b_ah = b_hs - b_b  # a_t h_{t-1}
        # Adjoint: g_t = C_t dy_t + a_{t+1} g_{t+1}, from the carry at the chunk's last token.
        b_q = b_C[:, None, :] * b_dy[:, :, None] + tl.where(at_last, b_G[None, :, :], 0.0)
        b_an = tl.exp2(b_dtn[:, :, None] * b_A2[None, :, :])
        _, b_g = tl.associative_scan((b_an, b_q), 0, _affine_combine, reverse=True)
        b_dx = tl.sum(b_g * b_B[:, None, :], axis=2) * b_dt + b_Dv[None, :] * b_dy
        b_ddt = tl.sum(b_g * (b_A[None, :, :] * b_ah + b_x[:, :, None] * b_B[:, None, :]), axis=2)
        tl.store(dx_ptr + p_td, b_dx.to(dx_ptr.dtype.element_ty), mask=m_td)
        tl.store(ddt_ptr + p_td, b_ddt.to(ddt_ptr.dtype.element_ty), mask=m_td)
        acc_dB += tl.sum(b_g * (b_dt * b_x)[:, :, None], axis=1)
        tl.store(dA_ptr + chunk * DSTATE + o_dn, tl.sum(b_g * b_ah * b_dt[:, :, None], axis=0), mask=m_dn)
        tl.store(dD_ptr + chunk + o_d, tl.sum(b_dy * b_x, axis=0), mask=m_d)
    p_part = ((i_b * groups + i_g) * seqlen + o_t)[:, None] * DSTATE + o_n[None, :]
    tl.store(dB_ptr + p_part, acc_dB, mask=m_tn)
    tl.store(dC_ptr + p_part, acc_dC, mask=m_tn)
