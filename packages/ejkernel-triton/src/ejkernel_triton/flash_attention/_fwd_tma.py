"""FlashAttention forward for Hopper: K/V tiles by the tensor memory accelerator (Triton >= 3.6, sm_90).

The same algorithm as ``_fwd.flash_fwd_kernel`` (FlashAttention-2's online softmax in base 2,
causal in stages: unmasked key blocks, then the masked ones) for the plain case: no bias,
segments, soft cap, window, sinks, dropout or varlen, 16-bit inputs, head dim 64 or 128
(``heuristics.tma_eligible``). Q, K and V tiles arrive through device-side TMA descriptors
(``tl.make_tensor_descriptor``) instead of per-thread pointer loads: one bulk copy per tile,
completing on a barrier, leaves the warps' issue slots to the matrix products and the softmax.
The descriptors need a global scratch buffer per program, which ``_launch.launch_compiled``
provides (jax-triton 0.3.1 passes none).

``flash_fwd_tma_kernel`` views each BSHD tensor as ``[batch, seq, heads * head_dim]``, so a tile
never crosses into the next sequence: rows past a sequence's end load as zeros (and are not
stored). ``flash_fwd_tma_ws_kernel`` is its warp-specialized form for non-causal calls whose
lengths are whole tiles (``_call._warp_specialized``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._device import LN2, LOG2E


@triton.jit
def _tma_blocks(
    acc, l_i, m_i, q, k_desc, v_desc, off_b, kv_col, offs_m, start, stop, seq_k, diag, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """Key blocks ``[start, stop)``; ``MASKED`` drops keys past ``seq_k`` and, causal, keys past
    each row's diagonal (row ``r`` sees keys ``<= r + diag``)."""
    for start_n in tl.range(start, stop, BLOCK_N):
        k = k_desc.load([off_b, start_n, kv_col]).reshape([BLOCK_N, HEAD_DIM])
        qk = tl.dot(q, k.T)  # [BLOCK_M, BLOCK_N]
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < seq_k
            if IS_CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + diag)
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        if MASKED:  # a row may have seen no key yet
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_safe = m_new
        p = tl.math.exp2(qk * qk_scale - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([off_b, start_n, kv_col]).reshape([BLOCK_N, HEAD_DIM])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_fwd_tma_kernel(
    Q, K, V, sm_scale, batch, seq_q, seq_k, num_heads, num_kv_heads, groups,
    Out, Lse,  # outputs follow every input
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    MASK_TAIL: tl.constexpr,
):  # fmt: skip
    """``MASK_TAIL``: some block needs the key mask (causal, or ``seq_k % BLOCK_N``), a host-side
    fact of the static shapes."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // num_heads
    off_h = pid_bh % num_heads
    q_desc = tl.make_tensor_descriptor(
        Q, shape=[batch, seq_q, num_heads * HEAD_DIM], strides=[seq_q * num_heads * HEAD_DIM, num_heads * HEAD_DIM, 1],
        block_shape=[1, BLOCK_M, HEAD_DIM],
    )  # fmt: skip
    k_desc = tl.make_tensor_descriptor(
        K, shape=[batch, seq_k, num_kv_heads * HEAD_DIM],
        strides=[seq_k * num_kv_heads * HEAD_DIM, num_kv_heads * HEAD_DIM, 1], block_shape=[1, BLOCK_N, HEAD_DIM],
    )  # fmt: skip
    v_desc = tl.make_tensor_descriptor(
        V, shape=[batch, seq_k, num_kv_heads * HEAD_DIM],
        strides=[seq_k * num_kv_heads * HEAD_DIM, num_kv_heads * HEAD_DIM, 1], block_shape=[1, BLOCK_N, HEAD_DIM],
    )  # fmt: skip
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = q_desc.load([off_b, m0, off_h * HEAD_DIM]).reshape([BLOCK_M, HEAD_DIM])
    kv_col = (off_h // groups) * HEAD_DIM  # GQA: the kv head of this query head, never repeated

    diag = seq_k - seq_q  # causal is aligned bottom-right
    if IS_CAUSAL:
        hi = tl.maximum(tl.minimum(seq_k, m0 + BLOCK_M + diag), 0)  # the block's last row's bound
        full = tl.maximum(tl.minimum(seq_k, m0 + diag + 1), 0)  # every row sees these keys
    else:
        hi = seq_k
        full = seq_k
    full = (full // BLOCK_N) * BLOCK_N  # whole unmasked blocks; the rest is masked

    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    acc, l_i, m_i = _tma_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, off_b, kv_col, offs_m, 0, full, seq_k, diag, qk_scale,
        HEAD_DIM, BLOCK_N, False, IS_CAUSAL,
    )  # fmt: skip
    if MASK_TAIL:
        acc, l_i, m_i = _tma_blocks(
            acc, l_i, m_i, q, k_desc, v_desc, off_b, kv_col, offs_m, full, hi, seq_k, diag, qk_scale,
            HEAD_DIM, BLOCK_N, True, IS_CAUSAL,
        )  # fmt: skip

    l_safe = tl.where(l_i > 0, l_i, 1.0)  # rows that see no key: zeros, never NaN
    out = acc / l_safe[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    rows = (off_b.to(tl.int64) * seq_q + offs_m) * num_heads + off_h
    tl.store(
        Out + rows[:, None] * HEAD_DIM + offs_d[None, :], out.to(Out.dtype.element_ty), mask=(offs_m < seq_q)[:, None]
    )
    lse = tl.where(l_i > 0, (m_i + tl.math.log2(l_safe)) * LN2, float("-inf"))
    tl.store(Lse + pid_bh.to(tl.int64) * seq_q + offs_m, lse, mask=offs_m < seq_q)


@triton.jit
def flash_fwd_tma_ws_kernel(
    Q, K, V, sm_scale, batch, seq_q, seq_k, num_heads, num_kv_heads, groups,
    Out, Lse,  # outputs follow every input
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """Non-causal, ``seq_q % BLOCK_M == 0`` and ``seq_k % BLOCK_N == 0``: one unmasked key loop,
    warp-specialized (``tl.range(..., warp_specialize=True)``): Triton 3.6 splits it into a
    producer warp issuing the TMA copies and two consumer warpgroups that alternate between their
    matrix products and their softmax (FlashAttention-3 §3.1's producer-consumer asynchrony and
    ping-pong schedule). Triton 3.6 specializes a kernel only with a single key loop, and ran
    this loop correctly only with 2-D descriptors (``[batch * seq, heads * head_dim]``: tiles
    may not cross a sequence's end, hence the alignment) and at most 2 stages."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // num_heads
    off_h = pid_bh % num_heads
    q_desc = tl.make_tensor_descriptor(
        Q, shape=[batch * seq_q, num_heads * HEAD_DIM], strides=[num_heads * HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM]
    )  # fmt: skip
    k_desc = tl.make_tensor_descriptor(
        K, shape=[batch * seq_k, num_kv_heads * HEAD_DIM], strides=[num_kv_heads * HEAD_DIM, 1],
        block_shape=[BLOCK_N, HEAD_DIM],
    )  # fmt: skip
    v_desc = tl.make_tensor_descriptor(
        V, shape=[batch * seq_k, num_kv_heads * HEAD_DIM], strides=[num_kv_heads * HEAD_DIM, 1],
        block_shape=[BLOCK_N, HEAD_DIM],
    )  # fmt: skip
    o_desc = tl.make_tensor_descriptor(
        Out, shape=[batch * seq_q, num_heads * HEAD_DIM], strides=[num_heads * HEAD_DIM, 1],
        block_shape=[BLOCK_M, HEAD_DIM],
    )  # fmt: skip
    q_row = off_b * seq_q + pid_m * BLOCK_M
    k_row = off_b * seq_k
    kv_col = (off_h // groups) * HEAD_DIM
    q = q_desc.load([q_row, off_h * HEAD_DIM])
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in tl.range(0, seq_k, BLOCK_N, warp_specialize=True):
        k = k_desc.load([k_row + start_n, kv_col])
        qk = tl.dot(q, k.T)  # [BLOCK_M, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([k_row + start_n, kv_col])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    o_desc.store([q_row, off_h * HEAD_DIM], (acc / l_i[:, None]).to(Out.dtype.element_ty))
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(Lse + pid_bh.to(tl.int64) * seq_q + offs_m, (m_i + tl.math.log2(l_i)) * LN2)
