"""The ``state_space_v2`` op (Mamba-2 SSD) and its mapping onto the gated linear recurrence.

SSD is scalar-gated linear attention: per head ``h`` (group ``h // (num_heads // n_groups)``)::

    S_t = exp(A_h · dt_t) · S_{t-1} + (x_t · dt_t) ⊗ B_t        y_t = S_t C_t + D_h · x_t

with the state ``[head_dim, state_size]``. In the linear-attention form (state ``[dk, dv]``):
``q = C``, ``k = B``, ``v = x · dt``, log gate ``A · dt``, scale 1, and the state transposed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ..args import Args, ShardPlan, array, flag, positive_float, shape_str, static, static_int
from ..families.linear_attention import LinearAttentionConfig, LinearProblem
from ..op import Op

__all__ = ["StateSpaceV2", "StateSpaceV2Args", "StateSpaceV2Config", "gated_output"]


@dataclasses.dataclass(frozen=True)
class StateSpaceV2Config(LinearAttentionConfig):
    __doc__ = "Config of ``state_space_v2``. " + (LinearAttentionConfig.__doc__ or "")


class StateSpaceV2Args(
    Args,
    shardable=("batch",),
    shard_reasons={
        "seq": "the recurrence runs along the sequence",
        "num_heads": "the gated RMSNorm and the groups span every head",
    },
    divides=[("groups", "num_heads")],
):
    """Canonical arguments of a ``state_space_v2`` call (the names of the public function)."""

    x: Any = array("batch", "seq", "num_heads", "head_dim", differentiable=True)
    A: Any = array("num_heads", differentiable=True)
    B: Any = array("batch", "seq", "groups", "state_size", same_dtype_as="x", differentiable=True)
    C: Any = array("batch", "seq", "groups", "state_size", same_dtype_as="x", differentiable=True)
    D: Any = array("num_heads", differentiable=True)
    dt: Any = array("batch", "seq", "num_heads", differentiable=True)
    gate: Any = array("batch", "seq", "intermediate_size", optional=True, differentiable=True)
    initial_state: Any = array("batch", "num_heads", "head_dim", "state_size", optional=True, differentiable=True)
    conv_state: Any = array("batch", None, None, kind="any", optional=True)
    n_groups: int = static(1)
    act_fn: Callable[..., Any] | None = static(None, key="ignore")
    use_gated_rmsnorm: bool = static(False, parse=flag)
    rmsnorm_eps: float = static(1e-5, key="ignore", parse=positive_float)
    precision: Any = static(None, key="ignore")

    @property
    def dtype(self) -> Any:
        return self.x.dtype


FEATURES: dict[str, tuple[str, Any]] = {
    "initial_state": ("a given initial state", lambda a: a.initial_state is not None),
    "gate": ("output gating act_fn(gate)", lambda a: a.gate is not None),
    "gated_rmsnorm": ("RMSNorm before the gating", lambda a: a.gate is not None and a.use_gated_rmsnorm),
    "groups": ("B and C shared by groups of heads", lambda a: a.groups != a.num_heads),
}


def gated_output(y: Any, gate: Any, act_fn: Any, use_gated_rmsnorm: bool, eps: float, dtype: Any) -> Any:
    """``y [b, s, intermediate]`` gated: ``rmsnorm(y) · act(gate)`` or ``y · act(gate)`` (float32)."""
    if gate is None:
        return y.astype(dtype)
    act = act_fn if act_fn is not None else jax.nn.silu
    y = y.astype(jnp.float32)
    if use_gated_rmsnorm:
        y = y * jax.lax.rsqrt(jnp.mean(jnp.square(y), axis=-1, keepdims=True) + eps)
    return (y * act(gate.astype(jnp.float32))).astype(dtype)


class StateSpaceV2(Op):
    """The ``state_space_v2`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "state_space_v2"
    version = "1"
    config_cls = StateSpaceV2Config
    args_cls = StateSpaceV2Args
    trainable = True
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES
    aliases: ClassVar[tuple[str, ...]] = ()

    def canonicalize(self, params: dict[str, Any]) -> StateSpaceV2Args:
        x, b = params["x"], params["B"]
        n_groups = static_int(self.name, "n_groups", params.get("n_groups", 1), minimum=1, allow_none=False)
        if b.ndim == 4 and int(b.shape[2]) != n_groups:
            raise ValueError(f"{self.name}: B {shape_str(b)} has {int(b.shape[2])} groups, but n_groups={n_groups}")
        prec = params.get("precision")  # accepted and ignored, but only as a precision
        if prec is not None and not all(
            isinstance(p, (str, jax.lax.Precision)) for p in (prec if isinstance(prec, (tuple, list)) else (prec,))
        ):
            raise TypeError(
                f"{self.name}: precision must be None, a jax.lax.Precision, its name or a pair of them, "
                f"got {type(prec).__name__}"
            )
        act = params.get("act_fn")
        if act is not None and not callable(act):
            raise TypeError(f"{self.name}: act_fn must be callable, got {type(act).__name__}")
        gate = params.get("gate")
        if gate is None and flag(self.name, "use_gated_rmsnorm", params.get("use_gated_rmsnorm", False)):
            raise ValueError(
                f"{self.name}: use_gated_rmsnorm=True normalizes y before the gating by gate, but gate is None; "
                f"pass gate [batch, seq, num_heads * head_dim] (x {shape_str(x)}) or use_gated_rmsnorm=False"
            )
        if gate is not None and x.ndim == 4 and gate.ndim == 3 and int(gate.shape[-1]) != x.shape[2] * x.shape[3]:
            raise ValueError(
                f"{self.name}: gate must be [batch, seq, num_heads * head_dim = {x.shape[2] * x.shape[3]}], "
                f"got {shape_str(gate)} (x {shape_str(x)})"
            )
        return StateSpaceV2Args.build(self.name, params, n_groups=n_groups)

    def autotune_inputs(self, a: StateSpaceV2Args, seed: int = 0) -> StateSpaceV2Args:
        out = a.random_like(seed)
        return dataclasses.replace(
            out,
            A=-jnp.exp(out.A.astype(jnp.float32)).astype(a.A.dtype),
            dt=jax.nn.softplus(out.dt.astype(jnp.float32) - 2.0).astype(a.dt.dtype),
        )

    def shard_plan(self, a: StateSpaceV2Args, in_specs: Any, mesh: Any) -> ShardPlan:
        return a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), required=6)

    def default_out_spec(self, a: StateSpaceV2Args, plan: ShardPlan) -> Any:
        conv = plan.specs.get("conv_state") if a.conv_state is not None else None
        return plan.spec_of(("batch", None, None)), plan.spec_of(("batch", None, None, None)), conv

    # -- the linear-attention form ----------------------------------------------------------

    def problem(self, a: StateSpaceV2Args) -> LinearProblem:
        rep = a.num_heads // a.groups
        f32 = jnp.float32
        dt = a.dt.astype(f32)
        v = (a.x.astype(f32) * dt[..., None]).astype(a.dtype)
        h0 = None if a.initial_state is None else jnp.swapaxes(a.initial_state, -1, -2)
        return LinearProblem(
            q=jnp.repeat(a.C, rep, axis=2),
            k=jnp.repeat(a.B, rep, axis=2),
            v=v,
            gs=a.A.astype(f32)[None, None, :] * dt,
            initial_state=h0,
            scale=1.0,
        )

    def finish(self, a: StateSpaceV2Args, out: Any, final_state: Any) -> Any:
        y = out.astype(jnp.float32) + a.D.astype(jnp.float32)[:, None] * a.x.astype(jnp.float32)
        y = y.reshape(a.batch, a.seq, a.num_heads * a.head_dim)
        y = gated_output(y, a.gate, a.act_fn, a.use_gated_rmsnorm, a.rmsnorm_eps, a.dtype)
        state_dtype = a.initial_state.dtype if a.initial_state is not None else a.dtype
        return y, jnp.swapaxes(final_state, -1, -2).astype(state_dtype), a.conv_state
