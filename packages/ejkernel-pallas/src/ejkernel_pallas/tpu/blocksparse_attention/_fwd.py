"""Forward kernel: block-sparse FlashAttention-2 in the splash-attention style.

Grid ``(batch, head, q_block, slot)``: the last axis walks the key tiles query tile ``i`` visits
(``kv_index``, scalar-prefetched with its count, flags and fine-mask index), so the key/value
index maps fetch only visited tiles and the pipeline skips the copy on idle slots (they repeat
the last visited tile). A slot's tile is computed unmasked when its flags are 0 (a full tile)
and with :func:`~._spec.fine_mask` otherwise; the static fine mask of a partial tile arrives as
the ``partial_masks`` block its index names. The online-softmax state (``m``, ``l``, ``acc``)
lives in VMEM scratch and the output and the lane-replicated log-sum-exp are written at the last
slot. GQA/MQA maps query head ``h`` to key/value head ``h // groups`` in the index maps.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ejkernel.ops.blocksparse_attention.mask import BlockLayout

from .._pallas import compiler_params, smem_spec
from .._tiling import MASK_VALUE, NUM_LANES, NUM_SUBLANES, round_up
from ..flash_attention._fwd import pad_heads_and_seq, segment_tiles, softmax_step, write_output
from ..flash_attention._spec import logits
from ._spec import F32, Schedule, Spec, fine_mask


def pairwise_tiles(mask: Any, sq_pad: int, sk_pad: int) -> Any:
    """The pairwise mask ``[B1, H1, sq, sk]`` as int32 padded to whole tiles (padding masked;
    int32 tiles have the TPU's plain ``[8, 128]`` layout, unlike bool or int8)."""
    pad = ((0, 0), (0, 0), (0, sq_pad - mask.shape[2]), (0, sk_pad - mask.shape[3]))
    return jnp.pad(mask.astype(jnp.int32), pad)


def query_major_specs(spec: Spec, sched: Schedule, block_q: int, block_k: int) -> dict[str, Any]:
    """Block specs of a query-major grid ``(batch, head, q_block, slot)`` (forward and dQ)."""
    g, d, dv = spec.groups, spec.d_pad, spec.dv_pad

    def kv_block(bi, i, t, index):
        return index[sched.slot(bi, i, t)]

    def q_map(bi, hi, i, t, *_):
        return bi, hi, i, 0

    def kv_map(bi, hi, i, t, index, *_):
        return bi, hi // g, kv_block(bi, i, t, index), 0

    def pm_map(bi, hi, i, t, index, count, flags, mask_index):
        return mask_index[sched.slot(bi, i, t)], 0, 0

    out = {
        "q": pl.BlockSpec((None, None, block_q, d), q_map),
        "k": pl.BlockSpec((None, None, block_k, d), kv_map),
        "v": pl.BlockSpec((None, None, block_k, dv), kv_map),
        "pm": pl.BlockSpec((None, block_q, block_k), pm_map),
        "q_row": lambda width: pl.BlockSpec((None, None, block_q, width), q_map),
        "q_seg": pl.BlockSpec((None, block_q, NUM_LANES), lambda bi, hi, i, t, *_: (bi, i, 0)),
        "kv_seg": pl.BlockSpec(
            (None, NUM_SUBLANES, block_k), lambda bi, hi, i, t, index, *_: (bi, 0, kv_block(bi, i, t, index))
        ),
    }
    if spec.mask_bh is not None:
        mb, mh = spec.mask_bh
        out["am"] = pl.BlockSpec(
            (None, None, block_q, block_k),
            lambda bi, hi, i, t, index, *_: (bi if mb else 0, hi if mh else 0, i, kv_block(bi, i, t, index)),
        )
    return out


def _fwd_kernel(
    index_ref, count_ref, flags_ref, mask_index_ref,  # scalar prefetch (SMEM): the schedule
    q_ref, k_ref, v_ref, pm_ref, *refs, spec: Spec, sched: Schedule,
):  # fmt: skip
    refs = list(refs)
    q_seg_ref = kv_seg_ref = am_ref = sinks_ref = None
    if spec.has_segments:
        q_seg_ref, kv_seg_ref = refs.pop(0), refs.pop(0)
    if spec.mask_bh is not None:
        am_ref = refs.pop(0)
    if spec.num_sinks:
        sinks_ref = refs.pop(0)
    o_ref, lse_ref, m_scr, l_scr, acc_scr = refs
    block_k = spec.fwd_blocks[1]
    bi, h, i, t = pl.program_id(0), pl.program_id(1), pl.program_id(2), pl.program_id(3)
    flags = flags_ref[sched.slot(bi, i, t)]

    @pl.when(t == 0)
    def _init():
        m_scr[...] = jnp.full(m_scr.shape, MASK_VALUE, F32)
        l_scr[...] = jnp.zeros(l_scr.shape, F32)
        acc_scr[...] = jnp.zeros(acc_scr.shape, F32)

    def update(masked: bool):
        s, _ = logits(spec, q_ref[...], k_ref[...])  # [bq, bk]
        mask = fine_mask(flags, block_k, pm_ref, q_seg_ref, kv_seg_ref, am_ref) if masked else None
        softmax_step(s, mask, v_ref, m_scr, l_scr, acc_scr)

    run = t < count_ref[sched.row(bi, i)]
    pl.when(jnp.logical_and(run, flags == 0))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, flags != 0))(functools.partial(update, True))

    @pl.when(t == sched.width - 1)
    def _finalize():
        write_output(h, spec.num_sinks, sinks_ref, m_scr, l_scr, acc_scr, o_ref, lse_ref)


