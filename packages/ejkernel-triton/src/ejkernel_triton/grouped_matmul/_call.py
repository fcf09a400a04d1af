"""Host side of the Triton grouped GEMM: the launch spec, the launches, the custom VJP.

``grouped_matmul(args, cfg)`` is differentiable in ``lhs`` and ``rhs`` through a
``jax.custom_vjp``: ``dlhs = gmm(dout, rhsᵀ)`` (the forward kernel with ``rhs`` read transposed,
no copy) and ``drhs = tgmm(lhs, dout)``; ``existing_out`` and ``rhs_bias`` are applied outside it
(``merge_rows``), so JAX differentiates them.

A per-group, per-column ``rhs_scale`` (``s[j, n]``) multiplies the forward's float32 tiles
before they are stored. Its backward needs no kernel of its own: with ``T = tgmm(lhs, dout)``
(unscaled, float32), ``drhs = T * s``, ``dscale[j, n] = sum_k T[j, k, n] rhs[j, k, n]`` and
``dlhs = gmm(dout * s[row's group], rhsᵀ)``, the scaled ``dout`` rounded once to the kernel's
input dtype.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops import device_for_arrays
from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.op import merge_rows, row_groups_of

from .. import _launch
from .._launch import launch
from . import heuristics as H
from ._kernel import bounds_kernel, gmm_kernel, tgmm_kernel

# float32 operands: DEFAULT is three-pass TF32 (about float32's accuracy, as the flash kernels
# use); one-pass TF32 (10-bit mantissa) misses the float32 reference by several times its own error.
_DOT_PRECISION = {"default": "tf32x3", "high": "tf32x3", "highest": "ieee"}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def max_tiles(m: int, groups: int, block_m: int) -> int:
    """An upper bound of the tile schedule's length (row tiles): ``sum ceil(s_i / B) <= m / B +
    segments``, with ``groups + 2`` segments (the local groups and the rows before and after them)."""
    return -(-m // block_m) + groups + 2


def segment_pad(groups: int) -> int:
    """The kernels' segment vector length: a power of two holding ``groups + 2`` segments."""
    return max(16, 1 << (groups + 1).bit_length())


def group_inputs(a: GroupedMatmulArgs) -> tuple[jax.Array, jax.Array]:
    """What the kernels read of the groups: ``group_sizes`` (int32, all of them) and
    ``group_offset`` as a ``[1]`` array. ``gmm_kernel``'s programs build the tile schedule from
    them; ``tgmm`` reads bounds that ``row_bounds`` builds from them."""
    return a.group_sizes.astype(jnp.int32), jnp.reshape(a.group_offset, (1,)).astype(jnp.int32)


