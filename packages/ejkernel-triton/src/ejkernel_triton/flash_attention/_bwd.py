"""FlashAttention-2 backward kernels (Dao 2023, Algorithm 2) in Triton, without atomics.

- ``flash_dkdv_kernel``: one program per (key block, batch, kv head). It keeps ``K``/``V`` and the
  ``dK``/``dV`` accumulators on chip and walks the query blocks that attend its keys, for every
  query head of its GQA group, so K/V are never repeated and no two programs write the same dK.
- ``flash_dq_kernel``: one program per (query block, batch, query head), walking key blocks with
  the forward's stages. It also writes ``dS`` for the bias gradient when asked.

Both recompute ``P = exp2(S·log2(e) - lse·log2(e))`` from the saved log-sum-exp; ``D`` (the row
sums of ``dO ∘ O``) comes precomputed.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._grid import tile_and_row
from ._fwd import _tanh
from ._kernel import (
    _BH_OFFSET,
    _GOLDEN,
    _KMUL,
    _QMUL,
    LOG2E,
    _u32,
    block_stages,
    dropout_keep,
    fmix32,
    load_tile,
    row_bounds,
    store_tile,
)


@triton.jit
def _scores(qk, bias, sm_scale, softcap, HAS_SOFTCAP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Base-2 logits of a tile and ``tanh`` of the soft cap (for its derivative)."""
    t = qk
    if HAS_SOFTCAP:
        t = _tanh(qk * (sm_scale / softcap))
        s = softcap * t * LOG2E
    else:
        s = qk * (sm_scale * LOG2E)
    if HAS_BIAS:
        s += bias.to(tl.float32) * LOG2E
    return s, t


@triton.jit
def _dq_blocks(
    dq, q, do, lse2, delta, q_seg,
    k_base, v_base, bias_base, dbias_base, kseg_base,
    lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, bh,
    start, stop,
    stride_ks, stride_vs, stride_bq, stride_bk, stride_dbq,
    seq_k, sm_scale, softcap, inv_keep, threshold,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, HAS_BIAS: tl.constexpr, WRITE_DBIAS: tl.constexpr,
    HAS_SEGMENTS: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if MASKED:
            in_k = offs_n < seq_k
        else:
            in_k = offs_n >= 0
        kT = load_tile(
            k_base + offs_n[None, :] * stride_ks + offs_d[:, None],
            offs_d < HEAD_DIM, in_k, HEAD_DIM != HEAD_DIM_PAD, MASKED,
        )  # fmt: skip
        vT = load_tile(
            v_base + offs_n[None, :] * stride_vs + offs_dv[:, None],
            offs_dv < HEAD_DIM_V, in_k, HEAD_DIM_V != HEAD_DIM_V_PAD, MASKED,
        )  # fmt: skip
        qk = tl.dot(q, kT, input_precision=DOT_PRECISION)
        bias = qk
        if HAS_BIAS:
            bias = tl.load(
                bias_base + offs_m[:, None] * stride_bq + offs_n[None, :] * stride_bk,
                mask=valid_m[:, None] & in_k[None, :],
                other=0.0,
            )
        s, t = _scores(qk, bias, sm_scale, softcap, HAS_SOFTCAP, HAS_BIAS)
        if MASKED or HAS_SEGMENTS:
            if MASKED:
                keep = (offs_n[None, :] >= lo[:, None]) & (offs_n[None, :] < hi[:, None])
            else:
                keep = valid_m[:, None] & in_k[None, :]
            if HAS_SEGMENTS:
                k_seg = tl.load(kseg_base + offs_n, mask=in_k, other=-2)
                keep = keep & (q_seg[:, None] == k_seg[None, :]) & (q_seg[:, None] >= 0)
            s = tl.where(keep, s, float("-inf"))
        p = tl.math.exp2(s - lse2[:, None])
        dp = tl.dot(do, vT, input_precision=DOT_PRECISION)
        if HAS_DROPOUT:
            dp = tl.where(dropout_keep(seed, bh, offs_m, offs_n, threshold), dp * inv_keep, 0.0)
        ds = p * (dp - delta[:, None])  # gradient of the (biased, capped) logits
        if WRITE_DBIAS:
            tl.store(
                dbias_base + offs_m[:, None] * stride_dbq + offs_n[None, :],
                ds,
                mask=valid_m[:, None] & (offs_n[None, :] < seq_k),
            )
        if HAS_SOFTCAP:
            ds = ds * (1.0 - t * t)
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=DOT_PRECISION)
    return dq


