"""Host side of the CUDA grouped GEMM: the XLA FFI calls of ``ejkernel_cuda_gmm``
(csrc/grouped_matmul/ffi.cc) and the custom VJP.

``dlhs = gmm(dout, rhsᵀ)`` reads ``rhs`` in its own layout (the FFI's ``layout`` picks the
transposed operand, no copy) and ``drhs = tgmm(lhs, dout)`` (``tgmm(dout, lhs)`` for a
``[g, n, k]`` rhs, whose gradient is ``[g, n, k]`` too). ``existing_out`` and ``rhs_bias`` are
applied outside the VJP (``merge_rows``), so JAX differentiates them.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.grouped_matmul import GroupedMatmulArgs
from ejkernel.ops.grouped_matmul.op import group_bounds, merge_rows

from .. import _ffi

__all__ = ["TARGET", "grouped_matmul"]

TARGET = "ejkernel_cuda_gmm"
ROW_ROW, ROW_COL, COL_ROW = 0, 1, 2  # gmm.h's Layout


def ffi_gmm(
    a: jax.Array, b: jax.Array, starts: jax.Array, ends: jax.Array, layout: int, out_dtype: Any, config: int
) -> jax.Array:
    """One FFI call (layouts as in ffi.cc): ``[m, n]`` for ``ROW_ROW`` / ``ROW_COL``, ``[g, k, n]``
    for ``COL_ROW``. ``out_dtype``: the inputs' dtype, or float32 for the first two."""
    _ffi.ensure_registered()
    ext, _ = _ffi._load()
    m, k = a.shape
    if layout == COL_ROW:
        shape = (starts.shape[0], k, b.shape[1])
    else:
        shape = (m, b.shape[2] if layout == ROW_ROW else b.shape[1])
    sms = ext.sm_count()  # type: ignore[union-attr]
    ws = ext.gmm_workspace_bytes(  # type: ignore[union-attr]
        layout=layout, float16=jnp.dtype(a.dtype) == jnp.float16, out_f32=jnp.dtype(out_dtype) == jnp.float32,
        groups=int(starts.shape[0]), config=config, m=m, k=k, n=shape[-1], sm_count=sms,
    )  # fmt: skip
    call = jax.ffi.ffi_call(
        TARGET,
        (jax.ShapeDtypeStruct(shape, out_dtype), jax.ShapeDtypeStruct((ws,), jnp.uint8)),
        vmap_method="sequential",
    )
    # The handler runs with the SM count the workspace was sized for.
    out, _ = call(a, b, starts, ends, layout=np.int32(layout), config=np.int32(config), sm_count=np.int32(sms))
    return out


def _forward(a: jax.Array, b: jax.Array, starts, ends, layout: int, out_dtype: Any, config: int) -> jax.Array:
    """The forward-layout product in any output dtype: the inputs' dtype or float32 come from the
    kernel's epilogue; another dtype is the float32 result rounded once (what an epilogue in
    that dtype would write)."""
    out_dtype = jnp.dtype(out_dtype)
    if out_dtype in (jnp.dtype(a.dtype), jnp.dtype(jnp.float32)):
        return ffi_gmm(a, b, starts, ends, layout, out_dtype, config)
    return ffi_gmm(a, b, starts, ends, layout, jnp.float32, config).astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _core(transpose_rhs: bool, out_dtype: str, config: int, lhs, rhs, starts, ends) -> jax.Array:
    return _forward(lhs, rhs, starts, ends, ROW_COL if transpose_rhs else ROW_ROW, out_dtype, config)


def _core_fwd(transpose_rhs, out_dtype, config, lhs, rhs, starts, ends):
    return _core(transpose_rhs, out_dtype, config, lhs, rhs, starts, ends), (lhs, rhs, starts, ends)


def _core_bwd(transpose_rhs, out_dtype, config, res, dout):
    lhs, rhs, starts, ends = res
    dout = dout.astype(lhs.dtype)  # the tensor-core products take one input dtype
    # dlhs[rows of j] = dout[rows] @ rhs[j]ᵀ: rhs [g, k, n] is the [N=k, K=n] operand (ROW_COL).
    dlhs = ffi_gmm(dout, rhs, starts, ends, ROW_ROW if transpose_rhs else ROW_COL, lhs.dtype, config)
    if transpose_rhs:  # drhs[j] = dout[rows]ᵀ @ lhs[rows], [g, n, k]
        drhs = ffi_gmm(dout, lhs, starts, ends, COL_ROW, rhs.dtype, config)
    else:
        drhs = ffi_gmm(lhs, dout, starts, ends, COL_ROW, rhs.dtype, config)
    return dlhs, drhs, None, None


_core.defvjp(_core_fwd, _core_bwd)


def grouped_matmul(a: GroupedMatmulArgs, config: int) -> jax.Array:
    starts, ends = group_bounds(a)
    out = _core(a.transpose_rhs, a.preferred_element_type, config, a.lhs, a.rhs, starts, ends)
    return merge_rows(a, out)
