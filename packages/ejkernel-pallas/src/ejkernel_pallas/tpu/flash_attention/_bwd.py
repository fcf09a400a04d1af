"""Backward kernels: FlashAttention-2's backward pass (Dao, 2023, Algorithm 2), split in two.

With ``P = exp(S - lse)``, ``dP = dO Vᵀ``, ``dS = P ∘ (dP - D)`` where ``D = rowsum(dO ∘ O)``:

- the dK/dV kernel, grid ``(batch, kv_head, k_block, group, step)``, keeps a key block resident
  and walks the query blocks that attend it, for every query head of its GQA group (the two
  innermost axes both reduce into the same VMEM accumulators, so dK/dV of shared K/V heads are
  summed in place, never materialized per query head): ``dV += Pᵀ dO``, ``dK += dSᵀ Q``;
- the dQ kernel, grid ``(batch, head, q_block, step)`` like the forward: ``dQ += dS K``.

The log-sum-exp and ``D`` arrive lane-replicated (``[b, h, s, 128]``) so they broadcast over a
tile without relayout; rows that attend nothing carry ``lse = +inf`` (so ``P = 0``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._pallas import compiler_params, lanes
from .._tiling import NUM_LANES, NUM_SUBLANES, cdiv, round_up
from ._fwd import band_maps, band_segment_specs, pad_heads_and_seq, segment_tiles
from ._plan import plan_blocks
from ._spec import F32, NT_DIMS, Spec, element_mask, logits


def probs_and_dlogits(spec: Spec, q, k, v, do, lse, di, mask) -> tuple[Any, Any]:
    """``P`` and ``dS`` (with respect to the scaled, uncapped logits) of one ``[bq, bk]`` tile."""
    block_k = k.shape[0]
    s, t = logits(spec, q, k)
    p = jnp.exp(s - lanes(lse, block_k))
    if mask is not None:
        p = jnp.where(mask, p, 0.0)
    dp = jax.lax.dot_general(do, v, NT_DIMS, preferred_element_type=F32)  # [bq, bk]
    ds = p * (dp - lanes(di, block_k))
    if t is not None:  # d(cap·tanh(x/cap))/dx = 1 - tanh²
        ds = ds * (1.0 - t * t)
    return p, ds


def _split_refs(spec: Spec, refs: list[Any]) -> tuple[Any, Any, list[Any]]:
    if spec.has_segments:
        return refs[0], refs[1], refs[2:]
    return None, None, refs


def _dq_kernel(
    kv_lo_ref, kv_hi_ref, full_lo_ref, full_hi_ref,  # scalar prefetch, [nq] each
    q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, *refs, spec: Spec, steps: int, k_padded: bool,
):  # fmt: skip
    q_seg_ref, kv_seg_ref, (dq_ref, dq_scr) = _split_refs(spec, list(refs))
    block_q, block_k = spec.bwd_blocks
    i, step = pl.program_id(2), pl.program_id(3)
    kb = kv_lo_ref[i] + step

    @pl.when(step == 0)
    def _init():
        dq_scr[...] = jnp.zeros(dq_scr.shape, F32)

    def update(masked: bool):
        mask = None
        if masked:
            mask = element_mask(
                spec, i * block_q, kb * block_k, (block_q, block_k),
                q_seg_ref[...] if q_seg_ref is not None else None,
                kv_seg_ref[...] if kv_seg_ref is not None else None,
                k_padded,
            )  # fmt: skip
        k = k_ref[...]
        _, ds = probs_and_dlogits(spec, q_ref[...], k, v_ref[...], do_ref[...], lse_ref[...], di_ref[...], mask)
        dq_scr[...] += jax.lax.dot(ds.astype(k.dtype), k, preferred_element_type=F32)  # [bq, d]

    run = kb < kv_hi_ref[i]
    full = jnp.logical_and(kb >= full_lo_ref[i], kb < full_hi_ref[i])
    pl.when(jnp.logical_and(run, full))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, jnp.logical_not(full)))(functools.partial(update, True))

    @pl.when(step == steps - 1)
    def _finalize():
        dq_ref[...] = (dq_scr[...] * spec.scale).astype(dq_ref.dtype)


def _dkv_kernel(
    q_lo_ref, q_hi_ref, full_lo_ref, full_hi_ref,  # scalar prefetch: [nk], [nk], [nq], [nq]
    q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, *refs, spec: Spec, steps: int, k_padded: bool,
):  # fmt: skip
    q_seg_ref, kv_seg_ref, (dk_ref, dv_ref, dk_scr, dv_scr) = _split_refs(spec, list(refs))
    block_q, block_k = spec.bwd_blocks
    j, grp, step = pl.program_id(2), pl.program_id(3), pl.program_id(4)
    qb = q_lo_ref[j] + step

    @pl.when(jnp.logical_and(grp == 0, step == 0))
    def _init():
        dk_scr[...] = jnp.zeros(dk_scr.shape, F32)
        dv_scr[...] = jnp.zeros(dv_scr.shape, F32)

    def update(masked: bool):
        mask = None
        if masked:
            mask = element_mask(
                spec, qb * block_q, j * block_k, (block_q, block_k),
                q_seg_ref[...] if q_seg_ref is not None else None,
                kv_seg_ref[...] if kv_seg_ref is not None else None,
                k_padded,
            )  # fmt: skip
        q, do = q_ref[...], do_ref[...]
        p, ds = probs_and_dlogits(spec, q, k_ref[...], v_ref[...], do, lse_ref[...], di_ref[...], mask)
        # Pᵀ and dSᵀ are transposed explicitly in float32 (one XLU transpose per tile, as in JAX's
        # TPU flash attention) and then fed to plain [bk, bq] @ [bq, d] matmuls.
        dv_scr[...] += jax.lax.dot(p.T.astype(do.dtype), do, preferred_element_type=F32)
        dk_scr[...] += jax.lax.dot(ds.T.astype(q.dtype), q, preferred_element_type=F32)

    run = qb < q_hi_ref[j]
    qb_read = jnp.minimum(qb, full_lo_ref.shape[0] - 1)  # idle steps must not read past the plan
    full = jnp.logical_and(j >= full_lo_ref[qb_read], j < full_hi_ref[qb_read])
    pl.when(jnp.logical_and(run, full))(functools.partial(update, False))
    pl.when(jnp.logical_and(run, jnp.logical_not(full)))(functools.partial(update, True))

    @pl.when(jnp.logical_and(grp == spec.groups - 1, step == steps - 1))
    def _finalize():
        dk_ref[...] = (dk_scr[...] * spec.scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_scr[...].astype(dv_ref.dtype)


def row_stat(x: Any, seq: int, pad_value: float) -> Any:
    """``[b, h, s]`` float32 → lane-replicated ``[b, h, seq, 128]`` (padding rows: ``pad_value``)."""
    x = jnp.pad(x.astype(F32), ((0, 0), (0, 0), (0, seq - x.shape[2])), constant_values=pad_value)
    return jax.lax.broadcast_in_dim(x, (*x.shape, NUM_LANES), (0, 1, 2))


def backward(
    spec: Spec, q: Any, k: Any, v: Any, q_seg: Any, kv_seg: Any, out: Any, lse: Any, dout: Any
) -> tuple[Any, Any, Any, Any]:
    """dq, dk, dv (unpadded, in the inputs' dtypes) and ``D = rowsum(dO ∘ O)`` ``[b, h, sq]``."""
    b, h, hk, g = q.shape[0], spec.num_heads, spec.num_kv_heads, spec.groups
    block_q, block_k = spec.bwd_blocks
    sq_pad, sk_pad = round_up(spec.seq_q, block_q), round_up(spec.seq_k, block_k)
    d, dv = spec.d_pad, spec.dv_pad
    nq, nk = cdiv(spec.seq_q, block_q), cdiv(spec.seq_k, block_k)
    plan = plan_blocks(
        spec.seq_q, spec.seq_k, block_q, block_k,
        causal=spec.causal, window=spec.window, always_mask=spec.has_segments,
    )  # fmt: skip
    k_padded = sk_pad != spec.seq_k

    dout = dout.astype(q.dtype)
    # D = rowsum(dO ∘ O), elementwise: exact float32 (an einsum is a matmul at the TPU's default,
    # bfloat16-pass precision)
    delta = (dout.astype(F32) * out.astype(F32)).sum(axis=-1)
    lse_in = row_stat(jnp.where(lse == -jnp.inf, jnp.inf, lse), sq_pad, jnp.inf)  # P = 0 where empty
    di_in = row_stat(delta, sq_pad, 0.0)
    qp, dop = pad_heads_and_seq(q, sq_pad, d), pad_heads_and_seq(dout, sq_pad, dv)
    kp, vp = pad_heads_and_seq(k, sk_pad, d), pad_heads_and_seq(v, sk_pad, dv)
    seg_inputs = segment_tiles(q_seg, kv_seg, sq_pad, sk_pad) if spec.has_segments else ()
    plan_full = (jnp.asarray(plan.full_lo), jnp.asarray(plan.full_hi))

    # -- dK/dV ------------------------------------------------------------------------------
    def q_block(j, step, q_lo, q_hi):
        return jnp.minimum(q_lo[j] + step, jnp.maximum(q_hi[j] - 1, 0))

    def dkv_q_map(bi, ki, j, grp, step, q_lo, q_hi, *_):
        return bi, ki * g + grp, q_block(j, step, q_lo, q_hi), 0

    def dkv_kv_map(bi, ki, j, grp, step, *_):
        return bi, ki, j, 0

    in_specs = [
        pl.BlockSpec((None, None, block_q, d), dkv_q_map),
        pl.BlockSpec((None, None, block_k, d), dkv_kv_map),
        pl.BlockSpec((None, None, block_k, dv), dkv_kv_map),
        pl.BlockSpec((None, None, block_q, dv), dkv_q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), dkv_q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), dkv_q_map),
    ]
    if spec.has_segments:
        in_specs += [
            pl.BlockSpec(
                (None, block_q, NUM_LANES),
                lambda bi, ki, j, grp, step, q_lo, q_hi, *_: (bi, q_block(j, step, q_lo, q_hi), 0),
            ),
            pl.BlockSpec((None, NUM_SUBLANES, block_k), lambda bi, ki, j, grp, step, *_: (bi, 0, j)),
        ]
    dk, dv_out = pl.pallas_call(
        functools.partial(_dkv_kernel, spec=spec, steps=plan.q_steps, k_padded=k_padded),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, hk, nk, g, plan.q_steps),
            in_specs=in_specs,
            out_specs=[
                pl.BlockSpec((None, None, block_k, d), dkv_kv_map),
                pl.BlockSpec((None, None, block_k, dv), dkv_kv_map),
            ],
            scratch_shapes=[pltpu.VMEM((block_k, d), F32), pltpu.VMEM((block_k, dv), F32)],
        ),
        out_shape=[
            jax.ShapeDtypeStruct((b, hk, sk_pad, d), k.dtype),
            jax.ShapeDtypeStruct((b, hk, sk_pad, dv), v.dtype),
        ],
        compiler_params=compiler_params(("parallel", "parallel", "parallel", "arbitrary", "arbitrary")),
        name="ejkernel_flash_bwd_dkv",
    )(jnp.asarray(plan.q_lo), jnp.asarray(plan.q_hi), *plan_full, qp, kp, vp, dop, lse_in, di_in, *seg_inputs)

    # -- dQ ---------------------------------------------------------------------------------
    dq_q_map, dq_kv_map = band_maps(g)
    in_specs = [
        pl.BlockSpec((None, None, block_q, d), dq_q_map),
        pl.BlockSpec((None, None, block_k, d), dq_kv_map),
        pl.BlockSpec((None, None, block_k, dv), dq_kv_map),
        pl.BlockSpec((None, None, block_q, dv), dq_q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), dq_q_map),
        pl.BlockSpec((None, None, block_q, NUM_LANES), dq_q_map),
    ]
    if spec.has_segments:
        in_specs += band_segment_specs(block_q, block_k)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, spec=spec, steps=plan.kv_steps, k_padded=k_padded),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=4,
            grid=(b, h, nq, plan.kv_steps),
            in_specs=in_specs,
            out_specs=pl.BlockSpec((None, None, block_q, d), dq_q_map),
            scratch_shapes=[pltpu.VMEM((block_q, d), F32)],
        ),
        out_shape=jax.ShapeDtypeStruct((b, h, sq_pad, d), q.dtype),
        compiler_params=compiler_params(("parallel", "parallel", "parallel", "arbitrary")),
        name="ejkernel_flash_bwd_dq",
    )(
        jnp.asarray(plan.kv_lo), jnp.asarray(plan.kv_hi), *plan_full, qp, kp, vp, dop, lse_in, di_in, *seg_inputs
    )  # fmt: skip

    sq, sk = spec.seq_q, spec.seq_k
    return (
        dq[:, :, :sq, : spec.head_dim],
        dk[:, :, :sk, : spec.head_dim],
        dv_out[:, :, :sk, : spec.head_dim_v],
        delta,
    )
