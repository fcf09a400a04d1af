"""Triton kernels of ``blocksparse_attention``: FlashAttention-2 (Dao 2023, Algorithms 1 and 2)
restricted to the block schedule of :mod:`ejkernel.ops.blocksparse_attention.mask`.

Every operand is padded by the host to whole tiles and a power-of-two head dim, so loads need no
bounds masks. A program walks only the tiles its schedule lists; a tile's fine mask (its static
pattern, the document mask, the pairwise mask) is built only when the tile's flags say it is
partial. Tile shapes are in comments: ``BLOCK_M`` query rows, ``BLOCK_N`` keys.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._grid import tile_and_row

FLAG_STATIC = tl.constexpr(1)
FLAG_SEGMENTS = tl.constexpr(2)
FLAG_ATTENTION_MASK = tl.constexpr(4)


@triton.jit
def _tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _fine_mask(
    flags, mask_idx, q_seg, PartialMasks, KSeg, AttnMask,
    offs_m, offs_k, b, head, am_bstride, am_hstride,
    SKP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SEG: tl.constexpr, HAS_AM: tl.constexpr,
):  # fmt: skip
    """``[BLOCK_M, BLOCK_N]`` which pairs of a partial tile may attend."""
    keep = tl.full((BLOCK_M, BLOCK_N), 1, tl.int1)
    if (flags & FLAG_STATIC) != 0:
        rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        pattern = tl.load(PartialMasks + mask_idx.to(tl.int64) * (BLOCK_M * BLOCK_N) + rows)
        keep = keep & (pattern != 0)
    if HAS_SEG:  # noqa: SIM102 - a compile-time test around the run-time one
        if (flags & FLAG_SEGMENTS) != 0:
            k_seg = tl.load(KSeg + b.to(tl.int64) * SKP + offs_k)  # [BLOCK_N]
            keep = keep & (q_seg[:, None] == k_seg[None, :]) & (q_seg[:, None] >= 0)
    if HAS_AM:  # noqa: SIM102 - a compile-time test around the run-time one
        if (flags & FLAG_ATTENTION_MASK) != 0:
            base = b.to(tl.int64) * am_bstride + head.to(tl.int64) * am_hstride
            am = tl.load(AttnMask + base + offs_m[:, None].to(tl.int64) * SKP + offs_k[None, :])
            keep = keep & (am != 0)
    return keep


@triton.jit
def _logits(q, k, sm_scale, softcap, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` float32 logits of a tile, and ``tanh`` of the soft cap (for its derivative)."""
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
    t = s
    if HAS_SOFTCAP:
        t = _tanh(s / softcap)
        s = softcap * t
    return s, t


