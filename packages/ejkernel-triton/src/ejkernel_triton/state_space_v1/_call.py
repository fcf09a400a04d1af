"""Host side of the Triton ``state_space_v1``: launches and the custom VJP (gating stays in JAX,
outside the kernels, differentiated by JAX)."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

from .._launch import launch
from . import heuristics as H
from ._kernel import ssm1_bwd_carry_kernel, ssm1_bwd_kernel, ssm1_bwd_sum_kernel, ssm1_fwd_kernel

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Spec:
    batch: int
    seqlen: int
    dim: int
    dstate: int
    block_t: int
    block_d: int
    block_n: int
    num_warps: int
    bwd_warps: int
    num_stages: int
    # The backward's channel block (its tiles are [block_t, bwd_block_d, block_n]; block_t must be
    # the forward's, whose chunk-start states it reads); None: block_d.
    bwd_block_d: int | None = None
    # The backward's programs per (chunk, batch element): channel groups, each walking its channel
    # blocks in turn; None: ``heuristics.bwd_groups``.
    bwd_groups: int | None = None

    @property
    def num_chunks(self) -> int:
        return -(-self.seqlen // self.block_t)

    @property
    def d_blocks(self) -> int:
        return -(-self.dim // self.block_d)

    @property
    def bwd_d(self) -> int:
        return self.bwd_block_d or self.block_d

    @property
    def bwd_d_blocks(self) -> int:
        return -(-self.dim // self.bwd_d)

    def bwd_group(self) -> tuple[int, int]:
        """The backward's channels per group and groups. A group is a whole number of channel
        blocks, rounded up to a multiple of ``heuristics.GROUP_ALIGN`` channels, or below that to a
        power of two of blocks, since groups starting mid-sector are ~14 % slower on an H100
        (456-channel groups against 512 at d_inner 4096)."""
        want = self.bwd_groups or H.bwd_groups(self.bwd_d_blocks, self.num_chunks * self.batch)
        blocks = -(-self.bwd_d_blocks // max(1, min(want, self.bwd_d_blocks)))
        align = math.lcm(self.bwd_d, H.GROUP_ALIGN)
        if blocks * self.bwd_d >= align:
            per = -(-blocks * self.bwd_d // align) * align
        else:
            per = H.pow2_at_least(blocks) * self.bwd_d
        per = min(per, self.bwd_d_blocks * self.bwd_d)
        return per, -(-self.dim // per)

    def consts(self, backward: bool = False) -> dict[str, int]:
        # The widths are compile-time constants: jax-triton gives integer arguments no
        # divisibility hint, and as runtime strides they made every row load and store a 2- or
        # 4-byte access (sm_90 PTX of the forward: 24 two-byte loads per step, 244 registers).
        return dict(
            DIM=self.dim,
            DSTATE=self.dstate,
            BLOCK_T=self.block_t,
            BLOCK_D=self.bwd_d if backward else self.block_d,
            BLOCK_N=self.block_n,
        )


def _dummy() -> jax.Array:
    return jnp.zeros((1,), F32)


def forward(spec: Spec, x, A, B, C, D, dt, h0, *, store_states: bool) -> tuple[jax.Array, ...]:
    b, s, d, n = spec.batch, spec.seqlen, spec.dim, spec.dstate
    states_shape = (b, spec.num_chunks, d, n) if store_states else (1,)
    y, hT, states = launch(
        ssm1_fwd_kernel,
        x, dt, A, B, C, D, h0 if h0 is not None else _dummy(), s,
        out_shape=[
            jax.ShapeDtypeStruct((b, s, d), x.dtype),
            jax.ShapeDtypeStruct((b, d, n), F32),
            jax.ShapeDtypeStruct(states_shape, F32),
        ],
        grid=(spec.d_blocks, b),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_ssm1_fwd",
        HAS_H0=h0 is not None,
        STORE_STATES=store_states,
        **spec.consts(),
    )  # fmt: skip
    return (y, hT, states) if store_states else (y, hT)


def chunk_sums(spec: Spec, A, C, dt, dy) -> tuple[jax.Array, jax.Array]:
    """Every chunk's own adjoint at its start ``L [b, num_chunks, d, n]`` and ``Σ dt [b, num_chunks, d]``."""
    b, s, d, n = spec.batch, spec.seqlen, spec.dim, spec.dstate
    nc = spec.num_chunks
    return tuple(
        launch(
            ssm1_bwd_sum_kernel,
            dt, A, C, dy, s,
            out_shape=[jax.ShapeDtypeStruct((b, nc, d, n), F32), jax.ShapeDtypeStruct((b, nc, d), F32)],
            grid=(nc, spec.d_blocks, b),
            num_warps=spec.num_warps,
            num_stages=spec.num_stages,
            name="ejkernel_ssm1_bwd_sum",
            **spec.consts(),
        )
    )  # fmt: skip


