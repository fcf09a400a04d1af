"""The paged attention kernel: decode rows (split-K) and prefill rows (FlashAttention-2 tiles) of
packed query tokens over a paged K/V cache.

One source, two kinds of program, each compiled and launched alone (``PREFILL``): the prefill
tiles (heaviest first: the GPU starts blocks in index order), then the decode splits. Compiled
together, the decode splits took the prefill tiles' registers and shared memory (sm_90, d 128:
255 registers against 116 alone) and ran 64 decodes at 8k 10% slower on an H200
(``benchmarks/results/h200/ragged_page_attention_v3.json``). Each program serves one kv head (``pid %
NUM_KV_HEADS``), and the query heads of its GQA group are the rows of its tile next to the query
tokens (row ``r``: token ``r // GROUPS``, head ``r % GROUPS``), so a page is read once per group.

- A sequence whose query count is at most ``DECODE_Q`` is a decode: ``NUM_SPLITS`` programs each
  attend one range of its key blocks with a ``[BLOCK_M_DEC, *]`` tile and store their partial
  softmax state (row max ``m`` in natural log, sum ``l``, unnormalized ``acc``), which the host
  combines (``_call.combine``).
- Longer sequences are prefills: tile ``j`` of ``BLOCK_Q`` query tokens finds its sequence by a
  binary search over ``query_start_loc`` (tile ``j`` of sequence ``i`` is program
  ``query_start_loc[i] // BLOCK_Q + i + j``: a static bound on the tile count), attends all of its
  keys with an online softmax and stores normalized rows (sinks included).

Keys are read in place through the block table: token ``t`` is slot ``t % PAGE_SIZE`` of page
``block_tables[seq, t // PAGE_SIZE]``, at ``K + page * stride_kp + slot * stride_ks + head *
stride_kh`` (the strides make both the K/V-interleaved ``[pages, page_size, 2 * hkv, d]`` cache and
``page_attention``'s separate caches in either layout readable). Loads of tokens at or past a
sequence's context are masked (their pages may hold NaN, their table entries garbage), and logits
outside each row's window are ``-inf`` by ``where``: nothing is multiplied by zero. Key blocks that
every row of a tile attends whole skip the masks (FlashAttention's causal in stages).

``num_seqs`` is read from memory (it may be traced): the grid covers ``max_num_seqs`` and
programs of dead or other-kind sequences return at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..flash_attention._fwd import _tanh
from ..flash_attention._kernel import LN2, LOG2E, load_tile


@triton.jit
def _attend_blocks(
    acc, l_i, m_i, q, pos, k_base, v_base, table, start, stop, ctx,
    qk_scale, softcap, window_left, offs_d, offs_dv,
    stride_kp: tl.constexpr, stride_ks: tl.constexpr, stride_vp: tl.constexpr, stride_vs: tl.constexpr,
    PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Fold key blocks ``[start, stop)`` (token offsets, multiples of ``BLOCK_N``) into the
    online softmax (base 2). ``MASKED``: tokens at or past ``ctx`` are not loaded and each row
    keeps only keys ``<= pos`` (and ``>= pos - window_left``); unmasked blocks lie inside every
    row's range."""
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_ctx = offs_n < ctx
        if MASKED:
            page = tl.load(table + offs_n // PAGE_SIZE, mask=in_ctx, other=0).to(tl.int64)
        else:
            page = tl.load(table + offs_n // PAGE_SIZE).to(tl.int64)
        slot = offs_n % PAGE_SIZE
        k = load_tile(  # [HEAD_DIM_PAD, BLOCK_N]
            k_base + (page * stride_kp + slot * stride_ks)[None, :] + offs_d[:, None],
            offs_d < HEAD_DIM, in_ctx, HEAD_DIM != HEAD_DIM_PAD, MASKED,
        )  # fmt: skip
        qk = tl.dot(q, k, input_precision=DOT_PRECISION)
        if HAS_SOFTCAP:
            s = softcap * _tanh(qk * (qk_scale / softcap)) * LOG2E
        else:
            s = qk * (qk_scale * LOG2E)
        if MASKED:
            keep = offs_n[None, :] <= pos[:, None]
            if HAS_WINDOW:
                keep = keep & (offs_n[None, :] >= pos[:, None] - window_left)
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = m_new
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = load_tile(  # [BLOCK_N, HEAD_DIM_V_PAD]
            v_base + (page * stride_vp + slot * stride_vs)[:, None] + offs_dv[None, :],
            in_ctx, offs_dv < HEAD_DIM_V, MASKED, HEAD_DIM_V != HEAD_DIM_V_PAD,
        )  # fmt: skip
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attend_range(
    acc, l_i, m_i, q, pos, k_base, v_base, table, start, stop, ctx, first_pos, last_pos,
    qk_scale, softcap, window_left, offs_d, offs_dv,
    stride_kp: tl.constexpr, stride_ks: tl.constexpr, stride_vp: tl.constexpr, stride_vs: tl.constexpr,
    PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Key blocks ``[start, stop)`` of a tile whose rows sit at positions ``first_pos`` to
    ``last_pos``: the blocks every row attends whole (all keys ``<= first_pos`` and, with a
    window, ``>= last_pos - window_left``) run unmasked, the others masked."""
    full_hi = ((first_pos + 1) // BLOCK_N) * BLOCK_N
    full_lo = start
    if HAS_WINDOW:
        full_lo = tl.cdiv(tl.maximum(last_pos - window_left, 0), BLOCK_N) * BLOCK_N
    full_lo = tl.minimum(tl.maximum(full_lo, start), stop)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), stop)
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, pos, k_base, v_base, table, start, full_lo, ctx, qk_scale, softcap, window_left,
        offs_d, offs_dv, stride_kp, stride_ks, stride_vp, stride_vs, PAGE_SIZE, HEAD_DIM, HEAD_DIM_PAD,
        HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True, HAS_WINDOW, HAS_SOFTCAP, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, pos, k_base, v_base, table, full_lo, full_hi, ctx, qk_scale, softcap, window_left,
        offs_d, offs_dv, stride_kp, stride_ks, stride_vp, stride_vs, PAGE_SIZE, HEAD_DIM, HEAD_DIM_PAD,
        HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, False, HAS_WINDOW, HAS_SOFTCAP, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q, pos, k_base, v_base, table, full_hi, stop, ctx, qk_scale, softcap, window_left,
        offs_d, offs_dv, stride_kp, stride_ks, stride_vp, stride_vs, PAGE_SIZE, HEAD_DIM, HEAD_DIM_PAD,
        HEAD_DIM_V, HEAD_DIM_V_PAD, BLOCK_N, True, HAS_WINDOW, HAS_SOFTCAP, DOT_PRECISION,
    )  # fmt: skip
    return acc, l_i, m_i


@triton.jit
def _find_sequence(QueryStartLoc, tile, num_seqs, BLOCK_Q: tl.constexpr):
    """The last sequence ``i < num_seqs`` whose first tile ``query_start_loc[i] // BLOCK_Q + i``
    is at most ``tile`` (binary search), and that first tile."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first = tl.load(QueryStartLoc + mid) // BLOCK_Q + mid
        if first <= tile:
            lo = mid + 1
        else:
            hi = mid
    seq = tl.maximum(lo - 1, 0)
    return seq, tl.load(QueryStartLoc + seq) // BLOCK_Q + seq


@triton.jit
def paged_attention_kernel(
    Q, K, V, BlockTables, ContextLens, QueryStartLoc, NumSeqs, Aux,
    sm_scale, softcap, window_left,
    Out, PartM, PartL, PartAcc,  # outputs follow every input (jax-triton appends them)
    # Strides are compile-time (Triton then proves the alignment of each token's row).
    stride_qt: tl.constexpr, stride_qh: tl.constexpr,
    stride_kp: tl.constexpr, stride_ks: tl.constexpr, stride_kh: tl.constexpr, K_OFFSET: tl.constexpr,
    stride_vp: tl.constexpr, stride_vs: tl.constexpr, stride_vh: tl.constexpr, V_OFFSET: tl.constexpr,
    stride_bt: tl.constexpr, stride_ot: tl.constexpr, stride_oh: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr, GROUPS: tl.constexpr, PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr, DECODE_Q: tl.constexpr, BLOCK_M_DEC: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, NUM_SINKS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    PREFILL: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    kvh = pid % NUM_KV_HEADS
    work = pid // NUM_KV_HEADS  # this launch's prefill tile or decode split
    num_seqs = tl.load(NumSeqs)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    k_base = K + K_OFFSET + kvh * stride_kh
    v_base = V + V_OFFSET + kvh * stride_vh

    if PREFILL:
        # Prefill tiles, the last ones (the most keys under the causal mask) first.
        tile = tl.num_programs(0) // NUM_KV_HEADS - 1 - work
        seq, first_tile = _find_sequence(QueryStartLoc, tile, num_seqs, BLOCK_Q)
        q_start = tl.load(QueryStartLoc + seq)
        q_len = tl.load(QueryStartLoc + seq + 1) - q_start
        j0 = (tile - first_tile) * BLOCK_Q
        if (num_seqs > 0) & (q_len > DECODE_Q) & (j0 < q_len):
            ctx = tl.load(ContextLens + seq)
            rows = tl.arange(0, BLOCK_M)
            tok = j0 + rows // GROUPS
            head = kvh * GROUPS + rows % GROUPS
            row_ok = (rows < BLOCK_Q * GROUPS) & (tok < q_len)
            pos = ctx - q_len + tok
            q = load_tile(
                Q + (q_start + tok).to(tl.int64)[:, None] * stride_qt + (head * stride_qh)[:, None] + offs_d[None, :],
                row_ok, offs_d < HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD,
            )  # fmt: skip
            first_pos = ctx - q_len + j0
            last_pos = ctx - q_len + tl.minimum(j0 + BLOCK_Q, q_len) - 1
            start = 0
            if HAS_WINDOW:
                start = (tl.maximum(first_pos - window_left, 0) // BLOCK_N) * BLOCK_N
            m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M], tl.float32)
            acc = tl.zeros([BLOCK_M, HEAD_DIM_V_PAD], tl.float32)
            acc, l_i, m_i = _attend_range(
                acc, l_i, m_i, q, pos, k_base, v_base, BlockTables + seq.to(tl.int64) * stride_bt, start,
                last_pos + 1, ctx, first_pos, last_pos, sm_scale, softcap, window_left, offs_d, offs_dv,
                stride_kp, stride_ks, stride_vp, stride_vs, PAGE_SIZE, HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V,
                HEAD_DIM_V_PAD, BLOCK_N, HAS_WINDOW, HAS_SOFTCAP, DOT_PRECISION,
            )  # fmt: skip
            for n in tl.static_range(NUM_SINKS):  # attention sinks: denominator only
                a = tl.load(Aux + head * NUM_SINKS + n, mask=row_ok, other=0.0).to(tl.float32) * LOG2E
                m_new = tl.maximum(m_i, a)
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha + tl.math.exp2(a - m_new)
                acc = acc * alpha[:, None]
                m_i = m_new
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            o_ptrs = Out + (q_start + tok).to(tl.int64)[:, None] * stride_ot + (head * stride_oh)[:, None]
            tl.store(o_ptrs + offs_dv[None, :], out.to(Out.dtype.element_ty),
                     mask=row_ok[:, None] & (offs_dv < HEAD_DIM_V)[None, :])  # fmt: skip
    else:
        seq = work // NUM_SPLITS
        split = work % NUM_SPLITS
        q_start = tl.load(QueryStartLoc + seq)
        q_len = tl.load(QueryStartLoc + seq + 1) - q_start
        if (seq < num_seqs) & (q_len > 0) & (q_len <= DECODE_Q):
            ctx = tl.load(ContextLens + seq)
            rows = tl.arange(0, BLOCK_M_DEC)
            tok = rows // GROUPS
            head = kvh * GROUPS + rows % GROUPS
            row_ok = (rows < DECODE_Q * GROUPS) & (tok < q_len)
            pos = ctx - q_len + tok
            q = load_tile(
                Q + (q_start + tok).to(tl.int64)[:, None] * stride_qt + (head * stride_qh)[:, None] + offs_d[None, :],
                row_ok, offs_d < HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD,
            )  # fmt: skip
            first_pos = ctx - q_len
            # This split's share of the key blocks from the window's start to the context's end.
            start = 0
            if HAS_WINDOW:
                start = (tl.maximum(first_pos - window_left, 0) // BLOCK_N) * BLOCK_N
            blocks = tl.cdiv(tl.maximum(ctx - start, 0), BLOCK_N)
            per = tl.cdiv(blocks, NUM_SPLITS)
            lo = tl.minimum(start + split * per * BLOCK_N, ctx)
            hi = tl.minimum(lo + per * BLOCK_N, ctx)
            m_i = tl.full([BLOCK_M_DEC], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M_DEC], tl.float32)
            acc = tl.zeros([BLOCK_M_DEC, HEAD_DIM_V_PAD], tl.float32)
            acc, l_i, m_i = _attend_range(
                acc, l_i, m_i, q, pos, k_base, v_base, BlockTables + seq.to(tl.int64) * stride_bt, lo, hi, ctx,
                first_pos, ctx - 1, sm_scale, softcap, window_left, offs_d, offs_dv,
                stride_kp, stride_ks, stride_vp, stride_vs, PAGE_SIZE, HEAD_DIM, HEAD_DIM_PAD, HEAD_DIM_V,
                HEAD_DIM_V_PAD, BLOCK_N, HAS_WINDOW, HAS_SOFTCAP, DOT_PRECISION,
            )  # fmt: skip
            part = ((seq * NUM_SPLITS + split) * NUM_KV_HEADS + kvh).to(tl.int64) * BLOCK_M_DEC + rows
            tl.store(PartM + part, m_i * LN2)  # natural log: the host combines in it
            tl.store(PartL + part, l_i)
            tl.store(PartAcc + part[:, None] * HEAD_DIM_V_PAD + offs_dv[None, :], acc)
