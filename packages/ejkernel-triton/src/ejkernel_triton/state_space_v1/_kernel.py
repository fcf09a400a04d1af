"""Triton kernels of ``state_space_v1``: Mamba-1's selective scan, forward and backward.

Follows ``mamba_ssm``'s selective-scan CUDA kernel (Gu & Dao 2023, "Mamba", section 3.3 and
appendix D): one program per (channel block, batch element) walks the sequence in chunks of
``BLOCK_T`` tokens, the state ``h [BLOCK_D, BLOCK_N]`` in registers; inside a chunk the affine
maps ``h -> a h + b`` (``a = exp(dt A)``, ``b = dt x B``) are composed by a parallel scan along
the tokens (``tl.associative_scan``, Blelloch-style), so a chunk costs a few dependent steps, not
``BLOCK_T``. The forward writes ``y``, the final state and the state at each chunk start; the
backward walks the chunks in reverse, recomputes the chunk's states from its start state, and runs
the adjoint recurrence ``g_t = C_t dy_t + exp(dt_{t+1} A) g_{t+1}`` with a reverse scan.
Reductions over channels (``dB``, ``dC``) are written per channel block and added on the host
(deterministic), those over the batch (``dA``, ``dD``) per batch element.
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
def ssm1_fwd_kernel(
    x_ptr,  # [b, s, d]
    dt_ptr,  # [b, s, d]
    A_ptr,  # [d, n]
    B_ptr,  # [b, s, n]
    C_ptr,  # [b, s, n]
    D_ptr,  # [d]
    h0_ptr,  # [b, d, n] (HAS_H0)
    seqlen,
    dim,
    dstate,
    y_ptr,  # out: [b, s, d]
    hT_ptr,  # out: [b, d, n] float32
    states_ptr,  # out: [b, num_chunks, d, n] float32: the state before each chunk (STORE_STATES)
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
    m_d = o_d < dim
    m_n = o_n < dstate
    m_dn = m_d[:, None] & m_n[None, :]
    o_dn = o_d[:, None] * dstate + o_n[None, :]  # [BLOCK_D, BLOCK_N]
    b_A2 = tl.load(A_ptr + o_dn, mask=m_dn, other=0.0).to(tl.float32) * LOG2E
    b_Dv = tl.load(D_ptr + o_d, mask=m_d, other=0.0).to(tl.float32)
    if HAS_H0:
        b_h = tl.load(h0_ptr + i_b * dim * dstate + o_dn, mask=m_dn, other=0.0).to(tl.float32)
    else:
        b_h = tl.zeros([BLOCK_D, BLOCK_N], dtype=tl.float32)
    num_chunks = tl.cdiv(seqlen, BLOCK_T)
    for c in range(0, num_chunks):
        if STORE_STATES:
            tl.store(states_ptr + ((i_b * num_chunks + c) * dim) * dstate + o_dn, b_h, mask=m_dn)
        o_t = c * BLOCK_T + o_r
        m_t = o_t < seqlen
        row = i_b * seqlen + o_t  # [BLOCK_T] int64
        m_td = m_t[:, None] & m_d[None, :]
        m_tn = m_t[:, None] & m_n[None, :]
        p_td = row[:, None] * dim + o_d[None, :]
        p_tn = row[:, None] * dstate + o_n[None, :]
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
    tl.store(hT_ptr + i_b * dim * dstate + o_dn, b_h, mask=m_dn)


@triton.jit
def ssm1_bwd_kernel(
    x_ptr,
    dt_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    D_ptr,
    states_ptr,  # [b, num_chunks, d, n] float32
    dy_ptr,  # [b, s, d]
    dhT_ptr,  # [b, d, n]: the final state's cotangent
    seqlen,
    dim,
    dstate,
    dx_ptr,  # out: [b, s, d]
    ddt_ptr,  # out: [b, s, d]
    dB_ptr,  # out: [b, d_blocks, s, n] float32 (this channel block's share)
    dC_ptr,  # out: [b, d_blocks, s, n] float32
    dA_ptr,  # out: [b, d, n] float32 (this batch element's share)
    dD_ptr,  # out: [b, d] float32
    dh0_ptr,  # out: [b, d, n] float32
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    d_blocks = tl.num_programs(0)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    o_n = tl.arange(0, BLOCK_N)
    o_r = tl.arange(0, BLOCK_T)
    m_d = o_d < dim
    m_n = o_n < dstate
    m_dn = m_d[:, None] & m_n[None, :]
    o_dn = o_d[:, None] * dstate + o_n[None, :]
    b_A = tl.load(A_ptr + o_dn, mask=m_dn, other=0.0).to(tl.float32)
    b_A2 = b_A * LOG2E
    b_Dv = tl.load(D_ptr + o_d, mask=m_d, other=0.0).to(tl.float32)
    # carry: dL/dh at the end of the chunk from everything after it (the final state's cotangent first)
    b_G = tl.load(dhT_ptr + i_b * dim * dstate + o_dn, mask=m_dn, other=0.0).to(tl.float32)
    acc_dA = tl.zeros([BLOCK_D, BLOCK_N], dtype=tl.float32)
    acc_dD = tl.zeros([BLOCK_D], dtype=tl.float32)
    num_chunks = tl.cdiv(seqlen, BLOCK_T)
    for k in range(0, num_chunks):
        c = num_chunks - 1 - k
        b_h0 = tl.load(states_ptr + ((i_b * num_chunks + c) * dim) * dstate + o_dn, mask=m_dn, other=0.0)
        o_t = c * BLOCK_T + o_r
        m_t = o_t < seqlen
        m_next = (o_t + 1) < seqlen
        row = i_b * seqlen + o_t
        m_td = m_t[:, None] & m_d[None, :]
        m_tn = m_t[:, None] & m_n[None, :]
        p_td = row[:, None] * dim + o_d[None, :]
        p_tn = row[:, None] * dstate + o_n[None, :]
        b_x = tl.load(x_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_dt = tl.load(dt_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_dtn = tl.load(dt_ptr + p_td + dim, mask=m_next[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        b_dy = tl.load(dy_ptr + p_td, mask=m_td, other=0.0).to(tl.float32)
        b_B = tl.load(B_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)
        b_C = tl.load(C_ptr + p_tn, mask=m_tn, other=0.0).to(tl.float32)
        # Recompute the chunk's states from its start state. The [BLOCK_T, BLOCK_D, BLOCK_N] tiles
        # are used and dropped in order (dC and a_t h_{t-1} before the adjoint scan, only the first
        # row of the decays kept): fewer live tiles, fewer registers.
        b_a = tl.exp2(b_dt[:, :, None] * b_A2[None, :, :])  # [BLOCK_T, BLOCK_D, BLOCK_N]
        b_a0 = tl.sum(tl.where((o_r == 0)[:, None, None], b_a, 0.0), axis=0)  # [BLOCK_D, BLOCK_N]
        b_b = (b_dt * b_x)[:, :, None] * b_B[:, None, :]
        a_cum, b_cum = tl.associative_scan((b_a, b_b), 0, _affine_combine)
        b_hs = a_cum * b_h0[None, :, :] + b_cum
        p_part = ((i_b * d_blocks + i_d) * seqlen + o_t)[:, None] * dstate + o_n[None, :]
        tl.store(dC_ptr + p_part, tl.sum(b_hs * b_dy[:, :, None], axis=1), mask=m_tn)
        b_ah = b_hs - b_b  # a_t h_{t-1}
        # Adjoint: g_t = C_t dy_t + a_{t+1} g_{t+1}; the carry enters at the chunk's last token.
        last = tl.minimum(BLOCK_T, seqlen - c * BLOCK_T) - 1
        b_q = b_C[:, None, :] * b_dy[:, :, None] + tl.where((o_r == last)[:, None, None], b_G[None, :, :], 0.0)
        b_an = tl.exp2(b_dtn[:, :, None] * b_A2[None, :, :])
        _, b_g = tl.associative_scan((b_an, b_q), 0, _affine_combine, reverse=True)
        b_dx = tl.sum(b_g * b_B[:, None, :], axis=2) * b_dt + b_Dv[None, :] * b_dy
        b_ddt = tl.sum(b_g * (b_A[None, :, :] * b_ah + b_x[:, :, None] * b_B[:, None, :]), axis=2)
        tl.store(dx_ptr + p_td, b_dx.to(dx_ptr.dtype.element_ty), mask=m_td)
        tl.store(ddt_ptr + p_td, b_ddt.to(ddt_ptr.dtype.element_ty), mask=m_td)
        tl.store(dB_ptr + p_part, tl.sum(b_g * (b_dt * b_x)[:, :, None], axis=1), mask=m_tn)
        acc_dA += tl.sum(b_g * b_ah * b_dt[:, :, None], axis=0)
        acc_dD += tl.sum(b_dy * b_x, axis=0)
        b_G = b_a0 * tl.sum(tl.where((o_r == 0)[:, None, None], b_g, 0.0), axis=0)  # dL/dh before the chunk
    tl.store(dA_ptr + i_b * dim * dstate + o_dn, acc_dA, mask=m_dn)
    tl.store(dD_ptr + i_b * dim + o_d, acc_dD, mask=m_d)
    tl.store(dh0_ptr + i_b * dim * dstate + o_dn, b_G, mask=m_dn)
