"""The op definition: one class per op, and the table of every op (:func:`list_ops`).

An op lives in one folder of the core, ``ejkernel/ops/<op>/``, with a fixed vocabulary:

=================  ===========================================================================
``op.py``          the :class:`Op` subclass, its arguments record (:class:`~ejkernel.ops.args.Args`)
                   and its Config (:class:`~ejkernel.ops.config.OpConfig`)
``api.py``         the public function: ``@define(MyOp)`` on its signature (``ejkernel.ops.executor``)
``reference.py``   ``reference(...)``: the naive float32 reference, same parameters as the function
``cases.py``       ``CASES`` (and ``FULL_CASES``): conformance cases; ``ARG_SPECS``: realistic shapes
``bench.py``       ``BENCH``: the benchmark description (cost model, peers, CLI options)
``__init__.py``    the folder's exports (``__all__``), re-exported by ``ejkernel`` and ``ejkernel.modules``
=================  ===========================================================================

Defining an ``Op`` subclass with a ``name`` enters it in the table; ``ejkernel`` imports every op
folder at import (:func:`ejkernel.ops.catalog.load_builtin_ops`), so ``ejkernel info``, ``ejkernel
bench``, the exports and the conformance suite find a new op with no other edit. An op defined
elsewhere (a plugin, a test) sets ``reference``/``cases``/``bench`` on its class instead.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from .args import Args, ShardPlan
from .checks import ValueRule, enforce
from .config import OpConfig

__all__ = ["CALL_OPTIONS", "Op", "get_op", "list_ops", "op_class"]

CALL_OPTIONS = ("platform", "cfg", "mesh", "in_specs", "out_specs")

_OPS: dict[str, type[Op]] = {}


class Op:
    """Base of op definitions (an op's "Module" form, for use with an ``Executor``).

    Subclasses set:

    - ``name``: the op's name (its public function's name, registry key and cache-key part);
    - ``config_cls``: its Config class (whose ``op_name`` this sets);
    - ``args_cls``: its arguments record class;
    - ``param_aliases``: earlier parameter names mapped to the canonical ones (passing both is an error);
    - ``version``: bump it when the op's meaning changes, so cached configs are not reused;
    - ``trainable``: whether it has gradients worth timing (forward+backward tuning);
    - ``output_axes``: the output's axis names (its default ``out_specs`` under ``mesh``; an op
      with a tuple output overrides :meth:`output_axes_of`);
    - ``conformance_atol`` / ``conformance_grad_atol``: dtype name → error floor, overriding the
      conformance suite's defaults for this op (e.g. a long recurrence in bfloat16);
    - ``features``: feature name → ``(what it means, predicate(args))``: the optional features a
      call uses (implementations declare, by these names, those they do not support);
    - ``vmap_unsupported``: why ``jax.vmap`` over the op's arrays does not work (empty: it does, on
      every implementation; the conformance suite checks it);
    - ``donate``: array arguments an eager call consumes, their buffers donated to the outputs
      (an updated cache written in place, as ``jax.jit(..., donate_argnames=...)`` does); the
      old array is deleted after the call. Under the caller's ``jit`` the caller's own
      ``donate_argnums`` decides.

    and implement :meth:`canonicalize`. Everything else (validation, cache key, sharding,
    autotuning inputs) comes from the record's declaration and can be refined by overriding the
    hooks.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    config_cls: ClassVar[type[OpConfig]] = OpConfig
    args_cls: ClassVar[type[Args]] = Args
    trainable: ClassVar[bool] = False
    output_axes: ClassVar[tuple[str | None, ...]] = ()
    conformance_atol: ClassVar[dict[str, float]] = {}
    conformance_grad_atol: ClassVar[dict[str, float]] = {}
    features: ClassVar[dict[str, tuple[str, Callable[[Any], bool]]]] = {}
    vmap_unsupported: ClassVar[str] = ""
    donate: ClassVar[tuple[str, ...]] = ()
    # Earlier releases' parameter names → the canonical ones (both in the public signature).
    param_aliases: ClassVar[dict[str, str]] = {}
    aliases: ClassVar[tuple[str, ...]] = ()
    function: ClassVar[Callable[..., Any]]
    # Where an op keeps its reference, cases and benchmark when it has no folder of its own.
    reference: ClassVar[Callable[..., Any] | None] = None
    cases: ClassVar[Sequence[Any] | None] = None
    full_cases: ClassVar[Sequence[Any] | None] = None
    bench: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name and "name" in vars(cls):
            if cls.config_cls is not OpConfig:
                cls.config_cls.op_name = cls.name
            unknown = set(cls.donate) - set(cls.args_cls.array_names())
            if unknown:
                raise TypeError(f"{cls.__name__}.donate names no array argument: {sorted(unknown)}")
            _OPS[cls.name] = cls

    @property
    def op_name(self) -> str:
        return self.name

    @classmethod
    def signature(cls) -> inspect.Signature:
        return inspect.signature(cls.function)

    @classmethod
    def positional_arrays(cls) -> list[str]:
        """Names of the positional array parameters of the public function, in order."""
        arrays = set(cls.args_cls.array_names())
        return [
            p.name
            for p in cls.signature().parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name in arrays
        ]

    # -- the contract ---------------------------------------------------------------------------

    def bind(self, params: dict[str, Any]) -> Args:
        """Validate and canonicalize the op's parameters (call options removed) into a record.

        The declared arrays are checked first (rank, dtype kind), then :meth:`canonicalize`
        runs, then the record is checked against its declaration, then :meth:`value_rules`. Raises ``TypeError`` /
        ``ValueError`` naming the argument and shapes, once per call, before any implementation
        is chosen or traced.
        """
        params = dict(params)
        for old, new in self.param_aliases.items():
            value = params.pop(old, None)
            if value is None:
                continue
            if params.get(new) is not None:
                raise ValueError(f"{self.name}: pass {new} or its earlier name {old}, not both")
            params[new] = value
        params.update(self.args_cls.precheck(self.name, params))
        record = self.canonicalize(params)
        record.check(self.name)
        rules = self.value_rules(record)
        if rules:
            enforce(self.name, rules, {n: getattr(record, n) for n in record.array_names()})
        return record

    def config_hints(self, params: dict[str, Any]) -> dict[str, Any]:
        """Config fields that call parameters suggest (e.g. earlier releases' chunk sizes),
        popped from ``params``; the executor fills the call's ``cfg`` with them (fields the
        user's ``cfg`` sets win). Default: none."""
        return {}

    def implicit_sharding(self, args: Args) -> tuple[Any, Any] | None:
        """``(mesh, in_specs)`` a call without ``mesh=`` runs under, if the op infers one (e.g.
        ``ring_attention`` inside ``with jax.set_mesh(mesh):``); default ``None``."""
        return None

    def canonical_config(self, cfg: OpConfig, params: dict[str, Any]) -> OpConfig:
        """The call's ``cfg`` in canonical form, given the call's parameters (e.g. an earlier
        release's config field converted to the current one). Default: unchanged."""
        return cfg

    def value_rules(self, args: Args) -> list[ValueRule]:
        """Rules on the values of index arrays (:mod:`ejkernel.ops.checks`): checked when
        concrete, and under ``jit`` when value checks are on. Run after the shape checks."""
        return []

    def canonicalize(self, params: dict[str, Any]) -> Args:
        """Build the arguments record from checked parameters (op-specific)."""
        raise NotImplementedError(f"{type(self).__name__} must implement canonicalize()")

    def describe(self, args: Args) -> str:
        """Readable abstract description of ``args`` for cache keys (from the declaration)."""
        return args.describe()

    def features_of(self, args: Args) -> frozenset[str]:
        """The optional features (names of ``features``) this call uses."""
        return frozenset(name for name, (_, used) in self.features.items() if used(args))

    def arrays(self, args: Args) -> list[Any]:
        """The array leaves of ``args`` (used to find the device a call runs on)."""
        return [getattr(args, n) for n in args.present()]

    def autotune_inputs(self, args: Args, seed: int = 0) -> Args:
        """Concrete random arguments with the abstract shapes of ``args`` (which may be traced).

        Must produce *valid* values (segment ids, sequence lengths, page tables), not only the
        right shapes, so that timings reflect real work: ops override it for index arrays.
        """
        return args.random_like(seed)

    def differentiable_fields(self, args: Args) -> tuple[str, ...]:
        """Array fields that forward+backward tuning differentiates (declared on the record)."""
        return args.differentiable()

    # -- shard_map ----------------------------------------------------------------------------

    def shard_plan(self, args: Args, in_specs: Any, mesh: Any) -> ShardPlan:
        """The sharding of every present array field from the user's ``in_specs`` (from the
        declaration; ``ValueError`` for shardings the op cannot run under)."""
        return args.shard_plan(self.name, in_specs, mesh, self.positional_arrays())

    def output_axes_of(self, args: Args) -> Any:
        """The output's axis names for this call: ``output_axes`` by default; an op whose output
        is a tuple (e.g. ``(out, final_state)`` when ``return_state``) returns one tuple of axis
        names per output."""
        return self.output_axes

    def default_out_spec(self, args: Args, plan: ShardPlan) -> Any:
        axes = self.output_axes_of(args)
        if not axes:
            raise ValueError(f"{self.name}: out_specs is required with mesh")
        if isinstance(axes[0], tuple):
            return tuple(plan.spec_of(a) for a in axes)
        return plan.spec_of(axes)

    def localize(self, args: Args, plan: ShardPlan, mesh: Any) -> Args:
        """Adjust a shard's arguments inside ``shard_map`` (default: unchanged)."""
        return args

    # -- the op folder ------------------------------------------------------------------------

    @classmethod
    def _folder(cls, module: str) -> Any:
        package = cls.__module__.rpartition(".")[0]
        try:
            return importlib.import_module(f"{package}.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{module}":
                raise
            return None

    @classmethod
    def get_reference(cls) -> Callable[..., Any]:
        """The op's float32 reference function (same parameters as the public function)."""
        if cls.reference is not None:
            return cls.reference
        mod = cls._folder("reference")
        if mod is None:
            raise LookupError(f"op {cls.name!r} has no reference (reference.py in its folder)")
        return mod.reference

    @classmethod
    def get_cases(cls, full: bool = False) -> list[Any]:
        """The op's conformance cases (``full``: the whole matrix, else the default set)."""
        cases, full_cases = cls.cases, cls.full_cases
        if cases is None:
            mod = cls._folder("cases")
            cases = getattr(mod, "CASES", ()) if mod is not None else ()
            full_cases = getattr(mod, "FULL_CASES", None) if mod is not None else None
        if full and full_cases is not None:
            return list(full_cases)
        return list(cases)

    @classmethod
    def get_bench(cls) -> Any:
        """The op's benchmark description (``None`` if it has none)."""
        if cls.bench is not None:
            return cls.bench
        mod = cls._folder("bench")
        return getattr(mod, "BENCH", None) if mod is not None else None

    @classmethod
    def exports(cls) -> dict[str, Any]:
        """Public names of the op: its folder's ``__all__``, else function, Op and Config."""
        package = cls.__module__.rpartition(".")[0]
        mod = importlib.import_module(package) if package else None
        names = getattr(mod, "__all__", None) if mod is not None and package != "ejkernel.ops" else None
        if names and cls.__name__ in names:
            return {n: getattr(mod, n) for n in names}
        out: dict[str, Any] = {cls.__name__: cls, cls.config_cls.__name__: cls.config_cls}
        if hasattr(cls, "function"):
            out[cls.name] = cls.function
            for alias in cls.aliases:
                out[alias] = cls.function
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def op_class(name: str) -> type[Op]:
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known: {sorted(_OPS)}") from None


def get_op(name: str) -> Op:
    """The op definition registered as ``name`` (e.g. ``"flash_attention"``)."""
    return op_class(name)()


def list_ops() -> list[str]:
    """Names of every defined op, sorted."""
    return sorted(_OPS)
