"""Delta-rule linear attention (BTHD): the contract shared by ``kernel_delta_attention`` (KDA, a
per-channel gate) and ``gated_delta_rule`` (Gated DeltaNet, a scalar gate per head).

The recurrence, per value head, with state ``S`` ``[head_dim, value_head_dim]``::

    S_t = (I - beta_t k_t k_tᵀ) diag(exp(g_t)) S_{t-1} + beta_t k_t v_tᵀ
    o_t = scale · S_tᵀ q_t

``g_t`` is a log-space decay gate (``<= 0``): one value per channel ``[head_dim]`` (KDA) or one per
head (GDN, broadcast over the channels), or absent (plain DeltaNet). Canonical forms (what
implementations see in :class:`DeltaRuleArgs`):

- ``query``/``key`` ``[batch, seq, num_heads, head_dim]``; ``value`` ``[batch, seq,
  num_value_heads, value_head_dim]``; ``beta`` ``[batch, seq, num_value_heads]``; the gate
  ``[batch, seq, num_value_heads, gate_dim]`` with ``gate_dim`` 1 (scalar) or ``head_dim``.
  Grouped value heads (GVA, Qwen3-Next): value head ``j`` uses query/key head
  ``j // (num_value_heads // num_heads)``.
- ``initial_state`` ``[num_states, num_value_heads, head_dim, value_head_dim]``: one state per
  batch row, or per sequence under varlen; the final state (``return_state``) has the same shape
  and is float32.
- ``cu_seqlens`` ``[num_seqs + 1]``: packed sequences in a batch of 1; the state restarts (from
  that sequence's initial state, else zeros) at each sequence's first token. Empty sequences are
  allowed (their final state is their initial state).
- ``use_qk_l2norm``: ``q`` and ``k`` are divided by ``sqrt(sum(x²) + L2NORM_EPS)`` first (inside
  the op, differentiated through).

:func:`recurrent_delta_rule` is the token-by-token form (the decode step and ``chunked=False``),
written in plain ``jnp``: every backend may call it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ..args import Args, ShardPlan, array, concrete, flag, shape_str, static, static_float, static_int
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..op import Op

__all__ = [
    "FEATURES",
    "L2NORM_EPS",
    "DeltaRuleArgs",
    "DeltaRuleConfig",
    "DeltaRuleOp",
    "l2norm",
    "recurrent_delta_rule",
    "varlen_plan",
]

L2NORM_EPS = 1e-6  # fla's l2norm: x / sqrt(sum(x²) + 1e-6)

_NOT_SHARDED = {
    "seq": "the state runs through the whole sequence",
    "head_dim": "a head's state is updated whole",
    "value_head_dim": "a head's state is updated whole",
    "num_states": "the initial states follow the batch (or the packed sequences)",
    "num_seqs_plus_1": "cu_seqlens is read whole",
}


@dataclasses.dataclass(frozen=True)
class DeltaRuleConfig(OpConfig):
    """Config of the delta-rule ops.

    Attributes:
        chunk_size: tokens per chunk of the chunked (WY) algorithm: the state is materialized once
            per chunk, the work inside a chunk is dense matmuls.
        chunked: ``False``: run the token-by-token recurrence instead (``use_chunked=False``);
            ``None``: chunked, except one token per sequence (decode), which takes the step path.
        block_v: value columns of the state one GPU program owns (Triton).
        num_warps, num_stages: GPU launch parameters (Triton).
    """

    chunk_size: int | None = tile(power_of_two=True, minimum=16, maximum=128)
    chunked: bool | None = None
    block_v: int | None = tile(power_of_two=True, minimum=16, maximum=256)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()


class DeltaRuleArgs(
    Args,
    shardable=("batch", "num_heads", "num_value_heads"),
    shard_reasons=_NOT_SHARDED,
    tied=[("num_heads", "num_value_heads")],
    divides=[("num_heads", "num_value_heads")],
    allow_empty=("seq",),
):
    """Canonical arguments of a delta-rule call (see the module docstring). Subclasses add the
    gate under its public name and return it from :attr:`gate`."""

    query: Any = array("batch", "seq", "num_heads", "head_dim", differentiable=True)
    key: Any = array("batch", "seq", "num_heads", "head_dim", same_dtype_as="query", differentiable=True)
    value: Any = array("batch", "seq", "num_value_heads", "value_head_dim", same_dtype_as="query", differentiable=True)
    beta: Any = array("batch", "seq", "num_value_heads", differentiable=True)
    initial_state: Any = array(
        "num_states", "num_value_heads", "head_dim", "value_head_dim", optional=True, differentiable=True
    )
    cu_seqlens: Any = array("num_seqs_plus_1", kind="int", optional=True)
    softmax_scale: float = static(1.0, key="ignore")
    use_qk_l2norm: bool = static(False, parse=flag)
    return_state: bool = static(False, parse=flag)

    GATE: ClassVar[str] = ""

    @property
    def gate(self) -> Any:
        """The log-space gate ``[batch, seq, num_value_heads, 1 or head_dim]`` (or ``None``)."""
        return getattr(self, self.GATE) if self.GATE else None

    @property
    def per_channel_gate(self) -> bool:
        return self.gate is not None and int(self.gate.shape[-1]) != 1

    @property
    def num_groups(self) -> int:
        return self.num_value_heads // self.num_heads

    @property
    def dtype(self) -> Any:
        return self.query.dtype

    @property
    def is_varlen(self) -> bool:
        return self.cu_seqlens is not None

    @property
    def num_seqs(self) -> int:
        return int(self.cu_seqlens.shape[0]) - 1 if self.is_varlen else self.batch


FEATURES: dict[str, tuple[str, Any]] = {
    "varlen": ("packed sequences (cu_seqlens)", lambda a: a.is_varlen),
    "initial_state": ("a given initial state", lambda a: a.initial_state is not None),
    "gva": ("more value heads than query/key heads", lambda a: a.num_value_heads != a.num_heads),
    "value_head_dim": ("value head dim differs from the key's", lambda a: a.value_head_dim != a.head_dim),
}


class DeltaRuleOp(Op):
    """Base of the delta-rule ops: binding, value rules, sharding of the state, tuple outputs."""

    args_cls: ClassVar[type[DeltaRuleArgs]] = DeltaRuleArgs
    trainable = True
    output_axes = ("batch", "seq", "num_value_heads", "value_head_dim")
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES
    # The public name of the gate and whether it may be per channel ([..., head_dim]).
    GATE: ClassVar[str] = ""
    PER_CHANNEL: ClassVar[bool] = False
    L2NORM_PARAM: ClassVar[str] = "use_qk_l2norm"

    def config_hints(self, p: dict[str, Any]) -> dict[str, Any]:
        hints: dict[str, Any] = {}
        if "chunk_size" in p:
            c = static_int(self.name, "chunk_size", p.pop("chunk_size"), minimum=1)
            if c is not None and c != 64:  # 64: the documented default, the heuristic's choice
                if c < 16 or c > 128 or c & (c - 1):
                    raise ValueError(f"{self.name}: chunk_size must be a power of two in [16, 128], got {c}")
                hints["chunk_size"] = c
        if "use_chunked" in p:
            use = p.pop("use_chunked")
            if not isinstance(use, bool):
                raise TypeError(f"{self.name}: use_chunked must be a bool, got {type(use).__name__}")
            if not use:
                hints["chunked"] = False
        return hints

    def canonicalize(self, p: dict[str, Any]) -> DeltaRuleArgs:
        op = self.name
        q, k, v, beta = p["query"], p["key"], p["value"], p["beta"]
        gate = p.get(self.GATE)
        if gate is not None:  # its first three axes are checked with the record (batch, seq, value heads)
            if gate.ndim == 3:
                gate = gate[..., None]
            elif not self.PER_CHANNEL:
                raise ValueError(f"{op}: {self.GATE} must be [batch, seq, num_value_heads], got {shape_str(gate)}")
            dk = int(k.shape[3])
            if int(gate.shape[3]) not in (1, dk) and int(q.shape[3]) == dk:
                raise ValueError(
                    f"{op}: {self.GATE} must be [batch, seq, num_value_heads] or [batch, seq, num_value_heads, "
                    f"head_dim = {dk}], got {shape_str(gate)}"
                )
        scale = static_float(op, "softmax_scale", p.get("softmax_scale"))
        if scale is None:
            scale = 1.0 / math.sqrt(int(q.shape[3])) if q.shape[3] else 1.0
        cu = p.get("cu_seqlens")
        h0 = p.get("initial_state")
        if cu is not None and q.shape[0] != 1:
            raise ValueError(f"{op}: cu_seqlens packs the sequences in a batch of 1, got query {shape_str(q)}")
        if h0 is not None:
            n = int(cu.shape[0]) - 1 if cu is not None else int(q.shape[0])
            if int(h0.shape[0]) != n:
                what = f"num_seqs = len(cu_seqlens) - 1 = {n}" if cu is not None else f"batch = {n}"
                raise ValueError(
                    f"{op}: initial_state must be [{what}, num_value_heads, head_dim, value_head_dim], "
                    f"got {shape_str(h0)}"
                )
        if cu is not None and cu.shape[0] < 2:
            raise ValueError(f"{op}: cu_seqlens must hold at least 2 offsets, got {shape_str(cu)}")
        del beta, v
        return self.args_cls.build(
            op,
            p,
            softmax_scale=scale,
            use_qk_l2norm=flag(op, self.L2NORM_PARAM, p.get(self.L2NORM_PARAM, False)),
            **{self.GATE: gate},
        )

    def value_rules(self, a: DeltaRuleArgs) -> list[ValueRule]:
        if not a.is_varlen:
            return []
        total = a.seq

        def bad(xp: Any, cu: Any) -> Any:
            prev = xp.concatenate([cu[:1], cu[:-1]])
            index = xp.arange(cu.shape[0])
            return ((index == 0) & (cu != 0)) | (cu < prev) | ((index == cu.shape[0] - 1) & (cu != total))

        return [
            ValueRule(("cu_seqlens",), f"must start at 0, never decrease and end at the packed length {total}", bad)
        ]

    def autotune_inputs(self, a: DeltaRuleArgs, seed: int = 0) -> DeltaRuleArgs:
        out = a.random_like(seed)
        changes: dict[str, Any] = {}
        # Keys of unit length and gates/betas in range keep the recurrence stable.
        changes["beta"] = jax.nn.sigmoid(out.beta.astype(jnp.float32)).astype(a.beta.dtype)
        if a.gate is not None:
            changes[a.GATE] = jax.nn.log_sigmoid(out.gate.astype(jnp.float32)).astype(a.gate.dtype)
        if not a.use_qk_l2norm:
            changes["key"] = l2norm(out.key.astype(jnp.float32)).astype(a.key.dtype)
        if a.is_varlen and concrete(a.cu_seqlens) is None:
            n = a.num_seqs
            changes["cu_seqlens"] = (jnp.arange(n + 1, dtype=jnp.int32) * a.seq) // max(n, 1)
        return dataclasses.replace(out, **changes)

    def shard_plan(self, a: DeltaRuleArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        plan = a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), required=4)
        if a.initial_state is not None and not a.is_varlen:  # one state per batch row
            from jax.sharding import PartitionSpec as P

            spec = plan.specs["initial_state"]
            specs = dict(plan.specs)
            specs["initial_state"] = P(plan.axes.get("batch"), *tuple(spec)[1:])
            plan = ShardPlan(axes=plan.axes, specs=specs)
        return plan

    def output_axes_of(self, a: DeltaRuleArgs) -> Any:
        if not a.return_state:
            return self.output_axes
        # One final state per batch row (sharded with the batch), or per packed sequence.
        return (self.output_axes, (None if a.is_varlen else "batch", "num_value_heads", None, None))


def l2norm(x: Any, eps: float = L2NORM_EPS) -> Any:
    """``x / sqrt(sum(x², -1) + eps)`` in ``x``'s dtype (float32 inputs: exact)."""
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def varlen_plan(cu_seqlens: Any, total: int, chunk: int) -> dict[str, Any]:
    """Where the packed tokens go in a chunk-aligned layout (each sequence starts a chunk).

    With ``N`` sequences of lengths ``l_n``, sequence ``n`` owns ``ceil(l_n / chunk)`` chunks
    starting at chunk ``first[n]``; the layout has ``num_chunks = ceil(total / chunk) + N``
    chunks (a static bound; chunks past the last sequence's hold only padding). Returns int32
    arrays (traced is fine): ``src`` ``[num_chunks * chunk]`` the packed token at each slot
    (``-1``: padding), ``dst`` ``[total]`` the slot of each packed token (``-1`` outside the
    sequences), ``chunk_seq``
    ``[num_chunks]`` the sequence of each chunk, ``chunk_first`` ``[num_chunks]`` (bool) whether
    it starts its sequence, ``first_chunk`` ``[N]`` each sequence's first chunk and
    ``last_chunk`` ``[N]`` its last (``-1`` when empty, where ``first_chunk`` is where the next
    sequence starts: a walk from one to the other visits nothing).
    """
    cu = cu_seqlens.astype(jnp.int32)
    n = int(cu.shape[0]) - 1
    lens = cu[1:] - cu[:-1]
    nchunks = (lens + chunk - 1) // chunk
    first = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(nchunks)[:-1].astype(jnp.int32)])
    num_chunks = -(-total // chunk) + n
    c = jnp.arange(num_chunks, dtype=jnp.int32)
    # The sequence of chunk c: the last n with first[n] <= c among non-empty sequences.
    owner = (nchunks[None, :] > 0) & (first[None, :] <= c[:, None])
    seq = jnp.max(jnp.where(owner, jnp.arange(n, dtype=jnp.int32)[None, :], -1), axis=1)
    valid_chunk = (seq >= 0) & (c < (first[jnp.maximum(seq, 0)] + nchunks[jnp.maximum(seq, 0)]))
    seq = jnp.maximum(seq, 0)
    chunk_first = valid_chunk & (c == first[seq])
    slot = jnp.arange(num_chunks * chunk, dtype=jnp.int32)
    sc = slot // chunk
    off = (sc - first[seq[sc]]) * chunk + slot % chunk
    valid = valid_chunk[sc] & (off < lens[seq[sc]])
    src = jnp.where(valid, cu[seq[sc]] + off, -1)
    tok = jnp.arange(total, dtype=jnp.int32)
    tok_seq = jnp.clip(jnp.searchsorted(cu, tok, side="right").astype(jnp.int32) - 1, 0, n - 1)
    # -1 for tokens outside every sequence (cu_seqlens ending before the packed length: caught
    # when concrete, not under jit): zeros out, no gradient, rather than another token's slot
    dst = jnp.where((tok >= cu[0]) & (tok < cu[-1]), first[tok_seq] * chunk + (tok - cu[tok_seq]), -1)
    last_chunk = jnp.where(nchunks > 0, first + nchunks - 1, -1)
    return dict(
        src=src,
        dst=dst,
        first_chunk=first,
        chunk_seq=seq,
        chunk_first=chunk_first,
        last_chunk=last_chunk,
        num_chunks=num_chunks,
    )


def recurrent_delta_rule(
    q: Any,
    k: Any,
    v: Any,
    beta: Any,
    gate: Any,
    initial_state: Any,
    cu_seqlens: Any,
    *,
    scale: float,
    use_qk_l2norm: bool,
) -> tuple[Any, Any]:
    """The token-by-token recurrence in float32 (any device): the decode step (one token) and
    ``chunked=False``. Canonical arguments as in :class:`DeltaRuleArgs`; returns the output in
    the value's dtype and the final states ``[num_states, num_value_heads, K, V]`` (float32).
    Differentiable by JAX (its backward stores the state once per token: meant for short
    sequences)."""
    out_dtype = v.dtype
    b, t, h, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    grp = hv // h
    f32 = jnp.float32
    q, k, v, beta = (x.astype(f32) for x in (q, k, v, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = jnp.repeat(q * scale, grp, axis=2)
    k = jnp.repeat(k, grp, axis=2)
    g = jnp.zeros((b, t, hv, 1), f32) if gate is None else gate.astype(f32)
    n_states = int(cu_seqlens.shape[0]) - 1 if cu_seqlens is not None else b
    h0 = jnp.zeros((n_states, hv, dk, dv), f32) if initial_state is None else initial_state.astype(f32)
    hp = jax.lax.Precision.HIGHEST

    def step(s: Any, x: Any) -> tuple[Any, Any]:
        q_t, k_t, v_t, b_t, g_t = x  # [B, HV, K], [B, HV, K], [B, HV, V], [B, HV], [B, HV, Kg]
        s = s * jnp.exp(g_t)[..., None]
        kv = jnp.einsum("bhk,bhkv->bhv", k_t, s, precision=hp)
        s = s + jnp.einsum("bhk,bhv->bhkv", k_t * b_t[..., None], v_t - kv, precision=hp)
        return s, jnp.einsum("bhk,bhkv->bhv", q_t, s, precision=hp)

    xs = tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v, beta, g))
    if cu_seqlens is None:
        final, o = jax.lax.scan(step, h0, xs)
        return jnp.moveaxis(o, 0, 1).astype(out_dtype), final
    cu = cu_seqlens.astype(jnp.int32)
    n = n_states
    tok = jnp.arange(t, dtype=jnp.int32)
    tok_seq = jnp.clip(jnp.searchsorted(cu, tok, side="right").astype(jnp.int32) - 1, 0, n - 1)
    starts = tok == cu[tok_seq]
    ends = tok == cu[tok_seq + 1] - 1

    def vstep(carry: Any, x: Any) -> tuple[Any, Any]:
        s, finals = carry
        xt, sq, st, en = x
        s = jnp.where(st, h0[sq][None], s)
        s, o = step(s, xt)
        finals = jnp.where(en, finals.at[sq].set(s[0]), finals)
        return (s, finals), o

    (_, finals), o = jax.lax.scan(vstep, (jnp.zeros((1, hv, dk, dv), f32), h0), (xs, tok_seq, starts, ends))
    return jnp.moveaxis(o, 0, 1).astype(out_dtype), finals
