"""Host side of the Triton delta rule: the inter-chunk state recurrence and the output as one
``jax.custom_vjp`` over the intra-chunk quantities (:class:`~ejkernel.ops.families.delta_rule_math.Intra`).

Forward: ``delta_fwd_h_kernel`` (states entering each chunk, corrected values, final states),
then ``delta_fwd_o_kernel``. Backward: ``delta_bwd_dh_kernel`` (the reverse state-gradient walk,
``dV'``, ``dh0``), then the per-chunk contractions ``dQg = dO Sᵀ``, ``dW = -dV' Sᵀ``,
``dKg = V' dSᵀ``, ``d exp(γ_last) = Σ_v S ⊙ dS``, ``dAqk = dO V'ᵀ`` as batched matmuls. The
intra-chunk part (and its gradient) is JAX's, upstream of this function.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.families import delta_rule_math as M

from .._launch import launch
from ._kernel import delta_bwd_dh_kernel, delta_fwd_h_kernel, delta_fwd_o_kernel

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Spec:
    """Static shape of one call (hashable: the custom VJP's non-differentiable argument)."""

    rh: int  # R · HV head rows
    hv: int
    nc: int  # chunks per head row
    c: int  # chunk size
    k: int
    v: int
    n_states: int  # initial/final states (R, or the number of sequences)
    varlen: bool
    has_h0: bool
    block_v: int
    num_warps: int
    num_stages: int

    @property
    def bk(self) -> int:
        return max(16, int(2 ** np.ceil(np.log2(self.k))))

    def common(self, dtype: Any) -> dict[str, Any]:
        return dict(K=self.k, V=self.v, C=self.c, BK=self.bk, BV=self.block_v, IEEE=bool(jnp.dtype(dtype) == F32))


def _ids(spec: Spec, flags: Any) -> list[Any]:
    if spec.varlen:
        return list(flags)
    dummy = jnp.zeros((1,), jnp.int32)
    return [dummy, dummy, dummy]


def _forward(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    dt = w.dtype
    grid_v = -(-spec.v // spec.block_v)
    states, vn, final = launch(
        delta_fwd_h_kernel,
        w, u, kg, gl, h0 if spec.has_h0 else jnp.zeros((1,), F32), *_ids(spec, flags), spec.nc, spec.hv,
        out_shape=[
            jax.ShapeDtypeStruct((spec.rh, spec.nc, spec.k, spec.v), dt),
            jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), dt),
            jax.ShapeDtypeStruct((spec.n_states * spec.hv, spec.k, spec.v), F32),
        ],
        grid=(spec.rh, grid_v),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        zeroed_outputs=(2,) if spec.varlen else (),
        name="ejkernel_delta_fwd_h",
        VARLEN=spec.varlen,
        HAS_H0=spec.has_h0,
        **spec.common(dt),
    )  # fmt: skip
    (o,) = launch(
        delta_fwd_o_kernel,
        qg, states, aqk, vn, spec.nc,
        out_shape=[jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), dt)],
        grid=(spec.nc, grid_v, spec.rh),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_delta_fwd_o",
        **spec.common(dt),
    )  # fmt: skip
    return (o, final), (states, vn)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _inter(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    return _forward(spec, w, u, kg, gl, qg, aqk, h0, flags)[0]


def _inter_fwd(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    out, (states, vn) = _forward(spec, w, u, kg, gl, qg, aqk, h0, flags)
    return out, (w, u, kg, gl, qg, aqk, h0, flags, states, vn)


def _inter_bwd(spec: Spec, res, cts):
    w, u, kg, gl, qg, aqk, h0, flags, states, vn = res
    do, dfinal = cts
    dt = w.dtype
    do = do.astype(dt)
    dstates, dvn, dh0 = launch(
        delta_bwd_dh_kernel,
        qg, kg, w, gl, aqk, do, dfinal.astype(F32), *_ids(spec, flags), spec.nc, spec.hv,
        out_shape=[
            jax.ShapeDtypeStruct((spec.rh, spec.nc, spec.k, spec.v), F32),
            jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), F32),
            jax.ShapeDtypeStruct((spec.n_states * spec.hv, spec.k, spec.v), F32),
        ],
        grid=(spec.rh, -(-spec.v // spec.block_v)),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        zeroed_outputs=(2,) if spec.varlen else (),
        name="ejkernel_delta_bwd_dh",
        VARLEN=spec.varlen,
        **spec.common(dt),
    )  # fmt: skip
    prec = jax.lax.Precision.HIGHEST if jnp.dtype(dt) == F32 else None
    shape = (spec.rh, spec.nc, spec.c)
    s, ds = states.astype(F32), dstates
    do5 = do.astype(F32).reshape(*shape, spec.v)
    vn5 = vn.astype(F32).reshape(*shape, spec.v)
    dvn5 = dvn.reshape(*shape, spec.v)
    flat = lambda x: x.reshape(spec.rh, spec.nc * spec.c, x.shape[-1])  # noqa: E731
    dqg = flat(jnp.einsum("rncv,rnkv->rnck", do5, s, precision=prec))
    dw = -flat(jnp.einsum("rncv,rnkv->rnck", dvn5, s, precision=prec))
    dkg = flat(jnp.einsum("rncv,rnkv->rnck", vn5, ds, precision=prec))
    dgl = jnp.sum(s * ds, axis=-1)
    daqk = flat(jnp.einsum("rniv,rnjv->rnij", do5, vn5, precision=prec))
    grads = (dw, dvn, dkg, dgl, dqg, daqk, dh0 if spec.has_h0 else None)
    primals = (w, u, kg, gl, qg, aqk, h0)
    out = tuple(None if g is None else g.astype(p.dtype) for g, p in zip(grads, primals, strict=True))
    return (*out, None)


_inter.defvjp(_inter_fwd, _inter_bwd)


def triton_delta_rule(c: M.Chunks, x: M.Intra, dtype: Any, *, block_v: int, num_warps: int, num_stages: int):
    """The chunked output ``[R, HV, NC, C, V]`` (``dtype``) and final states ``[N, HV, K, V]``
    (float32) from the chunks and their intra-chunk quantities, on the Triton kernels."""
    r, hv, nc, size, k = x.w.shape
    v = x.u.shape[-1]
    n = c.h0.shape[0]
    varlen = c.plan is not None
    spec = Spec(
        rh=r * hv, hv=hv, nc=nc, c=size, k=k, v=v, n_states=n, varlen=varlen, has_h0=True,
        block_v=block_v, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    flat = lambda a: a.reshape(r * hv, nc * size, a.shape[-1]).astype(dtype)  # noqa: E731
    gl = jnp.broadcast_to(x.glast, (r, hv, nc, k)).reshape(r * hv, nc, k).astype(F32)
    aqk = x.aqk.reshape(r * hv, nc * size, size).astype(dtype)
    if varlen:
        p = c.plan
        last = p["last_chunk"]
        is_last = jnp.zeros((nc,), jnp.int32).at[jnp.where(last >= 0, last, nc)].set(1, mode="drop")
        flags = (p["chunk_first"].astype(jnp.int32), p["chunk_seq"].astype(jnp.int32), is_last)
    else:
        flags = ()
    o, final = _inter(
        spec, flat(x.w), flat(x.u), flat(x.kg), gl, flat(x.qg), aqk, c.h0.reshape(n * hv, k, v).astype(F32), flags
    )
    final = final.reshape(n, hv, k, v)
    if varlen:  # an empty sequence's final state is its initial state
        final = jnp.where((c.plan["last_chunk"] >= 0)[:, None, None, None], final, c.h0)
    return o.reshape(r, hv, nc, size, v), final
