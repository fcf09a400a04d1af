"""Config resolution in seven tiers.

For a call that an implementation has accepted, :class:`ConfigSelectorChain` returns the first of:

1. **explicit**: the ``cfg=`` of the call;
2. **overlay**: a config set for the op by the :func:`overlay` context manager;
3. **memory**: the in-memory :class:`~ejkernel.ops.cache.ConfigCache`;
4. **persistent**: the on-disk :class:`~ejkernel.ops.cache.PersistentCache`;
5. **autotune**: if the policy allows, the fastest candidate timed on the device (then stored in
   tiers 3 and 4);
6. **heuristic**: the implementation's heuristic (unless the policy says ``on_cache_miss="error"``);
7. **error**: :class:`~ejkernel.errors.ConfigResolutionError` listing what each tier reported.

Configs from tiers 1 and 2 may be partial: ``None`` fields are filled from the heuristic. A
cached config that no longer parses or validates is reported and skipped, never fatal.

With autotuning on and no implementation asked for (no ``platform``, no config or overlay),
the candidates span implementations too: :meth:`ConfigSelectorChain.select_implementation` times
every implementation that accepts the call, each with its own resolved config, and caches the
winner per shape and device like a config (memory, then disk). Without autotuning, the
highest-priority implementation that accepts the call runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigResolutionError
from .autotune import Autotuner, TuneResult
from .cache import ConfigCache, PersistentCache, cache_key
from .config import OpConfig
from .device import DeviceInfo
from .impl import check_config
from .policy import Policy, current_policy

__all__ = ["ConfigSelectorChain", "Tier", "current_overlay", "overlay", "resolve_config"]

log = logging.getLogger("ejkernel")


class Tier(enum.StrEnum):
    """Where a resolved config came from."""

    EXPLICIT = "explicit"
    OVERLAY = "overlay"
    MEMORY = "memory"
    PERSISTENT = "persistent"
    AUTOTUNE = "autotune"
    HEURISTIC = "heuristic"


_OVERLAYS: contextvars.ContextVar[tuple[Mapping[str, OpConfig], ...]] = contextvars.ContextVar(
    "ejkernel_overlays", default=()
)


@contextlib.contextmanager
def overlay(*configs: OpConfig, **by_op: OpConfig) -> Iterator[None]:
    """Use these configs for their ops inside the ``with`` block (the second tier).

    ``overlay(FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=64)))`` or
    ``overlay(flash_attention=cfg)``. The innermost overlay that names an op wins. A config whose
    ``platform`` is not ``"auto"`` also selects that implementation.
    """
    mapping: dict[str, OpConfig] = {}
    for cfg in configs:
        if not isinstance(cfg, OpConfig) or not type(cfg).op_name:
            raise TypeError(f"overlay() takes op config instances (e.g. FlashAttentionConfig), got {cfg!r}")
        mapping[type(cfg).op_name] = cfg
    for op, cfg in by_op.items():
        if not isinstance(cfg, OpConfig):
            raise TypeError(f"overlay({op}=...) must be an op config, got {type(cfg).__name__}")
        if type(cfg).op_name and type(cfg).op_name != op:
            raise TypeError(f"overlay({op}=...) got a config of {type(cfg).op_name!r}")
        mapping[op] = cfg
    token = _OVERLAYS.set((*_OVERLAYS.get(), mapping))
    try:
        yield
    finally:
        _OVERLAYS.reset(token)


def current_overlay(op_name: str) -> OpConfig | None:
    for mapping in reversed(_OVERLAYS.get()):
        if op_name in mapping:
            return mapping[op_name]
    return None


def _stamp(cfg: OpConfig, impl: Any) -> OpConfig:
    return dataclasses.replace(cfg, platform=impl.name, backend=impl.backend.value)


def resolve_config(op: Any, impl: Any, args: Any, device: DeviceInfo, cfg: OpConfig | None = None) -> OpConfig:
    """The complete config ``impl`` runs ``args`` with: ``cfg`` (or the heuristic) with its
    ``None`` fields filled from the heuristic, stamped with the implementation, validated by it
    and checked against the device's limits (:func:`~ejkernel.ops.impl.check_config`)."""
    heuristic = impl.heuristic_cfg(args, device)
    full = _stamp(heuristic if cfg is None else cfg.filled_from(heuristic), impl)
    check_config(impl, full, args, device)
    return full


@dataclasses.dataclass(frozen=True)
class Resolution:
    config: OpConfig
    tier: Tier
    key: str
    tune: TuneResult | None = None


