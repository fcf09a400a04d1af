"""The earlier ``ejkernel.ops`` API (ejkernel 0.0.16 and its 2026 revisions), mapped onto this one.

Code written for the earlier API imports its names from ``ejkernel.ops`` (and the paths
``ejkernel.ops.utils[.datacarrier]`` and ``ejkernel.modules.operations[.configs|.<op>]``) and runs
unchanged where the name maps onto this framework. Everything that maps is defined here, in one
module; a name that does not map raises an ``ImportError`` (``AttributeError`` on attribute access)
saying what to use instead (:data:`REFUSED`), never a silent stub.

What maps to what
=================

=================================  ===============================================================
earlier name                       here
=================================  ===============================================================
``Kernel[Cfg, Out]``               :class:`Kernel`: a user-defined kernel (``run``,
                                   ``heuristic_cfg``, ``candidate_cfgs``, ...), run by
                                   ``Executor(...)(kernel, *args, **kwargs)``. The built-in ops
                                   are :class:`~ejkernel.ops.op.Op` subclasses, not Kernels.
``Invocation[Cfg, Out]``           :class:`Invocation` (same fields, same 16-hex ``call_key``)
``Executor.choose_config``         :meth:`ejkernel.ops.Executor.choose_config` (ops and Kernels)
``ConfigSelectorChain``            ours; for a Kernel, its tiers are explicit ``cfg=`` → overlay
                                   (:func:`overlay_cache`) → the chain's in-memory ``ConfigCache``
                                   → autotune (:class:`Tuner`, if the policy says so) → heuristic
                                   → ``ConfigResolutionError``. A chooser object with
                                   ``choose(inv, kernel)`` passed to ``Executor`` is used as is.
``AutotunePolicy``                 :class:`AutotunePolicy` ↔ :class:`~ejkernel.ops.Policy`
                                   (:meth:`AutotunePolicy.to_policy`, table there)
``policy_override(sel, **kw)``     :func:`policy_override`: a scoped :func:`~ejkernel.ops.policy`
``Tuner(warmup, iters)``           :class:`Tuner`, an :class:`~ejkernel.ops.Autotuner` timing with
                                   :func:`~ejkernel.ops.timing.time_callable`
``autotune`` (decorator)           :func:`autotune`, timed with :class:`Tuner`
``benchmark``                      :func:`benchmark` (seconds, our clock), here only: the
                                   name ``ejkernel.ops.benchmark`` is the op benchmark suite
``overlay_cache``                  :func:`overlay_cache` for Kernels; built-in ops use
                                   :func:`~ejkernel.ops.overlay`
``get_device_platform``,           :func:`get_device_platform`, :func:`device_kind`; the earlier
``device_kind``                    ``device_fingerprint`` is ours (an opaque cache-key part)
``vmap_with_config``,              ``jax.vmap``/``jax.pmap`` of the executor call (the config is
``pmap_with_config``               chosen when traced, once, from a slice's shapes)
``abstractify``, ``short_hash``,   the same functions (they make :attr:`Invocation.call_key`)
``stable_json``, ``to_json``,
``from_json``,
``sharding_fingerprint``,
``default_key_builder_with_sharding``
``forward_autotune_only``          ``policy(autotune_mode="fwd")``
``FwdParams``/``BwdParams`` of     :data:`FwdParams`/:data:`BwdParams`: build ours from the
``ops.utils.datacarrier``          earlier field names (:data:`PARAM_ALIASES`)
``Cfg``, ``Out``,                  type variables; the ``ConfigChooser`` protocol
``ConfigChooser``
=================================  ===============================================================

The rest of the earlier export list is in :data:`REFUSED`, each with what to use instead.

Differences that code may notice: configs are chosen under the scoped
:class:`~ejkernel.ops.Policy`, which tunes only when asked (``EJKERNEL_AUTOTUNE=1``,
``policy(autotune=True)``), where the earlier default tuned on every cache miss; an explicit
``cfg=`` is used for its call only (the earlier chain also stored it in its caches); a Kernel's
configs are not written to the on-disk cache (they are the kernel's own types); ``stamp=`` and
``EJKERNEL_OPS_STAMP``/``EJKERNEL_OPS_RECORD`` have no effect; ``ConfigCache``,
``PersistentCache``, ``ConfigSelectorChain`` and ``Autotuner`` are this framework's classes, with
its constructors and methods; ``FwdParams``/``BwdParams`` are frozen (``dataclasses.replace``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import dis
import functools
import hashlib
import inspect
import itertools
import json
import logging
import math
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Literal, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _compat_loader
from ..errors import ConfigResolutionError
from ..ops.autotune import Autotuner
from ..ops.cache import cache_key
from ..ops.config import BwdParams as _BwdParams
from ..ops.config import FwdParams as _FwdParams
from ..ops.config import OpConfig
from ..ops.device import DeviceInfo, device_for_arrays
from ..ops.executor import _RECORDERS, Dispatch
from ..ops.op import list_ops, op_class
from ..ops.policy import Policy, current_policy, policy
from ..ops.selection import ConfigSelectorChain, Tier
from ..ops.timing import time_callable

__all__ = [
    "EARLIER_CONFIG_FIELDS",
    "EARLIER_CONFIG_REFUSED",
    "PARAM_ALIASES",
    "REFUSED",
    "AutotunePolicy",
    "BwdParams",
    "Cfg",
    "ConfigChooser",
    "FwdParams",
    "Invocation",
    "Kernel",
    "Out",
    "RemovedNameError",
    "Tuner",
    "abstractify",
    "autotune",
    "benchmark",
    "default_key_builder_with_sharding",
    "device_kind",
    "earlier_config_fields",
    "forward_autotune_only",
    "from_json",
    "get_device_platform",
    "module_getattr",
    "operation_configs",
    "overlay_cache",
    "pmap_with_config",
    "policy_override",
    "sharding_fingerprint",
    "short_hash",
    "stable_json",
    "to_json",
    "vmap_with_config",
]

log = logging.getLogger("ejkernel")

Cfg = TypeVar("Cfg")
Out = TypeVar("Out")


# -- fingerprints and serialization (what Invocation.call_key is made of) -------------------------


def abstractify(pytree: Any) -> Any:
    """``pytree`` with every array (``jax.Array``, tracer, ``np.ndarray``) replaced by a
    ``jax.ShapeDtypeStruct``: keys built from it depend on shapes and dtypes, not values."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (jax.Array, np.ndarray)):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        return x

    return jax.tree.map(leaf, pytree)


def _json_default(o: Any) -> Any:
    if isinstance(o, functools.partial):
        return {"__partial__": _json_default(o.func), "args": o.args, "kwargs": sorted((o.keywords or {}).items())}
    if inspect.isfunction(o) or inspect.ismethod(o):
        code = getattr(o, "__code__", None)
        pos = (code.co_filename, code.co_firstlineno) if code is not None else None
        return {"__callable__": True, "module": o.__module__, "name": o.__qualname__, "pos": pos}
    if isinstance(o, (jax.ShapeDtypeStruct, jax.Array, np.ndarray)):
        return {"shape": [int(s) for s in np.shape(o)], "dtype": np.dtype(o.dtype).name}
    if isinstance(o, np.dtype) or (isinstance(o, type) and issubclass(o, np.generic)):
        return np.dtype(o).name
    if isinstance(o, np.generic):
        return o.item()
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if hasattr(o, "model_dump"):  # pydantic models
        return o.model_dump()
    if callable(o):
        return {"__callable_obj__": f"{type(o).__module__}.{type(o).__qualname__}"}
    return repr(o)


