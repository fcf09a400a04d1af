"""Triton kernels of ``mean_pooling``: a split reduction over token rows and its broadcast backward.

Work is a list of items (``ejkernel.ops.mean_pooling.plan``): item ``i`` owns rows ``[lo_i, hi_i)`` of one sequence (a
long sequence is cut into several items so that every SM has work); a program owns one item and
``BLOCK_D`` hidden columns. The forward writes each item's float32 partial sums; a small second
kernel adds the partials of each sequence in item order (deterministic: no atomics, unlike an
XLA scatter-add on the GPU) and writes the means in ``x``'s dtype. The backward writes, for every
row of an item, ``g[seq]`` (= ``dout / count``) where the row counts and 0 elsewhere; the plan
also covers rows outside every sequence (item of sequence ``num_seqs``), so every row of ``dx``
is written exactly once.

``HIDDEN`` (the row stride) is a compile-time constant, not an argument: jax-triton gives integer
arguments no divisibility hint, and with a runtime stride Triton cannot prove rows 16-byte aligned,
so a 32x256 bf16 tile compiled to 64 two-byte loads per thread instead of 8 sixteen-byte ones
(sm_90 PTX; H200: 0.71 of a device copy with the runtime stride).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _item_and_block(HIDDEN: tl.constexpr, BLOCK_D: tl.constexpr):
    """A one-axis grid, column blocks fastest: the programs running together read whole rows of
    a few items. Measured on an H100 at (262144, 4096) bf16, this kernel alone at the heuristic's
    tiles: 0.885 of a device copy's bandwidth, against 0.824 with items fastest (whose programs
    read 512-byte pieces of rows far apart)."""
    pid = tl.program_id(0)
    cols = tl.cdiv(HIDDEN, BLOCK_D)
    return pid // cols, pid % cols


@triton.jit
def mean_pool_fwd_kernel(
    x_ptr,  # [tokens, hidden]
    item_seq_ptr,  # [items] int32
    item_lo_ptr,  # [items] int32
    item_hi_ptr,  # [items] int32
    mask_ptr,  # [tokens] int32 (HAS_MASK)
    num_seqs,
    part_ptr,  # out: [items, hidden] float32
    HIDDEN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_MASK: tl.constexpr,
):
    i_item, i_d = _item_and_block(HIDDEN, BLOCK_D)
    seq = tl.load(item_seq_ptr + i_item)
    lo = tl.load(item_lo_ptr + i_item)
    hi = tl.load(item_hi_ptr + i_item)
    hi = tl.where(seq < num_seqs, hi, lo)  # rows outside every sequence: nothing to add
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < HIDDEN
    acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
    for t0 in range(lo, hi, BLOCK_T):
        o_t = t0 + tl.arange(0, BLOCK_T)
        m_t = o_t < hi
        if HAS_MASK:
            m_t = m_t & (tl.load(mask_ptr + o_t, mask=m_t, other=0) != 0)
        p_x = x_ptr + o_t.to(tl.int64)[:, None] * HIDDEN + o_d[None, :]
        b_x = tl.load(p_x, mask=m_t[:, None] & m_d[None, :], other=0.0)  # [BLOCK_T, BLOCK_D]
        acc += b_x.to(tl.float32)
    tl.store(part_ptr + i_item.to(tl.int64) * HIDDEN + o_d, tl.sum(acc, axis=0), mask=m_d)


@triton.jit
def mean_pool_combine_kernel(
    part_ptr,  # [items, hidden] float32
    seq_first_ptr,  # [num_seqs] int32
    seq_items_ptr,  # [num_seqs] int32
    counts_ptr,  # [num_seqs] int32: rows that count in each sequence
    out_ptr,  # out: [num_seqs, hidden] in x's dtype: the means (zeros for sequences with no rows)
    HIDDEN: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    i_s = tl.program_id(0)
    i_d = tl.program_id(1)
    first = tl.load(seq_first_ptr + i_s)
    n_items = tl.load(seq_items_ptr + i_s)
    rows = tl.load(counts_ptr + i_s).to(tl.float32)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < HIDDEN
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    p_part = part_ptr + first.to(tl.int64) * HIDDEN + o_d
    for _ in range(0, n_items):
        acc += tl.load(p_part, mask=m_d, other=0.0)
        p_part += HIDDEN
    mean = tl.where(rows > 0, acc / tl.maximum(rows, 1.0), 0.0)
    tl.store(out_ptr + i_s.to(tl.int64) * HIDDEN + o_d, mean.to(out_ptr.dtype.element_ty), mask=m_d)


@triton.jit
def mean_pool_bwd_kernel(
    g_ptr,  # [num_seqs, hidden] float32: dout / count
    item_seq_ptr,
    item_lo_ptr,
    item_hi_ptr,
    mask_ptr,
    num_seqs,
    dx_ptr,  # out: [tokens, hidden]
    HIDDEN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_MASK: tl.constexpr,
):
    i_item, i_d = _item_and_block(HIDDEN, BLOCK_D)
    seq = tl.load(item_seq_ptr + i_item)
    lo = tl.load(item_lo_ptr + i_item)
    hi = tl.load(item_hi_ptr + i_item)
    inside = seq < num_seqs
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < HIDDEN
    b_g = tl.load(g_ptr + tl.minimum(seq, num_seqs - 1).to(tl.int64) * HIDDEN + o_d, mask=m_d & inside, other=0.0)
    for t0 in range(lo, hi, BLOCK_T):
        o_t = t0 + tl.arange(0, BLOCK_T)
        m_t = o_t < hi
        keep = m_t
        if HAS_MASK:
            keep = keep & (tl.load(mask_ptr + o_t, mask=m_t, other=0) != 0)
        b_dx = tl.where(keep[:, None], b_g[None, :], 0.0)  # [BLOCK_T, BLOCK_D]
        p_dx = dx_ptr + o_t.to(tl.int64)[:, None] * HIDDEN + o_d[None, :]
        tl.store(p_dx, b_dx.to(dx_ptr.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])
