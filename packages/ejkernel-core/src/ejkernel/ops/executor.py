"""The executor: bind → (shard_map) → select an implementation → resolve its config → run.

Also :func:`define`, which makes an op's public function from its signature, and
:func:`run_impl`, the same pipeline through one given implementation (for tests and plugins).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal

import jax

from ..errors import UnsupportedError
from .args import Args, is_traced
from .config import OpConfig
from .device import DeviceInfo, device_for_arrays
from .impl import KernelImpl
from .op import CALL_OPTIONS, Op, get_op
from .policy import current_policy
from .registry import KernelRegistry, kernel_registry
from .selection import ConfigSelectorChain, Tier, current_overlay, resolve_config

__all__ = [
    "CallOptions",
    "Dispatch",
    "Executor",
    "bind",
    "create_default_executor",
    "default_executor",
    "define",
    "record_dispatches",
    "resolve_config",
    "run_impl",
]

log = logging.getLogger("ejkernel")


@dataclasses.dataclass(frozen=True)
class CallOptions:
    """The options every op takes besides its own: where and how it runs."""

    platform: Any = None
    cfg: OpConfig | None = None
    mesh: Any = None
    in_specs: Any = None
    out_specs: Any = None

    @classmethod
    def pop_from(cls, params: dict[str, Any]) -> CallOptions:
        return cls(**{name: params.pop(name, None) for name in CALL_OPTIONS})


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """Which implementation and config served one call (see :func:`record_dispatches`)."""

    op: str
    impl: str
    platform: str
    backend: str
    plugin: str
    config: OpConfig
    tier: Tier
    key: str
    device: str


_RECORDERS: contextvars.ContextVar[tuple[list[Dispatch], ...]] = contextvars.ContextVar(
    "ejkernel_dispatch_recorders", default=()
)


@contextlib.contextmanager
def record_dispatches() -> Iterator[list[Dispatch]]:
    """Collect a :class:`Dispatch` for every op call (traced) inside the ``with`` block.

    >>> with record_dispatches() as log:
    ...     out = ejkernel.flash_attention(q, k, v)
    >>> log[0].impl, log[0].tier
    ('xla', <Tier.HEURISTIC: 'heuristic'>)
    """
    records: list[Dispatch] = []
    token = _RECORDERS.set((*_RECORDERS.get(), records))
    try:
        yield records
    finally:
        _RECORDERS.reset(token)


def _platform_name(value: Any) -> str | None:
    if value is None:
        return None
    name = str(getattr(value, "value", value)).lower()
    return None if name == "auto" else name


class Executor:
    """Runs ops: ``executor(FlashAttention(), q, k, v, causal=True)``.

    It also runs user-defined :class:`~ejkernel.compat.ops.Kernel` subclasses (the earlier API:
    ``executor(MyKernel(), a, b)``), which choose their config from the chain's in-memory cache
    (see :mod:`ejkernel.compat.ops`); :meth:`choose_config` tells the config a call would use.

    Args:
        chain: config resolution (default: a chain with fresh in-memory cache and the default
            persistent cache).
        registry: where implementations come from (default: ``ejkernel.kernel_registry``).
    """

    def __init__(self, chain: ConfigSelectorChain | None = None, registry: KernelRegistry | None = None):
        self.chain = chain if chain is not None else ConfigSelectorChain()
        self.registry = registry if registry is not None else kernel_registry

    # ``Executor[Cfg, Out]`` in annotations written for the earlier, generic Executor.
    __class_getitem__ = classmethod(types.GenericAlias)

    def __call__(self, op: Op, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(op, Op):
            return _kernel_hook(op, "_ejk_run_with")(self, args, kwargs)
        try:
            bound = op.signature().bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{op.name}: {e}") from None
        bound.apply_defaults()
        return self.run(op, dict(bound.arguments))

    def choose_config(self, op: Op, *args: Any, cfg: Any = None, **kwargs: Any) -> Any:
        """The config that ``self(op, *args, cfg=cfg, **kwargs)`` would run with, without running it.

        For an op: the complete config, stamped with the implementation chosen (its name is the
        config's ``platform``), as the call's :class:`Dispatch` reports it (with ``mesh=``, the
        config each shard runs with). The call is evaluated abstractly (``jax.eval_shape``), so
        the choice is the call's own, tiers and implementation included; nothing is compiled or
        run, except autotuning when the policy asks for it, as at the call. For a
        :class:`~ejkernel.compat.ops.Kernel`: the config its ``run`` would get.
        """
        if not isinstance(op, Op):
            return _kernel_hook(op, "_ejk_choose_with")(self, args, {**kwargs, "cfg": cfg})
        chosen: list[Dispatch] = []
        token = _RECORDERS.set((chosen,))  # out of sight of the caller's record_dispatches()
        try:
            jax.eval_shape(lambda: self(op, *args, cfg=cfg, **kwargs))
        finally:
            _RECORDERS.reset(token)
        return next(d.config for d in chosen if d.op == op.name)

    def compile(self, op: Any, *example_args: Any, cfg: Any = None, **options: Any) -> Any:
        """Choose the config once, for ``example_args`` and ``options``, and return a jitted
        function that runs ``op`` with it: ``f = executor.compile(op, q, k, v, causal=True)``,
        then ``f(q, k, v)``. The options (keywords) are fixed at compile time; the returned
        function takes the arrays (positionally, or array keywords). Works for ops and for
        :class:`~ejkernel.compat.ops.Kernel` subclasses (whose ``run`` gets the config).
        """
        chosen = self.choose_config(op, *example_args, cfg=cfg, **options)
        if isinstance(op, Op):
            return jax.jit(lambda *a, **arrays: self(op, *a, cfg=chosen, **options, **arrays))
        return jax.jit(lambda *a, **arrays: op.run(*a, cfg=chosen, **options, **arrays))

    def run(self, op: Op, params: dict[str, Any]) -> Any:
        """Run ``op`` with its full parameter mapping (call options included)."""
        params = dict(params)
        options = CallOptions.pop_from(params)
        hints = op.config_hints(params)
        _check_options(op, options)
        if options.cfg is not None and isinstance(options.cfg, op.config_cls):
            options = dataclasses.replace(options, cfg=op.canonical_config(options.cfg, params))
        if hints:
            options = dataclasses.replace(options, cfg=_with_hints(op, options.cfg, hints))
        args = op.bind(params)
        if options.mesh is None:
            implicit = op.implicit_sharding(args)
            if implicit is not None:
                options = dataclasses.replace(options, mesh=implicit[0], in_specs=implicit[1])
        if options.mesh is not None:
            return self._run_sharded(op, args, options)
        return self.dispatch(op, args, options)

    def dispatch(self, op: Op, args: Any, options: CallOptions) -> Any:
        """Select and run an implementation for already-bound ``args``."""
        policy = current_policy()
        device = device_for_arrays(op.arrays(args))
        requested = options.cfg if options.cfg is not None else current_overlay(op.name)
        platform = _platform_name(options.platform) or (_platform_name(requested.platform) if requested else None)
        backend = requested.backend if requested is not None and requested.backend != "any" else None
        impl = self.registry.select(op.name, args, device, platform=platform, backend=backend, policy=policy)
        impls = [impl]
        if policy.autotune and platform is None and backend is None and requested is None:
            # Autotuning with nothing asked for: every accepting implementation is a candidate.
            impls = self.registry.accepting(op.name, args, device, policy=policy)
        if len(impls) > 1:
            impl, res = self.chain.select_implementation(op, impls, args, device, policy=policy)
        else:
            res = self.chain.select(op, impl, args, device, explicit=options.cfg, policy=policy)
        record = Dispatch(
            op=op.name,
            impl=impl.name,
            platform=impl.platform.value,
            backend=impl.backend.value,
            plugin=impl.plugin,
            config=res.config,
            tier=res.tier,
            key=res.key,
            device=device.fingerprint,
        )
        for recorder in _RECORDERS.get():
            recorder.append(record)
        log.debug("ejkernel: %s -> %s (%s config %s)", op.name, impl.name, res.tier.value, res.config.tuning_fields())
        if op.donate and not any(is_traced(x) for x in jax.tree.leaves(args)):
            donated = {n: getattr(args, n) for n in op.donate}
            return _run_donating(impl, res.config, donated, dataclasses.replace(args, **dict.fromkeys(donated)))
        return impl.run(args, res.config)

    def _run_sharded(self, op: Op, args: Any, options: CallOptions) -> Any:
        mesh = options.mesh
        plan = op.shard_plan(args, options.in_specs, mesh)
        out_specs = options.out_specs if options.out_specs is not None else op.default_out_spec(args, plan)
        names = args.present()
        leaves = [getattr(args, n) for n in names]
        leaf_specs = tuple(plan.specs[n] for n in names)
        inner = dataclasses.replace(options, mesh=None, in_specs=None, out_specs=None)

        def body(*local: Any) -> Any:
            local_args = dataclasses.replace(args, **dict(zip(names, local, strict=True)))
            local_args = op.localize(local_args, plan, mesh)
            return self.dispatch(op, local_args, inner)

        sharded = jax.shard_map(body, mesh=mesh, in_specs=leaf_specs, out_specs=out_specs, check_vma=False)
        return sharded(*leaves)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2,))
def _run_donating(impl: KernelImpl, cfg: OpConfig, donated: dict[str, Any], rest: Args) -> Any:
    """``impl.run`` of an eager call whose op donates ``donated`` (its arrays' buffers become the
    outputs'). Only the run is compiled: the implementation and config were chosen outside, so a
    later call under another policy or overlay chooses again."""
    return impl.run(dataclasses.replace(rest, **donated), cfg)


def _kernel_hook(op: Any, name: str) -> Callable[..., Any]:
    """The method by which a non-Op (an ``ejkernel.ops.Kernel``) runs itself through an executor."""
    hook = getattr(op, name, None)
    if hook is None:
        raise TypeError(
            f"Executor runs ops (e.g. FlashAttention()) and ejkernel.ops.Kernel subclasses, got {type(op).__name__}"
        )
    return hook


def _check_options(op: Op, options: CallOptions) -> None:
    if options.cfg is not None and not isinstance(options.cfg, op.config_cls):
        raise TypeError(f"{op.name}: cfg must be a {op.config_cls.__name__}, got {type(options.cfg).__name__}")
    if options.platform is not None and not isinstance(options.platform, str):
        raise TypeError(f"{op.name}: platform must be a str or Platform, got {type(options.platform).__name__}")
    p, c = _platform_name(options.platform), _platform_name(options.cfg.platform) if options.cfg else None
    if p and c and p != c:
        raise ValueError(f"{op.name}: platform={p!r} contradicts cfg.platform={c!r}")
    if options.mesh is None and (options.in_specs is not None or options.out_specs is not None):
        raise ValueError(f"{op.name}: in_specs/out_specs need mesh=")
    if options.mesh is not None:
        if not isinstance(options.mesh, jax.sharding.Mesh):
            raise TypeError(f"{op.name}: mesh must be a jax.sharding.Mesh, got {type(options.mesh).__name__}")
        if options.in_specs is None:
            raise ValueError(f"{op.name}: mesh= needs in_specs (the PartitionSpecs of the array arguments)")


_DEFAULT: Executor | None = None
_DEFAULT_LOCK = threading.Lock()


def create_default_executor() -> Executor:
    """A new executor with its own in-memory cache and the shared persistent cache."""
    return Executor(ConfigSelectorChain())


def default_executor() -> Executor:
    """The process-wide executor behind the public functions (``ejkernel.flash_attention``)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = create_default_executor()
    return _DEFAULT


# -- defining an op's public function -------------------------------------------------------------


def _call_option_params(op_cls: type[Op]) -> list[inspect.Parameter]:
    kw = inspect.Parameter.KEYWORD_ONLY
    platform_t = Literal["auto", "xla", "triton", "pallas", "cuda", "cudnn"] | str | None
    return [
        inspect.Parameter("platform", kw, default=None, annotation=platform_t),
        inspect.Parameter("cfg", kw, default=None, annotation=op_cls.config_cls | None),
        inspect.Parameter("mesh", kw, default=None, annotation=Any),
        inspect.Parameter("in_specs", kw, default=None, annotation=Any),
        inspect.Parameter("out_specs", kw, default=None, annotation=Any),
    ]


def _with_hints(op: Op, cfg: OpConfig | None, hints: dict[str, Any]) -> OpConfig:
    """``cfg`` with its unset (``None``) top-level fields filled from ``hints``."""
    if cfg is None:
        return op.config_cls(**hints)
    return dataclasses.replace(cfg, **{k: v for k, v in hints.items() if getattr(cfg, k, None) is None})


def define(op_cls: type[Op], *, signature: Callable[..., Any] | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Decorator making the public function of ``op_cls``.

    The decorated function gives the docstring (and, unless ``signature`` is given, the op's own
    parameters); its body is never run. The function's signature is the op's parameters followed
    by the call options every op takes (``platform``, ``cfg``, ``mesh``, ``in_specs``,
    ``out_specs``), and its body hands everything to the default executor::

        @define(FlashAttention, signature=dense_attention_signature)
        def flash_attention():
            \"\"\"Exact softmax attention, ...\"\"\"

    ``signature``: a function whose parameters are shared by several ops (declared once).
    """

    def deco(doc_fn: Callable[..., Any]) -> Callable[..., Any]:
        source = inspect.signature(signature if signature is not None else doc_fn)
        clash = [n for n in CALL_OPTIONS if n in source.parameters]
        if clash:
            raise TypeError(f"{op_cls.__name__}: the call options {clash} are added by define(); remove them")
        sig = source.replace(parameters=[*source.parameters.values(), *_call_option_params(op_cls)])
        op = op_cls()

        def fn(*args: Any, **kwargs: Any) -> Any:
            return default_executor()(op, *args, **kwargs)

        fn.__signature__ = sig  # type: ignore[attr-defined]
        fn.__name__ = fn.__qualname__ = doc_fn.__name__
        fn.__doc__ = doc_fn.__doc__
        fn.__module__ = doc_fn.__module__
        fn.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()} | {"return": sig.return_annotation}
        op_cls.function = staticmethod(fn)  # type: ignore[assignment]
        return fn

    return deco


# -- one implementation, the executor's way ----------------------------------------------------------


def bind(op_name: str, *args: Any, **kwargs: Any) -> Args:
    """The canonical arguments record that op ``op_name`` makes of a call's arguments (call
    options, if any, are dropped): validation included, nothing run."""
    op = get_op(op_name)
    try:
        params = op.signature().bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{op.name}: {e}") from None
    params.apply_defaults()
    p = dict(params.arguments)
    CallOptions.pop_from(p)
    return op.bind(p)


def run_impl(
    impl: KernelImpl,
    args: Args,
    cfg: OpConfig | None = None,
    *,
    device: DeviceInfo | None = None,
    registry: KernelRegistry | None = None,
) -> Any:
    """Run bound ``args`` through ``impl`` alone, as the executor would: check that it accepts
    them on ``device`` (default: the arrays' device; pass another, e.g. a TPU for Pallas'
    interpret mode), resolve the config, run. Raises :class:`~ejkernel.errors.UnsupportedError`
    with the reason when it declines."""
    op = get_op(impl.op_name)
    device = device if device is not None else device_for_arrays(op.arrays(args))
    reason = (registry or kernel_registry).check(impl, args, device)
    if reason is not None:
        raise UnsupportedError(op.name, impl.name, reason)
    return impl.run(args, resolve_config(op, impl, args, device, cfg))


def run_next(impl: KernelImpl, op_name: str, args: Args, *, device: DeviceInfo | None = None) -> Any:
    """Run bound ``args`` of op ``op_name`` (``impl``'s or another) through the highest-priority implementation of another
    backend than ``impl``'s that accepts them, with its resolved config: how an implementation
    that serves only some of its calls, decided at run time (a decode-only kernel under
    ``lax.cond``), hands the others on within the same program. Raises
    :class:`~ejkernel.errors.NoImplementationError` with every reason when none accepts."""
    from ..errors import NoImplementationError

    op = get_op(op_name)
    device = device if device is not None else device_for_arrays(op.arrays(args))
    reasons: dict[str, str] = {}
    for other in kernel_registry.implementations(op.name):
        if other.plugin == impl.plugin:
            continue
        reason = kernel_registry.check(other, args, device)
        if reason is None:
            return other.run(args, resolve_config(op, other, args, device, None))
        reasons[other.name] = reason
    raise NoImplementationError(op.name, reasons)