def stable_json(obj: Any) -> str:
    """Deterministic JSON of ``obj`` (sorted keys; arrays as shape and dtype; functions by name
    and source position; other objects by ``repr``)."""
    return json.dumps(obj, default=_json_default, sort_keys=True, separators=(",", ":"))


def short_hash(obj: Any) -> str:
    """16 hex characters of the SHA-256 of :func:`stable_json` of ``obj``."""
    return hashlib.sha256(stable_json(obj).encode()).hexdigest()[:16]


def to_json(obj: Any) -> str:
    """JSON of ``obj`` (dataclasses as dicts, other objects by ``repr``), keys sorted."""

    def default(o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        return repr(o)

    return json.dumps(obj, default=default, sort_keys=True, separators=(",", ":"))


def from_json(s: str) -> Any:
    """``json.loads``: plain Python values (no object is rebuilt)."""
    return json.loads(s)


def sharding_fingerprint(x: Any) -> str | None:
    """``repr`` of an array's sharding (``None`` for anything else)."""
    if not isinstance(x, jax.Array):
        return None
    try:
        return repr(x.sharding)
    except Exception:
        try:
            return repr(getattr(jax.typeof(x), "sharding", None))
        except Exception:
            return None


def default_key_builder_with_sharding(inv: Invocation[Any, Any]) -> str:
    """An :class:`Invocation` key that also hashes each array's sharding (set it as a Kernel's
    ``key_builder`` when configs depend on the sharding)."""
    spec = {
        "args_spec": abstractify(inv.args),
        "kwargs_spec": abstractify(dict(inv.kwargs)),
        "batch_axes": inv.batch_axes,
        "sharding": {
            "args": jax.tree.map(sharding_fingerprint, inv.args),
            "kwargs": jax.tree.map(sharding_fingerprint, dict(inv.kwargs)),
        },
    }
    return short_hash(spec)


_KIND_WORDS = (("gpu", "gpu"), ("cuda", "gpu"), ("nvidia", "gpu"), ("geforce", "gpu"), ("rtx", "gpu"))
_KIND_WORDS += (("tpu", "tpu"), ("cpu", "cpu"))


def get_device_platform(dev: Any = None) -> str:
    """``"gpu"``, ``"tpu"`` or ``"cpu"``: the platform of ``dev`` (a ``jax.Device``; default: the
    default device). CUDA and ROCm devices are ``"gpu"``; an unknown platform is recognized from
    its device kind (``"NVIDIA ..."``, ``"... RTX ..."`` are GPUs), else returned as is."""
    info = DeviceInfo.from_device(dev) if dev is not None else device_for_arrays([])
    if info.platform in ("gpu", "tpu", "cpu"):
        return info.platform
    kind = info.kind.lower()
    for word, platform in _KIND_WORDS:
        if word in kind:
            return platform
    return info.platform


def device_kind() -> str:
    """The default device's kind (``"cpu"``, ``"NVIDIA H100 80GB HBM3"``, ``"TPU v5 lite"``...)."""
    return device_for_arrays([]).kind


# -- Invocation and Kernel --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Invocation(Generic[Cfg, Out]):
    """One call of a :class:`Kernel`, as its ``heuristic_cfg``/``candidate_cfgs`` see it.

    ``args``/``kwargs`` are the arguments after :meth:`Kernel.prepare`; ``override_cfg`` is the
    call's ``cfg=``; ``method="shard_map"`` (with ``mesh``, ``in_specs``, ``out_specs``,
    ``check_vma``) when the executor runs it under ``jax.shard_map``.
    """

    op_id: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    batch_axes: Mapping[str, int] | None = None
    override_cfg: Cfg | None = None
    stamp: bool = True
    method: str | None = None
    mesh: Any = None
    in_specs: tuple[Any, ...] | None = None
    out_specs: Any = None
    check_vma: bool = False

    @property
    def call_key(self) -> str:
        """16 hex characters identifying the call's abstract arguments (shapes, dtypes, other
        values by JSON/``repr``), its ``batch_axes`` and ``method``."""
        return self.make_key()

    def make_key(self, key_builder: Callable[[Invocation[Cfg, Out]], str] | None = None) -> str:
        """``key_builder(self)`` if given, else :attr:`call_key`."""
        if key_builder is not None:
            return key_builder(self)
        spec = {
            "args_spec": abstractify(self.args),
            "kwargs_spec": abstractify(dict(self.kwargs)),
            "batch_axes": self.batch_axes,
            "method": self.method,
        }
        return short_hash(spec)


class Kernel(Generic[Cfg, Out]):
    """Base of a kernel you define yourself, run by an :class:`~ejkernel.ops.Executor`::

        @dataclass(frozen=True)
        class MyConfig:
            block: int = 128

        class MyKernel(Kernel[MyConfig, jax.Array]):
            def run(self, a, b, *, cfg: MyConfig, **kwargs):
                return a @ b

            def heuristic_cfg(self, inv):
                return MyConfig()

            def candidate_cfgs(self, inv):
                return [MyConfig(64), MyConfig(128)]

        out = Executor(ConfigSelectorChain(ConfigCache()))(MyKernel("my_op"), a, b)

    Implement ``run(*args, cfg, **kwargs)`` and ``heuristic_cfg(inv)``; optionally
    ``candidate_cfgs(inv)`` (the autotuning candidates; default: the heuristic), ``prepare``,
    ``fwd_with_residuals`` with ``vjp`` (a custom VJP), and ``create_shard_map_wrapper`` (for
    ``method="shard_map"``). Each of ``run``, ``heuristic_cfg``, ``candidate_cfgs``,
    ``fwd_with_residuals`` and ``vjp`` may have variants for a platform and/or the shard_map
    context, looked up in this order: ``run_shard_map_gpu``, ``run_shard_map``, ``run_gpu``,
    ``run`` (platform ``gpu``/``tpu``/``cpu`` of the arrays' device).

    A call ``executor(kernel, *args, cfg=None, method=None, mesh=None, in_specs=None,
    out_specs=None, check_vma=False, stamp=True, **kwargs)`` (``_cfg=`` is ``cfg=``):
    ``prepare`` → :class:`Invocation` → config (see the :mod:`module docstring
    <ejkernel.compat.ops>`) → ``run(*args, cfg=chosen, **kwargs)``, or the custom VJP, or the
    shard_map wrapper. ``stamp`` is accepted and has no effect (ejkernel does not label HLO).

    Attributes:
        op_id: the kernel's name in cache keys (default ``"<module>.<ClassName>"``).
        key_builder: ``inv -> str``, replacing :attr:`Invocation.call_key` in cache keys.
        version: bump it when cached configs must not be reused.
    """

    op_id: str
    key_builder: Callable[[Invocation[Any, Any]], str] | None = None
    version: str = "0"

    def __init__(self, op_id: str | None = None):
        if op_id is not None:
            self.op_id = op_id
        elif not getattr(self, "op_id", None):
            self.op_id = _default_op_id(self)

    def prepare(self, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Preprocess the arguments (default: unchanged); returns ``(args, kwargs)``."""
        return args, kwargs

    def run(self, *args: Any, cfg: Cfg, **kwargs: Any) -> Out:
        raise NotImplementedError(f"{type(self).__name__} must implement run(*args, cfg, **kwargs)")

    def heuristic_cfg(self, inv: Invocation[Cfg, Out]) -> Cfg:
        raise NotImplementedError(f"{type(self).__name__} must implement heuristic_cfg(inv)")

    def candidate_cfgs(self, inv: Invocation[Cfg, Out]) -> Iterable[Cfg]:
        """The configs autotuning times (default: the heuristic one)."""
        return [self.heuristic_cfg(inv)]

    def fwd_with_residuals(self, *args: Any, cfg: Cfg, **kwargs: Any) -> tuple[Out, Any]:
        """Forward pass of a custom VJP: ``(output, residuals)``. Override with :meth:`vjp`."""
        raise NotImplementedError

    def vjp(self, residuals: Any, dy: Any, *args: Any, cfg: Cfg, **kwargs: Any) -> tuple[Any, ...]:
        """Backward pass of a custom VJP, called as ``vjp(residuals, dy, *args, cfg=cfg, **kwargs)``
        (as the earlier executor called it; its base-class signature listed a ``y`` it never
        passed). Returns one gradient per positional argument (``None`` for none), never a dict;
        keyword arguments get zero gradients."""
        raise NotImplementedError

    def create_shard_map_wrapper(
        self,
        fn: Callable[..., Any],
        *args: Any,
        mesh: Any,
        in_specs: Any,
        out_specs: Any,
        check_vma: bool = False,
        **kwargs: Any,
    ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """``(jax.shard_map of fn(*args, **kwargs), args)``: a helper for overrides.

        Under ``method="shard_map"`` the executor calls the kernel's override as
        ``create_shard_map_wrapper(*args, mesh=, in_specs=, out_specs=, check_vma=, cfg=chosen,
        **kwargs)`` and runs ``fn(*call_args)`` (then ``callback(out, cfg=chosen)`` when it
        returns ``(fn, call_args, callback)``); an override typically returns
        ``super().create_shard_map_wrapper(functools.partial(self.run, cfg=cfg), *args, ...)``.
        """

        def body(*call_args: Any) -> Any:
            return fn(*call_args, **kwargs)

        sharded = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)
        return sharded, args

    # The executor's protocol (ejkernel.ops.Executor calls these for objects that are not Ops).
    def _ejk_run_with(self, executor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _run_kernel(executor, self, args, kwargs)

    def _ejk_choose_with(self, executor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        inv = _invocation(self, args, kwargs)
        return _choose(executor, self, inv, _device_of(inv))[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(op_id={_op_id(self)!r})"


def _default_op_id(kernel: Any) -> str:
    return f"{type(kernel).__module__}.{type(kernel).__name__}"


def _op_id(kernel: Any) -> str:
    return getattr(kernel, "op_id", None) or _default_op_id(kernel)


def _variants(name: str, platform: str, context: str | None) -> list[str]:
    out = [f"{name}_{context}_{platform}", f"{name}_{context}"] if context else []
    return [*out, f"{name}_{platform}", name]


def _overridden(kernel: Kernel[Any, Any], name: str) -> bool:
    attr = getattr(type(kernel), name, None)
    return attr is not None and attr is not getattr(Kernel, name, None)


def _method(kernel: Kernel[Any, Any], name: str, platform: str, context: str | None) -> Callable[..., Any] | None:
    """The kernel's most specific override of ``name`` for the platform and context (or None)."""
    for variant in _variants(name, platform, context):
        if _overridden(kernel, variant):
            return getattr(kernel, variant)
    return None


def _has_custom_vjp(kernel: Kernel[Any, Any], platform: str, context: str | None) -> bool:
    fwd = _variants("fwd_with_residuals", platform, context)
    bwd = _variants("vjp", platform, context)
    return any(_overridden(kernel, f) and _overridden(kernel, b) for f, b in zip(fwd, bwd, strict=True))


class ConfigChooser(Protocol):
    """What an executor asks for a Kernel's config: ``choose(inv, kernel) -> cfg``. An object with
    this method given to ``Executor(...)`` in place of a ``ConfigSelectorChain`` chooses the
    configs of Kernels (the built-in ops need a ``ConfigSelectorChain``)."""

    def choose(self, inv: Invocation[Any, Any], kernel: Kernel[Any, Any]) -> Any: ...


# -- policy -----------------------------------------------------------------------------------------


@dataclasses.dataclass
class AutotunePolicy:
    """The earlier autotuning policy, as fields of :class:`~ejkernel.ops.Policy`.

    ======================================  ====================================================
    AutotunePolicy                          Policy
    ======================================  ====================================================
    ``allow_autotune=True`` and             ``autotune=True`` (tune on a cache miss); otherwise
    ``cache_miss_fallback="autotune"``      ``autotune=False`` (the heuristic on a cache miss)
    ``allow_heuristics=False``              ``on_cache_miss="error"``
    ``validate_backward=True``              ``autotune_mode="fwdbwd"`` (``"fwd"`` when False)
    ======================================  ====================================================

    Apply it with ``with ejkernel.ops.policy(p.to_policy()):`` or :func:`policy_override`.
    Note the defaults differ: the earlier default tuned on a cache miss, ours does not
    (``EJKERNEL_AUTOTUNE=1`` turns it on).
    """

    allow_autotune: bool = True
    allow_heuristics: bool = True
    cache_miss_fallback: Literal["autotune", "heuristics"] = "autotune"
    validate_backward: bool = False

    def __post_init__(self) -> None:
        if self.cache_miss_fallback not in ("autotune", "heuristics"):
            raise ValueError(
                f"cache_miss_fallback must be 'autotune' or 'heuristics', got {self.cache_miss_fallback!r}"
            )
        for name in ("allow_autotune", "allow_heuristics", "validate_backward"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"AutotunePolicy.{name} must be a bool, got {getattr(self, name)!r}")

    def to_policy(self, base: Policy | None = None) -> Policy:
        """``base`` (default: the policy in force) with the fields this policy sets (table above)."""
        base = base if base is not None else current_policy()
        if not self.allow_heuristics:
            on_miss = "error"
        else:
            on_miss = "heuristic" if base.on_cache_miss == "error" else base.on_cache_miss
        return dataclasses.replace(
            base,
            autotune=self.allow_autotune and self.cache_miss_fallback == "autotune",
            on_cache_miss=on_miss,
            autotune_mode="fwdbwd" if self.validate_backward else "fwd",
        )

    @classmethod
    def from_policy(cls, p: Policy | None = None) -> AutotunePolicy:
        """The AutotunePolicy that ``p`` (default: the policy in force) amounts to."""
        p = p if p is not None else current_policy()
        return cls(
            allow_autotune=p.autotune,
            allow_heuristics=p.on_cache_miss != "error",
            cache_miss_fallback="autotune" if p.autotune else "heuristics",
            validate_backward=p.autotune_mode == "fwdbwd",
        )


@contextlib.contextmanager
def policy_override(selector: Any = None, /, **updates: Any) -> Iterator[Policy]:
    """Change :class:`AutotunePolicy` fields for the length of a ``with`` block.

    ``with policy_override(selector, allow_autotune=False): ...``. Only the fields given change
    the policy in force: autotuning is off if the block sets ``allow_autotune=False`` or
    ``cache_miss_fallback="heuristics"``, else on if it sets ``allow_autotune=True`` or
    ``cache_miss_fallback="autotune"``. Policies are scoped here, not held by a selector: the
    block's policy applies to every op and Kernel called in it (through any executor);
    ``selector`` is accepted for the earlier signature.
    """
    known = {f.name for f in dataclasses.fields(AutotunePolicy)}
    unknown = sorted(set(updates) - known)
    if unknown:
        raise TypeError(
            f"policy_override: unknown AutotunePolicy fields {unknown}; known: {sorted(known)} "
            "(for the other Policy fields use ejkernel.ops.policy(...))"
        )
    wanted = AutotunePolicy(**updates)  # validates the values
    current = current_policy()
    changes: dict[str, Any] = {}
    if updates.get("allow_autotune") is False or updates.get("cache_miss_fallback") == "heuristics":
        changes["autotune"] = False
    elif updates.get("allow_autotune") is True or updates.get("cache_miss_fallback") == "autotune":
        changes["autotune"] = True
    if "allow_heuristics" in updates:
        changes["on_cache_miss"] = wanted.to_policy(current).on_cache_miss
    if "validate_backward" in updates:
        changes["autotune_mode"] = "fwdbwd" if wanted.validate_backward else "fwd"
    with policy(**changes) as p:
        yield p


@contextlib.contextmanager
def forward_autotune_only() -> Iterator[Policy]:
    """Tune forward passes only inside the block (``policy(autotune_mode="fwd")``)."""
    with policy(autotune_mode="fwd") as p:
        yield p


# -- timing -----------------------------------------------------------------------------------------


def _outside_trace(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a worker thread: no trace is in progress there, so it times concrete work
    even when the caller is being traced (``jit``, ``grad``, ``shard_map``)."""
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ejkernel-tune") as pool:
        return pool.submit(ctx.run, fn).result()


class Tuner(Autotuner, Generic[Cfg]):
    """Times candidates on the device; the earlier ``Tuner(warmup=1, iters=3)``.

    :meth:`measure` and :meth:`autotune` are the earlier methods (used for :class:`Kernel`
    configs and by :func:`autotune`): a jitted call is timed with our clock,
    :func:`~ejkernel.ops.timing.time_callable` (``warmup`` calls, then the median of ``iters``
    synchronized repeats, each at least 2 ms of calls; the earlier Tuner took the mean of
    ``iters`` calls). Given to ``ConfigSelectorChain(autotuner=...)``, it tunes the built-in ops
    as :class:`~ejkernel.ops.Autotuner` does (device time per call, ``Policy.autotune_repeats``).
    """

    def __init__(self, warmup: int = 1, iters: int = 3):
        for name, value in (("warmup", warmup), ("iters", iters)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"Tuner.{name} must be an int >= {0 if name == 'warmup' else 1}, got {value!r}")
        super().__init__(warmup=warmup)
        self.iters = iters

    def measure(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> float:
        """Seconds per call of ``fn(*args, **kwargs)``.

        Array leaves of ``(args, kwargs)`` are the jitted function's parameters (tracers are
        replaced by zeros of their shape and dtype); every other leaf is a constant. With
        ``fn._ejk_validate_backward`` set, ``grad`` of the sum of the float outputs with respect
        to the float inputs is timed instead (forward only if the function cannot be
        differentiated). Compilation is not timed; a function that fails to compile is timed
        without ``jit``.
        """
        return _outside_trace(lambda: self._measure(fn, args, kwargs))

    def _measure(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
        leaves, treedef = jax.tree.flatten((args, kwargs))
        is_array = [isinstance(x, (jax.Array, np.ndarray)) for x in leaves]
        arrays = [_concrete(x) for x, m in zip(leaves, is_array, strict=True) if m]

        def rebuild(arrs: Iterable[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            it = iter(arrs)
            return jax.tree.unflatten(treedef, [next(it) if m else x for x, m in zip(leaves, is_array, strict=True)])

        def forward(*arrs: Any) -> Any:
            a, k = rebuild(arrs)
            return fn(*a, **k)

        call = None
        if getattr(fn, "_ejk_validate_backward", False):
            call = _grad_call(forward, arrays)
        if call is None:
            try:
                compiled = jax.jit(forward).lower(*arrays).compile()
                call = functools.partial(compiled, *arrays)
            except Exception as e:
                log.debug("ejkernel: Tuner: jit failed (%s); timing without jit", e)
                call = functools.partial(forward, *arrays)
        return time_callable(call, self.iters, warmup=self.warmup) / 1e3

    def autotune(
        self,
        make_fn: Callable[[Cfg], Callable[..., Any]],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        candidates: Iterable[Cfg],
    ) -> Cfg | None:
        """The candidate whose ``make_fn(cfg)(*args, **kwargs)`` is fastest (``None`` if every
        candidate fails; failures are logged and skipped)."""
        best, best_s, failures = None, math.inf, []
        for cfg in candidates:
            try:
                s = self.measure(make_fn(cfg), *args, **dict(kwargs))
            except Exception as e:
                failures.append(f"{cfg!r}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
                continue
            log.info("ejkernel: Tuner: %r: %.6f s", cfg, s)
            if s < best_s:
                best, best_s = cfg, s
        if best is None:
            log.warning("ejkernel: Tuner: every candidate failed: %s", "; ".join(failures) or "no candidates")
        return best


def _concrete(x: Any) -> Any:
    if isinstance(x, jax.core.Tracer):
        return jnp.zeros(x.shape, x.dtype)
    return x


def _is_float(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _grad_call(forward: Callable[..., Any], arrays: list[Any]) -> Callable[[], Any] | None:
    """A compiled ``grad`` of the float outputs' sum w.r.t. the float inputs (None: not
    differentiable, time the forward pass)."""
    diff = [_is_float(x) for x in arrays]
    if not any(diff):
        return None

    def loss(theta: list[Any], rest: list[Any]) -> Any:
        it_t, it_r = iter(theta), iter(rest)
        out = forward(*[next(it_t) if d else next(it_r) for d in diff])
        return sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree.leaves(out) if _is_float(leaf))

    theta = [x for x, d in zip(arrays, diff, strict=True) if d]
    rest = [x for x, d in zip(arrays, diff, strict=True) if not d]
    try:
        compiled = jax.jit(jax.grad(loss)).lower(theta, rest).compile()
    except Exception as e:
        if "Cannot apply JAX transformations" in str(e) or "Leaked trace" in str(e):
            return None
        raise
    return functools.partial(compiled, theta, rest)


def benchmark(fn: Callable[..., Any], /, *args: Any, warmup: int = 1, iters: int = 5, **kwargs: Any) -> float:
    """Seconds per call of ``fn(*args, **kwargs)`` (jitted; see :meth:`Tuner.measure`)."""
    return Tuner(warmup=warmup, iters=iters).measure(fn, *args, **kwargs)


# -- the function autotuner -------------------------------------------------------------------------


def autotune(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    hyperparams: Mapping[str, Iterable[Any]] | None = None,
    timing_warmup_iterations: int = 2,
    timing_rounds: int = 5,
    cache_size_limit: int = 1000,
    example_args: tuple[Any, ...] | None = None,
    example_kws: Mapping[str, Any] | None = None,
    sample_num: int = 2**63 - 1,
    cache_key: str | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    device: Any = None,
    find_optimal_layouts_automatically: bool = False,
    allow_fallback_timing: bool = True,
    profiling_samples: int = 5,
    must_find_profiler_fraction: float = 0.5,
    enable_detailed_logging: bool = False,
    max_compilation_time_seconds: float = 300.0,
    calls_per_round: int = 3,
    profiler_prefix_filter: str = "jit_",
    profiler_event_regex: str | None = None,
    profiler_min_duration_ns: float = 1000.0,
    profiler_max_events: int | None = 10000,
    profiler_verbose: bool = False,
    max_workers: int = 32,
    event_filter_regex: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Tune a function's keyword hyperparameters on its first call for each argument signature.

    ``@autotune(hyperparams={"block_size": [64, 128, 256]})`` times ``fn(*args, block_size=b,
    **kwargs)`` for every combination (at most ``sample_num``, a fixed random sample beyond) with
    :class:`Tuner` (``timing_warmup_iterations`` warmup calls, ``timing_rounds`` timed repeats),
    keeps the fastest per abstract argument signature (``cache_key`` prefixes it; at most
    ``cache_size_limit`` kept) and calls ``fn`` with it. ``example_args``/``example_kws`` replace
    the call's arguments for timing. The wrapped function's ``optimal_hyperparams`` (a dict)
    and ``timing_results`` (``[(hyperparams, seconds)]``, fastest first) describe the last call.
    Settings that fail are skipped; ``RuntimeError`` if all fail. Use it as ``@autotune``,
    ``@autotune(...)`` or ``autotune(fn, ...)``.

    ``in_shardings``, ``out_shardings``, ``device`` and ``find_optimal_layouts_automatically``
    are not supported (``NotImplementedError``): place the arguments with ``jax.device_put``
    before the call; the function is timed where its arguments live. The profiler and
    compilation options (``profiling_samples``, ``profiler_*``, ``allow_fallback_timing``,
    ``max_workers``, ``timeout``, ``calls_per_round``, ...) are accepted and ignored: one clock
    times every candidate here.
    """
    refused = {
        "in_shardings": in_shardings is not None,
        "out_shardings": out_shardings is not None,
        "device": device is not None,
        "find_optimal_layouts_automatically": bool(find_optimal_layouts_automatically),
    }
    for name, given in refused.items():
        if given:
            raise NotImplementedError(
                f"autotune({name}=...) is not supported: place the arguments with jax.device_put(x, sharding) "
                "before calling; the function is timed where its arguments live"
            )
    grid = _hyperparam_grid(hyperparams, sample_num)
    tuner = Tuner(warmup=timing_warmup_iterations, iters=timing_rounds)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(f"autotune expects a callable, got {func!r}")
        tuned: collections.OrderedDict[str, tuple[dict[str, Any], list[tuple[dict[str, Any], float]]]]
        tuned = collections.OrderedDict()

        @functools.wraps(func)
        def wrapped(*args: Any, **kws: Any) -> Any:
            if not grid:
                return func(*args, **kws)
            key = f"{cache_key or ''}:{short_hash(abstractify((args, kws)))}"
            hit = tuned.get(key)
            if hit is None:
                hit = _tune_hyperparams(func, grid, tuner, example_args or args, example_kws or kws)
                tuned[key] = hit
                while len(tuned) > cache_size_limit:
                    tuned.popitem(last=False)
            wrapped.optimal_hyperparams, wrapped.timing_results = dict(hit[0]), list(hit[1])  # type: ignore[attr-defined]
            return func(*args, **{**kws, **hit[0]})

        wrapped.optimal_hyperparams = {}  # type: ignore[attr-defined]
        wrapped.timing_results = []  # type: ignore[attr-defined]
        return wrapped

    return decorate(fn) if fn is not None else decorate


def _hyperparam_grid(hyperparams: Mapping[str, Iterable[Any]] | None, sample_num: int) -> list[dict[str, Any]]:
    if not hyperparams:
        return []
    names = list(hyperparams)
    values = [
        list(v) if not isinstance(v, (str, bytes)) and isinstance(v, Iterable) else [v] for v in hyperparams.values()
    ]
    grid = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
    if len(grid) > sample_num:
        grid = random.Random(0).sample(grid, sample_num)
    return grid


def _tune_hyperparams(
    func: Callable[..., Any],
    grid: list[dict[str, Any]],
    tuner: Tuner[Any],
    args: tuple[Any, ...],
    kws: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], float]]]:
    results, failures = [], []
    for hp in grid:
        try:
            s = tuner.measure(lambda *a, _hp=hp, **k: func(*a, **{**k, **_hp}), *args, **dict(kws))
        except Exception as e:
            failures.append(f"{hp}: {type(e).__name__}: {e}")
            continue
        results.append((hp, s))
    if not results:
        raise RuntimeError(f"autotune({getattr(func, '__name__', func)}): every setting failed: " + "; ".join(failures))
    results.sort(key=lambda r: r[1])
    return results[0][0], results


