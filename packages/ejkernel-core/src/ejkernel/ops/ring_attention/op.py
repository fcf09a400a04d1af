"""The ``ring_attention`` op: exact attention over a sequence sharded across devices.

It takes the arguments of ``flash_attention`` plus ``axis_name`` (the mesh axis the sequence is
sharded over) and ``layout`` (how the sequence is laid out over that axis). The algorithm is in
:mod:`._ring`; the composite implementation that runs it over ``flash_attention`` blocks is in
:mod:`.impl` (backends with the log-sum-exp protocol register it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ...types.mask_info import MaskInfo
from ..args import (
    ShardPlan,
    ambient_mesh,
    array,
    as_array,
    mesh_axis_size,
    shape_str,
    static,
    static_bool,
    static_float,
    static_int,
)
from ..families.attention import _NOT_SHARDED, AttentionArgs, AttentionOp, BlockAttentionConfig, bind_attention
from .layout import LAYOUTS

__all__ = ["RingAttention", "RingAttentionArgs", "RingAttentionConfig"]


@dataclasses.dataclass(frozen=True)
class RingAttentionConfig(BlockAttentionConfig):
    """Config of ``ring_attention``: the tiling of its inner (per-block) flash-attention kernel.

    Attributes:
        fwd_params: forward tiling of the inner kernel, as in ``FlashAttentionConfig``.
        bwd_params: backward tiling of the inner kernel.
        platform: ``"auto"`` or the platform of the inner kernel (``"xla"``, ``"triton"``, ...).
        backend: ``"any"`` or ``"gpu"``/``"tpu"``/``"cpu"``.

    ``None`` fields come from the inner implementation's heuristic for the block shapes. The
    ring is not autotuned itself (it needs its mesh); tune ``flash_attention`` at the block shape
    and pass the result here.
    """


class RingAttentionArgs(
    AttentionArgs,
    shardable=("batch", "num_heads", "num_kv_heads", "seq_q", "seq_k"),
    shard_reasons={k: v for k, v in _NOT_SHARDED.items() if not k.startswith("seq")},
    tied=[("num_heads", "num_kv_heads"), ("seq_q", "seq_k")],
):
    """:class:`AttentionArgs` of the local shards plus the ring's axis and layout.

    ``bias`` and ``attention_mask`` hold the local query rows and *every* key column (in layout
    order): ``[.., seq_q, axis_size · seq_k]`` locally, or a broadcast dim of 1.
    """

    bias: Any = array(
        "batch", "num_heads", "seq_q", "all_keys", optional=True, broadcast=True, ranks=(2, 3, 4), differentiable=True
    )
    attention_mask: Any = array(
        "batch", "num_heads", "seq_q", "all_keys", kind="bool", optional=True, broadcast=True,
        label="mask_info attention_mask",
    )  # fmt: skip
    axis_name: Any = static(None)
    layout: str = static("contiguous")
    # Earlier releases' attention_sink_size: the first keys of the sequence, exempt from the
    # sliding window (0 without a window, where it changes nothing).
    attention_sink_size: int = static(0)

    @property
    def mode(self) -> str:
        if self.sliding_window is not None:
            return "window"
        return "causal" if self.causal else "full"


def _check_axis_name(op: str, axis_name: Any) -> Any:
    if axis_name is None:
        return None
    if isinstance(axis_name, str) and axis_name:
        return axis_name
    if isinstance(axis_name, (tuple, list)) and axis_name and all(isinstance(a, str) and a for a in axis_name):
        return tuple(axis_name) if len(axis_name) > 1 else axis_name[0]
    raise TypeError(f"{op}: axis_name must be a mesh axis name (a str) or a tuple of them, got {axis_name!r}")


def _earlier_options(op: str, p: dict[str, Any]) -> int:
    """Earlier releases' blockwise-ring options: checked, then removed (see the docstring).
    ``causal_block_size`` (the blockwise ring's causal tiling) sets ``causal``. Returns
    ``attention_sink_size``."""
    pdrop = static_float(op, "pdrop", p.pop("pdrop", 0.0), positive=False, allow_none=False)
    deterministic = static_bool(op, "deterministic", p.pop("deterministic", True))
    p.pop("dropout_rng", None)
    if pdrop and not deterministic:
        raise ValueError(f"{op}: dropout (pdrop={pdrop}, deterministic=False) is not supported by the ring")
    if static_int(op, "causal_block_size", p.pop("causal_block_size", None), minimum=1) is not None:
        p["causal"] = True
    static_bool(op, "float32_logits", p.pop("float32_logits", True))
    static_bool(op, "prevent_cse", p.pop("prevent_cse", True))
    policy = p.pop("policy", None)
    if policy is not None and not callable(policy):
        raise TypeError(
            f"{op}: policy must be a jax.checkpoint policy (a callable) or None, got {type(policy).__name__}"
        )
    dtype = p.pop("dtype", None)
    if dtype is not None:
        try:
            jnp.dtype(dtype)
        except TypeError:
            raise TypeError(f"{op}: dtype must be a dtype, got {dtype!r}") from None
    if p.pop("cache_idx", None) is not None:
        raise ValueError(f"{op}: cache_idx (decoding into a cache) is not supported; use ejkernel.page_attention")
    return static_int(op, "attention_sink_size", p.pop("attention_sink_size", 0), minimum=0) or 0


def bound_axis_size(axis_name: Any) -> int | None:
    """The size of ``axis_name`` when called inside ``shard_map`` over it, else ``None``."""
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError:
        return None


class RingAttention(AttentionOp):
    """The ``ring_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "ring_attention"
    version = "1"
    config_cls = RingAttentionConfig
    args_cls = RingAttentionArgs

    def bind(self, params: dict[str, Any]) -> Any:
        bias, aux = params.get("bias"), params.get("softmax_aux")
        if getattr(bias, "ndim", None) == 1 or getattr(aux, "ndim", None) == 4:
            # Earlier 2026 releases' order (query, key, value, softmax_aux, bias), told apart by rank.
            params = {**params, "bias": aux, "softmax_aux": bias}
        return super().bind(params)

    def config_hints(self, params: dict[str, Any]) -> dict[str, Any]:
        op = self.name
        q = static_int(op, "query_chunk_size", params.pop("query_chunk_size", None), minimum=1)
        k = static_int(op, "key_chunk_size", params.pop("key_chunk_size", None), minimum=1)
        fwd = {n: v for n, v in (("q_blocksize", q), ("kv_blocksize", k)) if v is not None}
        return {"fwd_params": fwd} if fwd else {}

    def canonicalize(self, params: dict[str, Any]) -> RingAttentionArgs:
        op = self.name
        params = dict(params)
        sinks = _earlier_options(op, params)
        axis_name = _check_axis_name(op, params.pop("axis_name", None))
        layout = params.pop("layout", "contiguous")
        if layout not in LAYOUTS:
            raise ValueError(f"{op}: layout must be one of {LAYOUTS}, got {layout!r}")
        q, k = params["query"], params["key"]
        sq, sk = int(q.shape[1]), int(k.shape[1])
        # Inside shard_map the arrays are shards: the key columns of a bias or mask are all keys.
        n = bound_axis_size(axis_name)
        sk_all = sk * (n or 1)
        mi = params.get("mask_info")
        if isinstance(mi, MaskInfo) and mi.stored_attention_mask is not None:
            mask = as_array(op, "mask_info attention_mask", mi.stored_attention_mask, ndim=4)
            if tuple(int(d) for d in mask.shape[2:]) != (sq, sk_all):
                raise ValueError(
                    f"{op}: mask_info attention_mask {shape_str(mask)} must be [batch or 1, num_heads or 1, seq_q, "
                    f"all keys] with seq_q={sq}, all keys={sk_all}"
                )
        a = bind_attention(op, params, keys_total=sk_all)
        shapes = f"query {shape_str(a.query)}, key {shape_str(a.key)}"
        if (a.causal or a.sliding_window is not None) and sq != sk:
            raise ValueError(f"{op}: causal and sliding_window need seq_q == seq_k: {shapes}")
        if layout == "zigzag" and (sq % 2 or sk % 2):
            raise ValueError(
                f"{op}: the zigzag layout holds two equal chunks per shard, so their lengths must be even: {shapes}"
            )
        fields = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
        sinks = sinks if a.sliding_window is not None else 0
        return RingAttentionArgs(**fields, axis_name=axis_name, layout=layout, attention_sink_size=sinks)

    # -- shard_map ----------------------------------------------------------------------------

    def shard_plan(self, a: RingAttentionArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        from jax.sharding import PartitionSpec as P

        op = self.name
        axis = a.axis_name if a.axis_name is not None else _sequence_axis(in_specs)
        ring_size = mesh_axis_size(mesh, axis)
        if isinstance(in_specs, (tuple, list)) and not isinstance(in_specs, P):
            for name, spec in zip(("query", "key", "value"), in_specs, strict=False):
                if isinstance(spec, P):
                    entries = tuple(spec) + (None,) * (4 - len(tuple(spec)))
                    if entries[1] != axis:
                        raise ValueError(
                            f"{op}: the sequence axis of {name} must be sharded over axis_name={axis!r} (the ring), "
                            f"got {spec}"
                        )
                    ring_names = set(axis if isinstance(axis, tuple) else (axis,))
                    for entry in (entries[0], entries[2]):
                        used = set(entry if isinstance(entry, tuple) else (entry,)) if entry is not None else set()
                        if used & ring_names:
                            raise ValueError(
                                f"{op}: the ring axis {axis!r} cannot also shard batch or heads ({name} {spec})"
                            )
        parts = ring_size * (2 if a.layout == "zigzag" else 1)
        for name, x in (("query", a.query), ("key", a.key), ("value", a.value)):
            if x.shape[1] % parts:
                how = (
                    f"the zigzag layout needs a multiple of 2 × {ring_size} = {parts}"
                    if a.layout == "zigzag"
                    else f"a multiple of {ring_size}"
                )
                raise ValueError(
                    f"{op}: {name} sequence length {x.shape[1]} does not split evenly over the {ring_size} devices of "
                    f"mesh axis {axis!r} ({how}): query {shape_str(a.query)}, key {shape_str(a.key)}, "
                    f"value {shape_str(a.value)}"
                )
        return super().shard_plan(a, in_specs, mesh)

    def implicit_sharding(self, a: RingAttentionArgs) -> tuple[Any, Any] | None:
        """Outside ``shard_map``, inside ``with jax.set_mesh(mesh):`` (or ``with mesh:``) whose
        mesh has ``axis_name``: the sequence sharded over it, as earlier releases ran it."""
        from jax.sharding import PartitionSpec as P

        if a.axis_name is None or bound_axis_size(a.axis_name) is not None:
            return None
        mesh = ambient_mesh()
        names = a.axis_name if isinstance(a.axis_name, tuple) else (a.axis_name,)
        if mesh is None or not set(names) <= set(mesh.axis_names):
            return None
        spec = P(None, a.axis_name, None, None)
        return mesh, (spec, spec, spec)

    def localize(self, a: RingAttentionArgs, plan: ShardPlan, mesh: Any) -> RingAttentionArgs:
        a = super().localize(a, plan, mesh)
        if a.axis_name is None:
            spec = tuple(plan.specs.get("query") or ())
            axis = spec[1] if len(spec) > 1 else None
            if axis is not None:  # inferred: the mesh axis in_specs shard the query's sequence over
                a = dataclasses.replace(a, axis_name=axis)
        return a


def _sequence_axis(in_specs: Any) -> Any:
    """The mesh axis ``in_specs`` shard the query's sequence over (``None``: not sharded)."""
    from jax.sharding import PartitionSpec as P

    spec = in_specs[0] if isinstance(in_specs, (tuple, list)) and not isinstance(in_specs, P) else in_specs
    if isinstance(spec, P) and len(tuple(spec)) > 1:
        return tuple(spec)[1]
    return None
