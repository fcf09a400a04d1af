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
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ConfigResolutionError
from .autotune import Autotuner, TuneResult
from .cache import ConfigCache, PersistentCache, cache_key
from .config import OpConfig
from .device import DeviceInfo
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
    ``None`` fields filled from the heuristic, stamped with the implementation, validated by it."""
    heuristic = impl.heuristic_cfg(args, device)
    full = _stamp(heuristic if cfg is None else cfg.filled_from(heuristic), impl)
    impl.validate_cfg(full, args, device)
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
        persistent: the on-disk cache; ``"default"`` uses the policy's cache folder, ``None``
            disables the tier for this chain.
        autotuner: what times candidates (default: :class:`Autotuner`).
    """

    def __init__(
        self,
        cache: ConfigCache | None = None,
        persistent: PersistentCache | str | None = "default",
        autotuner: Autotuner | None = None,
    ):
        self.cache = cache if cache is not None else ConfigCache()
        if persistent == "default":
            persistent = PersistentCache()
        if persistent is not None and not isinstance(persistent, PersistentCache):
            raise TypeError(f"persistent must be a PersistentCache, 'default' or None, got {persistent!r}")
        self.persistent = persistent
        self.autotuner = autotuner if autotuner is not None else Autotuner()

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
        policy = policy or current_policy()
        key = self.key(op, impl, args, device)
        attempts: list[str] = []

        if explicit is not None:
            return Resolution(self._complete(explicit, op, impl, args, device), Tier.EXPLICIT, key)
        ov = current_overlay(op.name)
        if ov is not None:
            return Resolution(self._complete(ov, op, impl, args, device), Tier.OVERLAY, key)

        rec = self.cache.get(key)
        if rec is not None:
            return Resolution(rec.config, Tier.MEMORY, key)
        attempts.append("memory: miss")

        if policy.persistent_cache and self.persistent is not None:
            stored = self.persistent.get(key)
            if stored is None:
                attempts.append(f"persistent: miss ({self.persistent.path})")
            else:
                try:
                    cfg = self._stamp(op.config_cls.from_dict(stored["config"]), impl)
                    impl.validate_cfg(cfg, args, device)
                except Exception as e:
                    attempts.append(f"persistent: unusable entry ({type(e).__name__}: {e})")
                    log.warning("ejkernel: ignoring cached config for %s: %s", key, e)
                else:
                    self.cache.put(key, cfg, source="persistent", time_ms=stored.get("time_ms"))
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
            impl.validate_cfg(cfg, args, device)
        except Exception as e:
            attempts.append(f"heuristic: {type(e).__name__}: {e}")
            raise ConfigResolutionError(key, attempts) from e
        if policy.on_cache_miss == "warn":
            log.warning("ejkernel: config cache miss for %s; using the heuristic %s", key, cfg.tuning_fields())
        return Resolution(cfg, Tier.HEURISTIC, key)

    def _autotune(
        self, op: Any, impl: Any, args: Any, device: DeviceInfo, policy: Policy, key: str, attempts: list[str]
    ) -> Resolution | None:
        candidates: list[OpConfig] = []
        try:
            heuristic = impl.heuristic_cfg(args, device)
            for cand in impl.candidate_cfgs(args, device):
                full = self._stamp(cand.filled_from(heuristic), impl)
                try:
                    impl.validate_cfg(full, args, device)
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
        result = self.autotuner.tune(op, impl, args, device, candidates, policy, label=op.describe(args))
        log.info("ejkernel: tuned %s: %s", key, result.summary())
        if result.best is None:
            attempts.append(f"autotune: {result.summary()}")
            return None
        self.cache.put(key, result.best, source="autotune", time_ms=result.best_ms)
        if policy.persistent_cache and self.persistent is not None:
            self.persistent.put(
                key,
                {
                    "op": op.name,
                    "impl": impl.name,
                    "device": device.fingerprint,
                    "config_class": type(result.best).__name__,
                    "config": result.best.to_dict(),
                    "time_ms": result.best_ms,
                    "mode": result.mode,
                    "tuning_seconds": round(result.seconds, 3),
                    "candidates": len(result.results),
                },
            )
        return Resolution(result.best, Tier.AUTOTUNE, key, result)