@triton.jit
def bsa_fwd_kernel(
    Q, K, V, Sinks, KvIndex, KvCount, KvFlags, KvMaskIdx, PartialMasks, QSeg, KSeg, AttnMask,
    sm_scale, softcap, meta_bstride, count_bstride, am_bstride, am_hstride, width, num_sinks,
    Out, Lse,
    H: tl.constexpr, G: tl.constexpr, SQP: tl.constexpr, SKP: tl.constexpr,
    DP: tl.constexpr, DVP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SEG: tl.constexpr, HAS_AM: tl.constexpr, HAS_SINKS: tl.constexpr, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    i, bh = tile_and_row(SQP // BLOCK_M)
    b = bh // H
    head = bh % H
    kv_bh = (b * (H // G) + head // G).to(tl.int64)
    offs_m = i * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    offs_dv = tl.arange(0, DVP)
    q = tl.load(Q + (bh.to(tl.int64) * SQP + offs_m[:, None]) * DP + offs_d[None, :])  # [BLOCK_M, DP]
    q_seg = offs_m
    if HAS_SEG:
        q_seg = tl.load(QSeg + b.to(tl.int64) * SQP + offs_m)
    meta = b.to(tl.int64) * meta_bstride + i * width
    count = tl.load(KvCount + b.to(tl.int64) * count_bstride + i)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, DVP), tl.float32)
    for t in range(0, count):
        j = tl.load(KvIndex + meta + t)
        flags = tl.load(KvFlags + meta + t)
        offs_k = j * BLOCK_N + offs_n
        k = tl.load(K + (kv_bh * SKP + offs_k[:, None]) * DP + offs_d[None, :])  # [BLOCK_N, DP]
        v = tl.load(V + (kv_bh * SKP + offs_k[:, None]) * DVP + offs_dv[None, :])  # [BLOCK_N, DVP]
        s, _ = _logits(q, k, sm_scale, softcap, HAS_SOFTCAP, DOT_PRECISION)
        if flags != 0:
            mask_idx = tl.load(KvMaskIdx + meta + t)
            keep = _fine_mask(
                flags, mask_idx, q_seg, PartialMasks, KSeg, AttnMask, offs_m, offs_k, b, head,
                am_bstride, am_hstride, SKP, BLOCK_M, BLOCK_N, HAS_SEG, HAS_AM,
            )  # fmt: skip
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    if HAS_SINKS:
        for n in range(0, num_sinks):
            sink = tl.load(Sinks + head * num_sinks + n)
            m_new = tl.maximum(m_i, sink)
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.exp(sink - m_new)
            acc = acc * alpha[:, None]
            m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(l_i > 0, m_i + tl.log(l_safe), float("-inf"))
    tl.store(Out + (bh.to(tl.int64) * SQP + offs_m[:, None]) * DVP + offs_dv[None, :], out.to(Out.dtype.element_ty))
    tl.store(Lse + bh.to(tl.int64) * SQP + offs_m, lse)


@triton.jit
def bsa_bwd_dq_kernel(
    Q, K, V, DO, Lse, Delta, KvIndex, KvCount, KvFlags, KvMaskIdx, PartialMasks, QSeg, KSeg, AttnMask,
    sm_scale, softcap, meta_bstride, count_bstride, am_bstride, am_hstride, width,
    DQ,
    H: tl.constexpr, G: tl.constexpr, SQP: tl.constexpr, SKP: tl.constexpr,
    DP: tl.constexpr, DVP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SEG: tl.constexpr, HAS_AM: tl.constexpr, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ of one query tile over its key tiles: ``dS = P ∘ (dO Vᵀ - D)``, ``dQ = dS K · scale``."""
    i, bh = tile_and_row(SQP // BLOCK_M)
    b = bh // H
    head = bh % H
    kv_bh = (b * (H // G) + head // G).to(tl.int64)
    offs_m = i * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DP)
    offs_dv = tl.arange(0, DVP)
    rows = bh.to(tl.int64) * SQP + offs_m
    q = tl.load(Q + rows[:, None] * DP + offs_d[None, :])  # [BLOCK_M, DP]
    do = tl.load(DO + rows[:, None] * DVP + offs_dv[None, :])  # [BLOCK_M, DVP]
    lse = tl.load(Lse + rows)
    lse = tl.where(lse == float("-inf"), float("inf"), lse)  # empty rows: P = 0
    delta = tl.load(Delta + rows)
    q_seg = offs_m
    if HAS_SEG:
        q_seg = tl.load(QSeg + b.to(tl.int64) * SQP + offs_m)
    meta = b.to(tl.int64) * meta_bstride + i * width
    count = tl.load(KvCount + b.to(tl.int64) * count_bstride + i)
    dq = tl.zeros((BLOCK_M, DP), tl.float32)
    for t in range(0, count):
        j = tl.load(KvIndex + meta + t)
        flags = tl.load(KvFlags + meta + t)
        offs_k = j * BLOCK_N + offs_n
        k = tl.load(K + (kv_bh * SKP + offs_k[:, None]) * DP + offs_d[None, :])
        v = tl.load(V + (kv_bh * SKP + offs_k[:, None]) * DVP + offs_dv[None, :])
        s, tc = _logits(q, k, sm_scale, softcap, HAS_SOFTCAP, DOT_PRECISION)
        if flags != 0:
            mask_idx = tl.load(KvMaskIdx + meta + t)
            keep = _fine_mask(
                flags, mask_idx, q_seg, PartialMasks, KSeg, AttnMask, offs_m, offs_k, b, head,
                am_bstride, am_hstride, SKP, BLOCK_M, BLOCK_N, HAS_SEG, HAS_AM,
            )  # fmt: skip
            s = tl.where(keep, s, float("-inf"))
        p = tl.exp(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        if HAS_SOFTCAP:
            ds = ds * (1.0 - tc * tc)
        ds = ds * sm_scale
        dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION)
    tl.store(DQ + rows[:, None] * DP + offs_d[None, :], dq.to(DQ.dtype.element_ty))


@triton.jit
def bsa_bwd_dkdv_kernel(
    Q, K, V, DO, Lse, Delta, QIndex, QCount, QFlags, QMaskIdx, PartialMasks, QSeg, KSeg, AttnMask,
    sm_scale, softcap, meta_bstride, count_bstride, am_bstride, am_hstride, width,
    DK, DV,
    H: tl.constexpr, G: tl.constexpr, SQP: tl.constexpr, SKP: tl.constexpr,
    DP: tl.constexpr, DVP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SEG: tl.constexpr, HAS_AM: tl.constexpr, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """dK, dV of one key tile over the query tiles that visit it, for every query head of its
    group: ``dV = Σ Pᵀ dO``, ``dK = Σ dSᵀ Q · scale``."""
    j, kv_bh = tile_and_row(SKP // BLOCK_N)
    hk = H // G
    b = kv_bh // hk
    kvh = kv_bh % hk
    offs_k = j * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_mb = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, DP)
    offs_dv = tl.arange(0, DVP)
    cols = kv_bh.to(tl.int64) * SKP + offs_k
    k = tl.load(K + cols[:, None] * DP + offs_d[None, :])  # [BLOCK_N, DP]
    v = tl.load(V + cols[:, None] * DVP + offs_dv[None, :])  # [BLOCK_N, DVP]
    meta = b.to(tl.int64) * meta_bstride + j * width
    count = tl.load(QCount + b.to(tl.int64) * count_bstride + j)
    dk = tl.zeros((BLOCK_N, DP), tl.float32)
    dv = tl.zeros((BLOCK_N, DVP), tl.float32)
    for g in range(0, G):
        head = kvh * G + g
        bh = (b * H + head).to(tl.int64)
        for t in range(0, count):
            i = tl.load(QIndex + meta + t)
            flags = tl.load(QFlags + meta + t)
            offs_m = i * BLOCK_M + offs_mb
            rows = bh * SQP + offs_m
            q = tl.load(Q + rows[:, None] * DP + offs_d[None, :])  # [BLOCK_M, DP]
            do = tl.load(DO + rows[:, None] * DVP + offs_dv[None, :])
            lse = tl.load(Lse + rows)
            lse = tl.where(lse == float("-inf"), float("inf"), lse)
            delta = tl.load(Delta + rows)
            s, tc = _logits(q, k, sm_scale, softcap, HAS_SOFTCAP, DOT_PRECISION)
            if flags != 0:
                q_seg = offs_m
                if HAS_SEG:
                    q_seg = tl.load(QSeg + b.to(tl.int64) * SQP + offs_m)
                mask_idx = tl.load(QMaskIdx + meta + t)
                keep = _fine_mask(
                    flags, mask_idx, q_seg, PartialMasks, KSeg, AttnMask, offs_m, offs_k, b, head,
                    am_bstride, am_hstride, SKP, BLOCK_M, BLOCK_N, HAS_SEG, HAS_AM,
                )  # fmt: skip
                s = tl.where(keep, s, float("-inf"))
            p = tl.exp(s - lse[:, None])  # [BLOCK_M, BLOCK_N]
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=DOT_PRECISION)
            dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
            ds = p * (dp - delta[:, None])
            if HAS_SOFTCAP:
                ds = ds * (1.0 - tc * tc)
            ds = ds * sm_scale
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=DOT_PRECISION)
    tl.store(DK + cols[:, None] * DP + offs_d[None, :], dk.to(DK.dtype.element_ty))
    tl.store(DV + cols[:, None] * DVP + offs_dv[None, :], dv.to(DV.dtype.element_ty))
