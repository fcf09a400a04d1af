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
