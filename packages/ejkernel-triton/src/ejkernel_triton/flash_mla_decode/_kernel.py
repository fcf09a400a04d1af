"""The paged latent decode kernel (MLA, absorbed form): split-K flash-decoding (FlashDecoding,
Dao et al. 2023) over a paged latent cache with a block of query rows per program, as FlashMLA
schedules it.

Program ``pid`` serves sequence ``pid // (NUM_SPLITS * NUM_HEAD_BLOCKS)``, split ``(pid //
NUM_HEAD_BLOCKS) % NUM_SPLITS`` of its key blocks and rows ``[hb * BLOCK_H, (hb + 1) * BLOCK_H)``
of its ``SEQ_Q * NUM_HEADS`` query rows (row ``r``: query token ``r // NUM_HEADS``, head ``r %
NUM_HEADS``); the head blocks of one split are neighbours in the grid, so they read the same
latent pages at about the same time (from L2 after the first). Each latent tile ``[BLOCK_N, LORA +
ROPE]`` is loaded once and used twice: ``q · latentᵀ`` over all lanes (two tensor-core products,
latent and rotary lanes, each a power of two wide) and ``p · latent[:, :LORA]`` for the values.

The online softmax runs in base 2. Key blocks every row attends whole (below the smallest row
position) run without masks; the others mask tokens at or past the context (not loaded: their
pages may hold NaN, their table entries garbage) and, per row, keys after its position. With one
split the program writes the normalized rows and their log-sum-exp; with more it writes its
partial state (row max in natural log, sum, unnormalized accumulator), merged by the host
(``_call``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..flash_attention._kernel import LN2, LOG2E, load_tile


@triton.jit
def _attend_blocks(
    acc, l_i, m_i, q_lat, q_rope, pos, Cache, table, start, stop, ctx, qk_scale, offs_v, offs_r,
    PAGE_SIZE: tl.constexpr, LORA: tl.constexpr, LORA_PAD: tl.constexpr, ROPE: tl.constexpr,
    ROPE_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, TILE_IN_PAGE: tl.constexpr,
    MASKED: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Fold key blocks ``[start, stop)`` (token offsets, multiples of ``BLOCK_N``) into the online
    softmax. ``MASKED``: tokens at or past ``ctx`` are not loaded and each row keeps only keys
    ``<= pos``; unmasked blocks lie inside every row's range."""
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_ctx = offs_n < ctx
        if TILE_IN_PAGE:
            # The step lies in one page (it starts inside the context: its table entry is used),
            # so its rows are one contiguous block: a scalar base, cheaper addresses.
            page = tl.load(table + start_n // PAGE_SIZE).to(tl.int64)
            row = Cache + (page * PAGE_SIZE + start_n % PAGE_SIZE) * HEAD_DIM + tl.arange(0, BLOCK_N) * HEAD_DIM
        else:
            if MASKED:
                page_n = tl.load(table + offs_n // PAGE_SIZE, mask=in_ctx, other=0).to(tl.int64)
            else:
                page_n = tl.load(table + offs_n // PAGE_SIZE).to(tl.int64)
            row = Cache + (page_n * PAGE_SIZE + offs_n % PAGE_SIZE) * HEAD_DIM  # [BLOCK_N] latent rows
        lat = load_tile(  # [BLOCK_N, LORA_PAD]: the keys' latent lanes, and the values
            row[:, None] + offs_v[None, :], in_ctx, offs_v < LORA, MASKED, LORA != LORA_PAD
        )
        qk = tl.dot(q_lat, tl.trans(lat), input_precision=DOT_PRECISION)  # [BLOCK_H, BLOCK_N]
        if ROPE > 0:
            rope = load_tile(  # [BLOCK_N, ROPE_PAD]
                row[:, None] + LORA + offs_r[None, :], in_ctx, offs_r < ROPE, MASKED, ROPE != ROPE_PAD
            )
            qk = tl.dot(q_rope, tl.trans(rope), qk, input_precision=DOT_PRECISION)
        s = qk * qk_scale
        if MASKED:
            s = tl.where(offs_n[None, :] <= pos[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = m_new
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(lat.dtype), lat, acc, input_precision=DOT_PRECISION)  # [BLOCK_H, LORA_PAD]
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def mla_decode_kernel(
    Q, Cache, BlockTables, ContextLens, sm_scale,
    Out, Lse, PartM, PartL, PartAcc,  # outputs follow every input (jax-triton appends them)
    stride_bt: tl.constexpr, SEQ_Q: tl.constexpr, NUM_HEADS: tl.constexpr, PAGE_SIZE: tl.constexpr,
    LORA: tl.constexpr, LORA_PAD: tl.constexpr, ROPE: tl.constexpr, ROPE_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, NUM_HEAD_BLOCKS: tl.constexpr, NUM_SPLITS: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    tl.static_assert(BLOCK_H >= 16 and BLOCK_N >= 16)  # the smallest tl.dot
    ROWS: tl.constexpr = SEQ_Q * NUM_HEADS
    HEAD_DIM: tl.constexpr = LORA + ROPE
    pid = tl.program_id(0)
    hb = pid % NUM_HEAD_BLOCKS
    split = (pid // NUM_HEAD_BLOCKS) % NUM_SPLITS
    seq = pid // (NUM_HEAD_BLOCKS * NUM_SPLITS)
    ctx = tl.load(ContextLens + seq)
    offs_v = tl.arange(0, LORA_PAD)
    offs_r = tl.arange(0, ROPE_PAD)
    rows = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok = rows < ROWS
    first_row = hb * BLOCK_H
    if CAUSAL:
        pos = ctx - SEQ_Q + rows // NUM_HEADS
        first_pos = ctx - SEQ_Q + first_row // NUM_HEADS
    else:
        pos = ctx - 1 + 0 * rows
        first_pos = ctx - 1
    # Rows are contiguous in memory: [batch, seq_q, heads, dim] is [batch * ROWS, dim].
    flat = seq.to(tl.int64) * ROWS + rows
    q_row = Q + flat * HEAD_DIM
    q_lat = load_tile(q_row[:, None] + offs_v[None, :], row_ok, offs_v < LORA, True, LORA != LORA_PAD)
    q_rope = load_tile(q_row[:, None] + LORA + offs_r[None, :], row_ok, offs_r < ROPE, True, ROPE != ROPE_PAD)

    # This split's share of the key blocks; below full_hi every block is attended whole by every row.
    blocks = tl.cdiv(ctx, BLOCK_N)
    per = tl.cdiv(blocks, NUM_SPLITS)
    lo = tl.minimum(split * per * BLOCK_N, ctx)
    hi = tl.minimum(lo + per * BLOCK_N, ctx)
    full_hi = (tl.maximum(first_pos + 1, 0) // BLOCK_N) * BLOCK_N
    full_hi = tl.minimum(tl.maximum(full_hi, lo), hi)
    table = BlockTables + seq.to(tl.int64) * stride_bt
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, LORA_PAD], tl.float32)
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q_lat, q_rope, pos, Cache, table, lo, full_hi, ctx, qk_scale, offs_v, offs_r,
        PAGE_SIZE, LORA, LORA_PAD, ROPE, ROPE_PAD, HEAD_DIM, BLOCK_N, PAGE_SIZE % BLOCK_N == 0, False, DOT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _attend_blocks(
        acc, l_i, m_i, q_lat, q_rope, pos, Cache, table, full_hi, hi, ctx, qk_scale, offs_v, offs_r,
        PAGE_SIZE, LORA, LORA_PAD, ROPE, ROPE_PAD, HEAD_DIM, BLOCK_N, PAGE_SIZE % BLOCK_N == 0, True, DOT_PRECISION,
    )  # fmt: skip

    v_ok = offs_v < LORA
    if NUM_SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(Out + flat[:, None] * LORA + offs_v[None, :], out.to(Out.dtype.element_ty),
                 mask=row_ok[:, None] & v_ok[None, :])  # fmt: skip
        lse = tl.where(l_i > 0, (m_i + tl.math.log2(tl.where(l_i > 0, l_i, 1.0))) * LN2, float("-inf"))
        tl.store(Lse + flat, lse, mask=row_ok)
    else:
        part = (seq.to(tl.int64) * NUM_SPLITS + split) * ROWS + rows
        tl.store(PartM + part, m_i * LN2, mask=row_ok)  # natural log: the host merges in it
        tl.store(PartL + part, l_i, mask=row_ok)
        tl.store(PartAcc + part[:, None] * LORA + offs_v[None, :], acc, mask=row_ok[:, None] & v_ok[None, :])
