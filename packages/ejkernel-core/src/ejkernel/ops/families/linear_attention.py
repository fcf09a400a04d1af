"""Gated linear attention (BTHD): the contract shared by ``gla_attention``, ``lightning_attention``,
``recurrent_attention`` and ``state_space_v2`` (and importable by the other linear-recurrence ops):
the arguments record, the Op base, the canonical problem the kernels solve, the naive float32
recurrence reference and the case builder.

The recurrence, per sequence and query head (state ``S`` is ``[head_dim, value_head_dim]``)::

    S_t = diag(exp(a_t)) · S_{t-1} · diag(exp(b_t)) + k_tᵀ v_t        o_t = scale · q_t S_t

with log-space gates ``a_t`` per key channel (``g_t + gk_t + g_gamma``) and ``b_t`` per value
channel (``gv_t``); ``S_0`` is ``initial_state`` (zeros when absent). Canonical forms:

- Layout BTHD: ``query [batch, seq, num_heads, head_dim]``, ``key [batch, seq, num_kv_heads,
  head_dim]``, ``value [batch, seq, num_kv_heads, value_head_dim]``; query head ``j`` reads
  key/value head ``j // (num_heads // num_kv_heads)`` (GQA head sharing); gates and states are per
  query head.
- Varlen: ``cu_seqlens [num_seqs + 1]`` over packed tokens (``batch == 1``); the state resets at
  each boundary, sequence ``i`` starts from ``initial_state[i]`` and ``final_state[i]`` is its
  state after its last token (``initial_state[i]`` for an empty sequence). Without ``cu_seqlens``
  each batch row is one sequence and ``initial_state`` is ``[batch, ...]``.
- ``reverse``: each sequence runs from its last token to its first (``S_t`` depends on tokens
  ``>= t``); ``final_state`` is then the state after its first token.
- Decode (one token per sequence): call with ``seq == 1``, ``initial_state=state`` and
  ``return_state=True``; implementations take a single-step path for it.

Kernels receive a :class:`LinearProblem` (:meth:`LinearAttentionOp.problem`): gates combined into
at most one per-key-channel log gate ``gk``, one per-value-channel ``gv`` and one scalar
``gs [batch, seq, num_heads]`` per token and head.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..args import Args, ShardPlan, array, concrete, flag, positive_float, shape_str, static
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..op import Op
from .attention import cu_seqlens_rule

__all__ = [
    "HIGHEST",
    "LinearAttentionArgs",
    "LinearAttentionCase",
    "LinearAttentionConfig",
    "LinearAttentionOp",
    "LinearProblem",
    "lightning_decay",
    "linear_recurrence_reference",
    "make_linear_inputs",
]

HIGHEST = jax.lax.Precision.HIGHEST

_NOT_SHARDED = {
    "seq": "the recurrence runs along the sequence",
    "head_dim": "a head's state is computed whole",
    "value_head_dim": "a head's state is computed whole",
    "num_seqs_plus_1": "cu_seqlens describes the whole packed row",
}


@dataclasses.dataclass(frozen=True)
class LinearAttentionConfig(OpConfig):
    """Config of the chunked linear-attention ops.

    Attributes:
        chunk_size: tokens per chunk: within a chunk the recurrence is computed as masked
            (gated) attention, across chunks as a state recurrence. XLA: any size; Triton: 16, 32
            or 64.
        block_v: value columns of a state tile (Triton; a power of two).
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
    """

    chunk_size: int | None = tile()
    block_v: int | None = tile(power_of_two=True)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class LinearAttentionArgs(
    Args,
    shardable=("batch", "num_heads", "num_kv_heads"),
    shard_reasons=_NOT_SHARDED,
    tied=[("num_heads", "num_kv_heads")],
    divides=[("num_kv_heads", "num_heads")],
):
    """Canonical arguments of a gated linear-attention call (see the module docstring)."""

    query: Any = array("batch", "seq", "num_heads", "head_dim", differentiable=True)
    key: Any = array("batch", "seq", "num_kv_heads", "head_dim", same_dtype_as="query", differentiable=True)
    value: Any = array("batch", "seq", "num_kv_heads", "value_head_dim", same_dtype_as="query", differentiable=True)
    g: Any = array("batch", "seq", "num_heads", "head_dim", optional=True, differentiable=True)
    g_gamma: Any = array("num_heads", optional=True, differentiable=True)
    gk: Any = array("batch", "seq", "num_heads", "head_dim", optional=True, differentiable=True)
    gv: Any = array("batch", "seq", "num_heads", "value_head_dim", optional=True, differentiable=True)
    initial_state: Any = array(
        "num_states", "num_heads", "head_dim", "value_head_dim", optional=True, differentiable=True
    )
    cu_seqlens: Any = array("num_seqs_plus_1", kind="int", optional=True)
    softmax_scale: float = static(1.0, key="ignore")
    reverse: bool = static(False, parse=flag)
    return_state: bool = static(False, parse=flag)

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    @property
    def is_varlen(self) -> bool:
        return self.cu_seqlens is not None

    @property
    def num_seqs(self) -> int:
        return self.cu_seqlens.shape[0] - 1 if self.is_varlen else self.batch


@dataclasses.dataclass(frozen=True)
class LinearProblem:
    """What the chunked kernels compute (see the module docstring): arrays in the inputs' dtypes,
    gates float32 log-space, ``None`` when absent.

    Attributes:
        q, k, v: ``[batch, seq, num_heads or num_kv_heads, dim]``.
        gk: ``[batch, seq, num_heads, head_dim]`` log decay per key channel.
        gv: ``[batch, seq, num_heads, value_head_dim]`` log decay per value channel.
        gs: ``[batch, seq, num_heads]`` log decay of the whole state (scalar gates).
        initial_state: ``[num_seqs, num_heads, head_dim, value_head_dim]``.
        cu_seqlens: ``[num_seqs + 1]`` int32 (``batch == 1``).
    """

    q: Any
    k: Any
    v: Any
    gk: Any = None
    gv: Any = None
    gs: Any = None
    initial_state: Any = None
    cu_seqlens: Any = None
    scale: float = 1.0
    reverse: bool = False

    @property
    def num_seqs(self) -> int:
        return self.cu_seqlens.shape[0] - 1 if self.cu_seqlens is not None else self.q.shape[0]


def _f32(x: Any) -> Any:
    return None if x is None else x.astype(jnp.float32)


FEATURES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "varlen": ("packed sequences (cu_seqlens)", lambda a: a.cu_seqlens is not None),
    "reverse": ("the recurrence runs from the last token", lambda a: a.reverse),
    "initial_state": ("a given initial state", lambda a: a.initial_state is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "key_gate": ("a per-key-channel gate (g or gk)", lambda a: a.g is not None or a.gk is not None),
    "value_gate": ("a per-value-channel gate (gv)", lambda a: a.gv is not None),
}


class LinearAttentionOp(Op):
    """Base of the gated linear-attention ops: binding, features, sharding, the kernels' problem.

    Subclasses name the op, its Config and :meth:`gates` (the op's own gate parameters →
    ``g``, ``g_gamma``, ``gk``, ``gv`` of the record)."""

    config_cls: ClassVar[type[OpConfig]] = LinearAttentionConfig
    args_cls: ClassVar[type[Args]] = LinearAttentionArgs
    trainable = True
    output_axes: ClassVar[tuple[str | None, ...]] = ("batch", "seq", "num_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def gates(self, params: dict[str, Any]) -> dict[str, Any]:
        """The record's gate fields from the call's parameters (default: passed as they are)."""
        return {n: params.get(n) for n in ("g", "g_gamma", "gk", "gv")}

    def canonicalize(self, params: dict[str, Any]) -> LinearAttentionArgs:
        q, k = params["query"], params["key"]
        scale = positive_float(self.name, "softmax_scale", params.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[-1])) if q.ndim == 4 and q.shape[-1] else 1.0
        cu = params.get("cu_seqlens")
        if cu is not None and q.ndim == 4 and q.shape[0] != 1:
            raise ValueError(
                f"{self.name}: cu_seqlens packs sequences in one row: query must have batch 1, got {shape_str(q)}"
            )
        h0 = params.get("initial_state")
        if h0 is not None and q.ndim == 4 and k.ndim == 4:
            want = cu.shape[0] - 1 if cu is not None else int(q.shape[0])
            what = "num_seqs (len(cu_seqlens) - 1)" if cu is not None else "batch"
            if h0.ndim != 4 or int(h0.shape[0]) != want:
                raise ValueError(
                    f"{self.name}: initial_state must be [{what}={want}, num_heads, head_dim, value_head_dim], "
                    f"got {shape_str(h0)} (query {shape_str(q)})"
                )
        if cu is not None and cu.shape[0] < 2:
            raise ValueError(f"{self.name}: cu_seqlens must hold at least 2 entries, got {shape_str(cu)}")
        return LinearAttentionArgs.build(self.name, params, softmax_scale=scale, **self.gates(params))

    def value_rules(self, a: LinearAttentionArgs) -> list[ValueRule]:
        rule = cu_seqlens_rule("cu_seqlens", a.seq)
        # The packed row must end exactly at the last sequence's end (no trailing tokens).
        return [
            dataclasses.replace(
                rule,
                requirement=f"must start at 0, never decrease and end at the packed length {a.seq}",
                bad=lambda xp, cu: rule.bad(xp, cu) | ((xp.arange(cu.shape[0]) == cu.shape[0] - 1) & (cu != a.seq)),
            )
        ]

    def autotune_inputs(self, a: LinearAttentionArgs, seed: int = 0) -> LinearAttentionArgs:
        out = a.random_like(seed)
        changes: dict[str, Any] = {}
        for n in ("g", "gk", "gv"):  # log decays: negative, as a model's are
            if getattr(out, n) is not None:
                changes[n] = jax.nn.log_sigmoid(getattr(out, n).astype(jnp.float32) + 3.0).astype(getattr(a, n).dtype)
        if a.g_gamma is not None:  # lightning's fixed decays, or a mild one per head
            gamma = concrete(a.g_gamma)
            changes["g_gamma"] = jnp.asarray(
                gamma if gamma is not None else np.full(a.num_heads, -0.1), a.g_gamma.dtype
            )
        if a.cu_seqlens is not None:
            c = concrete(a.cu_seqlens)
            changes["cu_seqlens"] = jnp.asarray(
                c if c is not None else np.linspace(0, a.seq, a.cu_seqlens.shape[0]).astype(np.int32)
            )
        return dataclasses.replace(out, **changes)

    # -- sharding: batch (not for packed rows) and heads; the states follow the batch ----------

    def shard_plan(self, a: LinearAttentionArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        plan = a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), required=3)
        if a.is_varlen and plan.axes.get("batch") is not None:
            raise ValueError(f"{self.name}: the batch of a packed (cu_seqlens) call cannot be sharded")
        if a.initial_state is None or plan.axes.get("batch") is None:
            return plan
        specs = dict(plan.specs)
        specs["initial_state"] = plan.spec_of(("batch", "num_heads", None, None))
        return ShardPlan(axes=plan.axes, specs=specs)

    def default_out_spec(self, a: LinearAttentionArgs, plan: ShardPlan) -> Any:
        out = plan.spec_of(self.output_axes)
        if not a.return_state:
            return out
        return out, plan.spec_of(("batch" if not a.is_varlen else None, "num_heads", None, None))

    # -- what the kernels compute -------------------------------------------------------------

    def problem(self, a: LinearAttentionArgs) -> LinearProblem:
        """The record as the kernels' problem: the key-channel gates summed (``g_gamma`` joins
        them, or stays a scalar gate when there is no per-channel one)."""
        gk = None
        for x in (a.g, a.gk):
            if x is not None:
                gk = _f32(x) if gk is None else gk + _f32(x)
        gs = None
        if a.g_gamma is not None:
            gamma = _f32(a.g_gamma)
            if gk is not None:
                gk = gk + gamma[None, None, :, None]
            else:
                gs = jnp.broadcast_to(gamma, (a.batch, a.seq, a.num_heads))
        return LinearProblem(
            q=a.query,
            k=a.key,
            v=a.value,
            gk=gk,
            gv=_f32(a.gv),
            gs=gs,
            initial_state=a.initial_state,
            cu_seqlens=a.cu_seqlens,
            scale=a.softmax_scale,
            reverse=a.reverse,
        )

    def finish(self, a: LinearAttentionArgs, out: Any, final_state: Any) -> Any:
        """The op's result from the kernels' ``(out, final_state)``."""
        out = out.astype(a.dtype)
        if not a.return_state:
            return out
        dtype = a.initial_state.dtype if a.initial_state is not None else jnp.float32
        return out, final_state.astype(dtype)


def lightning_decay(num_heads: int, layer_idx: int, num_layers: int) -> np.ndarray:
    """Lightning attention's per-head log decay, as fla-core's ``chunk_lightning_attn`` defines it:
    ``g_gamma[h] = -(8 / H) · (1 - layer_idx / num_layers) · h`` (head 0 does not decay)."""
    return (-(8.0 / num_heads) * (1.0 - layer_idx / num_layers) * np.arange(num_heads)).astype(np.float32)


# -- the reference ------------------------------------------------------------------------------


def _recurrence(q, k, v, a, b, s0, scale, dtype, precision):
    """One sequence, token by token: ``q, k [t, h, dk]``, ``v [t, h, dv]``, log gates ``a [t, h, dk]``
    and ``b [t, h, dv]``, ``s0 [h, dk, dv]``. Products see inputs rounded to ``dtype``; the state
    accumulates in float32."""

    def step(s, x):
        qt, kt, vt, at, bt = x
        kv = jnp.einsum("hi,hj->hij", kt, vt, precision=precision).astype(dtype).astype(jnp.float32)
        s = jnp.exp(at)[:, :, None] * s * jnp.exp(bt)[:, None, :] + kv
        o = jnp.einsum("hi,hij->hj", qt, s.astype(dtype), precision=precision, preferred_element_type=jnp.float32)
        return s, o * scale

    s, o = jax.lax.scan(step, s0, (q, k, v, a, b))
    return o, s


def linear_recurrence_reference(
    query: Any,
    key: Any,
    value: Any,
    *,
    gk: Any = None,
    gv: Any = None,
    initial_state: Any = None,
    cu_seqlens: Any = None,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The naive recurrence (see the module docstring), token by token: ``gk [b, t, h, dk]`` and
    ``gv [b, t, h, dv]`` are the summed log gates (a scalar gate broadcast over its channels).
    ``cu_seqlens`` must be concrete. Returns ``out [b, t, h, dv]`` float32 (rounded to ``dtype``
    when it is a low precision) or ``(out, final_state [num_seqs, h, dk, dv])``."""
    b, t, h, dk = query.shape
    hk, dv = key.shape[2], value.shape[3]
    scale = 1.0 / math.sqrt(dk) if softmax_scale is None else softmax_scale
    dtype = jnp.dtype(dtype)

    def prep(x):
        return x.astype(dtype).astype(jnp.float32)

    q = prep(query)
    k = jnp.repeat(prep(key), h // hk, axis=2)
    v = jnp.repeat(prep(value), h // hk, axis=2)
    a = jnp.zeros((b, t, h, dk), jnp.float32) if gk is None else gk.astype(jnp.float32)
    bv = jnp.zeros((b, t, h, dv), jnp.float32) if gv is None else gv.astype(jnp.float32)
    if cu_seqlens is not None:
        cu = np.asarray(cu_seqlens)
        spans = [(0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
    else:
        spans = [(i, 0, t) for i in range(b)]
    outs = jnp.zeros((b, t, h, dv), jnp.float32)
    finals = []
    for n, (row, lo, hi) in enumerate(spans):
        s0 = jnp.zeros((h, dk, dv), jnp.float32) if initial_state is None else initial_state[n].astype(jnp.float32)
        if hi == lo:
            finals.append(s0)
            continue
        xs = [x[row, lo:hi] for x in (q, k, v, a, bv)]
        if reverse:
            xs = [x[::-1] for x in xs]
        o, s = _recurrence(*xs, s0, scale, dtype, precision)
        if reverse:
            o = o[::-1]
        outs = outs.at[row, lo:hi].set(o)
        finals.append(s)
    if dtype != jnp.float32:
        outs = outs.astype(dtype).astype(jnp.float32)
    if not return_state:
        return outs
    return outs, jnp.stack(finals)


# -- cases ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LinearAttentionCase:
    """One conformance case of a gated linear-attention op.

    ``gates``: which gate arguments the call passes, among ``"g"``, ``"g_gamma"``, ``"gk"``,
    ``"gv"`` and ``"decay"`` (lightning's rates; only those the op takes). ``seqs``: per-sequence lengths packed in one row
    (varlen; 0 = an empty sequence). ``decay``: ``"mild"`` (log-sigmoid of N(2, 1): the typical
    range) or ``"strong"`` (down to ~-30 per step: a chunk's cumulated decay far below float32's
    exp range, which only exact per-pair gating survives).
    """

    name: str
    b: int = 2
    t: int = 37
    h: int = 2
    hk: int | None = None
    dk: int = 16
    dv: int = 16
    gates: tuple[str, ...] = ("g",)
    seqs: tuple[int, ...] | None = None
    initial_state: bool = False
    reverse: bool = False
    return_state: bool = False
    scale: float | None = None
    decay: str = "mild"
    dtype: str = "float32"
    extra: tuple[tuple[str, Any], ...] = ()

    def with_dtype(self, dtype: str) -> LinearAttentionCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        return make_linear_inputs(self, seed)


def log_decay(rng: np.random.Generator, shape: tuple[int, ...], decay: str) -> np.ndarray:
    """Random log-space gates (negative): typical (``"mild"``), steep (``"strong"``) or nearly
    1 (``"weak"``: about -6e-6 per step, a state that persists over ~10⁵ tokens)."""
    x = rng.standard_normal(shape)
    x = x * 4.0 - 6.0 if decay == "strong" else x + (12.0 if decay == "weak" else 2.0)
    return np.asarray(-np.logaddexp(0.0, -x), np.float32)  # log_sigmoid


def make_linear_inputs(case: LinearAttentionCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``gla_attention``-style call for ``case``."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    hk = case.hk or case.h
    b, t = case.b, case.t
    if case.seqs is not None:
        b, t = 1, sum(case.seqs)

    def rand(*shape: int, s: float = 1.0) -> Any:
        return jnp.asarray(rng.standard_normal(shape) * s, dtype)

    kw: dict[str, Any] = {
        "query": rand(b, t, case.h, case.dk),
        "key": rand(b, t, hk, case.dk, s=case.dk**-0.5),
        "value": rand(b, t, hk, case.dv),
    }
    for gate in case.gates:
        if gate in ("g", "gk"):
            kw[gate] = jnp.asarray(log_decay(rng, (b, t, case.h, case.dk), case.decay), jnp.float32)
        elif gate == "gv":
            kw[gate] = jnp.asarray(log_decay(rng, (b, t, case.h, case.dv), case.decay), jnp.float32)
        elif gate == "g_gamma":
            kw[gate] = jnp.asarray(-np.exp(rng.standard_normal(case.h) - 2.0), jnp.float32)
        elif gate == "decay":  # lightning's explicit per-head decay rates (>= 0)
            kw[gate] = jnp.asarray(np.exp(rng.standard_normal(case.h) - 2.0), jnp.float32)
    n_states = len(case.seqs) if case.seqs is not None else b
    if case.seqs is not None:
        kw["cu_seqlens"] = jnp.asarray(np.concatenate([[0], np.cumsum(case.seqs)]), jnp.int32)
    if case.initial_state:
        kw["initial_state"] = jnp.asarray(rng.standard_normal((n_states, case.h, case.dk, case.dv)) * 0.5, jnp.float32)
    kw["reverse"] = case.reverse
    kw["return_state"] = case.return_state
    if case.scale is not None:
        kw["softmax_scale"] = case.scale
    kw.update(dict(case.extra))
    return kw