@triton.jit
def flash_dq_kernel(
    Q, K, V, Bias, QSeg, KSeg, RowLo, RowHi, Seed, DO, Lse, Delta,
    sm_scale, softcap, inv_keep, threshold, window_left, window_right,
    seq_q, seq_k, num_heads, groups,
    DQ, DBias,  # outputs follow every input (jax-triton appends them)
    # Strides are compile-time: Triton then proves 16-byte alignment and vectorizes loads.
    stride_qb: tl.constexpr, stride_qs: tl.constexpr, stride_qh: tl.constexpr,
    stride_kb: tl.constexpr, stride_ks: tl.constexpr, stride_kh: tl.constexpr,
    stride_vb: tl.constexpr, stride_vs: tl.constexpr, stride_vh: tl.constexpr,
    stride_dob: tl.constexpr, stride_dos: tl.constexpr, stride_doh: tl.constexpr,
    stride_bb: tl.constexpr, stride_bh: tl.constexpr, stride_bq: tl.constexpr, stride_bk: tl.constexpr,
    stride_qseg: tl.constexpr, stride_kseg: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, WRITE_DBIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr, HEAD_MASKED: tl.constexpr, TAIL_MASKED: tl.constexpr,
):  # fmt: skip
    """``HEAD_MASKED`` / ``TAIL_MASKED``: whether some program has masked key blocks before /
    after its unmasked ones (``_call.masked_stages``); a loop that is empty for every program is
    not compiled, which spares registers (ptxas serializes the wgmma of a kernel that runs out)."""
    pid_m, pid_bh = tile_and_row(tl.cdiv(seq_q, BLOCK_M))
    off_b = pid_bh // num_heads
    off_h = pid_bh % num_heads
    off_kh = off_h // groups
    b64 = off_b.to(tl.int64)
    h64 = off_h.to(tl.int64)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    lo, hi, valid_m = row_bounds(
        RowLo, RowHi, offs_m, seq_q, seq_k, window_left, window_right, IS_CAUSAL, HAS_WINDOW, IS_VARLEN
    )
    q = load_tile(
        Q + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
        valid_m, offs_d < HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD,
    )  # fmt: skip
    do = load_tile(
        DO + b64 * stride_dob + h64 * stride_doh + offs_m[:, None] * stride_dos + offs_dv[None, :],
        valid_m, offs_dv < HEAD_DIM_V, True, HEAD_DIM_V != HEAD_DIM_V_PAD,
    )  # fmt: skip
    row = pid_bh.to(tl.int64) * seq_q + offs_m
    lse2 = tl.load(Lse + row, mask=valid_m, other=float("inf")) * LOG2E  # +inf: empty row, P = 0
    delta = tl.load(Delta + row, mask=valid_m, other=0.0)
    q_seg = offs_m
    if HAS_SEGMENTS:
        q_seg = tl.load(QSeg + b64 * stride_qseg + offs_m, mask=valid_m, other=-1)
    seed = tl.full((), 0, tl.uint32)
    if HAS_DROPOUT:
        seed = tl.load(Seed)

    k_base = K + b64 * stride_kb + off_kh.to(tl.int64) * stride_kh
    v_base = V + b64 * stride_vb + off_kh.to(tl.int64) * stride_vh
    bias_base = Bias + b64 * stride_bb + h64 * stride_bh
    dbias_base = DBias + pid_bh.to(tl.int64) * seq_q * seq_k
    kseg_base = KSeg + b64 * stride_kseg

    dq = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    start, full_lo, full_hi, end = block_stages(lo, hi, valid_m, seq_k, BLOCK_N)
    if HEAD_MASKED:
        dq = _dq_blocks(
            dq, q, do, lse2, delta, q_seg, k_base, v_base, bias_base, dbias_base, kseg_base,
            lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, pid_bh, start, full_lo,
            stride_ks, stride_vs, stride_bq, stride_bk, seq_k, seq_k, sm_scale, softcap, inv_keep, threshold,
            HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True, HAS_BIAS, WRITE_DBIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT,
            DOT_PRECISION,
        )  # fmt: skip
    dq = _dq_blocks(
        dq, q, do, lse2, delta, q_seg, k_base, v_base, bias_base, dbias_base, kseg_base,
        lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, pid_bh, full_lo, full_hi,
        stride_ks, stride_vs, stride_bq, stride_bk, seq_k, seq_k, sm_scale, softcap, inv_keep, threshold,
        HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, False, HAS_BIAS, WRITE_DBIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT,
        DOT_PRECISION,
    )  # fmt: skip
    if TAIL_MASKED:
        dq = _dq_blocks(
            dq, q, do, lse2, delta, q_seg, k_base, v_base, bias_base, dbias_base, kseg_base,
            lo, hi, offs_m, valid_m, offs_d, offs_dv, seed, pid_bh, full_hi, end,
            stride_ks, stride_vs, stride_bq, stride_bk, seq_k, seq_k, sm_scale, softcap, inv_keep, threshold,
            HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True, HAS_BIAS, WRITE_DBIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT,
            DOT_PRECISION,
        )  # fmt: skip
    dq = dq * sm_scale
    store_tile(
        DQ + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
        dq.to(DQ.dtype.element_ty), valid_m, offs_d < HEAD_DIM, HEAD_DIM != HEAD_DIM_PAD,
    )  # fmt: skip


