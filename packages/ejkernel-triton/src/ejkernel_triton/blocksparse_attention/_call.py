"""Host side of the Triton ``blocksparse_attention``: padding, the block schedule, launches, the custom VJP.

The schedule is the core's (``BlockSparseAttentionArgs.layout``), built at the kernels' tile
sizes: the same metadata the XLA implementation follows. Operands are padded to whole tiles and a
power-of-two head dim (zeros change no logit), so the kernels load without bounds masks.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.blocksparse_attention import BlockLayout, BlockSparseAttentionArgs, BlockSparseAttentionConfig

from .._grid import folded
from .._launch import dot_precision, launch
from ._kernel import bsa_bwd_dkdv_kernel, bsa_bwd_dq_kernel, bsa_fwd_kernel

F32 = jnp.float32


def pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, 1 << (max(n, 1) - 1).bit_length())


def tile_sizes(args: BlockSparseAttentionArgs, block_q: int, block_k: int) -> tuple[int, int]:
    """The tiles a config's block sizes give for this call: never beyond the (power-of-two
    rounded) sequence, so a short sequence is one tile."""
    return min(block_q, pow2_at_least(args.seq_q)), min(block_k, pow2_at_least(args.seq_k))


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernels are compiled for (hashable: the custom VJP's static argument)."""

    heads: int
    groups: int
    seq_q: int
    seq_k: int
    head_dim: int
    value_head_dim: int
    scale: float
    soft_cap: float | None
    fwd: tuple[int, int, int, int]  # block_q, block_k, num_warps, num_stages
    bwd: tuple[int, int, int, int]

    @property
    def dp(self) -> int:
        return pow2_at_least(self.head_dim)

    @property
    def dvp(self) -> int:
        return pow2_at_least(self.value_head_dim)


