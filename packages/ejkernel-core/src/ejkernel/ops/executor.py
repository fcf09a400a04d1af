"""The executor: bind → (shard_map) → select an implementation → resolve its config → run."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

import jax

from .config import OpConfig
from .device import device_for_arrays
from .kernel import CALL_OPTIONS, Kernel, array_fields
from .policy import current_policy
from .registry import KernelRegistry, kernel_registry
from .selection import ConfigSelectorChain, Tier, current_overlay

__all__ = ["CallOptions", "Dispatch", "Executor", "create_default_executor", "default_executor", "record_dispatches"]

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

    Args:
        chain: config resolution (default: a chain with fresh in-memory cache and the default
            persistent cache).
        registry: where implementations come from (default: ``ejkernel.kernel_registry``).
    """

    def __init__(self, chain: ConfigSelectorChain | None = None, registry: KernelRegistry | None = None):
        self.chain = chain if chain is not None else ConfigSelectorChain()
        self.registry = registry if registry is not None else kernel_registry

    def __call__(self, module: Kernel, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = module.signature().bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{module.op_name}: {e}") from None
        bound.apply_defaults()
        return self.run(module, dict(bound.arguments))

    def run(self, module: Kernel, params: dict[str, Any]) -> Any:
        """Run ``module`` with its full parameter mapping (call options included)."""
        params = dict(params)
        options = CallOptions.pop_from(params)
        _check_options(module, options)
        args = module.bind(params)
        if options.mesh is not None:
            return self._run_sharded(module, args, options)
        return self.dispatch(module, args, options)

    def dispatch(self, module: Kernel, args: Any, options: CallOptions) -> Any:
        """Select and run an implementation for already-bound ``args``."""
        policy = current_policy()
        device = device_for_arrays(module.arrays(args))
        requested = options.cfg if options.cfg is not None else current_overlay(module.op_name)
        platform = _platform_name(options.platform) or (_platform_name(requested.platform) if requested else None)
        backend = requested.backend if requested is not None and requested.backend != "any" else None
        impl = self.registry.select(module.op_name, args, device, platform=platform, backend=backend, policy=policy)
        res = self.chain.select(module, impl, args, device, explicit=options.cfg, policy=policy)
        record = Dispatch(
            op=module.op_name,
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
        log.debug(
            "ejkernel: %s -> %s (%s config %s)", module.op_name, impl.name, res.tier.value, res.config.tuning_fields()
        )
        return impl.run(args, res.config)

    def _run_sharded(self, module: Kernel, args: Any, options: CallOptions) -> Any:
        mesh = options.mesh
        specs = module.partition_specs(args, options.in_specs, mesh)
        out_specs = options.out_specs if options.out_specs is not None else module.default_out_spec(args, specs)
        names = [n for n in array_fields(args) if getattr(args, n) is not None]
        leaves = [getattr(args, n) for n in names]
        leaf_specs = tuple(specs[n] for n in names)
        inner = dataclasses.replace(options, mesh=None, in_specs=None, out_specs=None)

        def body(*local: Any) -> Any:
            local_args = dataclasses.replace(args, **dict(zip(names, local, strict=True)))
            local_args = module.localize(local_args, specs, mesh)
            return self.dispatch(module, local_args, inner)

        sharded = jax.shard_map(body, mesh=mesh, in_specs=leaf_specs, out_specs=out_specs, check_vma=False)
        return sharded(*leaves)


def _check_options(module: Kernel, options: CallOptions) -> None:
    if options.cfg is not None and not isinstance(options.cfg, module.config_cls):
        raise TypeError(
            f"{module.op_name}: cfg must be a {module.config_cls.__name__}, got {type(options.cfg).__name__}"
        )
    if options.platform is not None and not isinstance(options.platform, str):
        raise TypeError(f"{module.op_name}: platform must be a str or Platform, got {type(options.platform).__name__}")
    p, c = _platform_name(options.platform), _platform_name(options.cfg.platform) if options.cfg else None
    if p and c and p != c:
        raise ValueError(f"{module.op_name}: platform={p!r} contradicts cfg.platform={c!r}")
    if options.mesh is None and (options.in_specs is not None or options.out_specs is not None):
        raise ValueError(f"{module.op_name}: in_specs/out_specs need mesh=")
    if options.mesh is not None:
        if not isinstance(options.mesh, jax.sharding.Mesh):
            raise TypeError(f"{module.op_name}: mesh must be a jax.sharding.Mesh, got {type(options.mesh).__name__}")
        if options.in_specs is None:
            raise ValueError(f"{module.op_name}: mesh= needs in_specs (the PartitionSpecs of the array arguments)")


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