class ConfigSelectorChain:
    """Resolves the config of a call through the seven tiers (see the module docstring).

    Args:
        cache: the in-memory cache (default: a new one).
        policy: this chain's policy (a :class:`~ejkernel.ops.Policy`, or an earlier
            ``AutotunePolicy``, applied over the policy in force at each call); default: the
            policy in force.
        tuner: what times candidates (default: :class:`Autotuner`; an earlier ``Tuner`` works);
            ``autotuner=`` is the same parameter by its other name.
        persistent: the on-disk cache; ``"default"`` uses the policy's cache folder, ``None``
            disables the tier for this chain; ``PersistentCache("flash-attn")`` keeps a file of
            its own in that folder.
        persist_autotune: store autotuned and heuristic configs in ``persistent`` (default).
        on_event: ``on_event(event, **data)``, told of each resolution: ``"override"`` (an
            explicit ``cfg``), ``"overlay_hit"``, ``"cache_hit"`` (``level="memory"`` or
            ``"persistent"``), ``"autotune_start"``, ``"autotune_finish"``, ``"heuristics"``;
            ``data`` holds ``key``, ``op`` and ``config``. An exception it raises is logged, not raised.
        forbid_reautotune: a key this chain has tuned is not tuned again in this process (the
            memory tier answers it; after the cache is cleared, asking again is a ``RuntimeError``).
    """

    def __init__(
        self,
        cache: ConfigCache | None = None,
        policy: Any = None,
        tuner: Autotuner | None = None,
        persistent: PersistentCache | str | None = "default",
        persist_autotune: bool = True,
        on_event: Any = None,
        forbid_reautotune: bool = True,
        *,
        autotuner: Autotuner | None = None,
    ):
        self.cache = cache if cache is not None else ConfigCache()
        if persistent == "default":
            persistent = PersistentCache()
        if persistent is not None and not isinstance(persistent, PersistentCache):
            raise TypeError(f"persistent must be a PersistentCache, 'default' or None, got {persistent!r}")
        self.persistent = persistent
        if tuner is not None and autotuner is not None:
            raise TypeError("pass tuner or autotuner (the same parameter), not both")
        tuner = tuner if tuner is not None else autotuner
        if tuner is not None and not isinstance(tuner, Autotuner):
            raise TypeError(f"tuner must be an ejkernel.ops.Autotuner (or Tuner), got {type(tuner).__name__}")
        self.autotuner = tuner if tuner is not None else Autotuner()
        if policy is not None and not (isinstance(policy, Policy) or hasattr(policy, "to_policy")):
            raise TypeError(f"policy must be an ejkernel.ops.Policy or an AutotunePolicy, got {type(policy).__name__}")
        self.policy = policy
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be callable, got {type(on_event).__name__}")
        self.on_event = on_event
        self.persist_autotune = bool(persist_autotune)
        self.forbid_reautotune = bool(forbid_reautotune)
        self._tuned: set[str] = set()

    @property
    def tuner(self) -> Autotuner:
        return self.autotuner

    def _policy(self, policy: Policy | None) -> Policy:
        if policy is not None:
            return policy
        if self.policy is None:
            return current_policy()
        if isinstance(self.policy, Policy):
            return self.policy
        return self.policy.to_policy(current_policy())

    def _event(self, event: str, **data: Any) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event, **data)
        except Exception as e:  # a monitoring hook must not break a call
            log.warning("ejkernel: on_event(%r) raised %s: %s", event, type(e).__name__, e)

    def key(self, op: Any, impl: Any, args: Any, device: DeviceInfo) -> str:
        return cache_key(device.fingerprint, op.name, op.version, impl.name, impl.version, op.describe(args))

    @staticmethod
    def _stamp(cfg: OpConfig, impl: Any) -> OpConfig:
        return _stamp(cfg, impl)

    def _complete(self, cfg: OpConfig, op: Any, impl: Any, args: Any, device: DeviceInfo) -> OpConfig:
        if not isinstance(cfg, op.config_cls):
            raise TypeError(f"cfg for {op.name} must be a {op.config_cls.__name__}, got {type(cfg).__name__}")
        return resolve_config(op, impl, args, device, cfg)

    def select(
        self,
        op: Any,
        impl: Any,
        args: Any,
        device: DeviceInfo,
        *,
        explicit: OpConfig | None = None,
        policy: Policy | None = None,
    ) -> Resolution:
        policy = self._policy(policy)
        key = self.key(op, impl, args, device)
        attempts: list[str] = []

        if explicit is not None:
            res = Resolution(self._complete(explicit, op, impl, args, device), Tier.EXPLICIT, key)
            self._event("override", key=key, op=op.name, config=res.config)
            return res
        ov = current_overlay(op.name)
        if ov is not None:
            res = Resolution(self._complete(ov, op, impl, args, device), Tier.OVERLAY, key)
            self._event("overlay_hit", key=key, op=op.name, config=res.config)
            return res

        rec = self.cache.get(key)
        if rec is not None:
            self._event("cache_hit", level="memory", key=key, op=op.name, config=rec.config)
            return Resolution(rec.config, Tier.MEMORY, key)
        attempts.append("memory: miss")

        if policy.persistent_cache and self.persistent is not None:
            stored = self.persistent.get(key)
            if stored is None:
                attempts.append(f"persistent: miss ({self.persistent.path})")
            else:
                try:
                    cfg = self._stamp(self.persistent.decode(stored["config"], op.config_cls), impl)
                    check_config(impl, cfg, args, device)
                except Exception as e:
                    attempts.append(f"persistent: unusable entry ({type(e).__name__}: {e})")
                    log.warning("ejkernel: ignoring cached config for %s: %s", key, e)
                else:
                    self.cache.put(key, cfg, source="persistent", time_ms=stored.get("time_ms"))
                    self._event("cache_hit", level="persistent", key=key, op=op.name, config=cfg)
                    return Resolution(cfg, Tier.PERSISTENT, key)
        else:
            attempts.append("persistent: disabled")

        if policy.autotune:
            tuned = self._autotune(op, impl, args, device, policy, key, attempts)
            if tuned is not None:
                return tuned
        else:
            attempts.append("autotune: disabled by the policy")

        if policy.on_cache_miss == "error":
            attempts.append("heuristic: not allowed by the policy (on_cache_miss='error')")
            raise ConfigResolutionError(key, attempts)
        try:
            cfg = self._stamp(impl.heuristic_cfg(args, device), impl)
            check_config(impl, cfg, args, device)
        except Exception as e:
            attempts.append(f"heuristic: {type(e).__name__}: {e}")
            raise ConfigResolutionError(key, attempts) from e
        if policy.on_cache_miss == "warn":
            log.warning("ejkernel: config cache miss for %s; using the heuristic %s", key, cfg.tuning_fields())
        self._event("heuristics", key=key, op=op.name, config=cfg)
        return Resolution(cfg, Tier.HEURISTIC, key)

    def implementation_key(self, op: Any, impls: Sequence[Any], args: Any, device: DeviceInfo) -> str:
        """The cache key of the choice among ``impls`` (their names and versions are in it: another
        set of candidates, e.g. a backend installed since, is chosen among anew)."""
        candidates = "+".join(f"{i.name}@{i.version}" for i in impls)
        return cache_key(device.fingerprint, op.name, op.version, "*", candidates, op.describe(args))

    def select_implementation(
        self, op: Any, impls: Sequence[Any], args: Any, device: DeviceInfo, *, policy: Policy | None = None
    ) -> tuple[Any, Resolution]:
        """The fastest of the implementations ``impls`` (all accepting ``args``, best priority
        first) and its config, when the policy autotunes.

        Each implementation's config is resolved as :meth:`select` does (so it is autotuned and
        cached on its own); then each runs with it on the same random inputs, timed as autotuning
        times configs, and the fastest wins. The winner is cached per shape and device like a
        config, in memory and on disk (the record's ``impl``; its ``times_ms`` holds every
        candidate's time), so later calls and processes choose without timing. An implementation
        that fails to run is skipped; if none runs, the first (highest priority) is used.
        """
        policy = self._policy(policy)
        by_name = {i.name: i for i in impls}
        key = self.implementation_key(op, impls, args, device)
        rec = self.cache.get(key)
        if rec is not None and rec.config.platform in by_name:
            self._event("cache_hit", level="memory", key=key, op=op.name, config=rec.config)
            return by_name[rec.config.platform], Resolution(rec.config, Tier.MEMORY, key)
        if policy.persistent_cache and self.persistent is not None:
            stored = self.persistent.get(key)
            if stored is not None:
                try:
                    impl = by_name[stored["impl"]]
                    cfg = self._stamp(self.persistent.decode(stored["config"], op.config_cls), impl)
                    check_config(impl, cfg, args, device)
                except Exception as e:
                    log.warning("ejkernel: ignoring the cached implementation choice for %s: %s", key, e)
                else:
                    self.cache.put(key, cfg, source="persistent", time_ms=stored.get("time_ms"))
                    self._event("cache_hit", level="persistent", key=key, op=op.name, config=cfg)
                    return impl, Resolution(cfg, Tier.PERSISTENT, key)
        if key in self._tuned and self.forbid_reautotune:
            raise RuntimeError(
                f"Re-autotune requested for {key}: this chain tuned it before (forbid_reautotune=True); "
                "its result was cleared from the memory cache"
            )
        resolved = []
        errors: dict[str, str] = {}
        for impl in impls:
            try:
                resolved.append((impl, self.select(op, impl, args, device, policy=policy)))
            except ConfigResolutionError as e:  # e.g. on_cache_miss="error": the others still compete
                errors[impl.name] = str(e)
                if impl is impls[-1] and not resolved:
                    raise
        self._event("autotune_start", key=key, op=op.name, candidates=len(resolved))
        times: dict[str, float | None] = {}
        mode = ""
        for impl, res in resolved:
            result = self.autotuner.tune(op, impl, args, device, [res.config], policy, label=op.describe(args))
            mode = result.mode
            times[impl.name] = result.best_ms
            if result.best_ms is None:
                errors[impl.name] = result.summary()
        timed = [(times[impl.name], n, impl, res) for n, (impl, res) in enumerate(resolved) if times[impl.name]]
        if not timed:
            log.warning("ejkernel: no implementation of %s ran while tuning %s: %s", op.name, key, errors)
            impl, res = resolved[0]
            return impl, res
        best_ms, _, impl, res = min(timed, key=lambda t: (t[0], t[1]))
        self._event("autotune_finish", key=key, op=op.name, config=res.config)
        log.info(
            "ejkernel: chose %s for %s: %s",
            impl.name,
            key,
            ", ".join(f"{n} {'failed' if t is None else f'{t:.3f} ms'}" for n, t in times.items()),
        )
        self._tuned.add(key)
        self.cache.put(key, res.config, source="autotune", time_ms=best_ms)
        if policy.persistent_cache and self.persistent is not None and self.persist_autotune:
            self.persistent.put(
                key,
                {
                    "op": op.name,
                    "impl": impl.name,
                    "device": device.fingerprint,
                    "config_class": type(res.config).__name__,
                    "config": self.persistent.encode(res.config),
                    "time_ms": best_ms,
                    "mode": mode,
                    "times_ms": times,
                },
            )
        return impl, Resolution(res.config, Tier.AUTOTUNE, key)

    def _autotune(
        self, op: Any, impl: Any, args: Any, device: DeviceInfo, policy: Policy, key: str, attempts: list[str]
    ) -> Resolution | None:
        candidates: list[OpConfig] = []
        try:
            heuristic = impl.heuristic_cfg(args, device)
            for cand in impl.candidate_cfgs(args, device):
                full = self._stamp(cand.filled_from(heuristic), impl)
                try:
                    check_config(impl, full, args, device)
                except ValueError as e:
                    log.debug("ejkernel: pruned candidate %s: %s", full.tuning_fields(), e)
                    continue
                if full not in candidates:
                    candidates.append(full)
        except Exception as e:
            attempts.append(f"autotune: candidates unavailable ({type(e).__name__}: {e})")
            return None
        if not candidates:
            attempts.append("autotune: no valid candidate")
            return None
        if key in self._tuned and self.forbid_reautotune:
            raise RuntimeError(
                f"Re-autotune requested for {key}: this chain tuned it before (forbid_reautotune=True); "
                "its result was cleared from the memory cache"
            )
        self._event("autotune_start", key=key, op=op.name, candidates=len(candidates))
        result = self.autotuner.tune(op, impl, args, device, candidates, policy, label=op.describe(args))
        self._event("autotune_finish", key=key, op=op.name, config=result.best)
        log.info("ejkernel: tuned %s: %s", key, result.summary())
        if result.best is None:
            attempts.append(f"autotune: {result.summary()}")
            return None
        self._tuned.add(key)
        self.cache.put(key, result.best, source="autotune", time_ms=result.best_ms)
        if policy.persistent_cache and self.persistent is not None and self.persist_autotune:
            self.persistent.put(
                key,
                {
                    "op": op.name,
                    "impl": impl.name,
                    "device": device.fingerprint,
                    "config_class": type(result.best).__name__,
                    "config": self.persistent.encode(result.best),
                    "time_ms": result.best_ms,
                    "mode": result.mode,
                    "tuning_seconds": round(result.seconds, 3),
                    "candidates": len(result.results),
                },
            )
        return Resolution(result.best, Tier.AUTOTUNE, key, result)
