"""Ragged paged attention kernel: packed query rows of many sequences (decodes and prefill chunks
mixed) against their pages of a K/V-interleaved cache, with an online softmax.

Grid: one step per block of ``block_q`` packed query rows, sequential ("arbitrary"). The query
and output blocks ``[block_q, num_heads, head_dim]`` are pipelined by Pallas; the cache stays in
HBM (``memory_space=ANY``) and the kernel copies the pages it needs itself, reading page indices
from the block tables in SMEM (scalar prefetch, with the schedule of ``_plan.py``). For each
sequence overlapping the block (in order), it walks the pages its rows attend, from the first
token the earliest row may see (0, or the start of its window) to the last row's position,
``pages_per_block`` whole pages at a time. Each page is one contiguous DMA of ``[page_size,
2 * num_kv_heads, head_dim]`` into one of two VMEM slots; while one block of pages is attended,
the copies of the next one (of this sequence, the next one in the query block, or the first of
the next busy query block) run into the other slot.

Each kv head's keys (head ``2j``) and values (``2j + 1``) are read from the slot, and its
``groups`` query heads attend them together: the query block's ``[block_q, groups, head_dim]``
slice is folded into ``[block_q * groups, head_dim]`` rows (row ``r`` is token ``r // groups``),
as in JAX's TPU ragged paged attention, so GQA never repeats K/V. The row statistics (``m``,
``l``, lane-replicated ``[rows, 128]``) and the accumulator live in VMEM scratch for the whole
query block, updated sequence by sequence: a row attends only keys of its own sequence, at or
before its position (and within the window), every other logit is masked with ``where`` and its
probability set to zero, so rows of other sequences (and padding rows, whatever their queries
hold) are left exactly as they were. Values the block's rows cannot attend (past the last row's
position: beyond the context, or stale slots of pages not copied this time) are zeroed, so
whatever the cache or the buffer holds there (even NaN) never reaches the output. Rows that
attend nothing (padding) come out zero.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._pallas import compiler_params
from .._tiling import MASK_VALUE, NUM_LANES
from ._plan import plan_ragged

F32 = jnp.float32
NT_DIMS = (((1,), (1,)), ((), ()))


@dataclasses.dataclass(frozen=True)
class RaggedSpec:
    num_q_blocks: int
    block_q: int
    num_kv_heads: int
    groups: int
    head_dim: int
    page_size: int
    pages_per_block: int
    pages_per_seq: int
    scale: float
    soft_cap: float | None
    window_left: int | None
    num_sinks: int


def _fold(x: Any) -> Any:
    """``[a, b, d]`` as ``[a * b, d]``. Packed 16-bit rows fold through float32 when ``b`` does not
    fill whole packed rows (Mosaic cannot split a packed row), then return to the input's dtype."""
    a, b, d = x.shape
    if b == 1:
        return x[:, 0, :]
    packing = max(1, 4 // x.dtype.itemsize)
    if b % packing:
        return x.astype(F32).reshape(a * b, d).astype(x.dtype)
    return x.reshape(a * b, d)


def _ragged_kernel(
    seq_ref, q_start_ref, q_end_ref, kv_len_ref, seq_lo_ref, seq_hi_ref, next_ref, first_ref, tables_ref,  # SMEM
    q_ref, kv_hbm, *refs, spec: RaggedSpec,
):  # fmt: skip
    refs = list(refs)
    sinks_ref = refs.pop(0) if spec.num_sinks else None
    o_ref, kv_buf, sems, slot_ref, m_scr, l_scr, acc_scr = refs
    bq, g, hk, d = spec.block_q, spec.groups, spec.num_kv_heads, spec.head_dim
    ps, pps = spec.page_size, spec.pages_per_block
    rows, width = bq * g, pps * ps
    b = pl.program_id(0)

    def span(blk, s):
        """The pages ``[page_lo, page_hi)`` that the rows of list entry ``s`` in query block ``blk``
        attend, the tokens they attend end at ``tok_hi``, and the blocks of pages to walk."""
        q_start, q_end, kv_len = q_start_ref[s], q_end_ref[s], kv_len_ref[s]
        offset = kv_len - q_end  # the position of packed row r of the sequence is r + offset
        tok_hi = jnp.minimum(q_end, (blk + 1) * bq) + offset
        tok_lo = 0
        if spec.window_left is not None:
            tok_lo = jnp.maximum(jnp.maximum(q_start, blk * bq) + offset - spec.window_left, 0)
        page_lo = tok_lo // ps
        page_hi = (tok_hi + ps - 1) // ps
        return page_lo, page_hi, tok_hi, (page_hi - page_lo + pps - 1) // pps

    def block_copies(blk, s, k, slot, action):
        page_lo, page_hi, _, _ = span(blk, s)
        table_row = seq_ref[s] * spec.pages_per_seq
        first_page = page_lo + k * pps

        def body(p, carry):
            @pl.when(first_page + p < page_hi)
            def _():
                page = tables_ref[table_row + first_page + p]
                action(pltpu.make_async_copy(kv_hbm.at[page], kv_buf.at[slot, p], sems.at[slot]))

            return carry

        jax.lax.fori_loop(0, pps, body, 0)

    def start(blk, s, k, slot):
        block_copies(blk, s, k, slot, lambda c: c.start())

    def wait(blk, s, k, slot):
        block_copies(blk, s, k, slot, lambda c: c.wait())

    def kv_rows(slot, head):  # [width, d]: one head of every token of the slot's pages
        if pps == 1:
            return kv_buf[slot, 0, :, head, :]
        return _fold(kv_buf[slot, :, :, head, :])

    m_scr[...] = jnp.full(m_scr.shape, MASK_VALUE, F32)
    l_scr[...] = jnp.zeros(l_scr.shape, F32)
    acc_scr[...] = jnp.zeros(acc_scr.shape, F32)
    seq_lo, seq_hi = seq_lo_ref[b], seq_hi_ref[b]

    @pl.when(b == first_ref[0])
    def _first():  # nobody prefetched the very first block of pages
        slot_ref[0] = 0
        start(b, seq_lo, 0, 0)

    row_tok = b * bq + jax.lax.broadcasted_iota(jnp.int32, (rows, 1), 0) // g  # [rows, 1]

    def attend(slot, tok0, tok_hi, in_seq, pos):
        key_pos = tok0 + jax.lax.broadcasted_iota(jnp.int32, (1, width), 1)
        valid = jnp.logical_and(in_seq, key_pos <= pos)  # [rows, width]
        if spec.window_left is not None:
            valid = jnp.logical_and(valid, key_pos >= pos - spec.window_left)
        value_ok = tok0 + jax.lax.broadcasted_iota(jnp.int32, (width, 1), 0) < tok_hi  # [width, 1]
        for j in range(hk):
            q = _fold(q_ref[:, j * g : (j + 1) * g, :])  # [rows, d]
            k = kv_rows(slot, 2 * j)
            v = jnp.where(value_ok, kv_rows(slot, 2 * j + 1), 0)
            s = jax.lax.dot_general(q, k, NT_DIMS, preferred_element_type=F32) * spec.scale
            if spec.soft_cap is not None:
                s = spec.soft_cap * jnp.tanh(s / spec.soft_cap)
            s = jnp.where(valid, s, MASK_VALUE)
            m_prev, l_prev = m_scr[j], l_scr[j]  # [rows, 128]
            m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
            # Zero, not exp(MASK - MASK) = 1, where masked: a row that has seen no key of its own
            # yet (or belongs to another sequence) must stay untouched.
            prob = jnp.where(valid, jnp.exp(s - m_next[:, :1]), 0.0)
            alpha = jnp.exp(m_prev - m_next)
            l_scr[j] = alpha * l_prev + jnp.sum(prob, axis=1, keepdims=True)
            m_scr[j] = m_next
            pv = jax.lax.dot(prob.astype(v.dtype), v, preferred_element_type=F32)
            acc_scr[j] = acc_scr[j] * alpha[:, :1] + pv

    def seq_body(s, carry):
        page_lo, _, tok_hi, n_blocks = span(b, s)
        q_end = q_end_ref[s]
        in_seq = jnp.logical_and(row_tok >= q_start_ref[s], row_tok < q_end)
        pos = row_tok + kv_len_ref[s] - q_end

        def kv_body(k, carry):
            slot = slot_ref[0]
            more_here = k + 1 < n_blocks
            more_seqs = s + 1 < seq_hi
            nxt = next_ref[b]
            nxt_blk = jnp.minimum(nxt, spec.num_q_blocks - 1)
            in_blk = jnp.logical_or(more_here, more_seqs)
            n_b = jnp.where(in_blk, b, nxt_blk)
            n_s = jnp.where(more_here, s, jnp.where(more_seqs, s + 1, seq_lo_ref[nxt_blk]))
            n_k = jnp.where(more_here, k + 1, 0)

            @pl.when(jnp.logical_or(in_blk, nxt < spec.num_q_blocks))
            def _prefetch():
                start(n_b, n_s, n_k, 1 - slot)

            wait(b, s, k, slot)
            attend(slot, (page_lo + k * pps) * ps, tok_hi, in_seq, pos)
            slot_ref[0] = 1 - slot
            return carry

        jax.lax.fori_loop(0, n_blocks, kv_body, 0)
        return carry

    jax.lax.fori_loop(seq_lo, seq_hi, seq_body, 0)

    for j in range(hk):
        m_i, l_i, acc = m_scr[j], l_scr[j], acc_scr[j]
        if sinks_ref is not None:  # sinks join the denominator and carry no value
            sinks = sinks_ref[j]  # [rows, num_sinks]
            m_new = jnp.maximum(m_i, jnp.max(sinks, axis=1, keepdims=True))
            alpha = jnp.exp(m_i - m_new)
            l_i = l_i * alpha + jnp.sum(jnp.exp(sinks - m_new[:, :1]), axis=1, keepdims=True)
            acc = acc * alpha[:, :1]
        inv = jnp.where(l_i > 0.0, 1.0 / jnp.where(l_i > 0.0, l_i, 1.0), 0.0)  # attended nothing: zeros
        out = (acc * inv[:, :1]).reshape(bq, g, d) if g > 1 else (acc * inv[:, :1])[:, None, :]
        o_ref[:, j * g : (j + 1) * g, :] = out.astype(o_ref.dtype)


def ragged_page_attention(
    queries: Any,
    kv_pages: Any,
    context_lens: Any,
    block_tables: Any,
    query_start_loc: Any,
    num_seqs: Any,
    softmax_aux: Any,
    *,
    scale: float,
    soft_cap: float | None,
    window_left: int | None,
    pages_per_block: int,
    block_q: int,
) -> Any:
    """``queries [total_tokens, h, d]`` over ``kv_pages [num_pages, page_size, 2 * hk, d]`` (keys
    at even heads, values at odd ones) → ``[total_tokens, h, d]``; ``softmax_aux`` ``[h,
    num_sinks]`` or ``None``."""
    t_all, h, d = queries.shape
    num_pages, ps, hc, _ = kv_pages.shape
    hk = hc // 2
    g = h // hk
    pages_per_seq = block_tables.shape[1]
    plan, num_q_blocks = plan_ragged(
        query_start_loc, context_lens, block_tables, num_seqs,
        total_tokens=t_all, block_q=block_q, num_pages=num_pages,
    )  # fmt: skip
    spec = RaggedSpec(
        num_q_blocks=num_q_blocks, block_q=block_q, num_kv_heads=hk, groups=g, head_dim=d, page_size=ps,
        pages_per_block=pages_per_block, pages_per_seq=pages_per_seq, scale=scale, soft_cap=soft_cap,
        window_left=window_left, num_sinks=0 if softmax_aux is None else int(softmax_aux.shape[1]),
    )  # fmt: skip
    rows = block_q * g

    def q_map(bi, *_):
        return bi, 0, 0

    inputs = [queries, kv_pages]
    in_specs = [
        pl.BlockSpec((block_q, h, d), q_map),
        pl.BlockSpec(memory_space=pl.ANY),  # the cache stays in HBM: the kernel copies pages itself
    ]
    if spec.num_sinks:
        # Row r of kv head j's folded rows is query head j * groups + r % groups.
        sinks = softmax_aux.astype(F32).reshape(hk, 1, g, spec.num_sinks)
        inputs.append(jnp.tile(sinks, (1, block_q, 1, 1)).reshape(hk, rows, spec.num_sinks))
        in_specs.append(pl.BlockSpec((hk, rows, spec.num_sinks), lambda bi, *_: (0, 0, 0)))
    return pl.pallas_call(
        functools.partial(_ragged_kernel, spec=spec),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(plan.arrays()),
            grid=(num_q_blocks,),
            in_specs=in_specs,
            out_specs=pl.BlockSpec((block_q, h, d), q_map),
            scratch_shapes=[
                pltpu.VMEM((2, pages_per_block, ps, hc, d), kv_pages.dtype),  # two slots of pages
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SMEM((1,), jnp.int32),  # the slot the current block of pages is in
                pltpu.VMEM((hk, rows, NUM_LANES), F32),  # m
                pltpu.VMEM((hk, rows, NUM_LANES), F32),  # l
                pltpu.VMEM((hk, rows, d), F32),  # acc
            ],
        ),
        out_shape=jax.ShapeDtypeStruct((t_all, h, d), queries.dtype),
        # Sequential on purpose: each block of pages prefetches the next, across query blocks too.
        compiler_params=compiler_params(("arbitrary",)),
        name="ejkernel_ragged_page_attention",
    )(*plan.arrays(), *inputs)
