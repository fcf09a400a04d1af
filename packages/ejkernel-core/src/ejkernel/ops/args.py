"""Declarative arguments records: what an op's canonical arguments are, declared once.

An op's bound arguments are a frozen dataclass whose fields are declared with :func:`array`
(a named axis per dimension) or :func:`static` (a hashable option)::

    class PageAttentionArgs(Args, shardable=("batch", "num_heads", "num_kv_heads"),
                            tied=[("num_heads", "num_kv_heads")], divides=[("num_kv_heads", "num_heads")]):
        query: Any = array("batch", "num_heads", "head_dim")
        key_cache: Any = array("num_blocks", "block_size", "num_kv_heads", "head_dim", same_dtype_as="query")
        context_lens: Any = array("batch", kind="int")
        softmax_scale: float = static(1.0, key="ignore")

From the declaration alone come:

- **shape properties**: ``args.batch``, ``args.num_kv_heads``, ... (every axis name);
- **validation** (:meth:`Args.precheck` on the raw positional arrays, :meth:`Args.check` on the
  record): rank, dtype kind, one dtype where declared, every axis one size across fields (``1``
  too in broadcast fields), divisibility (GQA), no empty dims; each error names the op, the
  argument and the shapes;
- the **cache key** (:meth:`Args.describe`): every array's dtype and shape, and the statics
  declared to key the cache (by value or by presence);
- **sharding** (:meth:`Args.shard_plan`): the user's ``in_specs`` of the positional arrays map
  axis names to mesh axes (checked: only ``shardable`` axes, ``tied`` axes together, the same
  mapping in every argument, sizes divisible); every field's ``PartitionSpec`` follows;
- **autotuning inputs** (:meth:`Args.random_like`): random floats of the same shapes.

Records are pytrees (arrays are leaves, statics are aux data), so they pass through ``jit``.
A record whose arrays may come in more than one layout (``page_attention``'s caches) keeps them
as given and overrides :meth:`Args.axes_of` to name their axes by a static field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ArgSpec",
    "Args",
    "ShardPlan",
    "array",
    "as_array",
    "concrete",
    "describe_array",
    "flag",
    "is_traced",
    "mesh_axis_size",
    "positive_float",
    "shape_str",
    "static",
    "static_bool",
    "static_float",
    "static_int",
    "window",
]

_KINDS = ("float", "int", "bool", "any")
_KEYS = ("value", "presence", "ignore")


# -- helpers shared by op definitions ------------------------------------------------------------


def is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def shape_str(x: Any) -> str:
    return str(tuple(int(d) for d in x.shape))


def concrete(x: Any) -> np.ndarray | None:
    """NumPy value of ``x`` if it is concrete (checks on values happen only then)."""
    if x is None or is_traced(x) or isinstance(x, jax.ShapeDtypeStruct):
        return None
    return np.asarray(x)


_DTYPE_ABBREV = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int32": "i32",
    "int64": "i64",
    "uint32": "u32",
    "bool": "bool",
    "int8": "i8",
    "uint8": "u8",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}


def describe_array(x: Any) -> str:
    """``"bf16[8,2048,16,128]"`` for an array (or tracer); ``"-"`` for ``None``."""
    if x is None:
        return "-"
    dtype = np.dtype(x.dtype).name
    return f"{_DTYPE_ABBREV.get(dtype, dtype)}[{','.join(str(int(d)) for d in x.shape)}]"


def as_array(op: str, name: str, x: Any, *, ndim: int | Iterable[int] | None = None, layout: str = "") -> Any:
    """``x`` as a JAX array (or tracer); ``TypeError``/``ValueError`` if it is not one of the right rank."""
    if isinstance(x, jax.Array) or is_traced(x):
        arr = x
    elif isinstance(x, (np.ndarray, np.generic)):
        arr = jnp.asarray(x)
    else:
        raise TypeError(f"{op}: {name} must be an array{(' ' + layout) if layout else ''}, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            rank = " or ".join(f"{r}-D" for r in allowed)
            raise ValueError(
                f"{op}: {name} must be {rank}{(' ' + layout) if layout else ''}, got shape {shape_str(arr)}"
            )
    return arr


def _layout(axes: tuple[str | None, ...] | None, rank: int) -> str:
    """The named layout of a field given with ``rank`` dims, where the declaration says it: the
    canonical axes at their own rank, or without trailing unnamed axes the op adds itself (a
    gate ``[batch, seq, heads]`` the op makes ``[batch, seq, heads, 1]``); else nothing."""
    if axes is None or rank > len(axes) or any(a is not None for a in axes[rank:]):
        return ""
    return f"[{', '.join(a or '?' for a in axes[:rank])}]"


def check_kind(op: str, name: str, x: Any, kind: str) -> None:
    if kind == "float" and not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{op}: {name} must have a floating dtype, got {x.dtype}")
    if kind == "int" and not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{op}: {name} must have an integer dtype, got {x.dtype}")
    if kind == "bool" and x.dtype != jnp.bool_:
        raise TypeError(f"{op}: {name} must be a bool array, got {x.dtype}")


def static_float(op: str, name: str, x: Any, *, positive: bool = True, allow_none: bool = True) -> float | None:
    """A Python float option (not an array: options are static)."""
    if x is None:
        if allow_none:
            return None
        raise TypeError(f"{op}: {name} is required")
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: {name} must be a Python float (a static option), got {type(x).__name__}")
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{op}: {name} must be > 0, got {value}")
    return value


def static_int(op: str, name: str, x: Any, *, minimum: int | None = None, allow_none: bool = True) -> int | None:
    """A Python int option."""
    if x is None:
        if allow_none:
            return None
        raise TypeError(f"{op}: {name} is required")
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be a Python int (a static option), got {type(x).__name__}")
    if minimum is not None and x < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {int(x)}")
    return int(x)


def static_bool(op: str, name: str, x: Any) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {type(x).__name__}")
    return bool(x)


def ambient_mesh() -> Any:
    """The mesh a ``with jax.set_mesh(mesh):`` (or the older ``with mesh:``) block has set (under
    ``jit``, its abstract mesh), or ``None``."""
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    if get_mesh is not None:
        try:
            mesh = get_mesh()
        except ValueError:  # under jit: the abstract mesh (``shard_map`` takes it there)
            mesh = jax.sharding.get_abstract_mesh()
        except Exception:
            mesh = None
        if mesh is not None and getattr(mesh, "axis_names", ()):
            return mesh
    try:
        from jax._src import mesh as mesh_lib  # the older ``with mesh:`` context

        mesh = mesh_lib.thread_resources.env.physical_mesh
    except Exception:
        return None
    return mesh if getattr(mesh, "axis_names", ()) else None


def mesh_axis_size(mesh: Any, entry: Any) -> int:
    """Devices along a PartitionSpec entry (``None``, an axis name or a tuple of them)."""
    if entry is None:
        return 1
    names = entry if isinstance(entry, tuple) else (entry,)
    size = 1
    for n in names:
        if n not in mesh.shape:
            raise ValueError(f"mesh has no axis {n!r} (axes: {tuple(mesh.shape)})")
        size *= int(mesh.shape[n])
    return size


# -- field declarations ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """How one field of an arguments record is declared (see :func:`array`, :func:`static`)."""

    is_array: bool
    axes: tuple[str | None, ...] | None = None
    kind: str = "float"
    optional: bool = False
    broadcast: bool = False
    ranks: tuple[int, ...] | None = None
    label: str | None = None
    differentiable: bool = False
    same_dtype_as: str | None = None
    key: str = "value"
    parse: Any = None


def array(
    *axes: str | None,
    kind: str = "float",
    optional: bool = False,
    broadcast: bool = False,
    ranks: Sequence[int] | None = None,
    label: str | None = None,
    differentiable: bool = False,
    same_dtype_as: str | None = None,
) -> Any:
    """An array field of a record, one axis name per dimension (``None``: an unnamed axis).

    Args:
        axes: the canonical layout; fields sharing an axis name must agree on its size.
        kind: ``"float"``, ``"int"``, ``"bool"`` or ``"any"`` dtype.
        optional: may be ``None`` (the default value then).
        broadcast: each dim may also be 1 (e.g. a bias ``[batch or 1, heads or 1, ...]``).
        ranks: ranks accepted from the user before the op canonicalizes (default: ``len(axes)``).
        label: how errors name the field (default: its name), e.g. ``"mask_info q_segment_ids"``.
        differentiable: gradients flow to it (forward+backward tuning differentiates it).
        same_dtype_as: another field whose dtype this one must share.
    """
    if kind not in _KINDS:
        raise ValueError(f"array(kind=...) must be one of {_KINDS}, got {kind!r}")
    spec = ArgSpec(
        is_array=True,
        axes=tuple(axes),
        kind=kind,
        optional=optional,
        broadcast=broadcast,
        ranks=tuple(ranks) if ranks is not None else None,
        label=label,
        differentiable=differentiable,
        same_dtype_as=same_dtype_as,
    )
    if optional:
        return dataclasses.field(default=None, metadata={"ejkernel": spec})
    return dataclasses.field(metadata={"ejkernel": spec})


def static(default: Any = dataclasses.MISSING, *, key: str = "value", parse: Any = None) -> Any:
    """A static (hashable, compile-time) field. ``key`` says how it enters cache keys:
    ``"value"``, ``"presence"`` (set or not: e.g. a soft cap's value does not change the best
    tiling) or ``"ignore"``. ``parse(op, name, value)`` validates and canonicalizes the user's
    value in :meth:`Args.build` (e.g. :func:`positive_float`, :func:`flag`, :func:`window`)."""
    if key not in _KEYS:
        raise ValueError(f"static(key=...) must be one of {_KEYS}, got {key!r}")
    spec = ArgSpec(is_array=False, key=key, parse=parse)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={"ejkernel": spec})
    return dataclasses.field(default=default, metadata={"ejkernel": spec})


def positive_float(op: str, name: str, x: Any) -> float | None:
    """Parser of an optional float option that must be finite and > 0."""
    return static_float(op, name, x)


def flag(op: str, name: str, x: Any) -> bool:
    """Parser of a bool option."""
    return static_bool(op, name, x)


def window(op: str, name: str, x: Any) -> tuple[int, int] | None:
    """Parser of a sliding window: ``None``, ``w`` or ``(left, right)`` → ``(left, right)``."""
    from ..types.mask_info import canonical_window

    try:
        return canonical_window(x, name)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{op}: {e}") from None


def _spec(f: dataclasses.Field) -> ArgSpec:
    spec = f.metadata.get("ejkernel")
    return spec if spec is not None else ArgSpec(is_array=False)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How a call's arrays split over a mesh: the mesh axes of each named axis, and the spec of
    every present array field."""

    axes: Mapping[str, Any]
    specs: Mapping[str, Any]

    def spec_of(self, names: Sequence[str | None]) -> Any:
        from jax.sharding import PartitionSpec as P

        return P(*(self.axes.get(n) if n is not None else None for n in names))


