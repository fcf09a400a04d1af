"""The ``grouped_matmul`` op: the MoE grouped GEMM (``lax.ragged_dot`` semantics, megablox style).

``lhs[m, k]`` holds the rows of every group back to back (``group_sizes`` of them, in order);
``rhs[g, k, n]`` (or ``[g, n, k]`` with ``transpose_rhs``) holds one matrix per *local* group. The
local groups are ``group_offset .. group_offset + g - 1`` of the ``len(group_sizes)`` groups (an
expert-parallel shard holds a slice of the experts); rows of the other groups, and rows past
``sum(group_sizes)``, are not computed: they are zeros, or ``existing_out``'s rows when given.

``rhs_scale[g, num_blocks, 1, n]`` (earlier releases' quantization scales) multiplies the weights
before the product, per group, block of ``k`` (``k / num_blocks`` rows each) and column:
``out[r] = lhs[r] @ (rhs[j] * S[j])`` with ``S[j][kk, c] = rhs_scale[j, kk // (k / num_blocks), 0, c]``;
``rhs_bias`` is added after.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..args import Args, ShardPlan, array, concrete, shape_str, static, static_bool
from ..checks import ValueRule
from ..config import OpConfig, tile
from ..op import Op

__all__ = [
    "GroupedMatmul",
    "GroupedMatmulArgs",
    "GroupedMatmulConfig",
    "group_bounds",
    "merge_rows",
    "row_groups",
    "row_groups_of",
    "scaled_rhs",
]

_PRECISIONS = {
    None: "default",
    "default": "default",
    "high": "high",
    "highest": "highest",
    "fastest": "default",
    "bfloat16": "default",
    "tensorfloat32": "high",
    "float32": "highest",
}


@dataclasses.dataclass(frozen=True)
class GroupedMatmulConfig(OpConfig):
    """Config of ``grouped_matmul``.

    Attributes:
        block_m: rows of ``lhs`` per tile (GPU: a tile never straddles two groups; smaller tiles
            waste less on many small groups).
        block_n: output columns per tile.
        block_k: depth of one step of the reduction.
        num_warps: warps per program (GPU kernels).
        num_stages: software-pipelining depth (GPU kernels).
        tgmm_num_stages: pipelining depth of the transposed product (``drhs``) when it should
            differ from ``num_stages`` (``None``: the implementation's choice, else
            ``num_stages``): its programs reduce only one group's rows, a few steps each with
            small groups, where a shallower pipeline can be the faster one.
        split_k: the transposed product (``drhs``, summed over a group's rows) split over this
            many row chunks reduced in float32 afterwards (``1``: no split); helps when few
            groups are large.
        persistent: GPU: a persistent grid (a few programs per SM striding over the tiles)
            instead of one program per tile.
        bypass_xla_tiling: accepted from earlier releases (the Pallas TPU kernel's
            XLA-fusion switch); no implementation here reads it.
    """

    block_m: int | None = tile(power_of_two=True)
    block_n: int | None = tile(power_of_two=True)
    block_k: int | None = tile(power_of_two=True)
    num_warps: int | None = tile(power_of_two=True, maximum=32)
    num_stages: int | None = tile()
    tgmm_num_stages: int | None = tile()
    split_k: int | None = tile()
    persistent: bool | None = None
    bypass_xla_tiling: bool = False


def _precision(op: str, x: Any) -> str:
    if isinstance(x, (tuple, list)):
        names = {_precision(op, p) for p in x}
        if len(names) != 1:
            raise ValueError(f"{op}: precision must name one precision for both operands, got {x!r}")
        return names.pop()
    key = x.name.lower() if isinstance(x, jax.lax.Precision) else (x.lower() if isinstance(x, str) else x)
    if key not in _PRECISIONS:
        raise ValueError(f"{op}: precision must be a jax.lax.Precision (DEFAULT, HIGH, HIGHEST) or None, got {x!r}")
    return _PRECISIONS[key]


class GroupedMatmulArgs(
    Args,
    shardable=("n",),
    shard_reasons={
        "m": "rows are grouped by group_sizes over the whole lhs",
        "k": "the contraction would need a sum over shards",
        "groups": (
            "sharding experts routes tokens between devices (all_to_all): call grouped_matmul with "
            "group_offset inside your own shard_map (see examples/moe_expert_parallel.py)"
        ),
        "num_groups": "group_sizes is read whole",
    },
):
    """Canonical arguments of a grouped matmul.

    ``rhs`` keeps the caller's layout (``[g, k, n]``, or ``[g, n, k]`` with ``transpose_rhs``):
    kernels read either through strides. ``group_offset`` is an int32 scalar array (0 by default).
    """

    lhs: Any = array("m", "k", differentiable=True)
    rhs: Any = array("groups", None, None, same_dtype_as="lhs", differentiable=True)
    group_sizes: Any = array("num_groups", kind="int")
    group_offset: Any = array(kind="int")
    existing_out: Any = array("m", None, optional=True, differentiable=True)
    rhs_scale: Any = array("groups", None, None, None, optional=True, ranks=(2, 3, 4), differentiable=True)
    rhs_bias: Any = array("groups", None, None, optional=True, ranks=(2, 3), differentiable=True)
    transpose_rhs: bool = static(False)
    preferred_element_type: str = static("float32")
    precision: str = static("default")

    @property
    def n(self) -> int:
        return int(self.rhs.shape[1] if self.transpose_rhs else self.rhs.shape[2])

    def size(self, axis: str) -> int:
        return self.n if axis == "n" else super().size(axis)

    @property
    def out_dtype(self) -> Any:
        return jnp.dtype(self.preferred_element_type)

    @property
    def dtype(self) -> Any:
        return self.lhs.dtype

    @property
    def has_offset(self) -> bool:
        """Whether the local groups may not be all the groups (a shard of the experts)."""
        return self.num_groups != self.groups

    @property
    def scale_blocks(self) -> int:
        """Blocks of ``k`` with their own ``rhs_scale`` (0: no scale; 1: one per group and column)."""
        return 0 if self.rhs_scale is None else int(self.rhs_scale.shape[1])


FEATURES: dict[str, tuple[str, Any]] = {
    "existing_out": ("rows outside the local groups keep existing_out's", lambda a: a.existing_out is not None),
    "rhs_bias": ("a bias row per group added to its rows", lambda a: a.rhs_bias is not None),
    "rhs_scale": ("a scale per group and column of rhs (rhs_scale [groups, 1, 1, n])", lambda a: a.scale_blocks == 1),
    "rhs_scale_blocks": (
        "a scale per group, block of k and column of rhs (rhs_scale [groups, num_blocks > 1, 1, n])",
        lambda a: a.scale_blocks > 1,
    ),
    "group_offset": ("rhs holds a slice of the groups (expert parallelism)", lambda a: a.num_groups != a.groups),
}


class GroupedMatmul(Op):
    """The ``grouped_matmul`` op, for use with an :class:`~ejkernel.ops.Executor`."""

    name = "grouped_matmul"
    version = "1"
    config_cls = GroupedMatmulConfig
    args_cls = GroupedMatmulArgs
    trainable = True
    # lax.ragged_dot batches only when group_sizes are mapped too (jax 0.11: "vmap over any dim
    # but 0 - NYI"), and a sequential vmap rule is not differentiable.
    vmap_unsupported = "group_sizes partition the rows of one call; map over calls with jax.lax.map"
    features: ClassVar[dict[str, tuple[str, Any]]] = FEATURES

    def canonicalize(self, p: dict[str, Any]) -> GroupedMatmulArgs:
        op = self.name
        # Documented no-ops (see the function's docstring), type-checked all the same.
        static_bool(op, "interpret", p.pop("interpret", False))
        static_bool(op, "do_padding", p.pop("do_padding", True))
        static_bool(op, "use_v2", p.pop("use_v2", False))
        static_bool(op, "use_v3", p.pop("use_v3", False))
        if p.pop("out_shard_callback", None) is not None:
            raise ValueError(
                f"{op}: out_shard_callback belonged to the earlier shard_map wrapper and is not supported; "
                "use mesh=/in_specs= (columns of rhs), or call grouped_matmul inside your own shard_map"
            )
        transpose = static_bool(op, "transpose_rhs", p.get("transpose_rhs", False))
        lhs, rhs = p["lhs"], p["rhs"]
        k = int(lhs.shape[1])
        rhs_k = int(rhs.shape[2] if transpose else rhs.shape[1])
        layout = "[groups, n, k] (transpose_rhs=True)" if transpose else "[groups, k, n]"
        if rhs_k != k:
            raise ValueError(
                f"{op}: rhs must be {layout} with k = {k} like lhs: lhs {shape_str(lhs)}, rhs {shape_str(rhs)}"
            )
        n = int(rhs.shape[1] if transpose else rhs.shape[2])
        g = int(rhs.shape[0])
        sizes = p["group_sizes"]
        if int(sizes.shape[0]) < g:
            raise ValueError(
                f"{op}: group_sizes {shape_str(sizes)} must have at least one entry per group of rhs {shape_str(rhs)}"
            )
        offset = p.get("group_offset")
        if offset is None:
            offset = jnp.zeros((), jnp.int32)
        elif isinstance(offset, (int, np.integer)) and not isinstance(offset, bool):
            offset = jnp.asarray(int(offset), jnp.int32)
        else:
            offset = jnp.asarray(offset)
            if offset.size != 1 or offset.ndim > 1:
                raise ValueError(f"{op}: group_offset must be an int scalar, got shape {shape_str(offset)}")
            offset = offset.reshape(())
        if not jnp.issubdtype(offset.dtype, jnp.integer):
            raise TypeError(f"{op}: group_offset must have an integer dtype, got {offset.dtype}")
        existing = p.get("existing_out")
        if existing is not None and tuple(existing.shape) != (int(lhs.shape[0]), n):
            raise ValueError(
                f"{op}: existing_out must be [m, n] = {(int(lhs.shape[0]), n)}: lhs {shape_str(lhs)}, "
                f"rhs {shape_str(rhs)}, existing_out {shape_str(existing)}"
            )
        bias = p.get("rhs_bias")
        if bias is not None:
            if bias.ndim == 2:
                bias = bias[:, None, :]
            if tuple(bias.shape) != (g, 1, n):
                raise ValueError(f"{op}: rhs_bias must be [groups, 1, n] = {(g, 1, n)}, got {shape_str(bias)}")
        scale = p.get("rhs_scale")
        if scale is not None:
            if scale.ndim < 4:  # [groups, n] or [groups, 1, n]: one scale per group and column
                scale = scale.reshape(g, 1, 1, -1)
            nb = int(scale.shape[1])
            if scale.shape[0] != g or scale.shape[2] != 1 or scale.shape[3] != n or nb < 1 or k % nb:
                raise ValueError(
                    f"{op}: rhs_scale must be [groups, num_blocks, 1, n] = [{g}, num_blocks, 1, {n}] with num_blocks "
                    f"dividing k = {k} (or [groups, 1, n] / [groups, n]), got {shape_str(p['rhs_scale'])}"
                )
            if not jnp.issubdtype(scale.dtype, jnp.floating):
                raise TypeError(f"{op}: rhs_scale must have a floating dtype, got {scale.dtype}")
        pet = p.get("preferred_element_type", jnp.float32)
        try:
            out_dtype = jnp.dtype(lhs.dtype if pet is None else pet)
        except TypeError:
            raise TypeError(f"{op}: preferred_element_type must be a floating dtype or None, got {pet!r}") from None
        if not jnp.issubdtype(out_dtype, jnp.floating):
            raise TypeError(f"{op}: preferred_element_type must be a floating dtype, got {out_dtype}")
        if existing is not None and existing.dtype != out_dtype:
            raise TypeError(
                f"{op}: existing_out ({existing.dtype}) must have the output dtype (preferred_element_type={out_dtype})"
            )
        if bias is not None and not jnp.issubdtype(bias.dtype, jnp.floating):
            raise TypeError(f"{op}: rhs_bias must have a floating dtype, got {bias.dtype}")
        return GroupedMatmulArgs.build(
            op,
            p,
            group_offset=offset.astype(jnp.int32),
            existing_out=existing,
            rhs_scale=scale,
            rhs_bias=bias,
            transpose_rhs=transpose,
            preferred_element_type=out_dtype.name,
            precision=_precision(op, p.get("precision")),
        )

    def value_rules(self, a: GroupedMatmulArgs) -> list[ValueRule]:
        m, g, total = a.m, a.groups, a.num_groups
        return [
            ValueRule(("group_sizes",), "must be >= 0", lambda xp, s: s < 0),
            ValueRule(
                ("group_sizes",),
                f"must sum to at most m = {m} (the rows of lhs)",
                lambda xp, s: _total(xp, s) > m,
                whole=("sum(group_sizes)", _total),
            ),
            ValueRule(
                ("group_offset",),
                f"must be in [0, len(group_sizes) - groups] = [0, {total - g}] (rhs holds {g} groups of {total})",
                lambda xp, o: (o < 0) | (o > total - g),
            ),
        ]

    def autotune_inputs(self, a: GroupedMatmulArgs, seed: int = 0) -> GroupedMatmulArgs:
        sizes = concrete(a.group_sizes)
        offset = concrete(a.group_offset)
        if sizes is None:  # traced: a balanced split of every row over the groups
            sizes = np.full((a.num_groups,), a.m // a.num_groups, np.int32)
            sizes[: a.m % a.num_groups] += 1
        return dataclasses.replace(
            a.random_like(seed),
            group_sizes=jnp.asarray(sizes, jnp.int32),
            group_offset=jnp.asarray(0 if offset is None else offset, jnp.int32),
        )

    def differentiable_fields(self, a: GroupedMatmulArgs) -> tuple[str, ...]:
        return ("lhs", "rhs")

    def shard_plan(self, a: GroupedMatmulArgs, in_specs: Any, mesh: Any) -> ShardPlan:
        rhs_axes = ("groups", "n", "k") if a.transpose_rhs else ("groups", "k", "n")
        user = {
            "rhs": rhs_axes,
            "existing_out": ("m", "n"),
            "rhs_scale": ("groups", None, None, "n"),
            "rhs_bias": ("groups", None, "n"),
        }
        plan = a.shard_plan(self.name, in_specs, mesh, self.positional_arrays(), user, required=3)
        specs = dict(plan.specs)
        for name, axes in user.items():
            if getattr(a, name) is not None:
                specs[name] = plan.spec_of(axes)
        return ShardPlan(axes=plan.axes, specs=specs)

    def default_out_spec(self, a: GroupedMatmulArgs, plan: ShardPlan) -> Any:
        return plan.spec_of(("m", "n"))


def _total(xp: Any, sizes: Any) -> Any:
    """The rows ``group_sizes`` covers (int64 on the host, where a sum cannot wrap)."""
    return xp.sum(sizes.astype(xp.int64 if xp is np else xp.int32))


# -- helpers shared by the implementations --------------------------------------------------------


def group_bounds(a: GroupedMatmulArgs) -> tuple[jax.Array, jax.Array]:
    """The row ranges of the local groups: ``starts[g]``, ``ends[g]`` (int32, traced-safe).

    Local group ``j`` is global group ``group_offset + j``; its rows are
    ``[starts[j], ends[j])`` of ``lhs``."""
    return _bounds(a.group_sizes, a.group_offset, a.groups)


def _bounds(group_sizes: jax.Array, group_offset: jax.Array, groups: int) -> tuple[jax.Array, jax.Array]:
    sizes = group_sizes.astype(jnp.int32)
    cum = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(sizes)])
    first = jax.lax.dynamic_slice_in_dim(cum, jnp.reshape(group_offset, ()).astype(jnp.int32), groups + 1)
    return first[:-1], first[1:]


def row_groups(a: GroupedMatmulArgs) -> jax.Array:
    """Each row's local group (``-1``: a row outside the local groups), ``[m]`` int32."""
    return row_groups_of(a.group_sizes, a.group_offset, a.groups, a.m)


def row_groups_of(group_sizes: jax.Array, group_offset: jax.Array, groups: int, m: int) -> jax.Array:
    """:func:`row_groups` from the group sizes, the offset and the numbers of local groups and rows."""
    starts, ends = _bounds(group_sizes, group_offset, groups)
    rows = jnp.arange(m, dtype=jnp.int32)
    j = jnp.searchsorted(ends, rows, side="right", method="sort").astype(jnp.int32)
    inside = (rows >= starts[0]) & (rows < ends[-1])
    return jnp.where(inside, j, -1)


def merge_rows(a: GroupedMatmulArgs, out: jax.Array) -> jax.Array:
    """The op's output from ``out`` (the local groups' rows computed, other rows zero): the
    per-group bias added to computed rows, ``existing_out`` in the rows outside the local groups."""
    if a.rhs_bias is None and a.existing_out is None:
        return out
    gid = row_groups(a)
    inside = (gid >= 0)[:, None]
    if a.rhs_bias is not None:
        bias = a.rhs_bias[:, 0, :][jnp.maximum(gid, 0)]
        out = jnp.where(inside, out.astype(jnp.float32) + bias.astype(jnp.float32), out).astype(out.dtype)
    if a.existing_out is not None:
        out = jnp.where(inside, out, a.existing_out)
    return out


def scaled_rhs(a: GroupedMatmulArgs, dtype: Any = jnp.float32) -> jax.Array:
    """``rhs * S`` in its layout and ``dtype``: each block of ``k`` rows times its ``rhs_scale``
    row (see the module docstring); ``rhs`` itself without a scale."""
    rhs = a.rhs.astype(dtype)
    if a.rhs_scale is None:
        return rhs
    scale = jnp.repeat(a.rhs_scale[:, :, 0, :], a.k // a.scale_blocks, axis=1).astype(dtype)  # [g, k, n]
    return rhs * (jnp.swapaxes(scale, 1, 2) if a.transpose_rhs else scale)
