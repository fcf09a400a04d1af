"""Host side of the Triton delta rule: the inter-chunk state recurrence and the output as one
``jax.custom_vjp`` over the intra-chunk quantities (:class:`~ejkernel.ops.families.delta_rule_math.Intra`).

Forward: ``delta_fwd_h_kernel`` (states entering each chunk, corrected values, final states),
then ``delta_fwd_o_kernel``. Backward: ``delta_bwd_dh_kernel`` (the reverse state-gradient walk,
``dV'``, ``dh0``), then ``delta_bwd_dqkw_kernel``: the per-chunk products ``dQg = dO Sᵀ``,
``dW = -dV' Sᵀ``, ``dKg = V' dSᵀ``, ``d exp(γ_last) = Σ_v S ⊙ dS``, ``dAqk = dO V'ᵀ``. The
intra-chunk part upstream of it: :func:`triton_intra_chunk` (the ``_intra`` kernels, their own
``jax.custom_vjp``) or JAX's ``delta_rule_math.intra_chunk``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.families import delta_rule_math as M

from .._grid import folded
from .._launch import launch, sm_count
from ._intra import SUB as _SUB
from ._intra import (
    delta_intra_bwd_a_kernel,
    delta_intra_bwd_qk_kernel,
    delta_intra_bwd_qk_pc_kernel,
    delta_intra_bwd_wy_kernel,
    delta_intra_bwd_wy_pc_kernel,
    delta_intra_fwd_kernel,
    delta_intra_fwd_pc_kernel,
    delta_intra_gate_pc_kernel,
    delta_intra_inverse_kernel,
    delta_intra_pairs_pc_kernel,
    delta_intra_solve_kernel,
)
from ._kernel import delta_bwd_dh_kernel, delta_bwd_dqkw_kernel, delta_fwd_h_kernel, delta_fwd_o_kernel

F32 = jnp.float32
# The inter backward's per-chunk products (delta_bwd_dqkw_kernel) at 64-token chunks: 64 key
# channels per program (three [C, 64] float32 accumulators and the [C, C] one of dAqk: 240
# registers at 4 warps, sm_90), value steps of up to 64; 128-token chunks take half the key
# channels and twice the warps (dqkw_tiles).
DQKW_BLOCK_K = 64
DQKW_BLOCK_V = 64
DQKW_WARPS = 4
# The output kernel (one program per chunk and value block): value blocks of up to 64 columns,
# so Qg and Aqk are read V/64 times rather than V/block_v.
O_BLOCK_V = 64
O_WARPS = 4
# The reverse state walk when it has more programs than the GPU has SMs (B4 H16: 256): one stage
# (its loop's loads not pipelined) holds its shared memory to what lets two programs share an SM
# (135 KiB at two stages); with fewer programs (B1 H16: 64), each walks a long chain alone and the
# pipelined loads are worth more (one stage everywhere makes the packed varlen batch, 64 programs,
# 10 % slower: benchmarks/results/h100/gated_delta_rule.json, varlen).
DH_STAGES_MANY = 1
# Varlen state walks launched longest sequence first (LPT order; _kernel._walker).
VARLEN_LPT = True


def _pow2(n: int) -> int:
    """The tile side covering ``n``: a power of two, at least 16 (a ``tl.dot`` side)."""
    return max(16, 1 << (n - 1).bit_length())


def dqkw_tiles(c: int, k: int) -> tuple[int, int]:
    """``(key block, warps)`` of ``delta_bwd_dqkw_kernel`` for ``c``-token chunks: the float32
    accumulators grow with ``c`` (and ``dAqk`` with ``c²``), so longer chunks take narrower key
    blocks over more warps."""
    if c <= 64:
        return min(_pow2(k), DQKW_BLOCK_K), DQKW_WARPS
    return min(_pow2(k), max(16, DQKW_BLOCK_K * 64 // c)), 2 * DQKW_WARPS


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
        return _pow2(self.k)

    def common(self, dtype: Any) -> dict[str, Any]:
        return dict(K=self.k, V=self.v, C=self.c, BK=self.bk, BV=self.block_v, IEEE=bool(jnp.dtype(dtype) == F32))


def _ids(spec: Spec, flags: Any) -> list[Any]:
    """The varlen walks' sequence order (longest first) and chunk bounds per sequence (``order``,
    ``c_lo``, ``c_hi``), or placeholders."""
    if spec.varlen:
        return list(flags)
    dummy = jnp.zeros((1,), jnp.int32)
    return [dummy, dummy, dummy]


def _walkers(spec: Spec) -> int:
    """Programs of a state walk along its first grid axis: a head row each, or under varlen a
    (sequence, head) pair each."""
    return spec.n_states * spec.hv if spec.varlen else spec.rh


def _walk_grid(spec: Spec) -> tuple[int, ...]:
    """The state walks' grid: (walkers, value blocks), or under varlen with ``VARLEN_LPT`` one axis
    of both, longest sequences first (``_kernel._walker``)."""
    grid_v = -(-spec.v // spec.block_v)
    if spec.varlen and VARLEN_LPT:
        return (_walkers(spec) * grid_v,)
    return (_walkers(spec), grid_v)


def _forward(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    dt = w.dtype
    states, vn, final = launch(
        delta_fwd_h_kernel,
        w, u, kg, gl, h0 if spec.has_h0 else jnp.zeros((1,), F32), *_ids(spec, flags), spec.nc, spec.hv,
        out_shape=[
            jax.ShapeDtypeStruct((spec.rh, spec.nc, spec.k, spec.v), dt),
            jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), dt),
            jax.ShapeDtypeStruct((spec.n_states * spec.hv, spec.k, spec.v), F32),
        ],
        grid=_walk_grid(spec),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_delta_fwd_h",
        VARLEN=spec.varlen,
        HAS_H0=spec.has_h0,
        LPT=VARLEN_LPT,
        **spec.common(dt),
    )  # fmt: skip
    bv_o = min(O_BLOCK_V, _pow2(spec.v))
    (o,) = launch(
        delta_fwd_o_kernel,
        qg, states, aqk, vn, spec.nc,
        out_shape=[jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), dt)],
        grid=(*folded(spec.nc, spec.rh), -(-spec.v // bv_o)),
        num_warps=O_WARPS,
        num_stages=spec.num_stages,
        name="ejkernel_delta_fwd_o",
        **spec.common(dt) | dict(BV=bv_o),
    )  # fmt: skip
    return (o, final), (states, vn)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _inter(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    return _forward(spec, w, u, kg, gl, qg, aqk, h0, flags)[0]


def _inter_fwd(spec: Spec, w, u, kg, gl, qg, aqk, h0, flags):
    out, (states, vn) = _forward(spec, w, u, kg, gl, qg, aqk, h0, flags)
    return out, (w, kg, gl, qg, aqk, flags, states, vn)


def _inter_bwd(spec: Spec, res, cts):
    w, kg, gl, qg, aqk, flags, states, vn = res
    do, dfinal = cts
    dt = w.dtype
    do = do.astype(dt)
    grid_v = -(-spec.v // spec.block_v)
    # The state gradients and dV' in the inputs' dtype (fla's): the products below take them as
    # tensor-core operands in that dtype anyway.
    dstates, dvn, dh0 = launch(
        delta_bwd_dh_kernel,
        qg, kg, w, gl, aqk, do, dfinal.astype(F32), *_ids(spec, flags), spec.nc, spec.hv,
        out_shape=[
            jax.ShapeDtypeStruct((spec.rh, spec.nc, spec.k, spec.v), dt),
            jax.ShapeDtypeStruct((spec.rh, spec.nc * spec.c, spec.v), dt),
            jax.ShapeDtypeStruct((spec.n_states * spec.hv, spec.k, spec.v), F32),
        ],
        grid=_walk_grid(spec),
        num_warps=spec.num_warps,
        num_stages=DH_STAGES_MANY if _walkers(spec) * grid_v > sm_count() else spec.num_stages,
        name="ejkernel_delta_bwd_dh",
        VARLEN=spec.varlen,
        LPT=VARLEN_LPT,
        **spec.common(dt),
    )  # fmt: skip
    bk, warps = dqkw_tiles(spec.c, spec.k)
    common = spec.common(dt) | dict(BK=bk, BV=min(DQKW_BLOCK_V, _pow2(spec.v)))
    dqg, dw, dkg, dgl, daqk = launch(
        delta_bwd_dqkw_kernel,
        do, vn, dvn, states, dstates, spec.nc,
        out_shape=[
            jax.ShapeDtypeStruct(qg.shape, qg.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype),
            jax.ShapeDtypeStruct(kg.shape, kg.dtype), jax.ShapeDtypeStruct(gl.shape, F32),
            jax.ShapeDtypeStruct(aqk.shape, aqk.dtype),
        ],
        grid=(*folded(spec.nc, spec.rh), -(-spec.k // bk)),
        num_warps=warps,
        num_stages=spec.num_stages,
        name="ejkernel_delta_bwd_dqkw",
        **common,
    )  # fmt: skip
    # dV' is dU's (u is in the kernels' dtype, as w); dh0 is float32 as h0
    return (dw, dvn, dkg, dgl, dqg, daqk, dh0 if spec.has_h0 else None, None)


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
    if varlen:  # each sequence's chunks: first .. last (-1 when empty: no chunk to walk)
        lo, hi = c.plan["first_chunk"].astype(jnp.int32), c.plan["last_chunk"].astype(jnp.int32)
        flags = (jnp.argsort(lo - hi).astype(jnp.int32), lo, hi)  # longest first
    else:
        flags = ()
    o, final = _inter(
        spec, flat(x.w), flat(x.u), flat(x.kg), gl, flat(x.qg), aqk, c.h0.reshape(n * hv, k, v).astype(F32), flags
    )
    final = final.reshape(n, hv, k, v)  # an empty sequence's: its initial state (no chunk walked)
    return o.reshape(r, hv, nc, size, v), final


# -- the intra-chunk WY transform (_intra's kernels) -----------------------------------------------


# The intra-chunk products' operands for bfloat16 inputs ("tf32" or "bf16", fla's choice): half the
# shared memory and registers of TF32, within the conformance tolerances on a GPU
# (tests/ops/delta_rule/test_conformance.py).
INTRA_OPERANDS = "bf16"
# Warps of the intra-chunk kernels (one program per chunk). Four where the kernel fits two programs
# per SM that way (sm_90, 64-token chunks, head dim 128: the inverse 237 registers, the forward 252,
# no spills; the qk backward 255 with 152 B of spills, still faster): the inverse's serial steps
# of two chunks overlap (benchmarks/results/h100/gated_delta_rule.json, B4 T4096 H16 D128 bf16:
# four warps where listed beat eight everywhere, forward and forward+backward). The WY backward
# spills 412 B at four warps.
INTRA_WARPS = {"inverse": 4, "fwd": 4, "bwd_wy": 8, "bwd_a": 8, "bwd_qk": 4}
# A per-channel gate (KDA): key tiles of the pair sums and products (``_intra``'s ``*_pc_kernel``),
# and warps per kernel. The pair sums (a program per 16-row block) take 64-channel tiles at two
# warps: 0.33 ms on the H200 at B4 T4096 H16 D128 bf16, against 0.41 at 32 channels and four warps
# and 0.74 at eight (the first kernel, a program per chunk, took 0.92 ms with the inverse).
PC_BLOCK_K = 32
PAIRS_BLOCK_K = 64
PC_WARPS = {"pairs": 2, "inverse": 4, "fwd": 4, "bwd_wy": 4, "bwd_qk": 4}


def _intra_operands(dtype: Any) -> str:
    """Float32 inputs: exact products; bfloat16: ``INTRA_OPERANDS``; float16: TF32 (bfloat16
    operands would lose float16's extra mantissa bits)."""
    return {"float32": "ieee", "bfloat16": INTRA_OPERANDS}.get(jnp.dtype(dtype).name, "tf32")


@dataclasses.dataclass(frozen=True)
class IntraSpec:
    """Static shape of one intra-chunk call: ``n`` chunks of ``c`` rows (hashable)."""

    n: int
    c: int
    k: int
    v: int
    has_g: bool
    per_channel: bool  # the gate is per key channel (KDA): g [n, c, k]; else [n, c] (or none)
    ops: str  # the products' operands: "ieee", "tf32" or "bf16" (_linear._kernel._fdot)
    out: str  # W, U, Aqk, Qg, Kg's dtype: the inter-chunk kernels' (glast and M stay float32)

    def consts(self, *, v: bool = True) -> dict[str, Any]:
        """The scalar-gate kernels' compile-time arguments (``v``: with the value dim)."""
        c = dict(C=self.c, K=self.k, BK=_pow2(self.k)) | (dict(V=self.v, BV=_pow2(self.v)) if v else {})
        return c | dict(HAS_G=self.has_g, OPS=self.ops)

    @property
    def pc_block_k(self) -> int:
        """Key channels per tile of the per-channel kernels."""
        return min(PC_BLOCK_K, _pow2(self.k))

    @property
    def inverse_prec(self) -> str:
        """The unit-lower inverse's products over the blocks below its diagonal
        (``_intra._unit_lower_inverse``): exact float32 for float32 inputs, else TF32 (finer than
        the bfloat16 ``T`` the next products take; exact float32 and three-pass TF32 spill at
        255 registers, sm_90, 4 and 8 warps)."""
        return "ieee" if self.ops == "ieee" else "tf32"

    @property
    def gate_prec(self) -> str:
        """A per-channel gate's factored products (``_linear._kernel._fdot``): TF32 where the
        other products take bfloat16 operands (the factors ``e^{±(G − G_r)}`` reach ``e^±SPAN``)."""
        return "tf32" if self.ops == "bf16" else self.ops


def _intra_forward(spec: IntraSpec, q, k, v, beta, g):
    """The intra-chunk outputs and what the backward keeps: ``M = (I + A)⁻¹``; under a
    per-channel gate also ``G`` (its cumulative sums) and ``S`` (``A`` before ``diag(β)``)."""
    n, c, kd, vd = spec.n, spec.c, spec.k, spec.v
    dt = jnp.dtype(spec.out)
    if spec.per_channel:
        bk = spec.pc_block_k
        (gs,) = launch(
            delta_intra_gate_pc_kernel, g,
            out_shape=[jax.ShapeDtypeStruct((n, c, kd), F32)],
            grid=(n, -(-kd // bk)), num_warps=4, num_stages=1, name="ejkernel_delta_intra_gate", C=c, K=kd, BK=bk,
        )  # fmt: skip
        se, aqk = launch(
            delta_intra_pairs_pc_kernel, q, k, gs,
            out_shape=[jax.ShapeDtypeStruct((n, c, c), F32), jax.ShapeDtypeStruct((n, c, c), dt)],
            grid=(n * (c // _SUB.value),), num_warps=PC_WARPS["pairs"], num_stages=1, name="ejkernel_delta_intra_pairs",
            C=c, K=kd, BK=min(PAIRS_BLOCK_K, _pow2(kd)), GPREC=spec.gate_prec,
        )  # fmt: skip
        (m,) = launch(
            delta_intra_solve_kernel, se, beta,
            out_shape=[jax.ShapeDtypeStruct((n, c, c), F32)],
            grid=(n,), num_warps=PC_WARPS["inverse"], num_stages=1, name="ejkernel_delta_intra_inverse",
            C=c, IPREC=spec.inverse_prec,
        )  # fmt: skip
        w, u, qg, kg, glast = launch(
            delta_intra_fwd_pc_kernel, q, k, v, beta, gs, m,
            out_shape=[
                jax.ShapeDtypeStruct((n, c, kd), dt), jax.ShapeDtypeStruct((n, c, vd), dt),
                jax.ShapeDtypeStruct((n, c, kd), dt), jax.ShapeDtypeStruct((n, c, kd), dt),
                jax.ShapeDtypeStruct((n, kd), F32),
            ],
            grid=(n,), num_warps=PC_WARPS["fwd"], num_stages=1, name="ejkernel_delta_intra_fwd",
            C=c, K=kd, V=vd, BK=bk, BV=min(_pow2(vd), bk), OPS=spec.ops,
        )  # fmt: skip
        return (w, u, aqk, qg, kg, glast), (gs, m, se)
    (m,) = launch(
        delta_intra_inverse_kernel, k, beta, g,
        out_shape=[jax.ShapeDtypeStruct((n, c, c), F32)],
        grid=(n,), num_warps=INTRA_WARPS["inverse"], num_stages=1, name="ejkernel_delta_intra_inverse",
        IPREC=spec.inverse_prec, **spec.consts(v=False),
    )  # fmt: skip
    outs = launch(
        delta_intra_fwd_kernel, q, k, v, beta, g, m,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), dt), jax.ShapeDtypeStruct((n, c, vd), dt),
            jax.ShapeDtypeStruct((n, c, c), dt), jax.ShapeDtypeStruct((n, c, kd), dt),
            jax.ShapeDtypeStruct((n, c, kd), dt), jax.ShapeDtypeStruct((n,), F32),
        ],
        grid=(n,), num_warps=INTRA_WARPS["fwd"], num_stages=1, name="ejkernel_delta_intra_fwd", **spec.consts(),
    )  # fmt: skip
    return tuple(outs), (g, m, None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _intra(spec: IntraSpec, q, k, v, beta, g):
    return _intra_forward(spec, q, k, v, beta, g)[0]


def _intra_fwd(spec: IntraSpec, q, k, v, beta, g):
    outs, (gs, m, se) = _intra_forward(spec, q, k, v, beta, g)
    return outs, (q, k, v, beta, gs, m, se)


def _intra_bwd_pc(spec: IntraSpec, res, cts):
    """A per-channel gate: through W, U and T (one program per chunk), then through ``S``, Aqk,
    Qg, Kg and glast (one per chunk and key tile)."""
    q, k, v, beta, gs, m, se = res
    dw, du, daqk, dqg, dkg, dglast = cts
    n, c, kd, vd = spec.n, spec.c, spec.k, spec.v
    bk = spec.pc_block_k
    dk_wy, dv, dbeta, dg_wy, dp = launch(
        delta_intra_bwd_wy_pc_kernel, k, v, beta, gs, m, se, dw, du,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), F32), jax.ShapeDtypeStruct((n, c, vd), v.dtype),
            jax.ShapeDtypeStruct((n, c), F32), jax.ShapeDtypeStruct((n, c, kd), F32),
            jax.ShapeDtypeStruct((n, c, c), F32),
        ],
        grid=(n,), num_warps=PC_WARPS["bwd_wy"], num_stages=1, name="ejkernel_delta_intra_bwd_wy",
        C=c, K=kd, V=vd, BK=bk, BV=min(_pow2(vd), bk), OPS=spec.ops,
    )  # fmt: skip
    dq, dk, dg = launch(
        delta_intra_bwd_qk_pc_kernel, q, k, gs, dp, daqk, dqg, dkg, dglast, dk_wy, dg_wy,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), q.dtype), jax.ShapeDtypeStruct((n, c, kd), k.dtype),
            jax.ShapeDtypeStruct((n, c, kd), F32),
        ],
        grid=(n, -(-kd // bk)), num_warps=PC_WARPS["bwd_qk"], num_stages=1, name="ejkernel_delta_intra_bwd_qk",
        C=c, K=kd, BK=bk, GPREC=spec.gate_prec,
    )  # fmt: skip
    return dq, dk, dv, dbeta, dg


def _intra_bwd(spec: IntraSpec, res, cts):
    if spec.per_channel:
        return _intra_bwd_pc(spec, res, cts)
    q, k, v, beta, g, m, _ = res
    dw, du, daqk, dqg, dkg, dglast = cts
    n, c, kd, vd = spec.n, spec.c, spec.k, spec.v
    # in two kernels: through W, U, T (then dA), then through A (one kernel spilled ~800 B)
    dk_t, dv, db_t, dg_t, da = launch(
        delta_intra_bwd_wy_kernel, k, v, beta, g, m, dw, du,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), F32), jax.ShapeDtypeStruct((n, c, vd), v.dtype),
            jax.ShapeDtypeStruct((n, c), F32), jax.ShapeDtypeStruct((n, c), F32),
            jax.ShapeDtypeStruct((n, c, c), F32),
        ],
        grid=(n,), num_warps=INTRA_WARPS["bwd_wy"], num_stages=1, name="ejkernel_delta_intra_bwd_wy",
        **spec.consts(),
    )  # fmt: skip
    dk_wy, dbeta, dg_wy = launch(
        delta_intra_bwd_a_kernel, k, beta, g, da, dk_t, db_t, dg_t,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), F32), jax.ShapeDtypeStruct((n, c), F32),
            jax.ShapeDtypeStruct((n, c), F32),
        ],
        grid=(n,), num_warps=INTRA_WARPS["bwd_a"], num_stages=1, name="ejkernel_delta_intra_bwd_a",
        **spec.consts(v=False),
    )  # fmt: skip
    dq, dk, dg = launch(
        delta_intra_bwd_qk_kernel, q, k, g, daqk, dqg, dkg, dglast, dk_wy, dg_wy,
        out_shape=[
            jax.ShapeDtypeStruct((n, c, kd), q.dtype), jax.ShapeDtypeStruct((n, c, kd), k.dtype),
            jax.ShapeDtypeStruct(g.shape, F32),
        ],
        grid=(n,), num_warps=INTRA_WARPS["bwd_qk"], num_stages=1, name="ejkernel_delta_intra_bwd_qk",
        **spec.consts(v=False),
    )  # fmt: skip
    if not spec.has_g:  # g is a placeholder the kernel never writes the gradient of
        dg = jnp.zeros_like(g)
    return dq, dk, dv, dbeta, dg