def _round(n: int, m: int) -> int:
    return -(-n // m) * m


def _pad(x: Any, axis: int, size: int, value: Any = 0) -> Any:
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


class _Padded:
    """The call's arrays padded for one tiling (``bq`` rows, ``bk`` keys per tile)."""

    def __init__(self, spec: Spec, bq: int, bk: int, q: Any, k: Any, v: Any, masks: tuple[Any, Any, Any]):
        self.sqp = _round(spec.seq_q, bq)
        self.skp = _round(spec.seq_k, bk)
        self.q = _pad(_pad(q, 2, self.sqp), 3, spec.dp)
        self.k = _pad(_pad(k, 2, self.skp), 3, spec.dp)
        self.v = _pad(_pad(v, 2, self.skp), 3, spec.dvp)
        q_seg, kv_seg, mask = masks
        self.has_seg = q_seg is not None
        dummy = jnp.zeros((1,), jnp.int32)
        self.q_seg = _pad(q_seg, 1, self.sqp, -1) if self.has_seg else dummy
        self.kv_seg = _pad(kv_seg, 1, self.skp, -1) if self.has_seg else dummy
        self.has_am = mask is not None
        if self.has_am:
            am = _pad(_pad(mask, 2, self.sqp, False), 3, self.skp, False).astype(jnp.int8)
            b1, h1 = am.shape[:2]
            self.am = am
            self.am_bstride = h1 * self.sqp * self.skp if b1 > 1 else 0
            self.am_hstride = self.sqp * self.skp if h1 > 1 else 0
        else:
            self.am, self.am_bstride, self.am_hstride = jnp.zeros((1,), jnp.int8), 0, 0


def _schedule(lay: BlockLayout, key_major: bool) -> tuple[Any, ...]:
    index, count, flags, mask_idx = (
        (lay.q_index, lay.q_count, lay.q_flags, lay.q_mask_index)
        if key_major
        else (lay.kv_index, lay.kv_count, lay.kv_flags, lay.kv_mask_index)
    )
    bm, rows, width = index.shape
    # One schedule shared by every example: batch strides 0.
    meta_bstride = rows * width if bm > 1 else 0
    count_bstride = rows if bm > 1 else 0
    return index, count, flags, mask_idx, meta_bstride, count_bstride, width


def _forward(spec: Spec, lay: BlockLayout, q, k, v, aux, masks):
    bq, bk, warps, stages = spec.fwd
    p = _Padded(spec, bq, bk, q, k, v, masks)
    b = q.shape[0]
    index, count, flags, mask_idx, meta_bs, count_bs, width = _schedule(lay, key_major=False)
    assert index.shape[1] == p.sqp // bq, (index.shape, p.sqp, bq)  # the kernels' tiles per row
    sinks = aux.astype(F32) if aux is not None else jnp.zeros((1,), F32)
    num_sinks = int(aux.shape[1]) if aux is not None else 0
    out, lse = launch(
        bsa_fwd_kernel,
        p.q, p.k, p.v, sinks, index, count, flags, mask_idx, lay.partial_masks.astype(jnp.int8),
        p.q_seg, p.kv_seg, p.am,
        np.float32(spec.scale), np.float32(spec.soft_cap or 1.0), meta_bs, count_bs, p.am_bstride, p.am_hstride,
        width, num_sinks,
        out_shape=[
            jax.ShapeDtypeStruct((b, spec.heads, p.sqp, spec.dvp), q.dtype),
            jax.ShapeDtypeStruct((b, spec.heads, p.sqp), F32),
        ],
        grid=folded(index.shape[1], b * spec.heads),
        num_warps=warps,
        num_stages=stages,
        name="ejkernel_blocksparse_attention_fwd",
        H=spec.heads, G=spec.groups, SQP=p.sqp, SKP=p.skp, DP=spec.dp, DVP=spec.dvp, BLOCK_M=bq, BLOCK_N=bk,
        HAS_SEG=p.has_seg, HAS_AM=p.has_am, HAS_SINKS=aux is not None, HAS_SOFTCAP=spec.soft_cap is not None, DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    return out[:, :, : spec.seq_q, : spec.value_head_dim], lse[:, :, : spec.seq_q]


def _backward(spec: Spec, lay: BlockLayout, q, k, v, aux, masks, out, lse, dout):
    bq, bk, warps, stages = spec.bwd
    p = _Padded(spec, bq, bk, q, k, v, masks)
    b, hk = q.shape[0], k.shape[1]
    delta = (dout.astype(F32) * out.astype(F32)).sum(axis=-1)  # D = rowsum(dO ∘ O), exact float32
    do = _pad(_pad(dout.astype(q.dtype), 2, p.sqp), 3, spec.dvp)
    lse_p = _pad(lse, 2, p.sqp, -jnp.inf)
    delta_p = _pad(delta, 2, p.sqp)
    pm = lay.partial_masks.astype(jnp.int8)
    common = dict(
        H=spec.heads, G=spec.groups, SQP=p.sqp, SKP=p.skp, DP=spec.dp, DVP=spec.dvp, BLOCK_M=bq, BLOCK_N=bk,
        HAS_SEG=p.has_seg, HAS_AM=p.has_am, HAS_SOFTCAP=spec.soft_cap is not None, DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    scalars = (np.float32(spec.scale), np.float32(spec.soft_cap or 1.0))
    index, count, flags, mask_idx, meta_bs, count_bs, width = _schedule(lay, key_major=False)
    assert index.shape[1] == p.sqp // bq, (index.shape, p.sqp, bq)  # the kernels' tiles per row
    (dq,) = launch(
        bsa_bwd_dq_kernel,
        p.q, p.k, p.v, do, lse_p, delta_p, index, count, flags, mask_idx, pm, p.q_seg, p.kv_seg, p.am,
        *scalars, meta_bs, count_bs, p.am_bstride, p.am_hstride, width,
        out_shape=[jax.ShapeDtypeStruct(p.q.shape, q.dtype)],
        grid=folded(index.shape[1], b * spec.heads),
        num_warps=warps,
        num_stages=stages,
        name="ejkernel_blocksparse_attention_bwd_dq",
        **common,
    )  # fmt: skip
    index, count, flags, mask_idx, meta_bs, count_bs, width = _schedule(lay, key_major=True)
    assert index.shape[1] == p.skp // bk, (index.shape, p.skp, bk)
    dk, dv = launch(
        bsa_bwd_dkdv_kernel,
        p.q, p.k, p.v, do, lse_p, delta_p, index, count, flags, mask_idx, pm, p.q_seg, p.kv_seg, p.am,
        *scalars, meta_bs, count_bs, p.am_bstride, p.am_hstride, width,
        out_shape=[jax.ShapeDtypeStruct(p.k.shape, k.dtype), jax.ShapeDtypeStruct(p.v.shape, v.dtype)],
        grid=folded(index.shape[1], b * hk),
        num_warps=warps,
        num_stages=stages,
        name="ejkernel_blocksparse_attention_bwd_dkdv",
        **common,
    )  # fmt: skip
    dq = dq[:, :, : spec.seq_q, : spec.head_dim]
    dk = dk[:, :, : spec.seq_k, : spec.head_dim]
    dv = dv[:, :, : spec.seq_k, : spec.value_head_dim]
    daux = None
    if aux is not None:
        # d(sink) = -Σ_rows exp(sink - lse) · D (a row with lse = -inf adds nothing).
        lse_inf = jnp.where(lse == -jnp.inf, jnp.inf, lse)
        p_sink = jnp.exp(aux.astype(F32)[None, :, None, :] - lse_inf[..., None])  # [b, h, sq, n]
        daux = -(p_sink * delta[..., None]).sum(axis=(0, 2)).astype(aux.dtype)
    return dq, dk, dv, daux


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bsa(spec, q, k, v, aux, layouts, masks):
    out, _ = _forward(spec, layouts[0], q, k, v, aux, masks)
    return out


def _bsa_fwd(spec, q, k, v, aux, layouts, masks):
    out, lse = _forward(spec, layouts[0], q, k, v, aux, masks)
    return out, (q, k, v, aux, layouts, masks, out, lse)


def _bsa_bwd(spec, residuals, dout):
    q, k, v, aux, layouts, masks, out, lse = residuals
    dq, dk, dv, daux = _backward(spec, layouts[1], q, k, v, aux, masks, out, lse, dout)
    return (dq, dk, dv, daux, *jax.tree.map(lambda x: None, (layouts, masks)))


_bsa.defvjp(_bsa_fwd, _bsa_bwd)


def blocksparse_attention(args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig) -> jax.Array:
    f, g = cfg.fwd_params, cfg.bwd_params
    fq, fk = tile_sizes(args, f.q_blocksize, f.kv_blocksize)
    bq, bk = tile_sizes(args, g.q_blocksize, g.kv_blocksize)
    spec = Spec(
        heads=args.num_heads,
        groups=args.num_groups,
        seq_q=args.seq_q,
        seq_k=args.seq_k,
        head_dim=args.head_dim,
        value_head_dim=args.value_head_dim,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        fwd=(fq, fk, f.num_warps, f.num_stages),
        bwd=(bq, bk, g.num_warps, g.num_stages),
    )
    layouts = (args.layout(fq, fk), args.layout(bq, bk))
    masks = (args.q_segment_ids, args.kv_segment_ids, args.attention_mask)
    return _bsa(spec, args.query, args.key, args.value, args.softmax_aux, layouts, masks)
