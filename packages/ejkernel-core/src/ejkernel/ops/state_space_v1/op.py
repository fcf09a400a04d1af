"""The ``state_space_v1`` op: Mamba-1's selective scan (diagonal ``A [intermediate, state]``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ..args import Args, ShardPlan, flag, shape_str, static
from ..args import array as field
from ..config import OpConfig, tile
from ..op import Op

__all__ = ["StateSpaceV1", "StateSpaceV1Args", "StateSpaceV1Config", "gate_activation"]


@dataclasses.dataclass(frozen=True)
class StateSpaceV1Config(OpConfig):
    """Config of ``state_space_v1``.

    Attributes:
        block_d: channels (``intermediate`` positions) one program scans (Triton).
        block_e: tokens per chunk: the sequence is scanned chunk after chunk, each chunk with a
            parallel (associative) scan; the state at each chunk start is what the backward keeps
            (XLA and Triton; the Triton backward uses the same chunks).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth of the chunk loop (GPU kernels).
    """

    block_d: int | None = tile(power_of_two=True)
    block_e: int | None = tile(power_of_two=True)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


def gate_activation(act_fn: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """The gate's activation: ``act_fn``, SiLU by default."""
    return jax.nn.silu if act_fn is None else act_fn


def _act_fn(op: str, name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{op}: {name} must be a callable (e.g. jax.nn.silu) or None, got {type(value).__name__}")
    return value


class StateSpaceV1Args(
    Args,
    shardable=("batch",),
    shard_reasons={
        "seq": "the scan is sequential along the sequence",
        "intermediate": "shard the batch (A and D's gradients would need a reduction over channel shards of B and C)",
        "state": "y sums over the state axis",
    },
):
    """Canonical arguments: ``[batch, seq, ...]`` inputs (a decode step has ``seq = 1``;
    ``single_step`` restores the 2-D output).

    ``h_t = exp(dt_t · A) ⊙ h_{t-1} + (dt_t · x_t) ⊗ B_t``, ``y_t = h_t · C_t + D ⊙ x_t`` per batch
    element, with ``h [intermediate, state]``; then ``y ⊙ act(gate)`` when a gate is given.
    """

    hidden_states: Any = field("batch", "seq", "intermediate", differentiable=True, ranks=(2, 3))
    A: Any = field("intermediate", "state", differentiable=True)
    B: Any = field("batch", "seq", "state", differentiable=True, ranks=(2, 3))
    C: Any = field("batch", "seq", "state", differentiable=True, ranks=(2, 3))
    D: Any = field("intermediate", differentiable=True)
    dt: Any = field("batch", "seq", "intermediate", differentiable=True, ranks=(2, 3))
    gate: Any = field("batch", "seq", "intermediate", optional=True, differentiable=True, ranks=(2, 3))
    initial_state: Any = field("batch", "intermediate", "state", optional=True, differentiable=True)
    act_fn: Any = static(None, key="ignore", parse=_act_fn)
    return_state: bool = static(False, parse=flag)
    single_step: bool = static(False)

    @property
    def dtype(self) -> Any:
        return self.hidden_states.dtype

    def gated(self, y: Any) -> Any:
        """``y ⊙ act(gate)`` in float32, in ``y``'s dtype (``y`` itself without a gate)."""
        if self.gate is None:
            return y
        act = gate_activation(self.act_fn)
        return (y.astype(jnp.float32) * act(self.gate.astype(jnp.float32))).astype(y.dtype)

    def finish(self, y: Any, final_state: Any) -> Any:
        """The op's output from the ungated ``y [batch, seq, intermediate]`` and the float32
        final state: gating, the decode step's 2-D form, ``return_state``."""
        y = self.gated(y)
        if self.single_step:
            y = y[:, 0]
        return (y, final_state) if self.return_state else y


FEATURES: dict[str, tuple[str, Any]] = {
    "gate": ("y ⊙ act(gate)", lambda a: a.gate is not None),
    "initial_state": ("a state carried in", lambda a: a.initial_state is not None),
}

_STEP_FIELDS = ("hidden_states", "B", "C", "dt", "gate")


class StateSpaceV1(Op):
    """The ``state_space_v1`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "state_space_v1"
    aliases = ("ssm1", "mamba1")
    config_cls = StateSpaceV1Config
    args_cls = StateSpaceV1Args
    trainable = True
    output_axes = ("batch", "seq", "intermediate")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> StateSpaceV1Args:
        op = self.name
        conv = p.pop("conv_state", None)
        if conv is not None:
            raise ValueError(
                f"{op}: conv_state (got {shape_str(conv) if hasattr(conv, 'shape') else type(conv).__name__}) "
                "belongs to the causal convolution that runs before the scan; the scan neither reads nor "
                "updates it. Keep it with your convolution (e.g. the conv's own cache) and pass conv_state=None"
            )
        x = p["hidden_states"]
        single = x.ndim == 2
        ranks = {n: p[n].ndim for n in _STEP_FIELDS if p.get(n) is not None}
        want = 2 if single else 3
        bad = [n for n, r in ranks.items() if r != want]
        if bad:
            form = "a decode step: 2-D [batch, ...]" if single else "a sequence: 3-D [batch, seq, ...]"
            raise ValueError(
                f"{op}: hidden_states {shape_str(x)} makes this {form}; "
                + ", ".join(f"{n} {shape_str(p[n])}" for n in bad)
                + " must match"
            )
        given = {n: (p[n][:, None] if single else p[n]) for n in _STEP_FIELDS if p.get(n) is not None}
        return StateSpaceV1Args.build(op, p, **given, single_step=single)

    def shard_plan(self, a: StateSpaceV1Args, in_specs: Any, mesh: Any) -> ShardPlan:
        user = {n: ("batch", *self.args_cls.field_spec(n).axes[2:]) for n in _STEP_FIELDS} if a.single_step else {}
        return a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), user, required=1)

    def default_out_spec(self, a: StateSpaceV1Args, plan: ShardPlan) -> Any:
        y = plan.spec_of(("batch", "intermediate") if a.single_step else self.output_axes)
        return (y, plan.spec_of(("batch", "intermediate", "state"))) if a.return_state else y