# -- running a Kernel -------------------------------------------------------------------------------

_OVERLAYS: contextvars.ContextVar[tuple[Mapping[tuple[str, str, str], Any], ...]] = contextvars.ContextVar(
    "ejkernel_compat_overlays", default=()
)


@contextlib.contextmanager
def overlay_cache(mapping: Mapping[tuple[str, str, str], Any]) -> Iterator[None]:
    """Use these configs for Kernel calls inside the ``with`` block (innermost block first).

    Keys are ``(device_fingerprint(), f"{kernel.op_id}@v{kernel.version}", inv.call_key)``.
    The built-in ops take their overlays from :func:`ejkernel.ops.overlay` (a key naming one
    raises ``TypeError`` saying so).
    """
    for key in mapping:
        if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key)):
            raise TypeError(f"overlay_cache keys are (device, 'op_id@vversion', call_key) strings, got {key!r}")
        op = key[1].rpartition("@v")[0] or key[1]
        if op in list_ops():
            raise TypeError(
                f"overlay_cache: {op!r} is a built-in op; use ejkernel.ops.overlay({op}="
                f"{op_class(op).config_cls.__name__}(...)) for it"
            )
    token = _OVERLAYS.set((*_OVERLAYS.get(), dict(mapping)))
    try:
        yield
    finally:
        _OVERLAYS.reset(token)


