"""Host side of the TPU grouped GEMM: tiles, padding, group metadata, the custom VJP.

``dlhs = gmm(dout, rhsᵀ)`` (rhs read transposed through its block spec, no copy) and
``drhs = tgmm(lhs, dout)``; ``existing_out`` and ``rhs_bias`` are applied outside the VJP
(``merge_rows``). Rows outside the local groups, which the kernels leave unwritten, are set to
zero here (megablox's ``_zero_uninitialized_memory``)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.op import group_bounds, merge_rows

from .._tiling import NUM_LANES, cdiv, round_up
from ._kernel import gmm as gmm_call
from ._kernel import tgmm as tgmm_call
from ._plan import group_metadata


def fit(dim: int, want: int) -> int:
    """A block size along a lane-mapped axis: ``dim`` itself when it is not a multiple of 128
    (a block may span the whole axis), else the largest multiple of 128 <= ``want`` dividing it."""
    if dim % NUM_LANES:
        return dim
    b = max(NUM_LANES, min(want, dim) // NUM_LANES * NUM_LANES)
    while dim % b:
        b -= NUM_LANES
    return b


@dataclasses.dataclass(frozen=True)
class Spec:
    m: int
    groups: int
    transpose_rhs: bool
    out_dtype: str
    block_m: int
    block_n: int
    block_k: int

    @property
    def m_pad(self) -> int:
        return round_up(self.m, self.block_m)


def _pad_rows(x: jax.Array, m_pad: int) -> jax.Array:
    return x if x.shape[0] == m_pad else jnp.pad(x, ((0, m_pad - x.shape[0]), (0, 0)))


def _gmm(spec: Spec, a, b, starts, ends, b_kn: bool, out_dtype):
    kd = a.shape[1]
    nd = b.shape[2] if b_kn else b.shape[1]
    meta = group_metadata(starts, ends, cdiv(spec.m_pad, spec.block_m), spec.block_m, visit_empty=False)
    out = gmm_call(
        _pad_rows(a, spec.m_pad), b, starts, ends, meta, b_kn=b_kn, block_m=spec.block_m,
        block_n=fit(nd, spec.block_n), block_k=fit(kd, spec.block_k), out_dtype=out_dtype,
    )[: spec.m]  # fmt: skip
    rows = jnp.arange(spec.m)
    inside = (rows >= starts[0]) & (rows < ends[-1])
    return jnp.where(inside[:, None], out, jnp.zeros((), out.dtype))


def _tgmm(spec: Spec, a, d, starts, ends, dtype):
    meta = group_metadata(starts, ends, cdiv(spec.m_pad, spec.block_m), spec.block_m, visit_empty=True)
    return tgmm_call(
        _pad_rows(a, spec.m_pad), _pad_rows(d, spec.m_pad), starts, ends, meta, spec.groups,
        transpose=spec.transpose_rhs, block_m=spec.block_m, block_n=fit(d.shape[1], spec.block_n),
        block_k=fit(a.shape[1], spec.block_k), out_dtype=dtype,
    )  # fmt: skip


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(spec: Spec, lhs, rhs, starts, ends):
    return _gmm(spec, lhs, rhs, starts, ends, not spec.transpose_rhs, spec.out_dtype)


def _core_fwd(spec: Spec, lhs, rhs, starts, ends):
    return _core(spec, lhs, rhs, starts, ends), (lhs, rhs, starts, ends)


def _core_bwd(spec: Spec, res, dout):
    lhs, rhs, starts, ends = res
    dout = dout.astype(lhs.dtype)
    dlhs = _gmm(spec, dout, rhs, starts, ends, spec.transpose_rhs, lhs.dtype)
    drhs = _tgmm(spec, lhs, dout, starts, ends, rhs.dtype)
    return dlhs, drhs, None, None


_core.defvjp(_core_fwd, _core_bwd)


def grouped_matmul(a: GroupedMatmulArgs, cfg: GroupedMatmulConfig) -> jax.Array:
    assert cfg.block_m and cfg.block_n and cfg.block_k
    spec = Spec(a.m, a.groups, a.transpose_rhs, a.preferred_element_type, cfg.block_m, cfg.block_n, cfg.block_k)
    starts, ends = group_bounds(a)
    return merge_rows(a, _core(spec, a.lhs, a.rhs, starts, ends))
