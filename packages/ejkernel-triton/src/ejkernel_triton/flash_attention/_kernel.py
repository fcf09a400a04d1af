"""Device functions shared by the forward and backward kernels (``_fwd.py``, ``_bwd.py``).

They reproduce the op's semantics exactly as the core defines them
(``ejkernel.ops.families.attention_math``): per-row key intervals ``[lo, hi)`` for causal /
sliding window / varlen, and the counter-based dropout hash (bit-identical to
``dropout_keep_mask``).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): softmax runs in base 2 (exp2 is one instruction)
LN2 = tl.constexpr(0.6931471805599453)

# MurmurHash3 fmix32 and index multipliers, as in ejkernel.ops.families.attention_math.dropout_keep_mask.
_M1 = tl.constexpr(0x85EBCA6B)
_M2 = tl.constexpr(0xC2B2AE35)
_GOLDEN = tl.constexpr(0x9E3779B9)
_BH_OFFSET = tl.constexpr(0x7F4A7C15)
_QMUL = tl.constexpr(0x27D4EB2F)
_KMUL = tl.constexpr(0x165667B1)


@triton.jit
def _u32(value):
    return tl.full((), value, tl.uint32)


@triton.jit
def fmix32(x):
    x = x ^ (x >> 16)
    x = x * _u32(_M1)
    x = x ^ (x >> 13)
    x = x * _u32(_M2)
    return x ^ (x >> 16)


@triton.jit
def dropout_keep(seed, batch_head, offs_q, offs_k, threshold):
    """``[BLOCK_M, BLOCK_N]`` keep mask: ``hash(seed, bh, q, k) >= threshold`` (uint32)."""
    s = fmix32(seed ^ fmix32(batch_head.to(tl.uint32) * _u32(_GOLDEN) + _u32(_BH_OFFSET)))
    hq = fmix32(s ^ (offs_q.to(tl.uint32) * _u32(_QMUL)))  # [BLOCK_M]
    h = fmix32(hq[:, None] ^ (offs_k.to(tl.uint32) * _u32(_KMUL))[None, :])
    return h >= threshold.to(tl.uint32)


@triton.jit
def row_bounds(
    RowLo, RowHi, offs_m, seq_q, seq_k, window_left, window_right,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Key interval ``[lo, hi)`` of each query row, and which rows exist (``< seq_q``)."""
    valid = offs_m < seq_q
    if IS_VARLEN:
        lo = tl.load(RowLo + offs_m, mask=valid, other=0)
        hi = tl.load(RowHi + offs_m, mask=valid, other=0)
    else:
        pos = offs_m + (seq_k - seq_q)  # bottom-right alignment
        lo = tl.zeros_like(offs_m)
        hi = tl.zeros_like(offs_m) + seq_k
        if IS_CAUSAL:
            hi = tl.minimum(hi, pos + 1)
        if HAS_WINDOW:
            lo = tl.maximum(lo, pos - window_left)
            hi = tl.minimum(hi, pos + window_right + 1)
        lo = tl.minimum(tl.maximum(lo, 0), seq_k)
        hi = tl.maximum(tl.minimum(hi, seq_k), lo)
    lo = tl.where(valid, lo, 0)
    hi = tl.where(valid, hi, 0)
    return lo, hi, valid


@triton.jit
def block_stages(lo, hi, valid, seq_k, BLOCK_N: tl.constexpr):
    """Split a query block's key range into masked prefix, unmasked middle, masked suffix.

    Returns ``(start, full_lo, full_hi, end)``: key blocks in ``[start, full_lo)`` and
    ``[full_hi, end)`` need the interval mask; in ``[full_lo, full_hi)`` every existing row of
    the block attends every key (FlashAttention's "causal in stages", generalized to windows and
    varlen). A row with an empty interval leaves no unmasked middle.
    """
    nonempty = valid & (hi > lo)
    any_rows = tl.max(nonempty.to(tl.int32), axis=0) > 0
    every_row = tl.min(tl.where(valid, nonempty, True).to(tl.int32), axis=0) > 0
    lo_min = tl.min(tl.where(nonempty, lo, seq_k), axis=0)
    hi_max = tl.max(tl.where(nonempty, hi, 0), axis=0)
    lo_max = tl.max(tl.where(valid, lo, 0), axis=0)
    hi_min = tl.min(tl.where(valid, hi, seq_k), axis=0)
    start = (lo_min // BLOCK_N) * BLOCK_N
    end = tl.where(any_rows, hi_max, start)
    full_lo = tl.minimum(tl.maximum(((lo_max + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, start), end)
    full_hi = tl.where(every_row, (hi_min // BLOCK_N) * BLOCK_N, full_lo)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), end)
    return start, full_lo, full_hi, end


@triton.jit
def load_tile(ptrs, rows_ok, cols_ok, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """``tl.load`` of a 2-D tile, masking only what the flags ask for (0 where masked).

    A mask Triton cannot prove constant along the contiguous axis (e.g. ``d < HEAD_DIM``)
    forbids vectorized and asynchronous copies, so masks are applied only when needed.
    """
    if CHECK_ROWS and CHECK_COLS:
        return tl.load(ptrs, mask=rows_ok[:, None] & cols_ok[None, :], other=0.0)
    elif CHECK_ROWS:
        return tl.load(ptrs, mask=rows_ok[:, None], other=0.0)
    elif CHECK_COLS:
        return tl.load(ptrs, mask=cols_ok[None, :], other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def store_tile(ptrs, value, rows_ok, cols_ok, CHECK_COLS: tl.constexpr):
    """``tl.store`` of a 2-D tile with rows always checked, columns only if asked."""
    if CHECK_COLS:
        tl.store(ptrs, value, mask=rows_ok[:, None] & cols_ok[None, :])
    else:
        tl.store(ptrs, value, mask=rows_ok[:, None])