@triton.jit
def _dropout_keep_t(seed, batch_head, offs_q, offs_k, threshold):
    """The transposed keep mask ``[BLOCK_N, BLOCK_M]`` (same hash as ``dropout_keep``)."""
    s = fmix32(seed ^ fmix32(batch_head.to(tl.uint32) * _u32(_GOLDEN) + _u32(_BH_OFFSET)))
    hq = fmix32(s ^ (offs_q.to(tl.uint32) * _u32(_QMUL)))
    h = fmix32(hq[None, :] ^ (offs_k.to(tl.uint32) * _u32(_KMUL))[:, None])
    return h >= threshold.to(tl.uint32)


@triton.jit
def _dkdv_blocks(
    dk, dv, k, v, k_seg,
    q_base, do_base, lse_base, delta_base, bias_base, qseg_base,
    offs_n, in_k, offs_d, offs_dv, seed, bh, start, stop,
    RowLo, RowHi, window_left, window_right,
    stride_qs, stride_dos, stride_bq, stride_bk,
    seq_q, seq_k, sm_scale, softcap, inv_keep, threshold,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Query blocks ``[start, stop)`` against one key block (tiles transposed: keys are rows)."""
    for start_m in range(start, stop, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        if MASKED:
            lo, hi, valid_m = row_bounds(
                RowLo, RowHi, offs_m, seq_q, seq_k, window_left, window_right, IS_CAUSAL, HAS_WINDOW, IS_VARLEN
            )
            lse2 = tl.load(lse_base + offs_m, mask=valid_m, other=float("inf")) * LOG2E
            delta = tl.load(delta_base + offs_m, mask=valid_m, other=0.0)
        else:  # whole query blocks whose rows all attend the whole key block: nothing to mask
            valid_m = offs_m < seq_q
            lse2 = tl.load(lse_base + offs_m) * LOG2E
            delta = tl.load(delta_base + offs_m)
        qT = load_tile(
            q_base + offs_m[None, :] * stride_qs + offs_d[:, None],
            offs_d < HEAD_DIM, valid_m, HEAD_DIM != HEAD_DIM_PAD, MASKED,
        )  # fmt: skip
        qkT = tl.dot(k, qT, input_precision=DOT_PRECISION)  # [BLOCK_N, BLOCK_M]
        biasT = qkT
        if HAS_BIAS:
            biasT = tl.load(
                bias_base + offs_m[None, :] * stride_bq + offs_n[:, None] * stride_bk,
                mask=valid_m[None, :] & in_k[:, None],
                other=0.0,
            )
        sT, tT = _scores(qkT, biasT, sm_scale, softcap, HAS_SOFTCAP, HAS_BIAS)
        if MASKED or HAS_SEGMENTS:
            if MASKED:
                keep = (offs_n[:, None] >= lo[None, :]) & (offs_n[:, None] < hi[None, :])
            else:
                keep = in_k[:, None] & valid_m[None, :]
            if HAS_SEGMENTS:
                q_seg = tl.load(qseg_base + offs_m, mask=valid_m, other=-1)
                keep = keep & (k_seg[:, None] == q_seg[None, :]) & (q_seg[None, :] >= 0)
            sT = tl.where(keep, sT, float("-inf"))
        pT = tl.math.exp2(sT - lse2[None, :])
        do = load_tile(
            do_base + offs_m[:, None] * stride_dos + offs_dv[None, :],
            valid_m, offs_dv < HEAD_DIM_V, MASKED, HEAD_DIM_V != HEAD_DIM_V_PAD,
        )  # fmt: skip
        dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # [BLOCK_N, BLOCK_M]
        if HAS_DROPOUT:
            keepT = _dropout_keep_t(seed, bh, offs_m, offs_n, threshold)
            dv = tl.dot(tl.where(keepT, pT * inv_keep, 0.0).to(do.dtype), do, dv, input_precision=DOT_PRECISION)
            dpT = tl.where(keepT, dpT * inv_keep, 0.0)
        else:
            dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
        dsT = pT * (dpT - delta[None, :])
        if HAS_SOFTCAP:
            dsT = dsT * (1.0 - tT * tT)
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk, input_precision=DOT_PRECISION)
    return dk, dv


@triton.jit
def _q_range(
    QBlkRange, pid_n, start_n, seq_q, seq_k, window_left, window_right,
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Query rows ``[q_lo, q_hi)`` that attend some key of the block, and the rows
    ``[full_lo, full_hi)`` that attend all of them, as query-block boundaries."""
    off = seq_k - seq_q
    end_n = tl.minimum(start_n + BLOCK_N, seq_k)
    if IS_VARLEN:
        q_lo = tl.load(QBlkRange + 2 * pid_n)
        q_hi = tl.load(QBlkRange + 2 * pid_n + 1)
        f_lo = q_hi
        f_hi = q_hi
    else:
        q_lo = 0
        q_hi = seq_q
        f_lo = 0
        f_hi = seq_q
        if IS_CAUSAL:
            q_lo = tl.maximum(q_lo, start_n - off)
            f_lo = tl.maximum(f_lo, start_n + BLOCK_N - 1 - off)
        elif HAS_WINDOW:
            q_lo = tl.maximum(q_lo, start_n - off - window_right)
            f_lo = tl.maximum(f_lo, start_n + BLOCK_N - 1 - off - window_right)
        if HAS_WINDOW:
            q_hi = tl.minimum(q_hi, end_n - off + window_left)
            f_hi = tl.minimum(f_hi, start_n - off + window_left + 1)
        if start_n + BLOCK_N > seq_k:  # a partial key block is never unmasked
            f_hi = f_lo
        q_lo = tl.minimum(tl.maximum(q_lo, 0), seq_q)
        q_hi = tl.maximum(tl.minimum(q_hi, seq_q), q_lo)
    q_start = (q_lo // BLOCK_M) * BLOCK_M
    full_lo = tl.minimum(tl.maximum(((f_lo + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, q_start), q_hi)
    full_hi = tl.minimum(tl.maximum((f_hi // BLOCK_M) * BLOCK_M, full_lo), q_hi)
    return q_start, full_lo, full_hi, q_hi


@triton.jit
def flash_dkdv_kernel(
    Q, K, V, Bias, QSeg, KSeg, RowLo, RowHi, QBlkRange, Seed, DO, Lse, Delta,
    sm_scale, softcap, inv_keep, threshold, window_left, window_right,
    seq_q, seq_k, num_heads, num_kv_heads, groups,
    DK, DV,  # outputs follow every input (jax-triton appends them)
    # Strides are compile-time: Triton then proves 16-byte alignment and vectorizes loads.
    stride_qb: tl.constexpr, stride_qs: tl.constexpr, stride_qh: tl.constexpr,
    stride_kb: tl.constexpr, stride_ks: tl.constexpr, stride_kh: tl.constexpr,
    stride_vb: tl.constexpr, stride_vs: tl.constexpr, stride_vh: tl.constexpr,
    stride_dob: tl.constexpr, stride_dos: tl.constexpr, stride_doh: tl.constexpr,
    stride_bb: tl.constexpr, stride_bh: tl.constexpr, stride_bq: tl.constexpr, stride_bk: tl.constexpr,
    stride_qseg: tl.constexpr, stride_kseg: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr, HEAD_MASKED: tl.constexpr, TAIL_MASKED: tl.constexpr,
):  # fmt: skip
    """``HEAD_MASKED`` / ``TAIL_MASKED`` as in :func:`flash_dq_kernel`, for the query blocks."""
    pid_n, pid_bkh = tile_and_row(tl.cdiv(seq_k, BLOCK_N))
    off_b = pid_bkh // num_kv_heads
    off_kh = pid_bkh % num_kv_heads
    b64 = off_b.to(tl.int64)
    kh64 = off_kh.to(tl.int64)

    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    in_k = offs_n < seq_k
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    k = load_tile(
        K + b64 * stride_kb + kh64 * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
        in_k, offs_d < HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD,
    )  # fmt: skip
    v = load_tile(
        V + b64 * stride_vb + kh64 * stride_vh + offs_n[:, None] * stride_vs + offs_dv[None, :],
        in_k, offs_dv < HEAD_DIM_V, True, HEAD_DIM_V != HEAD_DIM_V_PAD,
    )  # fmt: skip
    k_seg = offs_n
    if HAS_SEGMENTS:
        k_seg = tl.load(KSeg + b64 * stride_kseg + offs_n, mask=in_k, other=-2)
    seed = tl.full((), 0, tl.uint32)
    if HAS_DROPOUT:
        seed = tl.load(Seed)
    qseg_base = QSeg + b64 * stride_qseg

    q_start, full_lo, full_hi, q_end = _q_range(
        QBlkRange, pid_n, start_n, seq_q, seq_k, window_left, window_right,
        BLOCK_N, BLOCK_M, IS_CAUSAL, HAS_WINDOW, IS_VARLEN,
    )  # fmt: skip
    dk = tl.zeros([BLOCK_N, HEAD_DIM_PAD], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V_PAD], tl.float32)
    for g in range(0, groups):  # every query head that shares this kv head
        off_h = off_kh * groups + g
        h64 = off_h.to(tl.int64)
        bh = off_b * num_heads + off_h
        q_base = Q + b64 * stride_qb + h64 * stride_qh
        do_base = DO + b64 * stride_dob + h64 * stride_doh
        lse_base = Lse + bh.to(tl.int64) * seq_q
        delta_base = Delta + bh.to(tl.int64) * seq_q
        bias_base = Bias + b64 * stride_bb + h64 * stride_bh
        if HEAD_MASKED:
            dk, dv = _dkdv_blocks(
                dk, dv, k, v, k_seg, q_base, do_base, lse_base, delta_base, bias_base, qseg_base,
                offs_n, in_k, offs_d, offs_dv, seed, bh, q_start, full_lo,
                RowLo, RowHi, window_left, window_right, stride_qs, stride_dos, stride_bq, stride_bk,
                seq_q, seq_k, sm_scale, softcap, inv_keep, threshold,
                HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_M, True, IS_CAUSAL, HAS_WINDOW, IS_VARLEN,
                HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
            )  # fmt: skip
        dk, dv = _dkdv_blocks(
            dk, dv, k, v, k_seg, q_base, do_base, lse_base, delta_base, bias_base, qseg_base,
            offs_n, in_k, offs_d, offs_dv, seed, bh, full_lo, full_hi,
            RowLo, RowHi, window_left, window_right, stride_qs, stride_dos, stride_bq, stride_bk,
            seq_q, seq_k, sm_scale, softcap, inv_keep, threshold,
            HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_M, False, IS_CAUSAL, HAS_WINDOW, IS_VARLEN,
            HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
        )  # fmt: skip
        if TAIL_MASKED:
            dk, dv = _dkdv_blocks(
                dk, dv, k, v, k_seg, q_base, do_base, lse_base, delta_base, bias_base, qseg_base,
                offs_n, in_k, offs_d, offs_dv, seed, bh, full_hi, q_end,
                RowLo, RowHi, window_left, window_right, stride_qs, stride_dos, stride_bq, stride_bk,
                seq_q, seq_k, sm_scale, softcap, inv_keep, threshold,
                HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_M, True, IS_CAUSAL, HAS_WINDOW, IS_VARLEN,
                HAS_BIAS, HAS_SEGMENTS, HAS_SOFTCAP, HAS_DROPOUT, DOT_PRECISION,
            )  # fmt: skip
    dk = dk * sm_scale
    store_tile(
        DK + b64 * stride_kb + kh64 * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
        dk.to(DK.dtype.element_ty), in_k, offs_d < HEAD_DIM, HEAD_DIM != HEAD_DIM_PAD,
    )  # fmt: skip
    store_tile(
        DV + b64 * stride_vb + kh64 * stride_vh + offs_n[:, None] * stride_vs + offs_dv[None, :],
        dv.to(DV.dtype.element_ty), in_k, offs_dv < HEAD_DIM_V, HEAD_DIM_V != HEAD_DIM_V_PAD,
    )  # fmt: skip