def forward(
    spec: Spec, layout: BlockLayout, q: Any, k: Any, v: Any, sinks: Any, masks: tuple[Any, Any, Any]
) -> tuple[Any, Any]:
    """``q [b, h, sq, d]``, ``k [b, hk, sk, d]``, ``v [b, hk, sk, dv]`` → output ``[b, h, sq, dv]``
    and log-sum-exp ``[b, h, sq]`` (float32; ``-inf`` for rows that attend nothing)."""
    b, h = q.shape[0], spec.num_heads
    block_q, block_k = spec.fwd_blocks
    sq_pad, sk_pad = round_up(spec.seq_q, block_q), round_up(spec.seq_k, block_k)
    d, dv = spec.d_pad, spec.dv_pad
    sched, metadata = Schedule.of(layout, key_major=False)
    bs = query_major_specs(spec, sched, block_q, block_k)
    q_seg, kv_seg, pairwise = masks

    inputs = [
        pad_heads_and_seq(q, sq_pad, d),
        pad_heads_and_seq(k, sk_pad, d),
        pad_heads_and_seq(v, sk_pad, dv),
        layout.partial_masks.astype(jnp.int32),
    ]
    in_specs = [bs["q"], bs["k"], bs["v"], bs["pm"]]
    if spec.has_segments:
        inputs += segment_tiles(q_seg, kv_seg, sq_pad, sk_pad)
        in_specs += [bs["q_seg"], bs["kv_seg"]]
    if spec.mask_bh is not None:
        inputs.append(pairwise_tiles(pairwise, sq_pad, sk_pad))
        in_specs.append(bs["am"])
    if spec.num_sinks:
        inputs.append(sinks.astype(F32).reshape(-1))
        in_specs.append(smem_spec())

    o, lse = pl.pallas_call(
        functools.partial(_fwd_kernel, spec=spec, sched=sched),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, h, sched.rows, sched.width),
            in_specs=in_specs,
            out_specs=[bs["q_row"](dv), bs["q_row"](NUM_LANES)],
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
        name="ejkernel_blocksparse_fwd",
    )(*metadata, *inputs)
    return o[:, :, : spec.seq_q, : spec.head_dim_v], lse[:, :, : spec.seq_q, 0]