class Args:
    """Base of op arguments records (see the module docstring).

    Class keywords (all optional) declare record-wide rules:

    - ``shardable``: axis names that ``mesh``/``in_specs`` may shard (others may not);
    - ``shard_reasons``: axis name → why it cannot be sharded (for the error);
    - ``tied``: groups of axes that must be sharded alike (query heads and kv heads);
    - ``divides``: ``(a, b)`` pairs where the size of ``a`` must divide that of ``b``;
    - ``allow_empty``: axis names that may be 0.
    """

    _fields: ClassVar[tuple[dataclasses.Field, ...]] = ()
    _arrays: ClassVar[tuple[str, ...]] = ()
    _axis_sources: ClassVar[dict[str, tuple[tuple[str, int], ...]]] = {}
    _shardable: ClassVar[frozenset[str]] = frozenset()
    _shard_reasons: ClassVar[Mapping[str, str]] = {}
    _tied: ClassVar[tuple[tuple[str, ...], ...]] = ()
    _divides: ClassVar[tuple[tuple[str, str], ...]] = ()
    _allow_empty: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(
        cls,
        *,
        shardable: Iterable[str] | None = None,
        shard_reasons: Mapping[str, str] | None = None,
        tied: Iterable[Iterable[str]] | None = None,
        divides: Iterable[tuple[str, str]] | None = None,
        allow_empty: Iterable[str] | None = None,
        **kwargs: Any,
    ):
        super().__init_subclass__(**kwargs)
        if shardable is not None:
            cls._shardable = frozenset(shardable)
        if shard_reasons is not None:
            cls._shard_reasons = {**cls._shard_reasons, **shard_reasons}
        if tied is not None:
            cls._tied = tuple(tuple(t) for t in tied)
        if divides is not None:
            cls._divides = tuple((a, b) for a, b in divides)
        if allow_empty is not None:
            cls._allow_empty = frozenset(allow_empty)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        cls._fields = tuple(fields)
        cls._arrays = tuple(f.name for f in fields if _spec(f).is_array)
        statics = [f.name for f in fields if not _spec(f).is_array]
        jax.tree_util.register_dataclass(cls, data_fields=list(cls._arrays), meta_fields=statics)
        # Shape properties: each axis name reads its size off the first present field that has it
        # (fields that may broadcast come last, and only count when not 1).
        sources: dict[str, list[tuple[str, int]]] = {}
        for pass_broadcast in (False, True):
            for f in fields:
                spec = _spec(f)
                if not spec.is_array or spec.broadcast != pass_broadcast or spec.axes is None:
                    continue
                for i, ax in enumerate(spec.axes):
                    if ax is not None:
                        sources.setdefault(ax, []).append((f.name, i))
        cls._axis_sources = {ax: tuple(src) for ax, src in sources.items()}
        taken = {f.name for f in fields}
        for ax in cls._axis_sources:
            if ax not in taken and not any(ax in vars(base) for base in cls.__mro__):
                setattr(cls, ax, property(lambda self, _ax=ax: self.size(_ax), doc=f"Size of the {ax!r} axis."))

    # -- declaration queries ------------------------------------------------------------------

    @classmethod
    def field_spec(cls, name: str) -> ArgSpec:
        return _spec(next(f for f in cls._fields if f.name == name))

    @classmethod
    def array_names(cls) -> tuple[str, ...]:
        return cls._arrays

    def axes_of(self, name: str) -> tuple[str | None, ...] | None:
        """The axis names of field ``name`` in this record: the declared ones, unless the record
        says its array is laid out otherwise (a subclass may override this to permute a field's
        declared axes by a static, e.g. a cache layout; it must not add or drop names)."""
        return self.field_spec(name).axes

    def size(self, axis: str) -> int:
        """Size of a named axis (``ValueError`` if no present field has it)."""
        fallback = None
        for name, _ in self._axis_sources.get(axis, ()):
            x = getattr(self, name)
            if x is None:
                continue
            n = int(x.shape[(self.axes_of(name) or ()).index(axis)])
            if not self.field_spec(name).broadcast or n != 1:
                return n
            fallback = n
        if fallback is not None:
            return fallback
        raise ValueError(f"{type(self).__name__}: no present argument has the axis {axis!r}")

    def present(self) -> list[str]:
        """Names of the array fields that are not ``None``, in declaration order."""
        return [n for n in self._arrays if getattr(self, n) is not None]

    def differentiable(self) -> tuple[str, ...]:
        return tuple(n for n in self._arrays if self.field_spec(n).differentiable)

    def label(self, name: str) -> str:
        return self.field_spec(name).label or name

    # -- building -----------------------------------------------------------------------------

    @classmethod
    def build(cls, op: str, params: Mapping[str, Any], **given: Any) -> Any:
        """The record of ``params``: each field from ``given``, else the parameter of the same
        name (statics through their declared parser), else its default. Integer index arrays
        become int32."""
        values: dict[str, Any] = {}
        for f in cls._fields:
            spec = _spec(f)
            if f.name in given:
                v = given[f.name]
            elif f.name in params:
                v = params[f.name]
                if not spec.is_array and spec.parse is not None:
                    v = spec.parse(op, f.name, v)
            else:
                continue
            if spec.is_array and spec.kind == "int" and v is not None and hasattr(v, "astype"):
                v = v.astype(jnp.int32)
            values[f.name] = v
        return cls(**values)

    # -- validation ---------------------------------------------------------------------------

    @classmethod
    def precheck(cls, op: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Arrays among ``params`` (the user's arguments), as arrays of an accepted rank and dtype
        kind: checked before the op's own code reads a shape."""
        out: dict[str, Any] = {}
        for f in cls._fields:
            spec = _spec(f)
            if not spec.is_array or f.name not in params or params[f.name] is None:
                continue
            if spec.axes == () and isinstance(params[f.name], (int, np.integer)):
                continue  # a Python scalar for a scalar field: the op converts it
            name = spec.label or f.name
            ranks = spec.ranks or ((len(spec.axes),) if spec.axes is not None else None)
            x = as_array(
                op, name, params[f.name], layout=next(filter(None, (_layout(spec.axes, r) for r in ranks or ())), "")
            )
            if ranks is not None and x.ndim not in ranks:
                layouts = [f"{r}-D: {_layout(spec.axes, r)}" for r in ranks if _layout(spec.axes, r)]
                shown = f" ({'; '.join(layouts)})" if layouts else ""
                if len(ranks) == 1:
                    shown = f" {_layout(spec.axes, ranks[0])}" if layouts else ""
                rank = " or ".join(f"{r}-D" for r in ranks)
                raise ValueError(f"{op}: {name} must be {rank}{shown}, got shape {shape_str(x)}")
            check_kind(op, name, x, spec.kind)
            out[f.name] = x
        return out

    def check(self, op: str) -> None:
        """Validate the record against its declaration (``ValueError``/``TypeError``)."""
        sizes: dict[str, tuple[int, str]] = {}
        present = self.present()

        def shapes(*names: str) -> str:
            return ", ".join(f"{self.label(n)} {shape_str(getattr(self, n))}" for n in names)

        for pass_broadcast in (False, True):
            for name in present:
                spec = self.field_spec(name)
                if spec.broadcast != pass_broadcast:
                    continue
                x = getattr(self, name)
                axes = self.axes_of(name)
                if axes is None:
                    continue
                if x.ndim != len(axes):
                    raise ValueError(f"{op}: {self.label(name)} must be {len(axes)}-D, got {shape_str(x)}")
                check_kind(op, self.label(name), x, spec.kind)
                for ax, n in zip(axes, (int(d) for d in x.shape), strict=True):
                    if ax is None:
                        continue
                    if ax not in sizes:
                        if not (spec.broadcast and n == 1):
                            sizes[ax] = (n, name)
                        continue
                    want, src = sizes[ax]
                    if n != want and not (spec.broadcast and n == 1):
                        extra = " (or 1)" if spec.broadcast else ""
                        raise ValueError(
                            f"{op}: {self.label(name)} must have {ax} = {want}{extra} like {self.label(src)}: "
                            f"{shapes(src, name)}"
                        )
            if not pass_broadcast:
                for name in present:
                    other = self.field_spec(name).same_dtype_as
                    if other is not None and getattr(self, other) is not None:
                        a, b = getattr(self, name), getattr(self, other)
                        if a.dtype != b.dtype:
                            raise TypeError(
                                f"{op}: {self.label(name)} ({a.dtype}) must have the dtype of {self.label(other)} "
                                f"({b.dtype}); cast one of them"
                            )
        for a, b in self._divides:
            if a in sizes and b in sizes:
                (na, fa), (nb, fb) = sizes[a], sizes[b]
                if na == 0 or nb % na:
                    raise ValueError(f"{op}: {b} ({nb}) must be a multiple of {a} ({na}): {shapes(*{fb: 0, fa: 0})}")
        empty = [ax for ax, (n, _) in sizes.items() if n == 0 and ax not in self._allow_empty]
        if empty:
            names = {sizes[ax][1]: 0 for ax in empty}
            raise ValueError(f"{op}: empty dimensions ({', '.join(empty)}) are not supported: {shapes(*names)}")

    # -- cache key ----------------------------------------------------------------------------

    def describe(self) -> str:
        """Readable abstract description for cache keys: the present arrays by dtype and shape,
        statics as declared (by value, by presence, or not at all). Arrays never enter by value."""
        parts = []
        for f in self._fields:
            spec = _spec(f)
            v = getattr(self, f.name)
            if spec.is_array:
                if v is not None:
                    parts.append(f"{f.name}={describe_array(v)}")
            elif spec.key == "value":
                parts.append(f"{f.name}={_describe_static(v)}")
            elif spec.key == "presence":
                parts.append(f"{f.name}={'y' if v not in (None, 0, 0.0, False) else 'n'}")
        return " ".join(parts)

    # -- sharding -----------------------------------------------------------------------------

    def shard_plan(
        self,
        op: str,
        in_specs: Any,
        mesh: Any,
        positional: Sequence[str],
        user_axes: Mapping[str, Sequence[str | None]] | None = None,
        required: int | None = None,
    ) -> ShardPlan:
        """The sharding of every present array from the user's ``in_specs``.

        Args:
            in_specs: PartitionSpecs of the positional array arguments, in signature order; an
                entry may be ``None`` for an absent argument, and trailing ones may be left out
                (their specs follow from the axes the given ones shard).
            positional: names of the positional array arguments, in signature order.
            user_axes: the axes of a user's array where they differ from the field's (e.g. a
                query given with an extra length-1 axis).
            required: how many leading specs must be given (default: one per non-optional array).
        """
        from jax.sharding import PartitionSpec as P

        if isinstance(in_specs, P) or not isinstance(in_specs, (tuple, list)):
            raise TypeError(
                f"{op}: in_specs must be a tuple of PartitionSpecs for ({', '.join(positional)}), got {in_specs!r}"
            )
        if len(in_specs) > len(positional):
            raise ValueError(
                f"{op}: in_specs has {len(in_specs)} entries for the {len(positional)} array arguments "
                f"({', '.join(positional)})"
            )
        required_names = [n for n in positional if not self.field_spec(n).optional][:required]
        if len(in_specs) < len(required_names):
            raise ValueError(
                f"{op}: in_specs has {len(in_specs)} entries; expected at least {len(required_names)} "
                f"({', '.join(required_names)}; the other arrays' specs follow from theirs)"
            )
        user_axes = dict(user_axes or {})
        # Tied axes (query heads and kv heads) are one axis for sharding purposes.
        canon = {ax: group[0] for group in self._tied for ax in group}
        seen: dict[str, tuple[Any, str]] = {}
        for name, spec in zip(positional, in_specs, strict=False):
            x = getattr(self, name, None)
            if spec is None:
                continue
            if x is None:
                raise ValueError(f"{op}: in_specs gives a spec for {name}, which is not passed")
            if not isinstance(spec, P):
                raise TypeError(f"{op}: the in_specs entry of {name} must be a PartitionSpec, got {spec!r}")
            axes = tuple(user_axes.get(name, self.axes_of(name) or ()))
            entries = tuple(spec)
            if len(entries) > len(axes):
                raise ValueError(
                    f"{op}: the PartitionSpec of {name} has {len(entries)} entries for a {len(axes)}-D array"
                )
            entries += (None,) * (len(axes) - len(entries))
            broadcast = self.field_spec(name).broadcast
            for i, (ax, e) in enumerate(zip(axes, entries, strict=True)):  # what may be sharded at all
                what = f"the {ax} axis of {name}" if ax else f"axis {i} of {name}"
                if e is None:
                    continue
                mesh_axis_size(mesh, e)  # raises for an axis the mesh lacks
                if ax is None or ax not in self._shardable:
                    why = self._shard_reasons.get(ax or "", "")
                    raise ValueError(f"{op}: {what} cannot be sharded (got {spec})" + (f": {why}" if why else ""))
                if broadcast and x.shape[i] == 1:
                    raise ValueError(f"{op}: {what} has size 1 (broadcast) and cannot be sharded (got {spec})")
            for i, (ax, e) in enumerate(zip(axes, entries, strict=True)):  # the same way in every array
                if ax is None or (broadcast and x.shape[i] == 1):
                    continue
                key = canon.get(ax, ax)
                if key in seen and seen[key][0] != e:
                    prev, src = seen[key]
                    raise ValueError(
                        f"{op}: {name} must be sharded like {src} over {ax} ({prev!r}), got {e!r} in {spec}"
                    )
                seen.setdefault(key, (e, name))
        for ax, key in canon.items():
            if key in seen:
                seen.setdefault(ax, seen[key])
        axes_map = {ax: e for ax, (e, _) in seen.items() if e is not None}
        for ax, e in axes_map.items():
            n = self.size(ax)
            parts = mesh_axis_size(mesh, e)
            if n % parts:
                raise ValueError(f"{op}: {ax} {n} is not divisible by the {parts} shards of mesh axis {e!r}")
        specs = {}
        for name in self.present():
            spec = self.field_spec(name)
            x = getattr(self, name)
            axes = self.axes_of(name)
            if axes is None:
                specs[name] = P()
                continue
            specs[name] = P(
                *(
                    axes_map.get(ax) if ax is not None and not (spec.broadcast and int(d) == 1) else None
                    for ax, d in zip(axes, x.shape, strict=True)
                )
            )
        return ShardPlan(axes=axes_map, specs=specs)

    # -- autotuning ---------------------------------------------------------------------------

    def random_like(self, seed: int = 0) -> Any:
        """A copy whose float arrays are random normal (same shapes and dtypes); other arrays are
        kept if concrete. Ops replace traced index arrays with valid values themselves."""
        rng = np.random.default_rng(seed)
        changes = {}
        for name in self.present():
            x = getattr(self, name)
            if jnp.issubdtype(x.dtype, jnp.floating):
                changes[name] = jnp.asarray(rng.standard_normal(x.shape).astype(np.float32), dtype=x.dtype)
            elif concrete(x) is not None:
                changes[name] = jnp.asarray(concrete(x))
            else:  # a traced index array: zeros are valid for most (ops override where not)
                changes[name] = jnp.zeros(x.shape, x.dtype)
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def _describe_static(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "y" if v else "n"
    if isinstance(v, tuple):
        return ",".join(_describe_static(x) for x in v)
    return str(v)