def _invocation(kernel: Kernel[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Invocation[Any, Any]:
    kwargs = dict(kwargs)
    cfg = kwargs.pop("cfg", None)
    if "_cfg" in kwargs:
        alt = kwargs.pop("_cfg")
        if cfg is not None and alt is not None and alt is not cfg:
            raise TypeError(f"{_op_id(kernel)}: cfg= and _cfg= both given")
        cfg = alt if alt is not None else cfg
    stamp = kwargs.pop("stamp", True)
    method = kwargs.pop("method", None)
    mesh, in_specs, out_specs = kwargs.pop("mesh", None), kwargs.pop("in_specs", None), kwargs.pop("out_specs", None)
    check_vma = kwargs.pop("check_vma", False)
    if method not in (None, "shard_map"):
        raise ValueError(f"{_op_id(kernel)}: method must be None or 'shard_map', got {method!r}")
    if method == "shard_map" and (mesh is None or in_specs is None or out_specs is None):
        raise ValueError(f"{_op_id(kernel)}: method='shard_map' needs mesh, in_specs and out_specs")
    if method is None and (mesh is not None or in_specs is not None or out_specs is not None):
        raise ValueError(f"{_op_id(kernel)}: mesh/in_specs/out_specs take effect with method='shard_map'; pass it")
    args2, kwargs2 = kernel.prepare(*args, **kwargs)
    return Invocation(
        op_id=_op_id(kernel),
        args=tuple(args2),
        kwargs=dict(kwargs2),
        override_cfg=cfg,
        stamp=stamp,
        method=method,
        mesh=mesh,
        in_specs=in_specs,
        out_specs=out_specs,
        check_vma=check_vma,
    )


def _device_of(inv: Invocation[Any, Any]) -> DeviceInfo:
    return device_for_arrays(x for x in jax.tree.leaves((inv.args, dict(inv.kwargs))) if isinstance(x, jax.Array))


def _choose(
    executor: Any, kernel: Kernel[Any, Any], inv: Invocation[Any, Any], device: DeviceInfo
) -> tuple[Any, Tier | None, str]:
    """A Kernel's config for ``inv``: ``(cfg, tier, cache key)`` (tier None: a custom chooser's)."""
    chain = executor.chain
    if not isinstance(chain, ConfigSelectorChain):
        choose = getattr(chain, "choose", None)
        if choose is None:
            raise TypeError(
                f"Executor's chooser {chain!r} is neither a ConfigSelectorChain nor has choose(inv, kernel)"
            )
        return choose(inv, kernel), None, ""
    platform, context = device.platform, inv.method
    version = str(getattr(kernel, "version", "0"))
    call_key = inv.make_key(kernel.key_builder)
    key = cache_key(device.fingerprint, inv.op_id, version, "kernel", version, call_key)
    if inv.override_cfg is not None:
        return inv.override_cfg, Tier.EXPLICIT, key
    for mapping in reversed(_OVERLAYS.get()):
        hit = mapping.get((device.fingerprint, f"{inv.op_id}@v{version}", call_key), None)
        if hit is not None:
            return hit, Tier.OVERLAY, key
    rec = chain.cache.get(key)
    if rec is not None:
        return rec.config, Tier.MEMORY, key
    attempts = ["memory: miss", "persistent: not used for Kernels (their configs are their own types)"]
    pol = current_policy()
    heuristic = _method(kernel, "heuristic_cfg", platform, context)
    if pol.autotune:
        best = _autotune_kernel(chain, kernel, inv, platform, heuristic, pol, attempts)
        if best is not None:
            chain.cache.put(key, best, source="autotune")
            return best, Tier.AUTOTUNE, key
    else:
        attempts.append("autotune: disabled by the policy")
    if pol.on_cache_miss == "error":
        raise ConfigResolutionError(key, [*attempts, "heuristic: not allowed by the policy (on_cache_miss='error')"])
    if heuristic is None:
        raise ConfigResolutionError(key, [*attempts, f"heuristic: {type(kernel).__name__} has no heuristic_cfg(inv)"])
    cfg = heuristic(inv)
    if pol.on_cache_miss == "warn":
        log.warning("ejkernel: config cache miss for %s; using the heuristic %r", key, cfg)
    return cfg, Tier.HEURISTIC, key


def _autotune_kernel(
    chain: ConfigSelectorChain,
    kernel: Kernel[Any, Any],
    inv: Invocation[Any, Any],
    platform: str,
    heuristic: Callable[..., Any] | None,
    pol: Policy,
    attempts: list[str],
) -> Any:
    """The fastest of the kernel's candidates (None, with the reason in ``attempts``)."""
    candidates_fn = _method(kernel, "candidate_cfgs", platform, inv.method)
    try:
        if candidates_fn is not None:
            candidates = list(candidates_fn(inv))
        else:
            candidates = [heuristic(inv)] if heuristic is not None else []
    except Exception as e:
        attempts.append(f"autotune: candidates unavailable ({type(e).__name__}: {e})")
        return None
    if not candidates:
        attempts.append("autotune: no candidates")
        return None

    def make(cfg: Any) -> Callable[..., Any]:
        fn = functools.partial(_call_with, kernel, inv, cfg, platform)
        fn._ejk_validate_backward = pol.autotune_mode == "fwdbwd"  # type: ignore[attr-defined]
        return fn

    tuner = chain.autotuner if isinstance(chain.autotuner, Tuner) else Tuner()
    best = tuner.autotune(make, inv.args, inv.kwargs, candidates)
    if best is None:
        attempts.append("autotune: every candidate failed (see the log)")
    return best


def _run_kernel(executor: Any, kernel: Kernel[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    inv = _invocation(kernel, args, kwargs)
    device = _device_of(inv)
    cfg, tier, key = _choose(executor, kernel, inv, device)
    if tier is not None:
        record = Dispatch(
            op=inv.op_id,
            impl=type(kernel).__name__,
            platform="kernel",
            backend="any",
            plugin="<kernel>",
            config=cfg,
            tier=tier,
            key=key,
            device=device.fingerprint,
        )
        for recorder in _RECORDERS.get():
            recorder.append(record)
    return _call_with(kernel, inv, cfg, device.platform, *inv.args, **inv.kwargs)


def _call_with(
    kernel: Kernel[Any, Any], inv: Invocation[Any, Any], cfg: Any, platform: str, /, *a: Any, **k: Any
) -> Any:
    """Run the kernel with ``cfg``: under shard_map, with its custom VJP, or its ``run``."""
    context = inv.method
    if context == "shard_map":
        if not _overridden(kernel, "create_shard_map_wrapper"):
            raise TypeError(
                f"{inv.op_id}: method='shard_map' needs {type(kernel).__name__}.create_shard_map_wrapper(*args, mesh, "
                "in_specs, out_specs, check_vma, cfg, **kwargs) -> (fn, call_args[, callback]); "
                "Kernel.create_shard_map_wrapper(fn, *args, ...) helps write it"
            )
        made = kernel.create_shard_map_wrapper(
            *a, mesh=inv.mesh, in_specs=inv.in_specs, out_specs=inv.out_specs, check_vma=inv.check_vma, cfg=cfg, **k
        )
        fn, call_args, callback = (*made, None) if len(made) == 2 else made
        out = fn(*call_args)
        return callback(out, cfg=cfg) if callback is not None else out
    if _has_custom_vjp(kernel, platform, context):
        return _custom_vjp_call(kernel, cfg, platform, context, a, k)
    run = _method(kernel, "run", platform, context)
    if run is None:
        raise NotImplementedError(f"{type(kernel).__name__} must implement run(*args, cfg, **kwargs)")
    return run(*a, cfg=cfg, **k)


def _custom_vjp_call(
    kernel: Kernel[Any, Any],
    cfg: Any,
    platform: str,
    context: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``fwd_with_residuals``/``vjp`` as a ``jax.custom_vjp`` over the array leaves of the
    arguments (everything else is closed over; keyword arguments get zero gradients)."""
    fwd_method = _method(kernel, "fwd_with_residuals", platform, context)
    vjp_method = _method(kernel, "vjp", platform, context)
    leaves, treedef = jax.tree.flatten((args, kwargs))
    is_array = [isinstance(x, jax.Array) for x in leaves]

    def rebuild(arrs: Iterable[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        it = iter(arrs)
        return jax.tree.unflatten(treedef, [next(it) if m else x for x, m in zip(leaves, is_array, strict=True)])

    def fwd(*arrs: Any) -> tuple[Any, Any]:
        a, k = rebuild(arrs)
        out, res = fwd_method(*a, cfg=cfg, **k)  # type: ignore[misc]
        return out, (arrs, res)

    def bwd(payload: Any, dy: Any) -> tuple[Any, ...]:
        arrs, res = payload
        a, k = rebuild(arrs)
        grads = vjp_method(res, dy, *a, cfg=cfg, **k)  # type: ignore[misc]
        if isinstance(grads, dict):
            raise TypeError(f"{type(kernel).__name__}.vjp must return a tuple of gradients for positional args")
        grads = tuple(grads)
        if len(grads) != len(a):
            raise TypeError(
                f"{type(kernel).__name__}.vjp must return one gradient per positional arg; "
                f"got {len(grads)} for {len(a)}"
            )
        per_leaf: list[Any] = []
        for arg, g in zip(a, grads, strict=True):
            arg_def = jax.tree.structure(arg)
            per_leaf += [None] * arg_def.num_leaves if g is None else arg_def.flatten_up_to(g)
        per_leaf += [None] * len(jax.tree.leaves(k))
        out = []
        for g, x, m in zip(per_leaf, leaves, is_array, strict=True):
            if m:
                out.append(None if g is None or not _is_float(x) else g)
        return tuple(out)

    g = jax.custom_vjp(lambda *arrs: fwd(*arrs)[0])
    g.defvjp(fwd, bwd)
    return g(*[x for x, m in zip(leaves, is_array, strict=True) if m])


def vmap_with_config(executor: Any, kernel: Any, in_axes: Any = 0) -> Callable[..., Any]:
    """``jax.vmap`` of ``executor(kernel, ...)``: the config is chosen once, when traced, for a
    slice's shapes (works for Kernels and the built-in ops)."""
    return jax.vmap(functools.partial(executor, kernel), in_axes=in_axes)


def pmap_with_config(executor: Any, kernel: Any, in_axes: Any = 0, axis_name: str = "devices") -> Callable[..., Any]:
    """``jax.pmap`` of ``executor(kernel, ...)`` (the config is chosen once, when traced)."""
    return jax.pmap(functools.partial(executor, kernel), in_axes=in_axes, axis_name=axis_name)


# -- FwdParams/BwdParams under their earlier field names -------------------------------------------

# The earlier field → our field (FwdParams/BwdParams of ejkernel.ops.config). BLOCK_M/BLOCK_N are
# Triton's names for the query and key/value tiles, which our q_blocksize/kv_blocksize document.
PARAM_ALIASES: dict[str, str] = {
    "q_blocksize": "q_blocksize",
    "kv_blocksize": "kv_blocksize",
    "num_warps": "num_warps",
    "num_stages": "num_stages",
    "blocksize_m": "q_blocksize",
    "blocksize_n": "kv_blocksize",
    "blocksize_keys": "kv_blocksize",
}
# Accepted and ignored: no kernel of the earlier ejkernel read it, so ignoring it keeps what the
# code did.
PARAM_IGNORED: dict[str, str] = {
    "blocksize_k": "the head-dim (reduction) tile; our kernels take the head dim whole",
}
# Accepted only as None: they configured the earlier ragged_decode_attention kernel, whose config
# is its own record here.
PARAM_REFUSED: dict[str, str] = {
    "blocksize_heads": "the head block of the earlier ragged_decode_attention kernel, which ours does not take",
    "num_key_splits": (
        "the split-K of ragged_decode_attention, set as RaggedDecodeAttentionConfig(num_key_splits=...) "
        "(page_attention's split-K is PageAttentionConfig(num_splits=...))"
    ),
}
_EARLIER_FIELDS = {
    "FwdParams": (
        "blocksize_m",
        "blocksize_k",
        "blocksize_n",
        "q_blocksize",
        "kv_blocksize",
        "blocksize_heads",
        "blocksize_keys",
        "num_key_splits",
        "num_warps",
        "num_stages",
    ),
    "BwdParams": (
        "blocksize_m",
        "blocksize_k",
        "blocksize_n",
        "q_blocksize",
        "kv_blocksize",
        "num_warps",
        "num_stages",
    ),
}


def _translate_params(cls_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    fields = _EARLIER_FIELDS[cls_name]
    if len(args) > len(fields):
        raise TypeError(f"{cls_name} takes at most {len(fields)} positional arguments, got {len(args)}")
    given = dict(zip(fields, args, strict=False))
    for name, value in kwargs.items():
        if name in given:
            raise TypeError(f"{cls_name} got multiple values for {name!r}")
        if name not in fields:
            raise TypeError(f"{cls_name} got an unexpected field {name!r}; fields: {', '.join(fields)}")
        given[name] = value
    out: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, value in given.items():
        if value is None or name in PARAM_IGNORED:
            continue
        if name in PARAM_REFUSED:
            raise ValueError(f"{cls_name}.{name}={value!r} is not supported: it was {PARAM_REFUSED[name]}")
        ours = PARAM_ALIASES[name]
        if ours in out and out[ours] != value:
            raise ValueError(
                f"{cls_name}: {source[ours]}={out[ours]!r} and {name}={value!r} set the same tile ({ours}); give one"
            )
        out[ours], source[ours] = value, name
    return out


class _EarlierParams(type):
    """Metaclass of the earlier ``FwdParams``/``BwdParams`` names: calling one builds our config
    object from the earlier field names, and isinstance/issubclass answer for ours."""

    _target: type

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._target(**_translate_params(cls.__name__, args, kwargs))

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._target)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._target)


class FwdParams(metaclass=_EarlierParams):
    """``FwdParams`` under the earlier field names (``ejkernel.ops.utils.datacarrier``).

    ``FwdParams(blocksize_m=64, blocksize_n=128, num_warps=4)`` returns
    ``ejkernel.ops.FwdParams(q_blocksize=64, kv_blocksize=128, num_warps=4)``: see
    :data:`PARAM_ALIASES` (``blocksize_m`` → ``q_blocksize``; ``blocksize_n``/``blocksize_keys`` →
    ``kv_blocksize``), :data:`PARAM_IGNORED` (``blocksize_k``) and :data:`PARAM_REFUSED`
    (``blocksize_heads``, ``num_key_splits``: ``ValueError`` unless None). The result is frozen:
    change it with ``dataclasses.replace(p, q_blocksize=...)``.
    """

    _target = _FwdParams


class BwdParams(metaclass=_EarlierParams):
    """``BwdParams`` under the earlier field names; see :class:`FwdParams`."""

    _target = _BwdParams


# -- the op configs (ejkernel.modules.operations.configs) -------------------------------------------

#: Earlier releases' op config fields that are not fields here, per config class: a field name
#: (the same setting under its name here), ``"fwd_params.<field>"`` (a field of the forward
#: tiling), or ``None`` (accepted and ignored: a tile of the earlier kernels, which changes no
#: result). Fields with the same name here (``num_warps``, ``block_m``, ...) need no entry.
EARLIER_CONFIG_FIELDS: dict[str, dict[str, str | None]] = {
    "AttentionConfig": dict.fromkeys(
        ("block_q", "block_k", "num_warps", "num_stages", "weights_block_q", "weights_block_k")
    ),
    "ScaledDotProductAttentionConfig": dict.fromkeys(("block_q", "block_k", "num_warps", "num_stages")),
    "RingAttentionConfig": {
        "block_q": None,
        "block_k": None,
        # As ring_attention's call parameters of these names: the inner kernel's forward tiles.
        "query_chunk_size": "fwd_params.q_blocksize",
        "key_chunk_size": "fwd_params.kv_blocksize",
        "num_warps": "fwd_params.num_warps",
        "num_stages": "fwd_params.num_stages",
    },
    "GLAttentionConfig": dict.fromkeys(("block_q", "block_k", "block_d")),
    "LightningAttentionConfig": dict.fromkeys(("block_q", "block_k", "block_d")),
    "RecurrentAttentionConfig": dict.fromkeys(("block_q", "block_k", "block_d")),
    "StateSpaceV2Config": {"block_e": None},
    "GatedDeltaRuleConfig": {"use_chunked": "chunked"},
}

#: Earlier config fields that held a call's semantics: accepted only as ``None`` or the value
#: given (the earlier default, or what the kernels here do), else ``ValueError`` saying what to
#: use instead; never silently dropped.
EARLIER_CONFIG_REFUSED: dict[str, dict[str, tuple[Any, str]]] = {
    "StateSpaceV2Config": {
        "n_groups": (1, "it is the call's argument here: pass n_groups= to state_space_v2(...)"),
        "use_gated_rmsnorm": (False, "it is the call's argument here: pass use_gated_rmsnorm= to state_space_v2(...)"),
        "rmsnorm_eps": (1e-5, "it is the call's argument here: pass rmsnorm_eps= to state_space_v2(...)"),
    },
    "GatedDeltaRuleConfig": {
        # False: the state and the first phase's outputs in float32, as the kernels here keep them.
        "use_input_dtype_state": (False, "the kernels keep the state in float32"),
        "use_input_dtype_phase1_outputs": (False, "the kernels keep the chunk outputs in float32"),
    },
}


def earlier_config_fields(cls: type[OpConfig], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of ``cls(...)`` with earlier releases' field names (:data:`EARLIER_CONFIG_FIELDS`,
    :data:`EARLIER_CONFIG_REFUSED`) mapped onto ``cls``'s fields; ``TypeError`` for a name that is
    neither."""
    name = cls.__name__
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    aliases = EARLIER_CONFIG_FIELDS.get(name, {})
    refused = EARLIER_CONFIG_REFUSED.get(name, {})
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    source: dict[str, str] = {}
    for key, value in kwargs.items():
        if key in fields:
            target: str | None = key
        elif key in aliases:
            target = aliases[key]
        elif key in refused:
            allowed, instead = refused[key]
            if value is not None and value != allowed:
                raise ValueError(f"{name}.{key}={value!r} is not supported here: {instead}")
            continue
        else:
            known = sorted(fields | aliases.keys() | refused.keys())
            raise TypeError(f"{name} got an unexpected field {key!r}; fields: {', '.join(known)}")
        if target is None or value is None:
            continue
        group, _, field = target.partition(".")
        where = f"{group}.{field}" if field else group
        if where in source:
            raise ValueError(
                f"{name}: {source[where]}={value!r} and {key}={value!r} set the same field ({where}); give one"
            )
        source[where] = key
        if field:
            nested.setdefault(group, {})[field] = value
        else:
            out[group] = value
    for group, values in nested.items():
        given = out.get(group)
        if given is not None:
            raise ValueError(f"{name}: pass {group} or the earlier fields {sorted(values)} that set it, not both")
        params_cls = _FwdParams if group == "fwd_params" else _BwdParams
        out[group] = params_cls(**values)
    return out


def operation_configs() -> dict[str, type[OpConfig]]:
    """Every op's Config class by class name, from the op table."""
    return {op_class(n).config_cls.__name__: op_class(n).config_cls for n in list_ops()}


# -- names that do not map --------------------------------------------------------------------------

_NO_RECORDING = (
    "ejkernel does not record invocations (EJKERNEL_OPS_RECORD); `with ejkernel.ops.record_dispatches() as log:` "
    "lists each call's op, implementation and config"
)
_NO_LABELS = (
    "ejkernel does not stamp op labels into HLO (EJKERNEL_OPS_STAMP); `with ejkernel.ops.record_dispatches() as log:` "
    "tells which implementation and config each call used"
)
_NO_OFFLINE = (
    "offline tuning of recorded invocations is gone; call the op once per shape under "
    "`with ejkernel.ops.policy(autotune=True):` (tuned configs persist in the on-disk cache), or time a Kernel's "
    "candidates with ejkernel.ops.Tuner().autotune(make_fn, args, kwargs, candidates)"
)
_NO_FN_RESULTS = (
    "was a result type of the earlier function autotuner; `ejkernel.ops.autotune(fn, hyperparams=...)` sets "
    "`optimal_hyperparams` and `timing_results` on the wrapped function, and ejkernel.ops.Tuner().autotune(...) "
    "returns the best config"
)
_NO_PROGRESS = (
    "progress bars are a policy field: `with ejkernel.ops.policy(progress=True):` (default: when stderr is a terminal)"
)

REFUSED: dict[str, str] = {
    "AutotuneData": _NO_FN_RESULTS,
    "Measurement": _NO_FN_RESULTS,
    "FNAutotuner": "was the class behind the autotune decorator; use `ejkernel.ops.autotune(fn, hyperparams=...)`",
    "AutotuningResult": _NO_OFFLINE,
    "Entry": _NO_OFFLINE,
    "autotune_recorded": _NO_OFFLINE,
    "get_invocations": _NO_RECORDING,
    "record_invocation": _NO_RECORDING,
    "label": _NO_LABELS,
    "labels_to_configs": _NO_LABELS,
    "extract_labels_from_hlo_text": _NO_LABELS,
    "find_labels_in_lowered": _NO_LABELS,
    "set_autotune_progress": _NO_PROGRESS,
    "log_autotune_progress": _NO_PROGRESS,
}
"""Names of the earlier ``ejkernel.ops`` exports that do not map, with what to use instead."""


class RemovedNameError(ImportError):
    """A name of the earlier ejkernel API that is not provided; the message says what to use."""


def _importing_from(frame: Any) -> bool:
    """Whether ``frame`` is executing ``from module import name`` (CPython's IMPORT_FROM)."""
    try:
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] == "IMPORT_FROM"
    except Exception:
        return False


def module_getattr(
    module: str, find: Callable[[str], Any] | None = None, explain: Callable[[str], str | None] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``find(name)`` (raising ``KeyError`` when absent), else the
    message of :data:`REFUSED` or ``explain(name)`` raised as :class:`RemovedNameError` by
    ``from module import name`` (whose own error would drop the message) and as
    ``AttributeError`` otherwise (so ``hasattr`` still answers False)."""

    def __getattr__(name: str) -> Any:
        if find is not None:
            try:
                return find(name)
            except KeyError:
                pass
        why = REFUSED.get(name) if not name.startswith("__") else None
        if why is None and explain is not None and not name.startswith("_"):
            why = explain(name)
        if why is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        text = f"{module}.{name} is not provided: {why}"
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name == "__getattr__":  # a module forwarding here
            frame = frame.f_back
        if _importing_from(frame):
            raise RemovedNameError(text, name=name)
        raise AttributeError(text)

    return __getattr__


def _earlier_ops_name(name: str) -> Any:
    if name in _MAPPED:
        return globals()[name]
    raise KeyError(name)


#: The earlier ``ejkernel.ops`` names that map onto this framework (``ejkernel.ops`` serves them).
_MAPPED = _compat_loader.OPS_MAPPED_NAMES

#: ``ejkernel.ops.__getattr__`` for the earlier names (``ejkernel.ops`` forwards them here).
ops_getattr = module_getattr("ejkernel.ops", _earlier_ops_name)
