"""Host side of the Triton ``mean_pooling``: the plan, launches and the custom VJP."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig
from ejkernel.ops.mean_pooling.plan import Plan, make_plan, row_counts, uniform_cu_seqlens

from .._launch import launch
from ._kernel import mean_pool_bwd_kernel, mean_pool_combine_kernel, mean_pool_fwd_kernel

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernels are compiled for (hashable: the custom VJP's static argument)."""

    num_seqs: int
    tokens: int
    hidden: int
    block_t: int
    block_d: int
    num_warps: int
    num_stages: int
    has_mask: bool
    dtype: str


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _mask_arg(mask: jax.Array | None) -> jax.Array:
    return mask.astype(jnp.int32) if mask is not None else jnp.zeros((1,), jnp.int32)


def _forward(spec: Spec, x: jax.Array, mask: jax.Array | None, plan: Plan, counts: jax.Array) -> jax.Array:
    items = plan.item_seq.shape[0]
    (part,) = launch(
        mean_pool_fwd_kernel,
        x, plan.item_seq, plan.item_lo, plan.item_hi, _mask_arg(mask), spec.num_seqs,
        out_shape=[jax.ShapeDtypeStruct((items, spec.hidden), F32)],
        grid=(items * _cdiv(spec.hidden, spec.block_d),),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_mean_pool_fwd",
        HIDDEN=spec.hidden,
        BLOCK_T=spec.block_t,
        BLOCK_D=spec.block_d,
        HAS_MASK=spec.has_mask,
    )  # fmt: skip
    # Second pass: each sequence's items are consecutive, added in order (the tail's and unused
    # items, of sequence num_seqs, are never read), divided by the sequence's rows in the kernel.
    (out,) = launch(
        mean_pool_combine_kernel,
        part, plan.seq_first, plan.seq_items, counts.astype(jnp.int32),
        out_shape=[jax.ShapeDtypeStruct((spec.num_seqs, spec.hidden), x.dtype)],
        grid=(spec.num_seqs, _cdiv(spec.hidden, spec.block_d)),
        num_warps=spec.num_warps,
        num_stages=1,
        name="ejkernel_mean_pool_combine",
        HIDDEN=spec.hidden,
        BLOCK_D=spec.block_d,
    )  # fmt: skip
    return out


def _backward(spec: Spec, dout: jax.Array, mask: jax.Array | None, plan: Plan, counts: jax.Array, dtype) -> jax.Array:
    c = counts.astype(F32)[:, None]
    g = jnp.where(c > 0, dout.astype(F32) / jnp.maximum(c, 1.0), 0.0)
    items = plan.item_seq.shape[0]
    (dx,) = launch(
        mean_pool_bwd_kernel,
        g, plan.item_seq, plan.item_lo, plan.item_hi, _mask_arg(mask), spec.num_seqs,
        out_shape=[jax.ShapeDtypeStruct((spec.tokens, spec.hidden), dtype)],
        grid=(items * _cdiv(spec.hidden, spec.block_d),),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_mean_pool_bwd",
        HIDDEN=spec.hidden,
        BLOCK_T=spec.block_t,
        BLOCK_D=spec.block_d,
        HAS_MASK=spec.has_mask,
    )  # fmt: skip
    return dx


# -- batching and differentiation --------------------------------------------------------------
#
# jax-triton launches cannot be vmapped: each kernel caller is a custom_vmap function of a dict
# of its arrays whose rule runs the calls one example after another (lax.map); the custom VJP
# sits outside.


def _map_rule(fn, axis_size: int, in_batched, arrays: dict[str, Any]):
    batched = in_batched[0]
    shared = {n: x for n, x in arrays.items() if not batched[n]}
    per_example = {n: x for n, x in arrays.items() if batched[n]}
    out = jax.lax.map(lambda a: fn({**shared, **a}), per_example)
    return out, True


@functools.lru_cache(maxsize=256)
def _forward_fn(spec: Spec):
    @jax.custom_batching.custom_vmap
    def fwd(a: dict[str, Any]):
        return _forward(spec, a["x"], a.get("mask"), _plan_of(a), a["counts"])

    fwd.def_vmap(functools.partial(_map_rule, fwd))
    return fwd


@functools.lru_cache(maxsize=256)
def _backward_fn(spec: Spec):
    @jax.custom_batching.custom_vmap
    def bwd(a: dict[str, Any]):
        return _backward(spec, a["dout"], a.get("mask"), _plan_of(a), a["counts"], jnp.dtype(spec.dtype))

    bwd.def_vmap(functools.partial(_map_rule, bwd))
    return bwd


def _plan_of(a: dict[str, Any]) -> Plan:
    return Plan(*(a[f"plan_{name}"] for name in Plan._fields))


def _arrays(mask: Any, plan: Plan, counts: Any, **arrays: Any) -> dict[str, Any]:
    out = dict(arrays, counts=counts, **{f"plan_{name}": v for name, v in plan._asdict().items()})
    if mask is not None:
        out["mask"] = mask
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _pool(spec: Spec, x, mask, plan, counts):
    return _forward_fn(spec)(_arrays(mask, plan, counts, x=x))


def _pool_fwd(spec: Spec, x, mask, plan, counts):
    return _pool(spec, x, mask, plan, counts), (mask, plan, counts)


def _pool_bwd(spec: Spec, res, dout):
    mask, plan, counts = res
    dx = _backward_fn(spec)(_arrays(mask, plan, counts, dout=dout))
    return dx, None, None, None


_pool.defvjp(_pool_fwd, _pool_bwd)


def mean_pooling(args: MeanPoolingArgs, cfg: MeanPoolingConfig) -> jax.Array:
    assert cfg.block_size and cfg.block_dim and cfg.split_size and cfg.num_warps and cfg.num_stages
    n = args.num_seqs
    if n == 0:
        return jnp.zeros(args.out_shape, args.dtype)
    if args.cu_seqlens is not None:
        cu = jnp.clip(args.cu_seqlens.astype(jnp.int32), 0, args.tokens)
    else:
        cu = uniform_cu_seqlens(n, args.seq_len or 0)
    spec = Spec(
        num_seqs=n,
        tokens=args.tokens,
        hidden=args.hidden,
        block_t=cfg.block_size,
        block_d=cfg.block_dim,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        has_mask=args.attention_mask is not None,
        dtype=jnp.dtype(args.dtype).name,
    )
    plan = make_plan(cu, args.tokens, cfg.split_size)
    out = _pool(spec, args.x, args.attention_mask, plan, row_counts(cu, args.attention_mask))
    return out.reshape(args.out_shape)
