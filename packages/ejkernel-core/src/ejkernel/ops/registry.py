"""The kernel registry: implementations of each op, by platform, backend and priority.

Backends are separate distributions. Each declares one entry point in the group
``ejkernel.backends`` whose target is a cheap ``register(registry)`` function::

    [project.entry-points."ejkernel.backends"]
    mybackend = "my_package:register"

    def register(registry):
        registry.register("flash_attention", Platform.TRITON, Backend.GPU, priority=200)(MyImpl)

Discovery is lazy (the first query of the registry) and each plugin is isolated: one that fails
to import or to register is recorded with its error (see :meth:`KernelRegistry.backends` and
``ejkernel info``), logged once, and rolled back; the others and ``import ejkernel`` carry on.

The first-party backends are *known* by name (:data:`KNOWN_BACKENDS`: distribution and install
command), never imported by name: ``platform="cuda"`` without a usable CUDA backend says whether
it is not installed, failed to import (with the error) or has no implementation of the op, and
how to install it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import BackendUnavailableError, NoImplementationError, UnknownPlatformError, UnsupportedError
from .args import Args
from .device import DeviceInfo
from .impl import _DIRECT, Backend, FunctionImpl, KernelImpl, Platform, declared_decline
from .policy import Policy, current_policy

__all__ = [
    "EARLIER_OP_NAMES",
    "ENTRY_POINT_GROUP",
    "KNOWN_BACKENDS",
    "Backend",
    "BackendInfo",
    "KernelImpl",
    "KernelRegistry",
    "KnownBackend",
    "Platform",
    "kernel_registry",
]

log = logging.getLogger("ejkernel")

ENTRY_POINT_GROUP = "ejkernel.backends"


@dataclasses.dataclass(frozen=True)
class KnownBackend:
    """A first-party backend: its entry-point name (also its ``platform=`` name), its
    distribution, the command that installs it, what it needs, and its package (whose ``OPS``
    declares the ops it registers, readable when it is not installed: ``ejkernel.ops.support``)."""

    name: str
    distribution: str
    install: str
    needs: str = ""
    module: str = ""


KNOWN_BACKENDS: dict[str, KnownBackend] = {
    b.name: b
    for b in (
        KnownBackend("xla", "ejkernel-xla", "pip install 'ejkernel-core[xla]'", "any device", "ejkernel_xla"),
        KnownBackend(
            "triton",
            "ejkernel-triton",
            "pip install 'ejkernel-core[triton]'",
            "an NVIDIA GPU and a CUDA jax: 'ejkernel-core[gpu]' installs both",
            "ejkernel_triton",
        ),
        KnownBackend(
            "cuda",
            "ejkernel-cuda",
            "pip install 'ejkernel-core[cuda]'",
            "an NVIDIA GPU and a CUDA jax; the wheel compiles with nvcc",
            "ejkernel_cuda",
        ),
        KnownBackend(
            "cudnn",
            "ejkernel-xla",
            "pip install 'ejkernel-core[xla]'",
            "an NVIDIA GPU (compute capability >= 8.0) and a CUDA jax, whose cuDNN it calls",
            "ejkernel_xla.cudnn",
        ),
        KnownBackend(
            "pallas", "ejkernel-pallas", "pip install 'ejkernel-core[tpu]'", "a TPU (or Mosaic GPU)", "ejkernel_pallas"
        ),
    )
}


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """A backend plugin and what became of it.

    ``status`` is ``"loaded"``, ``"failed"`` (see ``error`` and ``stage``), ``"disabled"`` (denied
    by the policy; loaded later if a policy allows it), ``"pending"`` (not needed yet) or, for a
    first-party backend listed by ``backends(include_missing=True)``, ``"not installed"``.
    ``stage`` says where a failed plugin failed: ``"import"`` (its module or the entry point's
    target) or ``"register"`` (its ``register(registry)``). ``install`` is the command that
    installs it, for the first-party backends and plugins with a known distribution.
    """

    name: str
    target: str
    distribution: str | None
    version: str | None
    status: str
    error: str | None = None
    implementations: tuple[str, ...] = ()
    stage: str | None = None
    install: str | None = None

    @property
    def state(self) -> str:
        """The status in words: ``"failed to import"`` rather than ``"failed"``."""
        return f"failed to {self.stage}" if self.status == "failed" and self.stage else self.status


T = TypeVar("T")

#: Earlier releases' registry names of ops ("algorithms": ``kernel_registry.get("gla", ...)``,
#: ``register("ssm1", ...)``) → the op names here. The registry answers to both.
EARLIER_OP_NAMES: dict[str, str] = {
    "gla": "gla_attention",
    "lightning_attn": "lightning_attention",
    "recurrent": "recurrent_attention",
    "kda": "kernel_delta_attention",
    "kda_decay": "kernel_delta_attention",
    "ssm1": "state_space_v1",
    "mamba1": "state_space_v1",
    "ssm2": "state_space_v2",
    "mamba2": "state_space_v2",
    # The functional name of ejkernel 0.0.16 (``mla_attention``) for multi-head latent attention.
    "mla_attention": "flash_mla",
    # Earlier kernel versions of the grouped GEMM; here one op whose implementation the registry picks.
    "grouped_matmulv2": "grouped_matmul",
    "grouped_matmulv3": "grouped_matmul",
}


def _op(name: Any) -> Any:
    """The op name here for ``name`` (an earlier registry name, or already one of ours)."""
    return EARLIER_OP_NAMES.get(name, name) if isinstance(name, str) else name


def _platform(value: Platform | str) -> Platform:
    try:
        return value if isinstance(value, Platform) else Platform(str(value).lower())
    except ValueError:
        raise ValueError(f"platform must be one of {[p.value for p in Platform]}, got {value!r}") from None


def _backend(value: Backend | str) -> Backend:
    try:
        return value if isinstance(value, Backend) else Backend(str(value).lower())
    except ValueError:
        raise ValueError(f"backend must be one of {[b.value for b in Backend]}, got {value!r}") from None


class KernelRegistry:
    """Implementations of every op. ``ejkernel.kernel_registry`` is the process-wide instance.

    Args:
        entry_point_group: where plugins are discovered; ``None`` disables discovery (a registry
            filled by hand, e.g. in tests).
        known_backends: the backends it can name when they are missing (default:
            :data:`KNOWN_BACKENDS`, the first-party ones).
    """

    def __init__(
        self, entry_point_group: str | None = ENTRY_POINT_GROUP, known_backends: dict[str, KnownBackend] | None = None
    ):
        self._group = entry_point_group
        self._known = dict(KNOWN_BACKENDS if known_backends is None else known_backends)
        self._lock = threading.RLock()
        self._impls: dict[str, list[KernelImpl]] = {}
        self._order = 0
        self._seq: dict[int, int] = {}
        self._plugins: dict[str, BackendInfo] | None = None
        self._entry_points: dict[str, importlib.metadata.EntryPoint] = {}
        self._loading: str | None = None
        self._warned: set[Any] = set()

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        op: str,
        platform: Platform | str,
        backend: Backend | str = Backend.ANY,
        priority: int = 0,
        *,
        name: str | None = None,
    ) -> Callable[[T], T]:
        """Decorator registering an implementation of the op named ``op``.

        It takes a :class:`KernelImpl` subclass (instantiated with no arguments), an instance,
        or a plain function ``fn(args, cfg)``. ``name`` (default: the platform's value) must be
        unique for the op; it is what ``platform=`` and cache keys use. Among the
        implementations that accept a call, the highest ``priority`` wins.
        """
        op = _op(op)
        plat = _platform(platform)
        back = _backend(backend)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int, got {priority!r}")

        def deco(obj: T) -> T:
            if isinstance(obj, type) and issubclass(obj, KernelImpl):
                impl = obj()
            elif isinstance(obj, KernelImpl):
                impl = obj
            elif callable(obj):
                impl = FunctionImpl(obj)
            else:
                raise TypeError(f"cannot register {obj!r}: expected a KernelImpl subclass, instance or function")
            impl.op_name = op
            impl.platform = plat
            impl.backend = back
            impl.priority = priority
            impl.name = (name or plat.value).lower()
            impl.plugin = self._loading or _DIRECT
            with self._lock:
                existing = self._impls.setdefault(op, [])
                if any(i.name == impl.name for i in existing):
                    raise ValueError(f"{op}: an implementation named {impl.name!r} is already registered")
                existing.append(impl)
                self._order += 1
                self._seq[id(impl)] = self._order
            return obj

        return deco

    def unregister(self, op: str, name: str) -> None:
        op = _op(op)
        with self._lock:
            impls = self._impls.get(op, [])
            self._impls[op] = [i for i in impls if i.name != name]

    # -- discovery ----------------------------------------------------------------------------

    def _scan(self) -> None:
        if self._plugins is not None:
            return
        self._plugins = {}
        if self._group is None:
            return
        try:
            eps = importlib.metadata.entry_points(group=self._group)
        except Exception as e:  # a broken metadata folder must not break the registry
            log.warning("ejkernel: could not list %s entry points: %s", self._group, e)
            return
        for ep in eps:
            if ep.name in self._entry_points:
                continue  # the same plugin seen twice on sys.path: the first one wins
            dist = getattr(ep, "dist", None)
            self._entry_points[ep.name] = ep
            dist_name = getattr(dist, "name", None)
            known = self._known.get(ep.name)
            self._plugins[ep.name] = BackendInfo(
                name=ep.name,
                target=ep.value,
                distribution=dist_name,
                version=getattr(dist, "version", None),
                status="pending",
                install=known.install if known else (f"pip install {dist_name}" if dist_name else None),
            )

    def load_plugins(self, policy: Policy | None = None) -> None:
        """Load every plugin the policy allows that is not loaded yet (idempotent)."""
        policy = policy or current_policy()
        with self._lock:
            self._scan()
            assert self._plugins is not None
            for name, info in list(self._plugins.items()):
                if info.status in ("loaded", "failed"):
                    continue
                if not policy.backend_allowed(name):
                    self._plugins[name] = dataclasses.replace(info, status="disabled")
                    continue
                self._plugins[name] = self._load_one(name, info)
            unknown = sorted((policy.backends_allow or frozenset()) - set(self._plugins))
            if unknown and ("allow", tuple(unknown)) not in self._warned:
                self._warned.add(("allow", tuple(unknown)))
                log.warning(
                    "ejkernel: the allowed backends %s (EJKERNEL_BACKENDS / Policy.backends_allow) are not installed; "
                    "installed: %s",
                    ", ".join(unknown),
                    ", ".join(sorted(self._plugins)) or "none",
                )

    def _load_one(self, name: str, info: BackendInfo) -> BackendInfo:
        before = {(a, i.name) for a, impls in self._impls.items() for i in impls}
        self._loading = name
        stage = "import"
        try:
            register_fn = self._entry_points[name].load()
            if not callable(register_fn):
                raise TypeError(f"entry point {info.target!r} is not callable")
            stage = "register"
            register_fn(self)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            # Roll back what the plugin registered before failing, so nothing half-made is used.
            for op, impls in self._impls.items():
                self._impls[op] = [i for i in impls if (op, i.name) in before]
            err = "".join(traceback.format_exception_only(type(e), e)).strip()
            if name not in self._warned:
                self._warned.add(name)
                log.warning("ejkernel: backend plugin %r (%s) failed to %s: %s", name, info.target, stage, err)
            return dataclasses.replace(info, status="failed", error=err, stage=stage)
        finally:
            self._loading = None
        added = tuple(
            sorted(f"{a}/{i.name}" for a, impls in self._impls.items() for i in impls if (a, i.name) not in before)
        )
        log.debug("ejkernel: loaded backend plugin %r: %s", name, ", ".join(added) or "nothing")
        return dataclasses.replace(info, status="loaded", implementations=added)

    def backends(self, *, include_missing: bool = False) -> list[BackendInfo]:
        """Every discovered backend plugin with its status (loading those the policy allows);
        with ``include_missing``, also each known backend that is not installed (status
        ``"not installed"``, with its install command)."""
        self.load_plugins()
        with self._lock:
            assert self._plugins is not None
            found = list(self._plugins.values())
        if include_missing:
            found += [self._missing(k) for name, k in self._known.items() if name not in self._plugins]
        return found

    @staticmethod
    def _missing(known: KnownBackend) -> BackendInfo:
        return BackendInfo(
            name=known.name,
            target="",
            distribution=known.distribution,
            version=None,
            status="not installed",
            install=known.install,
        )

    def refresh(self) -> None:
        """Forget the plugin scan, so that newly installed plugins are discovered.

        Plugins already loaded stay registered; failed ones are retried.
        """
        with self._lock:
            loaded = {n: i for n, i in (self._plugins or {}).items() if i.status == "loaded"}
            self._plugins = None
            self._entry_points.clear()
            self._scan()
            assert self._plugins is not None
            self._plugins.update(loaded)

    # -- queries ------------------------------------------------------------------------------

    def implementations(self, op: str | None = None, *, policy: Policy | None = None) -> list[KernelImpl]:
        """Registered implementations (of ``op``, or all), best priority first."""
        op = _op(op)
        self.load_plugins(policy)
        with self._lock:
            impls = [i for lst in self._impls.values() for i in lst] if op is None else list(self._impls.get(op, []))
        return sorted(impls, key=lambda i: (-i.priority, self._seq.get(id(i), 0)))

    def ops(self) -> list[str]:
        self.load_plugins()
        with self._lock:
            return sorted(a for a, impls in self._impls.items() if impls)

    def _matching(
        self, op: str, platform: Platform | str | None, backend: Backend | str | None, policy: Policy
    ) -> list[KernelImpl]:
        impls = self.implementations(op, policy=policy)
        if platform is not None and str(getattr(platform, "value", platform)).lower() != "auto":
            want = str(getattr(platform, "value", platform)).lower()
            matched = [i for i in impls if i.platform.value == want or i.name == want]
            if not matched:
                installed = [i.name for i in impls]
                unavailable = self._unavailable(op, want, installed, policy)
                if unavailable is not None:
                    raise unavailable
                platforms = [p.value for p in Platform]
                if want not in platforms:
                    failed = {b.name: str(b.error) for b in (self._plugins or {}).values() if b.status == "failed"}
                    raise UnknownPlatformError(op, want, installed, platforms, failed)
            impls = matched
        if backend is not None and str(getattr(backend, "value", backend)).lower() != "any":
            want_b = _backend(backend)
            impls = [i for i in impls if i.backend in (want_b, Backend.ANY)]
        return impls

    def get(
        self,
        op: str | None = None,
        platform: Platform | str | None = None,
        backend: Backend | str | None = None,
        *,
        algorithm: str | None = None,
    ) -> KernelImpl:
        """The highest-priority implementation of ``op`` matching the filters.

        This does not ask the implementation whether it accepts any particular call; the
        returned object is callable like the op (``impl(q, k, v, causal=True)``), which does.
        ``algorithm=`` is earlier releases' name for ``op``; earlier registry names of ops
        (:data:`EARLIER_OP_NAMES`, e.g. ``"gla"``, ``"ssm2"``) are accepted.
        """
        if algorithm is not None:
            if op is not None:
                raise TypeError("kernel_registry.get: pass op or its earlier name algorithm, not both")
            op = algorithm
        if op is None:
            raise TypeError("kernel_registry.get: missing the op name (e.g. get('flash_attention'))")
        op = _op(op)
        impls = self._matching(op, platform, backend, current_policy())
        if not impls:
            raise NoImplementationError(op, {}, self._hint(op, platform, backend, current_policy()))
        return impls[0]

    def _unavailable(self, op: str, want: str, installed: list[str], policy: Policy) -> BackendUnavailableError | None:
        """Why the backend named ``want`` serves no implementation of ``op`` (``None``: no
        backend has that name)."""
        with self._lock:
            self._scan()
            assert self._plugins is not None
            info = self._plugins.get(want)
        known = self._known.get(want)
        if info is None:
            if known is None:
                return None
            needs = f"; it needs {known.needs}" if known.needs else ""
            return BackendUnavailableError(
                op,
                want,
                "not installed",
                f"is not installed (distribution {known.distribution}{needs})",
                install=known.install,
                installed=installed,
            )
        where = f"{info.distribution or '?'} {info.version or ''}".strip()
        install = info.install
        if info.status == "failed":
            if info.distribution and not known:
                install = f"pip install --force-reinstall {info.distribution}"
            return BackendUnavailableError(
                op,
                want,
                info.state,
                f"({where}, entry point {info.target}) is installed but failed to {info.stage or 'load'}: {info.error}",
                install=install,
                installed=installed,
            )
        if info.status == "disabled" or not policy.backend_allowed(want):
            return BackendUnavailableError(
                op,
                want,
                "disabled",
                f"({where}) is installed but disabled by the policy (EJKERNEL_BACKENDS / Policy.backends_allow, "
                "backends_deny)",
                installed=installed,
            )
        ops = sorted({key.partition("/")[0] for key in info.implementations})
        return BackendUnavailableError(
            op,
            want,
            "no implementation",
            f"({where}) is installed but has no implementation of {op}; it implements: {', '.join(ops) or 'nothing'}",
            installed=installed,
        )

    def _hint(self, op: str, platform: Any, backend: Any, policy: Policy) -> str:
        names = [f"{i.name} ({i.platform.value}/{i.backend.value})" for i in self.implementations(op, policy=policy)]
        filters = []
        if platform is not None:
            filters.append(f"platform={getattr(platform, 'value', platform)!r}")
        if backend is not None:
            filters.append(f"backend={getattr(backend, 'value', backend)!r}")
        parts = []
        if filters:
            parts.append("asked for " + ", ".join(filters) + "; registered: " + (", ".join(names) or "none"))
        if not names:
            failed = [f"{b.name}: {b.error}" for b in (self._plugins or {}).values() if b.status == "failed"]
            parts.append(
                f"install a backend, e.g. `{KNOWN_BACKENDS['xla'].install}`"
                + (f" (plugins that failed to load: {'; '.join(failed)})" if failed else "")
            )
        return "\n".join(parts)

    def select(
        self,
        op: str,
        args: Any,
        device: DeviceInfo,
        *,
        platform: Platform | str | None = None,
        backend: Backend | str | None = None,
        policy: Policy | None = None,
    ) -> KernelImpl:
        """The highest-priority implementation that accepts ``args`` on ``device``.

        With ``platform`` (or ``backend``) set, only matching implementations are considered,
        and if they all decline, :class:`~ejkernel.errors.UnsupportedError` carries their
        reasons. With ``platform="auto"``/``None``, :class:`~ejkernel.errors.NoImplementationError`
        lists every implementation's reason. Nothing falls back silently.
        """
        policy = policy or current_policy()
        op = _op(op)
        impls = self._matching(op, platform, backend, policy)
        explicit = platform is not None and str(getattr(platform, "value", platform)).lower() != "auto"
        if not impls:
            raise NoImplementationError(op, {}, self._hint(op, platform, backend, policy))
        reasons: dict[str, str] = {}
        for impl in impls:
            reason = self.check(impl, args, device, policy)
            if reason is None:
                return impl
            reasons[impl.name] = reason
        if explicit:
            raise UnsupportedError(op, ", ".join(reasons), "; ".join(reasons.values()))
        raise NoImplementationError(op, reasons)

    def accepting(
        self,
        op: str,
        args: Any,
        device: DeviceInfo,
        *,
        platform: Platform | str | None = None,
        backend: Backend | str | None = None,
        policy: Policy | None = None,
    ) -> list[KernelImpl]:
        """Every implementation that accepts ``args`` on ``device`` (the filters as in
        :meth:`select`), best priority first; empty if none does. What autotuning chooses among."""
        policy = policy or current_policy()
        impls = self._matching(_op(op), platform, backend, policy)
        return [impl for impl in impls if self.check(impl, args, device, policy) is None]

    @staticmethod
    def environment(impl: KernelImpl, device: DeviceInfo, policy: Policy | None = None) -> str | None:
        """Why ``impl`` cannot run on ``device`` at all: the policy, the device kind, its
        :meth:`~KernelImpl.available` (``None``: it can)."""
        policy = policy or current_policy()
        if impl.plugin != _DIRECT and not policy.backend_allowed(impl.plugin):
            return f"backend plugin {impl.plugin!r} is disabled by the policy (EJKERNEL_BACKENDS)"
        if impl.backend is not Backend.ANY and impl.backend.value != device.platform:
            need = impl.device_requirement or f"a {impl.backend.value.upper()} device"
            return f"needs {need}; this call runs on {device.platform} ({device.kind})"
        try:
            return impl.available(device)
        except Exception as e:  # a buggy check must not hide the other implementations
            return f"available() raised {type(e).__name__}: {e}"

    @classmethod
    def check(cls, impl: KernelImpl, args: Args, device: DeviceInfo, policy: Policy | None = None) -> str | None:
        """Why ``impl`` cannot run ``args`` on ``device``: the environment, then its declaration
        (:func:`~ejkernel.ops.impl.declared_decline`), then its own :meth:`~KernelImpl.decline`."""
        reason = cls.environment(impl, device, policy)
        if reason is not None:
            return reason
        try:
            return declared_decline(impl, args) or impl.decline(args, device)
        except Exception as e:  # a buggy decline must not hide the other implementations
            return f"decline() raised {type(e).__name__}: {e}"


kernel_registry = KernelRegistry()