def carries(spec: Spec, A, C, dt, dy, dhT) -> tuple[jax.Array, jax.Array]:
    """The adjoint's carry at every chunk's end ``[b, num_chunks, d, n]`` and the initial state's
    gradient ``[b, d, n]`` (float32): the chunk sums, then their recurrence over the chunks."""
    b, d, n = spec.batch, spec.dim, spec.dstate
    nc = spec.num_chunks
    L, sdt = chunk_sums(spec, A, C, dt, dy)
    block_c = H.carry_block_c(nc)
    return tuple(
        launch(
            ssm1_bwd_carry_kernel,
            A, L, sdt, dhT.astype(F32), nc,
            out_shape=[jax.ShapeDtypeStruct((b, nc, d, n), F32), jax.ShapeDtypeStruct((b, d, n), F32)],
            grid=(-(-d // H.CARRY_BLOCK_D), b),
            num_warps=H.warps_for(block_c * H.CARRY_BLOCK_D * spec.block_n, H.CARRY_ELEMS_PER_WARP),
            num_stages=spec.num_stages,
            name="ejkernel_ssm1_bwd_carry",
            DIM=d,
            DSTATE=n,
            BLOCK_C=block_c,
            BLOCK_D=H.CARRY_BLOCK_D,
            BLOCK_N=spec.block_n,
        )
    )  # fmt: skip


def backward(spec: Spec, x, A, B, C, D, dt, states, dy, dhT) -> tuple[jax.Array, ...]:
    """``(dx, ddt, dB, dC, dA, dD, dh0)``; ``dB``, ``dC`` ``[b, groups, s, n]`` (one share per
    channel group), ``dA``, ``dD`` summed over the chunks (``[b, d, n]``, ``[b, d]``)."""
    b, s, d, n = spec.batch, spec.seqlen, spec.dim, spec.dstate
    nc = spec.num_chunks
    G, dh0 = carries(spec, A, C, dt, dy, dhT)
    group_d, groups = spec.bwd_group()
    part = jax.ShapeDtypeStruct((b, groups, s, n), F32)
    dx, ddt, dB, dC, dA, dD = launch(
        ssm1_bwd_kernel,
        x, dt, A, B, C, D, states, G, dy, s, group_d,
        out_shape=[
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(dt.shape, dt.dtype),
            part,
            part,
            jax.ShapeDtypeStruct((b, nc, d, n), F32),
            jax.ShapeDtypeStruct((b, nc, d), F32),
        ],
        grid=(nc, groups, b),
        num_warps=spec.bwd_warps,
        num_stages=spec.num_stages,
        name="ejkernel_ssm1_bwd",
        **spec.consts(backward=True),
    )  # fmt: skip
    return dx, ddt, dB, dC, dA.sum(axis=1), dD.sum(axis=1), dh0


# -- batching and differentiation --------------------------------------------------------------
#
# The launches are wrapped in jax.custom_batching.custom_vmap functions of a dict of the arrays
# present, whose results all have the batch first: a vmapped axis folds into the batch when A and
# D (shared by the batch) are not mapped, else the rule maps sequentially (lax.map). The custom
# VJP sits outside; its reductions over the batch are plain JAX, batched by JAX.

_SHARED = frozenset({"A", "D"})


def _vmap_rule(spec: Spec, make, axis_size: int, in_batched, arrays: dict[str, Any]):
    batched = in_batched[0]
    if any(batched[n] for n in _SHARED):
        mapped = {n: x if batched[n] else jnp.broadcast_to(x, (axis_size, *x.shape)) for n, x in arrays.items()}
        outs = jax.lax.map(make(spec), mapped)
        return outs, jax.tree.map(lambda _: True, outs)
    folded = {}
    for n, x in arrays.items():
        if n in _SHARED:
            folded[n] = x
            continue
        if not batched[n]:
            x = jnp.broadcast_to(x, (axis_size, *x.shape))
        folded[n] = x.reshape(axis_size * x.shape[1], *x.shape[2:])
    outs = make(dataclasses.replace(spec, batch=spec.batch * axis_size))(folded)
    outs = jax.tree.map(lambda o: o.reshape(axis_size, o.shape[0] // axis_size, *o.shape[1:]), outs)
    return outs, jax.tree.map(lambda _: True, outs)


@functools.lru_cache(maxsize=256)
def _forward_fn(spec: Spec, store_states: bool):
    @jax.custom_batching.custom_vmap
    def fwd(a: dict[str, Any]):
        return forward(spec, a["x"], a["A"], a["B"], a["C"], a["D"], a["dt"], a.get("h0"), store_states=store_states)

    fwd.def_vmap(functools.partial(_vmap_rule, spec, lambda s: _forward_fn(s, store_states)))
    return fwd


@functools.lru_cache(maxsize=256)
def _backward_fn(spec: Spec):
    @jax.custom_batching.custom_vmap
    def bwd(a: dict[str, Any]):
        return backward(spec, a["x"], a["A"], a["B"], a["C"], a["D"], a["dt"], a["states"], a["dy"], a["dhT"])

    bwd.def_vmap(functools.partial(_vmap_rule, spec, _backward_fn))
    return bwd


def _arrays(**arrays: Any) -> dict[str, Any]:
    return {n: x for n, x in arrays.items() if x is not None}


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _scan(spec: Spec, x, A, B, C, D, dt, h0):
    return _forward_fn(spec, False)(_arrays(x=x, A=A, B=B, C=C, D=D, dt=dt, h0=h0))


def _scan_fwd(spec: Spec, x, A, B, C, D, dt, h0):
    y, hT, states = _forward_fn(spec, True)(_arrays(x=x, A=A, B=B, C=C, D=D, dt=dt, h0=h0))
    return (y, hT), (x, A, B, C, D, dt, h0, states)


def _scan_bwd(spec: Spec, res, cts):
    x, A, B, C, D, dt, h0, states = res
    dy, dhT = cts
    dx, ddt, dB, dC, dA, dD, dh0 = _backward_fn(spec)(
        dict(x=x, A=A, B=B, C=C, D=D, dt=dt, states=states, dy=dy, dhT=dhT.astype(F32))
    )
    return (
        dx,
        dA.sum(axis=0).astype(A.dtype),
        dB.sum(axis=1).astype(B.dtype),
        dC.sum(axis=1).astype(C.dtype),
        dD.sum(axis=0).astype(D.dtype),
        ddt,
        None if h0 is None else dh0.astype(h0.dtype),
    )


_scan.defvjp(_scan_fwd, _scan_bwd)


def make_spec(args: StateSpaceV1Args, cfg: StateSpaceV1Config) -> Spec:
    assert cfg.block_d and cfg.block_e and cfg.num_warps and cfg.num_stages
    n = args.state
    block_n = H.state_block(n)
    bwd_d = H.bwd_block_d(cfg.block_d)
    return Spec(
        batch=args.batch,
        seqlen=args.seq,
        dim=args.intermediate,
        dstate=n,
        block_t=cfg.block_e,
        block_d=cfg.block_d,
        block_n=block_n,
        num_warps=cfg.num_warps,
        bwd_warps=H.warps_for(cfg.block_e * bwd_d * block_n, H.BWD_ELEMS_PER_WARP),
        num_stages=cfg.num_stages,
        bwd_block_d=bwd_d,
    )


def state_space_v1(args: StateSpaceV1Args, cfg: StateSpaceV1Config) -> Any:
    spec = make_spec(args, cfg)
    y, hT = _scan(spec, args.hidden_states, args.A, args.B, args.C, args.D, args.dt, args.initial_state)
    return args.finish(y, hT)