def row_bounds(m: int, groups: int, sizes: jax.Array, offset: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``starts[g]``, ``ends[g]``: the local groups' rows, clamped into ``[0, m]``, written by one
    launch of one-warp programs (``_kernel.bounds_kernel``), cheaper than XLA's cumsum and clamp."""
    shape = jax.ShapeDtypeStruct((groups,), jnp.int32)
    starts, ends = launch(
        bounds_kernel,
        sizes,
        offset,
        out_shape=[shape, shape],
        grid=(groups,),
        num_warps=1,
        num_stages=1,
        name="ejkernel_gmm_bounds",
        M=m,
        G=groups,
        S_PAD=segment_pad(groups),
    )
    return starts, ends


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one grouped GEMM call compiles for (hashable: the custom VJP's static argument)."""

    m: int
    k: int
    n: int
    groups: int
    transpose_rhs: bool
    out_dtype: str
    precision: str
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    split_k: int
    num_programs: int  # persistent gmm grid (0: one program per tile)
    tail_m: int = 0  # rows of a segment's last tile when that is enough (0: whole tiles only)
    tgmm_stages: int | None = None  # tgmm's pipeline depth (None: num_stages)

    def dot_precision(self, dtype: Any) -> str:
        return _DOT_PRECISION[self.precision] if jnp.dtype(dtype) == jnp.float32 else "tf32"


def persistent_programs(cfg: GroupedMatmulConfig, itemsize: int, out_itemsize: int) -> int:
    """Programs of a persistent grid: as many as fit on the GPU at once (by the declared shared
    memory of the forward and ``dlhs`` programs), or a few in the interpreter (so that each
    program strides over several tiles)."""
    if _launch._INTERPRET:
        return 3
    # Hopper's limits where the default device is no GPU (tracing for sm_90 under compile_only).
    cc = device_for_arrays(()).compute_capability or (9, 0)
    return _launch.sm_count() * H.programs_per_sm(cfg, itemsize, out_itemsize, cc)


def tail_rows(block_m: int) -> int:
    """Half-tiles at the group ends for tiles of 128+ rows (64-row products are still whole
    warpgroup MMAs on Hopper); smaller tiles keep whole tiles."""
    return block_m // 2 if block_m >= 128 else 0


def make_spec(a: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> Spec:
    assert cfg.block_m and cfg.block_n and cfg.block_k and cfg.num_warps and cfg.num_stages and cfg.split_k
    sizes = jnp.dtype(a.dtype).itemsize, jnp.dtype(a.preferred_element_type).itemsize
    programs = persistent_programs(cfg, *sizes) if cfg.persistent else 0
    return Spec(
        m=a.m, k=a.k, n=a.n, groups=a.groups, transpose_rhs=a.transpose_rhs, out_dtype=a.preferred_element_type,
        precision=a.precision, block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, split_k=cfg.split_k, num_programs=programs,
        tail_m=0 if programs else tail_rows(cfg.block_m), tgmm_stages=cfg.tgmm_num_stages,
    )  # fmt: skip


def gmm(
    spec: Spec,
    a: jax.Array,
    b: jax.Array,
    sizes: jax.Array,
    offset: jax.Array,
    b_kn: bool,
    out_dtype: Any,
    scale: jax.Array | None = None,
) -> jax.Array:
    """``out[rows of j] = a[rows] @ B[j]`` with ``B[j] = b[j]`` read as ``[K, N]`` (``b_kn``) or
    as the transpose of ``b[j]`` (``b`` is ``[g, N, K]``), times ``scale[j]`` (``[g, N]``
    float32) when given; zeros outside the groups. Local group ``j`` is group ``offset[0] + j``
    of ``sizes`` (``group_inputs``)."""
    m, kd = a.shape
    nd = b.shape[2] if b_kn else b.shape[1]
    s_g, s_1, s_2 = b.shape[1] * b.shape[2], b.shape[2], 1
    stride_bk, stride_bn = (s_1, s_2) if b_kn else (s_2, s_1)
    tiles = max_tiles(m, spec.groups, spec.block_m) * _cdiv(nd, spec.block_n)
    (out,) = launch(
        gmm_kernel,
        a, b, sizes, offset, jnp.zeros((1,), jnp.float32) if scale is None else scale,
        out_shape=[jax.ShapeDtypeStruct((m, nd), out_dtype)],
        grid=(min(spec.num_programs, tiles) if spec.num_programs else tiles,),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_gmm",
        M=m, N=nd, K=kd, stride_bg=s_g, stride_bk=stride_bk, stride_bn=stride_bn,
        G=spec.groups,
        S_PAD=segment_pad(spec.groups),
        BLOCK_M=spec.block_m,
        BLOCK_N=spec.block_n,
        BLOCK_K=spec.block_k,
        TAIL_M=spec.tail_m,
        EVEN_K=kd % spec.block_k == 0,
        DOT_PRECISION=spec.dot_precision(a.dtype),
        NUM_PROGRAMS=min(spec.num_programs, tiles),
        HAS_SCALE=scale is not None,
    )  # fmt: skip
    return out


def tgmm(spec: Spec, lhs: jax.Array, dout: jax.Array, sizes: jax.Array, offset: jax.Array, dtype: Any) -> jax.Array:
    """``drhs[j] = lhs[rows of j]ᵀ @ dout[rows of j]`` in rhs's layout (``[g, k, n]`` or ``[g, n, k]``)."""
    starts, ends = row_bounds(lhs.shape[0], spec.groups, sizes, offset)
    g, k, n = spec.groups, spec.k, spec.n
    # Output tile [block_m over k, block_n over n]; block_k rows per step.
    tiles_k, tiles_n = _cdiv(k, spec.block_m), _cdiv(n, spec.block_n)
    split = spec.split_k
    if split > 1:
        shape, out_dtype = (split, g, k, n), jnp.float32
        s_g, s_k, s_n, s_s = k * n, n, 1, g * k * n
    elif spec.transpose_rhs:
        shape, out_dtype = (g, n, k), dtype
        s_g, s_k, s_n, s_s = k * n, 1, k, 0
    else:
        shape, out_dtype = (g, k, n), dtype
        s_g, s_k, s_n, s_s = k * n, n, 1, 0
    (out,) = launch(
        tgmm_kernel,
        lhs, dout, starts, ends,
        out_shape=[jax.ShapeDtypeStruct(shape, out_dtype)],
        grid=(g * tiles_k * tiles_n, split),
        num_warps=spec.num_warps,
        num_stages=spec.tgmm_stages or spec.num_stages,
        name="ejkernel_tgmm",
        N=n, K=k, stride_og=s_g, stride_ok=s_k, stride_on=s_n, stride_os=s_s,
        SPLIT=split,
        BLOCK_M=spec.block_m,
        BLOCK_N=spec.block_n,
        BLOCK_K=spec.block_k,
        DOT_PRECISION=spec.dot_precision(lhs.dtype),
    )  # fmt: skip
    if split > 1:
        out = out.sum(axis=0)
        out = (jnp.swapaxes(out, 1, 2) if spec.transpose_rhs else out).astype(dtype)
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(spec: Spec, lhs, rhs, sizes, offset, scale) -> jax.Array:
    s = None if scale is None else scale.astype(jnp.float32)
    return gmm(spec, lhs, rhs, sizes, offset, not spec.transpose_rhs, spec.out_dtype, s)


def _core_fwd(spec: Spec, lhs, rhs, sizes, offset, scale):
    return _core(spec, lhs, rhs, sizes, offset, scale), (lhs, rhs, sizes, offset, scale)


def _core_bwd(spec: Spec, res, dout):
    lhs, rhs, sizes, offset, scale = res
    if scale is None:
        dout = dout.astype(lhs.dtype)  # the tensor-core products take one input dtype
        # dlhs[rows of j] = dout[rows] @ rhs[j]ᵀ: rhs read as [n, k], transposed from its layout.
        dlhs = gmm(spec, dout, rhs, sizes, offset, spec.transpose_rhs, lhs.dtype)
        drhs = tgmm(spec, lhs, dout, sizes, offset, rhs.dtype)
        return dlhs, drhs, None, None, None
    s = scale.astype(jnp.float32)  # [g, n]
    gid = jnp.maximum(row_groups_of(sizes, offset, spec.groups, spec.m), 0)  # other rows: zero products
    dout_s = (dout.astype(jnp.float32) * s[gid]).astype(lhs.dtype)
    dlhs = gmm(spec, dout_s, rhs, sizes, offset, spec.transpose_rhs, lhs.dtype)
    t = tgmm(spec, lhs, dout.astype(lhs.dtype), sizes, offset, jnp.float32)  # rhs's layout
    s_like = s[:, :, None] if spec.transpose_rhs else s[:, None, :]
    drhs = (t * s_like).astype(rhs.dtype)
    dscale = jnp.sum(t * rhs.astype(jnp.float32), axis=2 if spec.transpose_rhs else 1)
    return dlhs, drhs, None, None, dscale.astype(scale.dtype)


_core.defvjp(_core_fwd, _core_bwd)


def grouped_matmul(a: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
    # One scale per group and column ([g, 1, 1, n], the declared feature) as [g, n].
    scale = None if a.rhs_scale is None else a.rhs_scale[:, 0, 0, :]
    return merge_rows(a, _core(make_spec(a, cfg), a.lhs, a.rhs, *group_inputs(a), scale))
