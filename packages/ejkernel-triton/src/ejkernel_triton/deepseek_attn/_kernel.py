"""Triton kernel of ``deepseek_attn``'s sparse attention (forward, absorbed MLA form).

One program per (query token, block of ``BLOCK_H`` heads): the heads' absorbed queries
``[BLOCK_H, LORA + ROPE]`` stay resident while the program walks the token's selected key
indices ``BLOCK_K`` at a time, gathers those latent rows (``[BLOCK_K, LORA]`` latent lanes,
which are also the values, and ``[BLOCK_K, ROPE]`` rotary lanes), and folds them into a base-2
online softmax (``m_i``, ``l_i``, ``acc [BLOCK_H, LORA]``, float32) with tensor-core products.
Slots that are ``-1``, outside ``[0, SEQ_K)`` or (``CAUSAL``) after the token's own position
``i + SEQ_K - SEQ_Q`` are not loaded and get no weight; a token with no key writes zeros. Every
head block of a token reads the same rows (from L2 after the first), as FlashMLA's sparse
decode shares each gathered tile among 64 heads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..flash_attention._kernel import LOG2E


@triton.jit
def dsa_sparse_fwd_kernel(
    Q, KV, Sel, sm_scale,
    Out,  # outputs follow every input (jax-triton appends them)
    SEQ_Q: tl.constexpr, SEQ_K: tl.constexpr, NUM_HEADS: tl.constexpr, TOPK: tl.constexpr,
    LORA: tl.constexpr, LORA_PAD: tl.constexpr, ROPE: tl.constexpr, ROPE_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """``Q [B, SEQ_Q, NUM_HEADS, LORA + ROPE]``, ``KV [B, SEQ_K, LORA + ROPE]``, ``Sel [B, SEQ_Q,
    TOPK]`` int32 key indices; ``Out [B, SEQ_Q, NUM_HEADS, LORA]`` in the query's dtype."""
    tl.static_assert(BLOCK_H >= 16 and BLOCK_K >= 16)  # the smallest tl.dot
    HEAD_DIM: tl.constexpr = LORA + ROPE
    tok = tl.program_id(0).to(tl.int64)  # batch * SEQ_Q + query index
    hb = tl.program_id(1)
    b = tok // SEQ_Q
    pos = tok % SEQ_Q + (SEQ_K - SEQ_Q)  # the token's own key position
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = heads < NUM_HEADS
    offs_v = tl.arange(0, LORA_PAD)
    offs_r = tl.arange(0, ROPE_PAD)
    v_ok = offs_v < LORA
    r_ok = offs_r < ROPE
    q_row = Q + (tok * NUM_HEADS + heads) * HEAD_DIM
    q_lat = tl.load(q_row[:, None] + offs_v[None, :], mask=h_ok[:, None] & v_ok[None, :], other=0.0)
    if ROPE > 0:
        q_rope = tl.load(q_row[:, None] + LORA + offs_r[None, :], mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, LORA_PAD], tl.float32)
    sel_row = Sel + tok * TOPK
    for k0 in range(0, TOPK, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        idx = tl.load(sel_row + offs_k, mask=offs_k < TOPK, other=-1)
        ok = (idx >= 0) & (idx < SEQ_K)
        if CAUSAL:
            ok = ok & (idx <= pos)
        row = KV + (b * SEQ_K + tl.where(ok, idx, 0)) * HEAD_DIM  # [BLOCK_K] gathered latent rows
        lat = tl.load(row[:, None] + offs_v[None, :], mask=ok[:, None] & v_ok[None, :], other=0.0)
        qk = tl.dot(q_lat, tl.trans(lat), input_precision=DOT_PRECISION)  # [BLOCK_H, BLOCK_K]
        if ROPE > 0:
            rope = tl.load(row[:, None] + LORA + offs_r[None, :], mask=ok[:, None] & r_ok[None, :], other=0.0)
            qk = tl.dot(q_rope, tl.trans(rope), qk, input_precision=DOT_PRECISION)
        s = tl.where(ok[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(lat.dtype), lat, acc, input_precision=DOT_PRECISION)  # [BLOCK_H, LORA_PAD]
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_row = Out + (tok * NUM_HEADS + heads) * LORA
    tl.store(o_row[:, None] + offs_v[None, :], out.to(Out.dtype.element_ty), mask=h_ok[:, None] & v_ok[None, :])
