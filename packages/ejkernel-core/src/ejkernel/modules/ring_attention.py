"""``ring_attention``: exact attention over a sequence sharded across devices (sequence parallelism).

The op takes the arguments of ``flash_attention`` plus ``axis_name`` (the mesh axis the sequence
is sharded over) and ``layout`` (how the sequence is laid out over that axis). The algorithm is
in :mod:`ejkernel.modules._ring`; this module holds the op (signature, validation, sharding),
its config, the zig-zag layout helpers and the registry entries.

Implementations: one per platform (``"xla"``, ``"triton"``, ...). The ring itself is plain JAX
collectives; the implementation named ``p`` runs each block with the best ``flash_attention``
implementation of platform ``p`` that provides the log-sum-exp protocol
(:attr:`~ejkernel.ops.KernelImpl.supports_lse`) and accepts the blocks, chosen through the
registry. Its priority is that inner implementation's, so ``platform="auto"`` picks the ring over
the kernel ``flash_attention`` itself would pick; ``platform="triton"`` asks for Triton blocks.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..ops.config import BwdParams, FwdParams, OpConfig
from ..ops.device import DeviceInfo, device_for_arrays
from ..ops.kernel import args_record, describe_array
from ..ops.registry import Backend, KernelImpl, KernelRegistry, Platform, kernel_registry
from ..types.mask_info import MaskInfo
from . import _validate as V
from ._ring import RingPlan, ring
from .attention import AttentionArgs, DenseAttentionOp, _bind_bias, bind_attention
from .flash_attention import FlashAttentionConfig

__all__ = [
    "LAYOUTS",
    "RingAttention",
    "RingAttentionArgs",
    "RingAttentionConfig",
    "RingAttentionImpl",
    "ring_attention",
    "zigzag_permute",
    "zigzag_unpermute",
]

log = logging.getLogger("ejkernel")

LAYOUTS = ("contiguous", "zigzag")


# -- the zig-zag layout ------------------------------------------------------------------------


def _zigzag_order(num_shards: int) -> np.ndarray:
    """Chunk order of the zig-zag layout: device ``r`` holds chunks ``r`` and ``2P - 1 - r``."""
    return np.array([c for r in range(num_shards) for c in (r, 2 * num_shards - 1 - r)])


def _permute_chunks(x: Any, num_shards: int, axis: int, order: np.ndarray, name: str) -> jax.Array:
    x = jnp.asarray(x)
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"{name}: num_shards must be a positive int, got {num_shards!r}")
    axis = axis % x.ndim
    n, parts = x.shape[axis], 2 * int(num_shards)
    if n % parts:
        raise ValueError(
            f"{name}: axis {axis} of length {n} (shape {tuple(x.shape)}) does not split into 2 × {num_shards} = "
            f"{parts} equal chunks"
        )
    chunks = x.reshape(*x.shape[:axis], parts, n // parts, *x.shape[axis + 1 :])
    return jnp.take(chunks, jnp.asarray(order), axis=axis).reshape(x.shape)


def zigzag_permute(x: Any, num_shards: int, axis: int = 1) -> jax.Array:
    """Reorder a sequence axis into the zig-zag layout that balances causal ring attention.

    The axis is cut into ``2 · num_shards`` equal chunks; shard ``r`` (of a contiguous split of
    the result) gets chunks ``r`` and ``2 · num_shards - 1 - r``, so every device has as much
    work under a causal mask. Apply it to everything indexed by the sequence (query, key, value,
    segment ids, position ids; both sequence axes of a bias or a pairwise mask), call
    ``ring_attention(..., layout="zigzag")``, and undo it on the output with
    :func:`zigzag_unpermute`.

    >>> zigzag_permute(jnp.arange(8), 2, axis=0)
    Array([0, 1, 6, 7, 2, 3, 4, 5], dtype=int32)
    """
    return _permute_chunks(x, num_shards, axis, _zigzag_order(num_shards), "zigzag_permute")


def zigzag_unpermute(x: Any, num_shards: int, axis: int = 1) -> jax.Array:
    """The inverse of :func:`zigzag_permute`: back to the natural sequence order."""
    return _permute_chunks(x, num_shards, axis, np.argsort(_zigzag_order(num_shards)), "zigzag_unpermute")


# -- the op ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RingAttentionConfig(OpConfig):
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

    op_name = "ring_attention"

    fwd_params: FwdParams | None = None
    bwd_params: BwdParams | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.fwd_params is not None and not isinstance(self.fwd_params, FwdParams):
            raise TypeError(f"RingAttentionConfig.fwd_params must be FwdParams, got {type(self.fwd_params).__name__}")
        if self.bwd_params is not None and not isinstance(self.bwd_params, BwdParams):
            raise TypeError(f"RingAttentionConfig.bwd_params must be BwdParams, got {type(self.bwd_params).__name__}")


@args_record
class RingAttentionArgs(AttentionArgs):
    """:class:`AttentionArgs` of the local shards plus the ring's axis and layout.

    ``bias`` and ``attention_mask`` hold the local query rows and *every* key column (in layout
    order): ``[.., seq_q, axis_size · seq_k]`` locally, or a broadcast dim of 1.
    """

    axis_name: Any = None
    layout: str = "contiguous"

    @property
    def mode(self) -> str:
        if self.sliding_window is not None:
            return "window"
        return "causal" if self.causal else "full"


def _check_axis_name(op: str, axis_name: Any) -> Any:
    if isinstance(axis_name, str) and axis_name:
        return axis_name
    if isinstance(axis_name, (tuple, list)) and axis_name and all(isinstance(a, str) and a for a in axis_name):
        return tuple(axis_name) if len(axis_name) > 1 else axis_name[0]
    raise TypeError(f"{op}: axis_name must be a mesh axis name (a str) or a tuple of them, got {axis_name!r}")


def _bound_axis_size(axis_name: Any) -> int | None:
    """The size of ``axis_name`` when called inside ``shard_map`` over it, else ``None``."""
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError:
        return None


class RingAttention(DenseAttentionOp):
    """The ``ring_attention`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    op_name = "ring_attention"
    version = "1"
    config_cls = RingAttentionConfig

    def bind(self, params: dict[str, Any]) -> RingAttentionArgs:
        op = self.op_name
        params = dict(params)
        axis_name = _check_axis_name(op, params.pop("axis_name", None))
        layout = params.pop("layout", "contiguous")
        if layout not in LAYOUTS:
            raise ValueError(f"{op}: layout must be one of {LAYOUTS}, got {layout!r}")
        # Bias and pairwise masks span every key, not the local shard: checked here, not by
        # bind_attention.
        bias = params.pop("bias", None)
        mi = params.get("mask_info")
        pair = None
        if isinstance(mi, MaskInfo) and mi.attention_mask is not None:
            pair = mi.attention_mask
            params["mask_info"] = dataclasses.replace(mi, attention_mask=None)
        a = bind_attention(op, params)
        b, sq, h, sk = a.batch, a.seq_q, a.num_heads, a.seq_k
        shapes = f"query {V.shape_str(a.query)}, key {V.shape_str(a.key)}"
        if (a.causal or a.sliding_window is not None) and sq != sk:
            raise ValueError(f"{op}: causal and sliding_window need seq_q == seq_k: {shapes}")
        if layout == "zigzag" and (sq % 2 or sk % 2):
            raise ValueError(
                f"{op}: the zigzag layout holds two equal chunks per shard, so their lengths must be even: {shapes}"
            )
        # Inside shard_map the arrays are shards: the key columns of a bias or mask are all keys.
        n = _bound_axis_size(axis_name)
        sk_all = sk * (n or 1)
        bias = _bind_bias(op, bias, b, h, sq, sk_all)
        mask = None
        if pair is not None:
            mask = V.as_array(op, "mask_info attention_mask", pair, ndim=4)
            mb, mh, msq, msk = (int(d) for d in mask.shape)
            if (msq, msk) != (sq, sk_all) or mb not in (1, b) or mh not in (1, h):
                raise ValueError(
                    f"{op}: mask_info attention_mask {V.shape_str(mask)} must be [batch or 1, num_heads or 1, seq_q, "
                    f"all keys] with batch={b}, num_heads={h}, seq_q={sq}, all keys={sk_all}"
                )
            mask = mask.astype(bool)
        fields = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
        fields.update(bias=bias, attention_mask=mask, axis_name=axis_name, layout=layout)
        return RingAttentionArgs(**fields)

    def describe(self, a: RingAttentionArgs) -> str:
        return f"{super().describe(a)} axis={a.axis_name} layout={a.layout}"

    # -- shard_map ----------------------------------------------------------------------------

    def partition_specs(self, a: RingAttentionArgs, in_specs: Any, mesh: Any) -> dict[str, Any]:
        from jax.sharding import PartitionSpec as P

        op = self.op_name
        axis = a.axis_name
        if isinstance(in_specs, P) or not isinstance(in_specs, (tuple, list)):
            raise TypeError(f"{op}: in_specs must be a tuple of PartitionSpecs for (query, key, value[, bias])")
        n_pos = 4 if a.bias is not None else 3
        if len(in_specs) not in (3, n_pos):
            raise ValueError(f"{op}: in_specs has {len(in_specs)} entries; expected 3 (query, key, value) or {n_pos}")
        ring_size = V.mesh_axis_size(mesh, axis)
        ring_names = set(axis if isinstance(axis, tuple) else (axis,))
        qb, _, qh, _ = V.spec_entries(op, "query", in_specs[0], 4)
        for name, spec in (("query", in_specs[0]), ("key", in_specs[1]), ("value", in_specs[2])):
            xb, xs, xh, xd = V.spec_entries(op, name, spec, 4)
            if (xb, xh) != (qb, qh):
                raise ValueError(
                    f"{op}: {name} must be sharded like query over batch and heads: query {in_specs[0]}, {name} {spec}"
                )
            if xs != axis:
                raise ValueError(
                    f"{op}: the sequence axis of {name} must be sharded over axis_name={axis!r} (the ring), got {spec}"
                )
            if xd is not None:
                raise ValueError(f"{op}: the head_dim axis of {name} cannot be sharded (got {spec})")
        for entry in (qb, qh):
            names = set(entry if isinstance(entry, tuple) else (entry,)) if entry is not None else set()
            if names & ring_names:
                raise ValueError(f"{op}: the ring axis {axis!r} cannot also shard batch or heads (query {in_specs[0]})")
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
                    f"mesh axis {axis!r} ({how}): query {V.shape_str(a.query)}, key {V.shape_str(a.key)}, "
                    f"value {V.shape_str(a.value)}"
                )
        V.check_batch_head_shards(op, a.batch, a.num_heads, a.num_kv_heads, mesh, qb, qh)

        def rows_spec(x: Any) -> Any:  # [batch or 1, heads or 1, seq_q or 1, all keys or 1]
            return P(qb if x.shape[0] > 1 else None, qh if x.shape[1] > 1 else None, axis if x.shape[2] > 1 else None)

        specs: dict[str, Any] = {"query": in_specs[0], "key": in_specs[1], "value": in_specs[2]}
        if a.bias is not None:
            expect = rows_spec(a.bias)
            given = V.spec_entries(op, "bias", in_specs[3], 4) if len(in_specs) == 4 else None
            if given is not None and given != V.spec_entries(op, "bias", expect, 4):
                raise ValueError(f"{op}: bias of shape {V.shape_str(a.bias)} must be sharded as {expect}")
            specs["bias"] = expect
        if a.q_segment_ids is not None:
            specs["q_segment_ids"] = specs["kv_segment_ids"] = P(qb, axis)
        if a.attention_mask is not None:
            specs["attention_mask"] = rows_spec(a.attention_mask)
        if a.softmax_aux is not None:
            specs["softmax_aux"] = P(qh, None)
        return specs

    def default_out_spec(self, a: RingAttentionArgs, specs: dict[str, Any]) -> Any:
        from jax.sharding import PartitionSpec as P

        qb, qs, qh, _ = V.spec_entries(self.op_name, "query", specs["query"], 4)
        return P(qb, qs, qh, None)


@RingAttention.define
def ring_attention(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    key: Float[Array, "batch seq_k num_kv_heads head_dim"],
    value: Float[Array, "batch seq_k num_kv_heads value_head_dim"],
    bias: Float[Array, "..."] | None = None,
    *,
    axis_name: str | tuple[str, ...],
    mask_info: MaskInfo | None = None,
    causal: bool = False,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    softmax_scale: float | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    layout: Literal["contiguous", "zigzag"] = "contiguous",
    platform: Literal["auto", "xla", "triton", "pallas", "cuda"] | str | None = None,
    cfg: RingAttentionConfig | None = None,
    mesh: Any = None,
    in_specs: Any = None,
    out_specs: Any = None,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
    """Exact attention with the sequence sharded over a mesh axis: keys and values travel a ring.

    Each device keeps its query shard and passes its key/value shard (with its segment ids) to
    the next device over ``axis_name`` with ``jax.lax.ppermute``, merging each block's result
    by log-sum-exp; the next transfer overlaps the current block. The backward is a ring too
    (dK/dV travel with K/V); memory per device does not grow with the number of devices. The
    result equals ``flash_attention`` on the whole sequence.

    Call it inside ``jax.shard_map`` with the sequence axis sharded over ``axis_name`` (the
    arguments are then the local shards), or pass ``mesh``/``in_specs`` and it sets up the
    ``shard_map`` itself (the arguments are then the global arrays).

    Args:
        query: ``[batch, seq_q, num_heads, head_dim]`` (the local shard inside ``shard_map``).
        key: ``[batch, seq_k, num_kv_heads, head_dim]``; GQA/MQA as in ``flash_attention``
            (only the key/value heads travel).
        value: ``[batch, seq_k, num_kv_heads, value_head_dim]``.
        bias: added to the logits (after the soft cap), ``[batch or 1, num_heads or 1, seq_q or 1,
            all keys or 1]``: rows follow the (local) queries, the last axis spans *every* key of
            the ring in layout order (``axis_size · seq_k`` columns inside ``shard_map``). Quadratic
            in the sequence unless broadcast. Differentiable.
        axis_name: the mesh axis (or tuple of axes) the sequence is sharded over.
        mask_info: segment ids (packed sequences may cross shard boundaries; ``-1`` = padding),
            a pairwise mask (shaped like ``bias``, full rows), causal / window patterns.
        causal: query ``i`` attends keys ``j <= i`` (global positions; needs ``seq_q == seq_k``).
        sliding_window: ``w`` or ``(left, right)``: query ``i`` attends keys
            ``i - left <= j <= i + right`` (global positions). Needs an inner kernel that honours
            ``AttentionArgs.position_offset``.
        logits_soft_cap: ``cap · tanh(logits / cap)``, before ``bias``.
        softmax_scale: multiplies ``q kᵀ``; default ``1/sqrt(head_dim)``.
        softmax_aux: attention-sink logits ``[num_heads]`` or ``[num_heads, num_sinks]``; they join
            each row's denominator once. Differentiable.
        layout: how the sequence is split over ``axis_name``: ``"contiguous"`` (device ``r`` holds
            the ``r``-th slice) or ``"zigzag"`` (device ``r`` holds chunks ``r`` and ``2P - 1 - r``
            of ``2P``, see :func:`zigzag_permute`), which balances the causal work across devices.
            Every array indexed by the sequence must be in this layout; so is the output.
        platform: ``"auto"`` or the platform of the inner flash-attention kernel.
        cfg: a :class:`RingAttentionConfig` (the inner kernel's tiling).
        mesh, in_specs, out_specs: run under ``jax.shard_map`` on ``mesh``: ``in_specs`` are the
            PartitionSpecs of ``(query, key, value[, bias])`` with the sequence axis sharded over
            ``axis_name`` (batch and heads may be sharded over other axes); the sequence length
            must split evenly. ``out_specs`` defaults to the query's.

    Returns:
        ``[batch, seq_q, num_heads, value_head_dim]`` in the query's dtype and layout.

    Example:
        >>> import jax, numpy as np, ejkernel
        >>> from jax.sharding import Mesh, PartitionSpec as P
        >>> mesh = Mesh(np.array(jax.devices()), ("sp",))
        >>> n = len(jax.devices())
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 256 * n, 4, 64))
        >>> spec = P(None, "sp", None, None)
        >>> out = ejkernel.ring_attention(q, k, v, axis_name="sp", causal=True, mesh=mesh, in_specs=(spec,) * 3)
        >>> out.shape == q.shape
        True
    """
    return RingAttention.call(locals())


# -- implementations: one ring per platform of inner kernels -----------------------------------


def _sds(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape), dtype)


def _probe(a: RingAttentionArgs, nq: int, nk: int, causal: bool, offset: bool) -> AttentionArgs:
    """Abstract arguments of one inner call of ``nq`` queries against ``nk`` keys."""

    def cut(x: Any) -> Any:
        if x is None:
            return None
        return _sds((x.shape[0], x.shape[1], nq if x.shape[2] > 1 else 1, nk if x.shape[3] > 1 else 1), x.dtype)

    b = a.batch
    return AttentionArgs(
        query=_sds((b, nq, *a.query.shape[2:]), a.query.dtype),
        key=_sds((b, nk, *a.key.shape[2:]), a.key.dtype),
        value=_sds((b, nk, *a.value.shape[2:]), a.value.dtype),
        bias=cut(a.bias),
        q_segment_ids=None if a.q_segment_ids is None else _sds((b, nq), jnp.int32),
        kv_segment_ids=None if a.kv_segment_ids is None else _sds((b, nk), jnp.int32),
        attention_mask=cut(a.attention_mask),
        position_offset=_sds((), jnp.int32) if offset else None,
        causal=causal,
        softmax_scale=a.softmax_scale,
        sliding_window=a.sliding_window if offset else None,
        logits_soft_cap=a.logits_soft_cap,
    )


def block_probes(a: RingAttentionArgs) -> list[AttentionArgs]:
    """Abstract arguments of every kind of inner call the ring makes (the first is the largest)."""
    sq, sk = a.seq_q, a.seq_k
    if a.mode == "full":
        return [_probe(a, sq, sk, False, False)]
    if a.mode == "causal":
        if a.layout == "zigzag":
            return [_probe(a, sq, sq, True, False), _probe(a, sq // 2, sq // 2, False, False)]
        return [_probe(a, sq, sq, True, False), _probe(a, sq, sq, False, False)]
    h = sq // (2 if a.layout == "zigzag" else 1)
    return [_probe(a, h, h, a.causal, True)]


class RingAttentionImpl(KernelImpl):
    """``ring_attention`` over the ``flash_attention`` implementations of one platform.

    It accepts a call when an implementation of its platform with ``supports_lse`` accepts every
    kind of block the ring will run (see :func:`block_probes`); its priority is the best such
    implementation's, so it mirrors ``flash_attention``'s own choice.
    """

    version = "1"

    def __init__(self, registry: KernelRegistry):
        self._registry = registry

    @property  # type: ignore[override]
    def priority(self) -> int:
        inner = [i.priority for i in self._lse_impls()]
        return max(inner) if inner else -1

    @priority.setter
    def priority(self, value: int) -> None:  # the registry's value: the inner one's wins
        pass

    def _lse_impls(self) -> list[KernelImpl]:
        return [
            i
            for i in self._registry.implementations("flash_attention")
            if i.platform is self.platform and i.supports_lse
        ]

    def inner(self, args: RingAttentionArgs, device: DeviceInfo) -> tuple[KernelImpl | None, str]:
        """The inner implementation for ``args`` on ``device``, or ``None`` and why."""
        impls = [i for i in self._registry.implementations("flash_attention") if i.platform is self.platform]
        if not impls:
            return None, f"no flash_attention implementation of platform {self.platform.value!r} is registered"
        probes = block_probes(args)
        reasons = []
        for impl in impls:
            if not impl.supports_lse:
                reasons.append(f"flash_attention/{impl.name} does not provide the log-sum-exp protocol (supports_lse)")
                continue
            why = next((r for p in probes if (r := self._registry.check(impl, p, device)) is not None), None)
            if why is None:
                return impl, ""
            reasons.append(f"flash_attention/{impl.name} declines the ring's blocks: {why}")
        return None, "; ".join(reasons)

    def decline(self, args: RingAttentionArgs, device: DeviceInfo) -> str | None:
        impl, why = self.inner(args, device)
        return None if impl is not None else why

    def _inner_or_raise(self, args: RingAttentionArgs, device: DeviceInfo) -> KernelImpl:
        impl, why = self.inner(args, device)
        if impl is None:
            raise ValueError(f"ring_attention/{self.name}: {why}")
        return impl

    @staticmethod
    def _flash_cfg(cfg: Any, impl: KernelImpl) -> FlashAttentionConfig:
        return FlashAttentionConfig(fwd_params=cfg.fwd_params, bwd_params=cfg.bwd_params, platform=impl.name)

    def heuristic_cfg(self, args: RingAttentionArgs, device: DeviceInfo) -> RingAttentionConfig:
        impl = self._inner_or_raise(args, device)
        inner = impl.heuristic_cfg(block_probes(args)[0], device)
        return RingAttentionConfig(fwd_params=inner.fwd_params, bwd_params=inner.bwd_params)

    def candidate_cfgs(self, args: RingAttentionArgs, device: DeviceInfo) -> list[RingAttentionConfig]:
        return []  # the ring runs only under its mesh: autotuning falls through to the heuristic

    def validate_cfg(self, cfg: RingAttentionConfig, args: RingAttentionArgs, device: DeviceInfo) -> None:
        impl = self._inner_or_raise(args, device)
        for probe in block_probes(args):
            impl.validate_cfg(self._flash_cfg(cfg, impl), probe, device)

    def run(self, args: RingAttentionArgs, cfg: RingAttentionConfig) -> jax.Array:
        op = "ring_attention"
        n = _bound_axis_size(args.axis_name)
        if n is None:
            raise ValueError(
                f"{op}: axis_name {args.axis_name!r} is not bound: call it inside jax.shard_map over a mesh with that "
                "axis, or pass mesh= and in_specs="
            )
        for name, x in (("bias", args.bias), ("mask_info attention_mask", args.attention_mask)):
            if x is not None and x.shape[3] not in (1, n * args.seq_k):
                raise ValueError(
                    f"{op}: the last axis of {name} {describe_array(x)} must span every key of the ring: "
                    f"{n} devices × {args.seq_k} keys = {n * args.seq_k} (or be 1)"
                )
        device = device_for_arrays(jax.tree.leaves(args))
        impl = self._inner_or_raise(args, device)
        log.debug("ejkernel: ring_attention/%s runs its blocks with flash_attention/%s", self.name, impl.name)
        plan = RingPlan(
            axis_name=args.axis_name,
            axis_size=n,
            layout=args.layout,
            mode=args.mode,
            seq_q=args.seq_q,
            seq_k=args.seq_k,
            causal=args.causal,
            window=args.sliding_window,
            scale=args.softmax_scale,
            soft_cap=args.logits_soft_cap,
            impl=impl,
            cfg=self._flash_cfg(cfg, impl),
        )
        return ring(
            plan,
            args.query,
            args.key,
            args.value,
            args.bias,
            args.softmax_aux,
            args.q_segment_ids,
            args.kv_segment_ids,
            args.attention_mask,
        )


def register(registry: KernelRegistry) -> None:
    """Register one ring implementation per platform with ``registry``."""
    for platform in Platform:
        registry.register("ring_attention", platform, Backend.ANY, name=platform.value)(RingAttentionImpl(registry))


register(kernel_registry)
