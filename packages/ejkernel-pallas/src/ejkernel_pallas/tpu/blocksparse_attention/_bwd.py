"""Backward kernels: FlashAttention-2's backward (Dao, 2023, Algorithm 2) over the block
schedule, split in two as the flash kernels are.

With ``P = exp(S - lse)``, ``dP = dO Vᵀ``, ``dS = P ∘ (dP - D)`` where ``D = rowsum(dO ∘ O)``:

- the dK/dV kernel, grid ``(batch, kv_head, k_block, group, slot)``, keeps a key tile resident
  and walks the query tiles that visit it (the key-major schedule ``q_index``), for every query
  head of its GQA group, both inner axes reducing into the same VMEM accumulators:
  ``dV += Pᵀ dO``, ``dK += dSᵀ Q``;
- the dQ kernel, grid ``(batch, head, q_block, slot)`` like the forward: ``dQ += dS K``.

Only scheduled tiles are fetched and computed; a fine mask is built on partial tiles only.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ejkernel.ops.blocksparse_attention.mask import BlockLayout

from .._pallas import compiler_params
from .._tiling import NUM_LANES, NUM_SUBLANES, round_up
from ..flash_attention._bwd import probs_and_dlogits, row_stat
from ..flash_attention._fwd import pad_heads_and_seq, segment_tiles
from ._fwd import pairwise_tiles, query_major_specs
from ._spec import F32, Schedule, Spec, fine_mask


def _split(spec: Spec, refs: list[Any]) -> tuple[Any, Any, Any, list[Any]]:
    q_seg_ref = kv_seg_ref = am_ref = None
    if spec.has_segments:
        q_seg_ref, kv_seg_ref = refs.pop(0), refs.pop(0)
    if spec.mask_bh is not None:
        am_ref = refs.pop(0)
    return q_seg_ref, kv_seg_ref, am_ref, refs


def _dq_kernel(
    index_ref, count_ref, flags_ref, mask_index_ref,  # scalar prefetch: query-major schedule
    q_ref, k_ref, v_ref, pm_ref, do_ref, lse_ref, di_ref, *refs, spec: Spec, sched: Schedule,
):  # fmt: skip
    q_seg_ref, kv_seg_ref, am_ref, (dq_ref, dq_scr) = _split(spec, list(refs))
    block_k = spec.bwd_blocks[1]
    bi, i, t = pl.program_id(0), pl.program_id(2), pl.program_id(3)
    flags = flags_ref[sched.slot(bi, i, t)]

    @pl.when(t == 0)
    def _init():
        dq_scr[...] = jnp.zeros(dq_scr.shape, F32)

    def update(masked: bool):
        mask = fine_mask(flags, block_k, pm_ref, q_seg_ref, kv_seg_ref, am_ref) if masked else None
        k = k_ref[...]
        _, ds = probs_and_dlogits(spec, q_ref[...], k, v_ref[...], do_ref[...], lse_ref[...], di_ref[...], mask)
        dq_scr[...] += jax.lax.dot(ds.astype(k.dtype), k, preferred_element_type=F32)  # [bq, d]

    run = t < count_ref[sched.row(bi, i)]
    pl.when(jnp.logical_and(run, flags == 0))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, flags != 0))(functools.partial(update, True))

    @pl.when(t == sched.width - 1)
    def _finalize():
        dq_ref[...] = (dq_scr[...] * spec.scale).astype(dq_ref.dtype)


def _dkv_kernel(
    index_ref, count_ref, flags_ref, mask_index_ref,  # scalar prefetch: key-major schedule
    q_ref, k_ref, v_ref, pm_ref, do_ref, lse_ref, di_ref, *refs, spec: Spec, sched: Schedule,
):  # fmt: skip
    q_seg_ref, kv_seg_ref, am_ref, (dk_ref, dv_ref, dk_scr, dv_scr) = _split(spec, list(refs))
    block_k = spec.bwd_blocks[1]
    bi, j, grp, t = pl.program_id(0), pl.program_id(2), pl.program_id(3), pl.program_id(4)
    flags = flags_ref[sched.slot(bi, j, t)]

    @pl.when(jnp.logical_and(grp == 0, t == 0))
    def _init():
        dk_scr[...] = jnp.zeros(dk_scr.shape, F32)
        dv_scr[...] = jnp.zeros(dv_scr.shape, F32)

    def update(masked: bool):
        mask = fine_mask(flags, block_k, pm_ref, q_seg_ref, kv_seg_ref, am_ref) if masked else None
        q, do = q_ref[...], do_ref[...]
        p, ds = probs_and_dlogits(spec, q, k_ref[...], v_ref[...], do, lse_ref[...], di_ref[...], mask)
        # Pᵀ and dSᵀ transposed explicitly in float32, then plain [bk, bq] @ [bq, d] matmuls (as
        # the flash dK/dV kernel does).
        dv_scr[...] += jax.lax.dot(p.T.astype(do.dtype), do, preferred_element_type=F32)
        dk_scr[...] += jax.lax.dot(ds.T.astype(q.dtype), q, preferred_element_type=F32)

    run = t < count_ref[sched.row(bi, j)]
    pl.when(jnp.logical_and(run, flags == 0))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, flags != 0))(functools.partial(update, True))

    @pl.when(jnp.logical_and(grp == spec.groups - 1, t == sched.width - 1))
    def _finalize():
        dk_ref[...] = (dk_scr[...] * spec.scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_scr[...].astype(dv_ref.dtype)


def backward(
    spec: Spec, layout: BlockLayout, q: Any, k: Any, v: Any, masks: tuple[Any, Any, Any], out: Any, lse: Any, dout: Any
) -> tuple[Any, Any, Any, Any]:
    """dq, dk, dv (unpadded, in the inputs' dtypes) and ``D = rowsum(dO ∘ O)`` ``[b, h, sq]``."""
    b, h, hk, g = q.shape[0], spec.num_heads, spec.num_kv_heads, spec.groups
    block_q, block_k = spec.bwd_blocks
    sq_pad, sk_pad = round_up(spec.seq_q, block_q), round_up(spec.seq_k, block_k)
    d, dv = spec.d_pad, spec.dv_pad
    q_seg, kv_seg, pairwise = masks

    dout = dout.astype(q.dtype)
    # D = rowsum(dO ∘ O) elementwise: exact float32 (an einsum would be a matmul at the TPU's
    # default, bfloat16-pass precision).
    delta = (dout.astype(F32) * out.astype(F32)).sum(axis=-1)
    lse_in = row_stat(jnp.where(lse == -jnp.inf, jnp.inf, lse), sq_pad, jnp.inf)  # P = 0 where empty
    di_in = row_stat(delta, sq_pad, 0.0)
    qp, dop = pad_heads_and_seq(q, sq_pad, d), pad_heads_and_seq(dout, sq_pad, dv)
    kp, vp = pad_heads_and_seq(k, sk_pad, d), pad_heads_and_seq(v, sk_pad, dv)
    pm = layout.partial_masks.astype(jnp.int32)
    extra = list(segment_tiles(q_seg, kv_seg, sq_pad, sk_pad)) if spec.has_segments else []
    if spec.mask_bh is not None:
        extra.append(pairwise_tiles(pairwise, sq_pad, sk_pad))
    inputs = [qp, kp, vp, pm, dop, lse_in, di_in, *extra]

    # -- dK/dV: key-major ---------------------------------------------------------------------
    sched, metadata = Schedule.of(layout, key_major=True)

    def q_block(bi, j, t, index):
        return index[sched.slot(bi, j, t)]

    def q_map(bi, ki, j, grp, t, index, *_):
        return bi, ki * g + grp, q_block(bi, j, t, index), 0

    def kv_map(bi, ki, j, grp, t, *_):
        return bi, ki, j, 0

    def pm_map(bi, ki, j, grp, t, index, count, flags, mask_index):
        return mask_index[sched.slot(bi, j, t)], 0, 0

    in_specs = [
        pl.BlockSpec((None, None, block_q, d), q_map),
        pl.BlockSpec((None, None, block_k, d), kv_map),
        pl.BlockSpec((None, None, block_k, dv), kv_map),
        pl.BlockSpec((None, block_q, block_k), pm_map),
        pl.BlockSpec((None, None, block_q, dv), q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), q_map),
    ]
    if spec.has_segments:
        in_specs += [
            pl.BlockSpec(
                (None, block_q, NUM_LANES), lambda bi, ki, j, grp, t, index, *_: (bi, q_block(bi, j, t, index), 0)
            ),
            pl.BlockSpec((None, NUM_SUBLANES, block_k), lambda bi, ki, j, grp, t, *_: (bi, 0, j)),
        ]
    if spec.mask_bh is not None:
        mb, mh = spec.mask_bh

        def am_map(bi, ki, j, grp, t, index, *_):
            return bi if mb else 0, ki * g + grp if mh else 0, q_block(bi, j, t, index), j

        in_specs.append(pl.BlockSpec((None, None, block_q, block_k), am_map))
    dk, dv_out = pl.pallas_call(
        functools.partial(_dkv_kernel, spec=spec, sched=sched),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, hk, sched.rows, g, sched.width),
            in_specs=in_specs,
            out_specs=[
                pl.BlockSpec((None, None, block_k, d), kv_map),
                pl.BlockSpec((None, None, block_k, dv), kv_map),
            ],
            scratch_shapes=[pltpu.VMEM((block_k, d), F32), pltpu.VMEM((block_k, dv), F32)],
        ),
        out_shape=[
            jax.ShapeDtypeStruct((b, hk, sk_pad, d), k.dtype),
            jax.ShapeDtypeStruct((b, hk, sk_pad, dv), v.dtype),
        ],
        compiler_params=compiler_params(("parallel", "parallel", "parallel", "arbitrary", "arbitrary")),
        name="ejkernel_blocksparse_bwd_dkv",
    )(*metadata, *inputs)

    # -- dQ: query-major ----------------------------------------------------------------------
    sched, metadata = Schedule.of(layout, key_major=False)
    bs = query_major_specs(spec, sched, block_q, block_k)
    in_specs = [bs["q"], bs["k"], bs["v"], bs["pm"], bs["q_row"](dv), bs["q_row"](NUM_LANES), bs["q_row"](NUM_LANES)]
    if spec.has_segments:
        in_specs += [bs["q_seg"], bs["kv_seg"]]
    if spec.mask_bh is not None:
        in_specs.append(bs["am"])
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, spec=spec, sched=sched),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, h, sched.rows, sched.width),
            in_specs=in_specs,
            out_specs=bs["q_row"](d),
            scratch_shapes=[pltpu.VMEM((block_q, d), F32)],
        ),
        out_shape=jax.ShapeDtypeStruct((b, h, sq_pad, d), q.dtype),
        compiler_params=compiler_params(("parallel", "parallel", "parallel", "arbitrary")),
        name="ejkernel_blocksparse_bwd_dq",
    )(*metadata, *inputs)

    sq, sk = spec.seq_q, spec.seq_k
    return (
        dq[:, :, :sq, : spec.head_dim],
        dk[:, :, :sk, : spec.head_dim],
        dv_out[:, :, :sk, : spec.head_dim_v],
        delta,
    )
