"""Forward kernel: FlashAttention-2 (Dao, 2023, Algorithm 1) over a band of key blocks.

Grid ``(batch, head, q_block, step)``: the last axis walks the key blocks ``kv_lo[i] + step`` of
the plan (``_plan.py``), carrying the online-softmax state (``m``, ``l``, ``acc``) in VMEM
scratch; the output and the log-sum-exp are written at the last step. GQA/MQA maps query head
``h`` to key/value head ``h // groups`` in the block index maps, so K/V are never repeated in
memory. Row statistics are kept lane-replicated (``[bq, 128]``) as in JAX's TPU flash attention,
which avoids relayouts between row vectors and tiles.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._pallas import compiler_params, lanes, smem_spec
from .._tiling import MASK_VALUE, NUM_LANES, NUM_SUBLANES, cdiv, round_up
from ._plan import plan_blocks
from ._spec import F32, Spec, element_mask, logits

# A grid of (batch, head, query block, kv step) walks each query block's band of kv blocks
# [kv_lo[i], kv_hi[i]) (scalar-prefetched): the forward's and the backward dQ pass's.


def _band_kv_block(i: Any, step: Any, kv_lo: Any, kv_hi: Any) -> Any:
    # Idle steps (past the band) repeat the last block: the pipeline skips the copy.
    return jnp.minimum(kv_lo[i] + step, jnp.maximum(kv_hi[i] - 1, 0))


def band_maps(g: int) -> tuple[Any, Any]:
    """Index maps of the query rows and of the key/value rows (``g`` query heads per KV head)."""

    def q_map(bi, hi, i, step, *_):
        return bi, hi, i, 0

    def kv_map(bi, hi, i, step, kv_lo, kv_hi, *_):
        return bi, hi // g, _band_kv_block(i, step, kv_lo, kv_hi), 0

    return q_map, kv_map


def band_segment_specs(block_q: int, block_k: int) -> list[Any]:
    """Block specs of the query and key segment-id tiles (see :func:`segment_tiles`)."""
    return [
        pl.BlockSpec((None, block_q, NUM_LANES), lambda bi, hi, i, step, *_: (bi, i, 0)),
        pl.BlockSpec(
            (None, NUM_SUBLANES, block_k),
            lambda bi, hi, i, step, kv_lo, kv_hi, *_: (bi, 0, _band_kv_block(i, step, kv_lo, kv_hi)),
        ),
    ]


def _fwd_kernel(
    kv_lo_ref, kv_hi_ref, full_lo_ref, full_hi_ref,  # scalar prefetch (SMEM), [nq] each
    q_ref, k_ref, v_ref, *refs, spec: Spec, steps: int, k_padded: bool,
):  # fmt: skip
    refs = list(refs)
    q_seg_ref = kv_seg_ref = sinks_ref = None
    if spec.has_segments:
        q_seg_ref, kv_seg_ref = refs.pop(0), refs.pop(0)
    if spec.num_sinks:
        sinks_ref = refs.pop(0)
    o_ref, lse_ref, m_scr, l_scr, acc_scr = refs
    block_q, block_k = spec.fwd_blocks
    h, i, step = pl.program_id(1), pl.program_id(2), pl.program_id(3)
    kb = kv_lo_ref[i] + step

    @pl.when(step == 0)
    def _init():
        m_scr[...] = jnp.full(m_scr.shape, MASK_VALUE, F32)
        l_scr[...] = jnp.zeros(l_scr.shape, F32)
        acc_scr[...] = jnp.zeros(acc_scr.shape, F32)

    def update(masked: bool):
        s, _ = logits(spec, q_ref[...], k_ref[...])  # [bq, bk]
        mask = None
        if masked:
            mask = element_mask(
                spec, i * block_q, kb * block_k, s.shape,
                q_seg_ref[...] if q_seg_ref is not None else None,
                kv_seg_ref[...] if kv_seg_ref is not None else None,
                k_padded,
            )  # fmt: skip
        softmax_step(s, mask, v_ref, m_scr, l_scr, acc_scr)

    run = kb < kv_hi_ref[i]
    full = jnp.logical_and(kb >= full_lo_ref[i], kb < full_hi_ref[i])
    pl.when(jnp.logical_and(run, full))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, jnp.logical_not(full)))(functools.partial(update, True))

    @pl.when(step == steps - 1)
    def _finalize():
        write_output(h, spec.num_sinks, sinks_ref, m_scr, l_scr, acc_scr, o_ref, lse_ref)


def softmax_step(s: Any, mask: Any, v_ref: Any, m_scr: Any, l_scr: Any, acc_scr: Any) -> None:
    """One online-softmax step over a ``[bq, bk]`` logits tile ``s`` (``mask``: which logits count,
    ``None``: all), updating the lane-replicated ``m``/``l`` (``[bq, 128]``) and ``acc`` scratch."""
    block_k, dv = s.shape[1], acc_scr.shape[-1]
    if mask is not None:
        s = jnp.where(mask, s, MASK_VALUE)
    m_prev, l_prev = m_scr[...], l_scr[...]  # [bq, 128]
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1)[:, None])
    p = jnp.exp(s - lanes(m_next, block_k))
    if mask is not None:  # a row that has seen only masked keys has m_next == MASK_VALUE: exp(0) = 1
        p = jnp.where(mask, p, 0.0)
    alpha = jnp.exp(m_prev - m_next)
    l_scr[...] = alpha * l_prev + jnp.sum(p, axis=1)[:, None]
    m_scr[...] = m_next
    v = v_ref[...]
    pv = jax.lax.dot(p.astype(v.dtype), v, preferred_element_type=F32)  # [bq, dv]
    acc_scr[...] = acc_scr[...] * lanes(alpha, dv) + pv


def write_output(
    h: Any, num_sinks: int, sinks_ref: Any, m_scr: Any, l_scr: Any, acc_scr: Any, o_ref: Any, lse_ref: Any
) -> None:
    """The output ``acc / l`` and the lane-replicated log-sum-exp of head ``h``, after its sinks
    (``sinks_ref``: SMEM ``[heads * num_sinks]``, or ``None``) join the denominator."""
    m_i, l_i, acc = m_scr[...], l_scr[...], acc_scr[...]
    dv = acc.shape[-1]
    if sinks_ref is not None:  # sinks join the denominator and carry no value
        sinks = [sinks_ref[h * num_sinks + j] for j in range(num_sinks)]
        m_new = m_i
        for s_j in sinks:
            m_new = jnp.maximum(m_new, s_j)
        alpha = jnp.exp(m_i - m_new)
        l_i = l_i * alpha
        for s_j in sinks:
            l_i = l_i + jnp.exp(s_j - m_new)
        acc = acc * lanes(alpha, dv)
        m_i = m_new
    nonempty = l_i > 0.0  # rows that attend nothing return zeros, never NaN
    l_safe = jnp.where(nonempty, l_i, 1.0)
    o_ref[...] = (acc * lanes(jnp.where(nonempty, 1.0 / l_safe, 0.0), dv)).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(nonempty, m_i + jnp.log(l_safe), -jnp.inf)


def _pad_axis(x: Any, axis: int, size: int, value: Any = 0) -> Any:
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


def segment_tiles(q_seg: Any, kv_seg: Any, sq_pad: int, sk_pad: int) -> tuple[Any, Any]:
    """Segment ids in tile-friendly layouts: queries ``[b, sq, 128]`` (lane-replicated), keys
    ``[b, 8, sk]`` (sublane-replicated); padding positions get ``-1``."""
    b = q_seg.shape[0]
    q_seg = _pad_axis(q_seg.astype(jnp.int32), 1, sq_pad, -1)
    kv_seg = _pad_axis(kv_seg.astype(jnp.int32), 1, sk_pad, -1)
    return (
        jax.lax.broadcast_in_dim(q_seg, (b, sq_pad, NUM_LANES), (0, 1)),
        jax.lax.broadcast_in_dim(kv_seg, (b, NUM_SUBLANES, sk_pad), (0, 2)),
    )


def pad_heads_and_seq(x: Any, seq: int, dim: int) -> Any:
    """``[b, heads, s, d]`` zero-padded to ``[b, heads, seq, dim]``."""
    return _pad_axis(_pad_axis(x, 2, seq), 3, dim)


def forward(spec: Spec, q: Any, k: Any, v: Any, q_seg: Any, kv_seg: Any, sinks: Any) -> tuple[Any, Any]:
    """``q [b, h, sq, d]``, ``k [b, hk, sk, d]``, ``v [b, hk, sk, dv]`` → output ``[b, h, sq, dv]``
    and log-sum-exp ``[b, h, sq]`` (float32; ``-inf`` for rows that attend nothing)."""
    b, h = q.shape[0], spec.num_heads
    block_q, block_k = spec.fwd_blocks
    sq_pad, sk_pad = round_up(spec.seq_q, block_q), round_up(spec.seq_k, block_k)
    d, dv, g = spec.d_pad, spec.dv_pad, spec.groups
    plan = plan_blocks(
        spec.seq_q, spec.seq_k, block_q, block_k,
        causal=spec.causal, window=spec.window, always_mask=spec.has_segments,
    )  # fmt: skip
    nq, steps = cdiv(spec.seq_q, block_q), plan.kv_steps

    q_map, kv_map = band_maps(g)
    inputs = [pad_heads_and_seq(q, sq_pad, d), pad_heads_and_seq(k, sk_pad, d), pad_heads_and_seq(v, sk_pad, dv)]
    in_specs = [
        pl.BlockSpec((None, None, block_q, d), q_map),
        pl.BlockSpec((None, None, block_k, d), kv_map),
        pl.BlockSpec((None, None, block_k, dv), kv_map),
    ]
    if spec.has_segments:
        inputs += segment_tiles(q_seg, kv_seg, sq_pad, sk_pad)
        in_specs += band_segment_specs(block_q, block_k)
    if spec.num_sinks:
        inputs.append(sinks.astype(F32).reshape(-1))
        in_specs.append(smem_spec())

    kernel = functools.partial(_fwd_kernel, spec=spec, steps=steps, k_padded=sk_pad != spec.seq_k)
    o, lse = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, h, nq, steps),
            in_specs=in_specs,
            out_specs=[
                pl.BlockSpec((None, None, block_q, dv), q_map),
                pl.BlockSpec((None, None, block_q, NUM_LANES), q_map),
            ],
            scratch_shapes=[
                pltpu.VMEM((block_q, NUM_LANES), F32),  # m: running row max
                pltpu.VMEM((block_q, NUM_LANES), F32),  # l: running row sum
                pltpu.VMEM((block_q, dv), F32),  # acc: unnormalized output
            ],
        ),
        out_shape=[
            jax.ShapeDtypeStruct((b, h, sq_pad, dv), q.dtype),
            jax.ShapeDtypeStruct((b, h, sq_pad, NUM_LANES), F32),
        ],
        compiler_params=compiler_params(("parallel", "parallel", "parallel", "arbitrary")),
        name="ejkernel_flash_fwd",
    )(
        jnp.asarray(plan.kv_lo), jnp.asarray(plan.kv_hi), jnp.asarray(plan.full_lo), jnp.asarray(plan.full_hi),
        *inputs,
    )  # fmt: skip
    return o[:, :, : spec.seq_q, : spec.head_dim_v], lse[:, :, : spec.seq_q, 0]
