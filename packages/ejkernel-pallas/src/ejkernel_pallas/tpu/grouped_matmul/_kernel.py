"""Megablox's grouped GEMM kernels (Gale et al. 2022, MegaBlocks; JAX's ``pallas/ops/tpu/megablox``)
as Mosaic TPU Pallas kernels.

``gmm``: grid ``(n tiles, visits, k tiles)``; visit ``t`` multiplies the row tile
``m_tile_ids[t]`` of ``a`` by ``b[group_ids[t]]`` (read ``[K, N]`` or transposed), accumulating
over ``k`` in a float32 VMEM scratch, then writes the rows of that group with a select (the rows
of the other group of a shared tile are written by the neighbouring visit: the output block
stays in VMEM between them). Rows outside every group are left unwritten; the host wrapper
replaces them.

``tgmm``: grid ``(k tiles, n tiles, visits)``; the visits of one group accumulate
``a[rows]ᵀ @ d[rows]`` (rows of other groups masked to zero) and the group's last visit writes its
``[tk, tn]`` block of the gradient (empty groups get one visit: zeros).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._pallas import compiler_params

F32 = jnp.float32


def _rows_mask(m_tile, start, end, shape, block_m):
    rows = m_tile * block_m + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    return (rows >= start) & (rows < end)


def _gmm_kernel(gids, mtiles, starts, ends, num_active, a_ref, b_ref, out_ref, acc_ref, *, b_kn, block_m, k_steps):
    t, kk = pl.program_id(1), pl.program_id(2)

    @pl.when(kk == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    dims = (((1,), (0,)), ((), ())) if b_kn else (((1,), (1,)), ((), ()))
    acc_ref[...] += jax.lax.dot_general(a_ref[...], b_ref[...], dims, preferred_element_type=F32)

    @pl.when((kk == k_steps - 1) & (t < num_active[0]))
    def _():
        g = gids[t]
        mask = _rows_mask(mtiles[t], starts[g], ends[g], acc_ref.shape, block_m)
        out_ref[...] = jnp.where(mask, acc_ref[...], out_ref[...].astype(F32)).astype(out_ref.dtype)


def gmm(a, b, starts, ends, meta, *, b_kn, block_m, block_n, block_k, out_dtype):
    """``out[rows of j] = a[rows] @ B[j]``; ``B[j] = b[j]`` (``b_kn``) or ``b[j]ᵀ``. ``a`` is
    ``[m_pad, K]`` with ``m_pad`` a multiple of ``block_m``; ``block_n``/``block_k`` divide N/K."""
    gids, mtiles, num_active, visits = meta
    m_pad, kd = a.shape
    nd = b.shape[2] if b_kn else b.shape[1]
    k_steps, n_tiles = kd // block_k, nd // block_n
    if b_kn:
        b_spec = pl.BlockSpec((None, block_k, block_n), lambda n, t, k, g, mt, s, e, na: (g[t], k, n))
    else:
        b_spec = pl.BlockSpec((None, block_n, block_k), lambda n, t, k, g, mt, s, e, na: (g[t], n, k))
    kernel = functools.partial(_gmm_kernel, b_kn=b_kn, block_m=block_m, k_steps=k_steps)
    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=5,
            grid=(n_tiles, visits, k_steps),
            in_specs=[pl.BlockSpec((block_m, block_k), lambda n, t, k, g, mt, s, e, na: (mt[t], k)), b_spec],
            out_specs=pl.BlockSpec((block_m, block_n), lambda n, t, k, g, mt, s, e, na: (mt[t], n)),
            scratch_shapes=[pltpu.VMEM((block_m, block_n), F32)],
        ),
        out_shape=jax.ShapeDtypeStruct((m_pad, nd), out_dtype),
        compiler_params=compiler_params(("parallel", "arbitrary", "arbitrary")),
        name="ejkernel_gmm",
    )(gids, mtiles, starts, ends, num_active, a, b)


def _tgmm_kernel(gids, mtiles, starts, ends, num_active, a_ref, d_ref, out_ref, acc_ref, *, transpose, block_m):
    t = pl.program_id(2)
    last_t = pl.num_programs(2) - 1
    g = gids[t]
    first = (t == 0) | (gids[jnp.maximum(t - 1, 0)] != g)
    last = (t == last_t) | (gids[jnp.minimum(t + 1, last_t)] != g)

    @pl.when(first)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(t < num_active[0])
    def _():
        mask = _rows_mask(mtiles[t], starts[g], ends[g], (block_m, 1), block_m)
        a = jnp.where(mask, a_ref[...], 0).astype(a_ref.dtype)
        d = jnp.where(mask, d_ref[...], 0).astype(d_ref.dtype)
        x, y = (d, a) if transpose else (a, d)
        acc_ref[...] += jax.lax.dot_general(x, y, (((0,), (0,)), ((), ())), preferred_element_type=F32)

    @pl.when(last)
    def _():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def tgmm(a, d, starts, ends, meta, groups, *, transpose, block_m, block_n, block_k, out_dtype):
    """``db[j] = a[rows of j]ᵀ @ d[rows of j]`` as ``[g, K, N]`` (or ``[g, N, K]`` with
    ``transpose``); ``a`` ``[m_pad, K]``, ``d`` ``[m_pad, N]``; tiles ``block_k`` over K,
    ``block_n`` over N, ``block_m`` rows per visit."""
    gids, mtiles, num_active, visits = meta
    _, kd = a.shape
    nd = d.shape[1]
    if transpose:
        out_spec = pl.BlockSpec((None, block_n, block_k), lambda k, n, t, g, mt, s, e, na: (g[t], n, k))
        shape, acc = (groups, nd, kd), (block_n, block_k)
    else:
        out_spec = pl.BlockSpec((None, block_k, block_n), lambda k, n, t, g, mt, s, e, na: (g[t], k, n))
        shape, acc = (groups, kd, nd), (block_k, block_n)
    kernel = functools.partial(_tgmm_kernel, transpose=transpose, block_m=block_m)
    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=5,
            grid=(kd // block_k, nd // block_n, visits),
            in_specs=[
                pl.BlockSpec((block_m, block_k), lambda k, n, t, g, mt, s, e, na: (mt[t], k)),
                pl.BlockSpec((block_m, block_n), lambda k, n, t, g, mt, s, e, na: (mt[t], n)),
            ],
            out_specs=out_spec,
            scratch_shapes=[pltpu.VMEM(acc, F32)],
        ),
        out_shape=jax.ShapeDtypeStruct(shape, out_dtype),
        compiler_params=compiler_params(("parallel", "parallel", "arbitrary")),
        name="ejkernel_tgmm",
    )(gids, mtiles, starts, ends, num_active, a, d)