_intra.defvjp(_intra_fwd, _intra_bwd)


def intra_chunk_supported(size: int) -> bool:
    """Whether :func:`triton_intra_chunk` takes chunks of ``size`` rows: a power of two from 16
    to 256 (``_intra._unit_lower_inverse``'s doublings; any gate: none, scalar, or per key channel)."""
    return 16 <= size <= 256 and size & (size - 1) == 0


def triton_intra_chunk(c: M.Chunks, dtype: Any) -> M.Intra:
    """:func:`ejkernel.ops.families.delta_rule_math.intra_chunk` on the Triton kernels
    (:func:`intra_chunk_supported` chunks), differentiable in q, k, v, β and the gate; W, U, Aqk,
    Qg and Kg in ``dtype`` (what :func:`triton_delta_rule` takes them as: no conversion pass)."""
    r, hv, nc, size, kd = c.k.shape
    vd = c.v.shape[-1]
    n = r * hv * nc
    has_g = c.g is not None
    per_channel = has_g and c.g.shape[-1] != 1
    spec = IntraSpec(
        n=n, c=size, k=kd, v=vd, has_g=has_g, per_channel=per_channel, ops=_intra_operands(dtype),
        out=jnp.dtype(dtype).name,
    )  # fmt: skip
    if per_channel:
        g = c.g.reshape(n, size, kd)
    else:
        g = c.g[..., 0].reshape(n, size) if has_g else jnp.zeros((1,), F32)
    w, u, aqk, qg, kg, glast = _intra(
        spec, c.q.reshape(n, size, kd), c.k.reshape(n, size, kd), c.v.reshape(n, size, vd),
        c.beta.reshape(n, size), g,
    )  # fmt: skip
    lead = (r, hv, nc, size)
    return M.Intra(
        w.reshape(*lead, kd), u.reshape(*lead, vd), aqk.reshape(*lead, size), qg.reshape(*lead, kd),
        kg.reshape(*lead, kd), glast.reshape(r, hv, nc, kd if per_channel else 1),
    )  # fmt: skip
