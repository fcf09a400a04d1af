"""Triton kernel of NSA's selected-blocks branch (forward).

NSA §3.3.2 / fla's ``parallel_nsa_fwd_kernel``: one program per (token, kv head) holds the
``G`` query rows of the kv head's group, a ``[BLOCK_G, BLOCK_D]`` tile (the group shares the
selection, so each selected block is loaded once for all of them), and runs the online softmax
(``m_i``, ``l_i``, ``acc``) over the keys of its selected blocks, ``BLOCK_K`` rows at a time,
causal within the token's own block. Slots that are ``-1`` (``branches.selected_blocks``: unused,
out of range or repeated) are skipped; a token with no key writes zeros.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._grid import tile_and_row


@triton.jit
def nsa_selected_fwd_kernel(
    q_ptr,  # [B, T, HQ, D]
    k_ptr,  # [B, T, H, D]
    v_ptr,  # [B, T, H, DV]
    sel_ptr,  # [B, T, H, S] int32: block number within the sequence, or -1
    pos_ptr,  # [T] int32: position within the sequence (-1: padding)
    bos_ptr,  # [T] int32: row of the sequence's first token
    scale,
    seq_len,
    o_ptr,  # out: [B, T, HQ, DV] float32
    H: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    S: tl.constexpr,
    BS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    i_t, i_bh = tile_and_row(seq_len)
    i_b = i_bh // H
    i_h = i_bh % H
    row = (i_b * seq_len + i_t).to(tl.int64)
    pos = tl.load(pos_ptr + i_t)
    bos = tl.load(bos_ptr + i_t)

    o_g = tl.arange(0, BLOCK_G)
    o_d = tl.arange(0, BLOCK_D)
    o_dv = tl.arange(0, BLOCK_DV)
    o_k = tl.arange(0, BLOCK_K)
    m_g = o_g < G
    # [BLOCK_G, BLOCK_D]
    p_q = q_ptr + (row * (H * G) + i_h * G + o_g[:, None]) * D + o_d[None, :]
    b_q = tl.load(p_q, mask=m_g[:, None] & (o_d[None, :] < D), other=0.0)

    m_i = tl.full([BLOCK_G], -1e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], dtype=tl.float32)
    kv_base = (i_b * seq_len).to(tl.int64)
    for j in range(S):
        blk = tl.load(sel_ptr + (row * H + i_h) * S + j)
        if blk >= 0:
            for r0 in range(0, BS, BLOCK_K):
                local = blk * BS + r0 + o_k  # [BLOCK_K] positions within the sequence
                m_k = (r0 + o_k < BS) & (local <= pos)
                rows = kv_base + bos + local
                # [BLOCK_K, BLOCK_D], [BLOCK_K, BLOCK_DV]
                b_k = tl.load(
                    k_ptr + (rows[:, None] * H + i_h) * D + o_d[None, :],
                    mask=m_k[:, None] & (o_d[None, :] < D),
                    other=0.0,
                )
                b_v = tl.load(
                    v_ptr + (rows[:, None] * H + i_h) * DV + o_dv[None, :],
                    mask=m_k[:, None] & (o_dv[None, :] < DV),
                    other=0.0,
                )
                # [BLOCK_G, BLOCK_K]
                b_s = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION) * scale
                b_s = tl.where(m_k[None, :], b_s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(b_s, 1))
                alpha = tl.exp(m_i - m_new)
                b_p = tl.exp(b_s - m_new[:, None])
                l_i = l_i * alpha + tl.sum(b_p, 1)
                acc = acc * alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PRECISION)
                m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    p_o = o_ptr + (row * (H * G) + i_h * G + o_g[:, None]) * DV + o_dv[None, :]
    tl.store(p_o, out, mask=m_g[:, None] & (o_dv[None, :] < DV))
