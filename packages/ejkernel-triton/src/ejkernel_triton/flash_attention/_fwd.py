"""The forward kernels: FlashAttention-2 (Dao 2023, Algorithm 1) in Triton, and its Hopper TMA form.

``flash_fwd_kernel`` (every option of the op): one program computes a ``[BLOCK_M, HEAD_DIM_V]``
output tile of one (batch, query head): it walks the key blocks its rows may attend in three
stages (masked prefix, unmasked middle, masked suffix; see ``_kernel.block_stages``), keeping the
online-softmax state ``m_i``, ``l_i``, ``acc`` in registers, in base 2 (``exp2``, with
``log2(e)`` folded into the scale). Sinks join the denominator at the end; the log-sum-exp
(natural log) is saved for the backward pass.

``flash_fwd_tma_kernel`` and ``flash_fwd_tma_ws_kernel`` (Triton >= 3.6, sm_90): the same
algorithm (causal in stages: unmasked key blocks, then the masked ones) for the plain case: no
bias, segments, soft cap, window, sinks, dropout or varlen, 16-bit inputs, head dim 64 or 128
(``heuristics.tma_eligible``). Q, K and V tiles arrive through device-side TMA descriptors
(``tl.make_tensor_descriptor``) instead of per-thread pointer loads: one bulk copy per tile,
completing on a barrier, leaves the warps' issue slots to the matrix products and the softmax.
The descriptors need a global scratch buffer per program, which ``_launch.launch_compiled``
provides (jax-triton 0.3.1 passes none). ``flash_fwd_tma_kernel`` views each BSHD tensor as
``[batch, seq, heads * head_dim]``, so a tile never crosses into the next sequence: rows past a
sequence's end load as zeros (and are not stored). ``flash_fwd_tma_ws_kernel`` is its
warp-specialized form for non-causal calls whose lengths are whole tiles
(``_call._warp_specialized``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._grid import tile_and_row
from ._kernel import LN2, LOG2E, block_stages, dropout_keep, load_tile, row_bounds, store_tile


@triton.jit
def _tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _fwd_blocks(
    acc, l_i, m_i, q, q_seg,
    k_base, v_base, bias_base, kseg_base,
    lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, bh,
    start, stop,
    stride_ks, stride_vs, stride_bq, stride_bk,
    seq_k, qk_scale, sm_scale, softcap, threshold,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Key blocks ``[start, stop)``: ``MASKED`` applies each row's interval ``[lo, hi)``."""
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if MASKED:
            in_k = offs_n < seq_k
        else:
            in_k = offs_n >= 0  # every key of an unmasked block exists
        k = load_tile(  # [HEAD_DIM_PAD, BLOCK_N]
            k_base + offs_n[None, :] * stride_ks + offs_d[:, None],
            offs_d < HEAD_DIM, in_k, HEAD_DIM != HEAD_DIM_PAD, MASKED,
        )  # fmt: skip
        qk = tl.dot(q, k, input_precision=DOT_PRECISION)  # [BLOCK_M, BLOCK_N]
        # Plain logits stay unscaled: the row max is taken on q·k and the scale folds into the
        # exponent's FMA (one multiply per element fewer; softmax_scale > 0).
        PLAIN: tl.constexpr = not (HAS_SOFTCAP or HAS_BIAS)
        if HAS_SOFTCAP:
            s = softcap * _tanh(qk * (sm_scale / softcap)) * LOG2E
        elif HAS_BIAS:
            s = qk * qk_scale
        else:
            s = qk  # scaled in the exponent
        if HAS_BIAS:
            b = tl.load(
                bias_base + offs_m[:, None] * stride_bq + offs_n[None, :] * stride_bk,
                mask=valid_m[:, None] & in_k[None, :],
                other=0.0,
            )
            s += b.to(tl.float32) * LOG2E
        if MASKED or HAS_SEGMENTS:
            if MASKED:
                keep = (offs_n[None, :] >= lo[:, None]) & (offs_n[None, :] < hi[:, None])
            else:
                keep = valid_m[:, None] & in_k[None, :]
            if HAS_SEGMENTS:
                k_seg = tl.load(kseg_base + offs_n, mask=in_k, other=-2)
                keep = keep & (q_seg[:, None] == k_seg[None, :]) & (q_seg[:, None] >= 0)
            s = tl.where(keep, s, float("-inf"))
        if PLAIN:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED or HAS_SEGMENTS or HAS_BIAS:  # a row may have seen no key yet
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_safe = m_new
        if PLAIN:
            p = tl.math.exp2(s * qk_scale - m_safe[:, None])
        else:
            p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_DROPOUT:
            p = tl.where(dropout_keep(seed, bh, offs_m, offs_n, threshold), p, 0.0)
        v = load_tile(  # [BLOCK_N, HEAD_DIM_V_PAD]
            v_base + offs_n[:, None] * stride_vs + offs_dv[None, :],
            in_k, offs_dv < HEAD_DIM_V, MASKED, HEAD_DIM_V != HEAD_DIM_V_PAD,
        )  # fmt: skip
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_fwd_kernel(
    Q, K, V, Bias, QSeg, KSeg, RowLo, RowHi, Aux, Seed,
    sm_scale, softcap, inv_keep, threshold, window_left, window_right,
    seq_q, seq_k, num_heads, groups,
    Out, Lse,  # outputs follow every input (jax-triton appends them)
    # Strides are compile-time: Triton then proves 16-byte alignment and vectorizes loads.
    stride_qb: tl.constexpr, stride_qs: tl.constexpr, stride_qh: tl.constexpr, stride_kb: tl.constexpr,
    stride_ks: tl.constexpr, stride_kh: tl.constexpr, stride_vb: tl.constexpr, stride_vs: tl.constexpr,
    stride_vh: tl.constexpr, stride_ob: tl.constexpr, stride_os: tl.constexpr, stride_oh: tl.constexpr,
    stride_bb: tl.constexpr, stride_bh: tl.constexpr, stride_bq: tl.constexpr, stride_bk: tl.constexpr,
    stride_qseg: tl.constexpr, stride_kseg: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    NUM_SINKS: tl.constexpr, HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    tl.static_assert(HEAD_DIM_PAD >= HEAD_DIM)
    pid_m, pid_bh = tile_and_row(tl.cdiv(seq_q, BLOCK_M))
    off_b = pid_bh // num_heads
    off_h = pid_bh % num_heads
    off_kh = off_h // groups
    b64 = off_b.to(tl.int64)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    lo, hi, valid_m = row_bounds(
        RowLo, RowHi, offs_m, seq_q, seq_k, window_left, window_right, IS_CAUSAL, HAS_WINDOW, IS_VARLEN
    )

    q_base = Q + b64 * stride_qb + off_h.to(tl.int64) * stride_qh
    q = load_tile(  # [BLOCK_M, HEAD_DIM_PAD], stays on chip
        q_base + offs_m[:, None] * stride_qs + offs_d[None, :],
        valid_m, offs_d < HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD,
    )  # fmt: skip
    k_base = K + b64 * stride_kb + off_kh.to(tl.int64) * stride_kh
    v_base = V + b64 * stride_vb + off_kh.to(tl.int64) * stride_vh
    bias_base = Bias + b64 * stride_bb + off_h.to(tl.int64) * stride_bh
    kseg_base = KSeg + b64 * stride_kseg
    q_seg = offs_m
    if HAS_SEGMENTS:
        q_seg = tl.load(QSeg + b64 * stride_qseg + offs_m, mask=valid_m, other=-1)
    seed = tl.full((), 0, tl.uint32)
    if HAS_DROPOUT:
        seed = tl.load(Seed)
    bh = pid_bh

    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V_PAD], tl.float32)

    start, full_lo, full_hi, end = block_stages(lo, hi, valid_m, seq_k, BLOCK_N)
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, q_seg, k_base, v_base, bias_base, kseg_base,
        lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, bh, start, full_lo,
        stride_ks, stride_vs, stride_bq, stride_bk, seq_k, qk_scale, sm_scale, softcap, threshold,
        HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True,
        HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, q_seg, k_base, v_base, bias_base, kseg_base,
        lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, bh, full_lo, full_hi,
        stride_ks, stride_vs, stride_bq, stride_bk, seq_k, qk_scale, sm_scale, softcap, threshold,
        HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, False,
        HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, q_seg, k_base, v_base, bias_base, kseg_base,
        lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, bh, full_hi, end,
        stride_ks, stride_vs, stride_bq, stride_bk, seq_k, qk_scale, sm_scale, softcap, threshold,
        HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True,
        HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
    )  # fmt: skip

    for n in tl.static_range(NUM_SINKS):  # attention sinks: denominator only
        a = tl.load(Aux + off_h * NUM_SINKS + n).to(tl.float32) * LOG2E
        m_new = tl.maximum(m_i, a)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.math.exp2(a - m_new)
        acc = acc * alpha[:, None]
        m_i = m_new

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    if HAS_DROPOUT:
        out = out * inv_keep
    lse = tl.where(l_i > 0, (m_i + tl.math.log2(l_safe)) * LN2, float("-inf"))
    o_base = Out + b64 * stride_ob + off_h.to(tl.int64) * stride_oh
    store_tile(
        o_base + offs_m[:, None] * stride_os + offs_dv[None, :],
        out.to(Out.dtype.element_ty), valid_m, offs_dv < HEAD_DIM_V, HEAD_DIM_V != HEAD_DIM_V_PAD,
    )  # fmt: skip
    tl.store(Lse + pid_bh.to(tl.int64) * seq_q + offs_m, lse, mask=valid_m)


# -- Hopper: K/V tiles by the tensor memory accelerator ------------------------------------------


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
    pid_m, pid_bh = tile_and_row(tl.cdiv(seq_q, BLOCK_M))
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
    pid_m, pid_bh = tile_and_row(tl.cdiv(seq_q, BLOCK_M))
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
