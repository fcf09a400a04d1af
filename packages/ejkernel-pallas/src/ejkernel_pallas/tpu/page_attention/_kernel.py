"""Paged decode kernel: one query token per sequence against its pages, with an online softmax.

Grid ``(sequence, step)``, both sequential ("arbitrary"): the K/V caches stay in HBM
(``memory_space=ANY``) and the kernel copies the pages it needs itself, reading page indices from
the block table in SMEM (scalar prefetch), into one of two VMEM slots. While step ``t`` is
attended, the copies for the next working step (of this or a later sequence, see ``_plan.py``)
already run into the other slot, so the DMA engine never idles between steps.

A copy moves a whole page as the cache lays it out, ``[block_size, num_kv_heads, head_dim]`` or
(``heads_major``) ``[num_kv_heads, block_size, head_dim]``: contiguous either way, so the cache is
read in place. Each kv head's ``[block_size, head_dim]`` rows are then read from VMEM (a strided
load in the first layout, a whole tile in the second), and its ``groups`` query heads attend them
together (GQA without repeating K/V). Tokens past the context, or before a sliding window, are
masked, and their values zeroed, so whatever the unused slots of a page hold (even NaN) never
reaches the output.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._pallas import compiler_params, lanes
from .._tiling import MASK_VALUE, NUM_LANES
from ._plan import plan_decode

F32 = jnp.float32
NT_DIMS = (((1,), (1,)), ((), ()))


@dataclasses.dataclass(frozen=True)
class DecodeSpec:
    batch: int
    num_kv_heads: int
    groups: int
    head_dim: int
    head_dim_v: int
    block_size: int
    pages_per_step: int
    steps: int
    scale: float
    soft_cap: float | None
    window_left: int | None
    num_sinks: int
    heads_major: bool


def _decode_kernel(
    lens_ref, page_lo_ref, page_hi_ref, step_lo_ref, step_hi_ref, next_ref, first_ref, tables_ref,  # SMEM
    q_ref, k_hbm, v_hbm, *refs, spec: DecodeSpec,
):  # fmt: skip
    refs = list(refs)
    sinks_ref = refs.pop(0) if spec.num_sinks else None
    o_ref, k_buf, v_buf, k_sem, v_sem, slot_ref, m_scr, l_scr, acc_scr = refs
    pps, bs, hk = spec.pages_per_step, spec.block_size, spec.num_kv_heads
    b, t = pl.program_id(0), pl.program_id(1)

    def page_needed(seq, page_no):
        return jnp.logical_and(page_no >= page_lo_ref[seq], page_no < page_hi_ref[seq])

    def page_copies(seq, step, slot, p):
        page = tables_ref[(seq * spec.steps + step) * pps + p]
        return (
            pltpu.make_async_copy(k_hbm.at[page], k_buf.at[slot, p], k_sem.at[slot]),
            pltpu.make_async_copy(v_hbm.at[page], v_buf.at[slot, p], v_sem.at[slot]),
        )

    def for_needed_pages(seq, step, slot, action):
        def body(p, carry):
            @pl.when(page_needed(seq, step * pps + p))
            def _():
                for copy in page_copies(seq, step, slot, p):
                    action(copy)

            return carry

        jax.lax.fori_loop(0, pps, body, 0)

    def start(seq, step, slot):
        for_needed_pages(seq, step, slot, lambda c: c.start())

    def wait(seq, step, slot):
        for_needed_pages(seq, step, slot, lambda c: c.wait())

    @pl.when(t == 0)
    def _init():
        m_scr[...] = jnp.full(m_scr.shape, MASK_VALUE, F32)
        l_scr[...] = jnp.zeros(l_scr.shape, F32)
        acc_scr[...] = jnp.zeros(acc_scr.shape, F32)

    def attend(slot):
        length = lens_ref[b]
        first_token = 0 if spec.window_left is None else jnp.maximum(length - 1 - spec.window_left, 0)
        qs = [q_ref[j] for j in range(hk)]  # [groups, d] per kv head

        def head_rows(buf, p, j):  # [bs, d]: kv head j of every token of page p, as the cache lays it out
            return buf[slot, p, j, :, :] if spec.heads_major else buf[slot, p, :, j, :]

        def body(p, carry):
            page_no = t * pps + p

            @pl.when(page_needed(b, page_no))
            def _():
                pos = page_no * bs + jax.lax.broadcasted_iota(jnp.int32, (1, bs), 1)
                valid = jnp.logical_and(pos < length, pos >= first_token)  # [1, bs]
                pos_v = page_no * bs + jax.lax.broadcasted_iota(jnp.int32, (bs, spec.head_dim_v), 0)
                valid_v = jnp.logical_and(pos_v < length, pos_v >= first_token)  # [bs, dv]
                for j in range(hk):
                    k = head_rows(k_buf, p, j)
                    s = jax.lax.dot_general(qs[j], k, NT_DIMS, preferred_element_type=F32) * spec.scale
                    if spec.soft_cap is not None:
                        s = spec.soft_cap * jnp.tanh(s / spec.soft_cap)
                    s = jnp.where(valid, s, MASK_VALUE)  # [groups, bs]
                    m_prev, l_prev = m_scr[j], l_scr[j]  # [groups, 128]
                    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1)[:, None])
                    prob = jnp.exp(s - lanes(m_next, bs))  # a needed page has a valid token: masked → 0
                    alpha = jnp.exp(m_prev - m_next)
                    l_scr[j] = alpha * l_prev + jnp.sum(prob, axis=1)[:, None]
                    m_scr[j] = m_next
                    v = jnp.where(valid_v, head_rows(v_buf, p, j), 0)  # [bs, dv]
                    pv = jax.lax.dot(prob.astype(v.dtype), v, preferred_element_type=F32)
                    acc_scr[j] = acc_scr[j] * lanes(alpha, spec.head_dim_v) + pv

            return carry

        jax.lax.fori_loop(0, pps, body, 0)

    @pl.when(jnp.logical_and(t >= step_lo_ref[b], t < step_hi_ref[b]))
    def _step():
        @pl.when(jnp.logical_and(b == first_ref[0], t == step_lo_ref[b]))
        def _first():  # nobody prefetched the very first working step
            slot_ref[0] = 0
            start(b, t, 0)

        slot = slot_ref[0]
        same_seq = t + 1 < step_hi_ref[b]
        nxt = next_ref[b]
        next_seq = jnp.where(same_seq, b, jnp.minimum(nxt, spec.batch - 1))
        next_step = jnp.where(same_seq, t + 1, step_lo_ref[next_seq])

        @pl.when(jnp.logical_or(same_seq, nxt < spec.batch))
        def _prefetch():
            start(next_seq, next_step, 1 - slot)

        wait(b, t, slot)
        attend(slot)
        slot_ref[0] = 1 - slot

    @pl.when(t == spec.steps - 1)
    def _finalize():
        dv = spec.head_dim_v
        for j in range(hk):
            m_i, l_i, acc = m_scr[j], l_scr[j], acc_scr[j]
            if sinks_ref is not None:  # sinks join the denominator and carry no value
                sinks = sinks_ref[j]  # [groups, num_sinks]
                m_new = jnp.maximum(m_i, jnp.max(sinks, axis=1, keepdims=True))
                alpha = jnp.exp(m_i - m_new)
                l_i = l_i * alpha + jnp.sum(jnp.exp(sinks - m_new[:, :1]), axis=1, keepdims=True)
                acc = acc * lanes(alpha, dv)
            inv = jnp.where(l_i > 0.0, 1.0 / jnp.where(l_i > 0.0, l_i, 1.0), 0.0)  # no context: zeros
            o_ref[j] = (acc * lanes(inv, dv)).astype(o_ref.dtype)


def page_attention(
    query: Any,
    key_cache: Any,
    value_cache: Any,
    context_lens: Any,
    block_tables: Any,
    softmax_aux: Any,
    *,
    scale: float,
    soft_cap: float | None,
    window_left: int | None,
    pages_per_step: int,
    heads_major: bool = False,
) -> Any:
    """``query [b, h, d]`` over caches ``[num_blocks, block_size, hk, d (dv)]`` (``heads_major``:
    ``[num_blocks, hk, block_size, d (dv)]``) → ``[b, h, dv]``."""
    b, h, d = query.shape
    if heads_major:
        num_blocks, hk, bs, dv = value_cache.shape
    else:
        num_blocks, bs, hk, dv = value_cache.shape
    g = h // hk
    page = (hk, bs) if heads_major else (bs, hk)  # a page's leading axes, as the cache lays them out
    plan, steps = plan_decode(
        context_lens, block_tables,
        block_size=bs, pages_per_step=pages_per_step, num_blocks=num_blocks, window_left=window_left,
    )  # fmt: skip
    spec = DecodeSpec(
        batch=b, num_kv_heads=hk, groups=g, head_dim=d, head_dim_v=dv, block_size=bs,
        pages_per_step=pages_per_step, steps=steps, scale=scale, soft_cap=soft_cap, window_left=window_left,
        num_sinks=0 if softmax_aux is None else int(softmax_aux.shape[1]), heads_major=heads_major,
    )  # fmt: skip

    def seq_map(bi, t, *_):
        return bi, 0, 0, 0

    inputs = [query.reshape(b, hk, g, d), key_cache, value_cache]
    in_specs = [
        pl.BlockSpec((None, hk, g, d), seq_map),
        pl.BlockSpec(memory_space=pl.ANY),  # caches stay in HBM: the kernel copies pages itself
        pl.BlockSpec(memory_space=pl.ANY),
    ]
    if spec.num_sinks:
        inputs.append(softmax_aux.astype(F32).reshape(hk, g, spec.num_sinks))
        in_specs.append(pl.BlockSpec((hk, g, spec.num_sinks), lambda bi, t, *_: (0, 0, 0)))
    out = pl.pallas_call(
        functools.partial(_decode_kernel, spec=spec),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(plan.arrays()),
            grid=(b, steps),
            in_specs=in_specs,
            out_specs=pl.BlockSpec((None, hk, g, dv), seq_map),
            scratch_shapes=[
                pltpu.VMEM((2, pages_per_step, *page, d), key_cache.dtype),  # two K slots
                pltpu.VMEM((2, pages_per_step, *page, dv), value_cache.dtype),  # two V slots
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SMEM((1,), jnp.int32),  # the slot the current step reads
                pltpu.VMEM((hk, g, NUM_LANES), F32),  # m
                pltpu.VMEM((hk, g, NUM_LANES), F32),  # l
                pltpu.VMEM((hk, g, dv), F32),  # acc
            ],
        ),
        out_shape=jax.ShapeDtypeStruct((b, hk, g, dv), query.dtype),
        # Sequential on purpose: each step prefetches the next one, across sequences too.
        compiler_params=compiler_params(("arbitrary", "arbitrary")),
        name="ejkernel_page_attention",
    )(*plan.arrays(), *inputs)
    return out.reshape(b, h, dv)
