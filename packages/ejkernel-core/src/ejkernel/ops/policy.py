"""The scoped execution policy: autotuning, cache-miss behaviour, caches, allowed backends.

One frozen :class:`Policy` is in force at any time; :func:`policy` changes fields for the length
of a ``with`` block (per thread and per asyncio task, through ``contextvars``). Environment
variables set the defaults once, at import; nothing reads them later in a call path:

=============================  ==============================================================
``EJKERNEL_AUTOTUNE``          ``1`` tunes configs on a cache miss (default ``0``)
``EJKERNEL_AUTOTUNE_MODE``     ``fwd`` or ``fwdbwd``: what tuning times for trainable ops
``EJKERNEL_CACHE_MISS``        ``heuristic`` (default), ``warn`` or ``error``
``EJKERNEL_PERSISTENT_CACHE``  ``0`` disables the on-disk config cache
``EJKERNEL_CACHE_DIR``         where the on-disk cache lives (default: the user cache dir)
``EJKERNEL_BACKENDS``          ``xla,triton`` allows only those; ``-triton`` denies one
``EJKERNEL_CHECKS``            ``1`` (or ``checkify``) checks traced index arrays (:mod:`ejkernel.ops.checks`)
=============================  ==============================================================

Earlier releases' names are read too, where the names above are not set:
``EJKERNEL_AUTOTUNE_POLICY=autotune`` (or ``heuristics``) is ``EJKERNEL_AUTOTUNE=1`` (or ``0``),
``EJKERNEL_PERSISTENT_CACHE_DIR`` is ``EJKERNEL_CACHE_DIR``.

Note that ops pick their implementation and config when they are traced: a jitted function
keeps what was chosen at its first trace, whatever policy is in force when it is called later.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import platformdirs

__all__ = ["Policy", "current_policy", "default_policy", "parse_backend_list", "policy"]

CacheMiss = Literal["heuristic", "warn", "error"]
AutotuneMode = Literal["fwd", "fwdbwd"]


def parse_backend_list(spec: str) -> tuple[frozenset[str] | None, frozenset[str]]:
    """Parse ``EJKERNEL_BACKENDS``: ``"xla,triton"`` → allow; ``"-cuda,-pallas"`` → deny.

    Returns ``(allow, deny)`` where ``allow is None`` means every backend not denied.
    """
    allow: set[str] = set()
    deny: set[str] = set()
    for raw in spec.split(","):
        item = raw.strip().lower()
        if not item or item in ("all", "*"):
            continue
        if item.startswith(("-", "!")):
            deny.add(item[1:].strip())
        else:
            allow.add(item.lstrip("+").strip())
    return (frozenset(allow) if allow else None), frozenset(deny)


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: expected 0/1, true/false, yes/no or on/off")


@dataclasses.dataclass(frozen=True)
class Policy:
    """How ops resolve configs and which backends they may use.

    Attributes:
        autotune: on a cache miss, time the implementation's candidate configs on the device
            and keep the fastest (in memory and, if enabled, on disk).
        autotune_mode: ``"fwd"`` times the forward pass; ``"fwdbwd"`` times forward + backward
            for trainable ops.
        autotune_repeats: timed repetitions per candidate (the median is kept).
        on_cache_miss: when no cached or tuned config exists: ``"heuristic"`` uses the
            implementation's heuristic, ``"warn"`` does too but logs a warning, ``"error"``
            raises :class:`~ejkernel.errors.ConfigResolutionError` (useful in production, to
            prove every shape was tuned ahead).
        persistent_cache: read and write the on-disk config cache.
        cache_dir: folder of the on-disk cache.
        backends_allow: backend plugin names that may be used (``None``: all not denied).
        backends_deny: backend plugin names that must not be loaded or used.
        progress: show progress bars while tuning (``None``: when stderr is a terminal).
        value_checks: check the values of traced index arrays (``cum_seqlens_*``,
            ``block_tables``, ``context_lens``, segment ids) under ``jit`` with
            ``False`` (default), ``True`` (a bad value raises from inside the jitted function)
            or ``"checkify"`` (``checkify.check``, functionalized by the caller); see
            :mod:`ejkernel.ops.checks`. Concrete values are always checked.
    """

    autotune: bool = False
    autotune_mode: AutotuneMode = "fwd"
    autotune_repeats: int = 5
    on_cache_miss: CacheMiss = "heuristic"
    persistent_cache: bool = True
    cache_dir: Path = dataclasses.field(default_factory=lambda: Path(platformdirs.user_cache_dir("ejkernel")))
    backends_allow: frozenset[str] | None = None
    backends_deny: frozenset[str] = frozenset()
    progress: bool | None = None
    value_checks: bool | Literal["checkify"] = False

    def __post_init__(self):
        if not (isinstance(self.value_checks, bool) or self.value_checks == "checkify"):
            raise ValueError(f"value_checks must be False, True or 'checkify', got {self.value_checks!r}")
        for name in ("autotune", "persistent_cache"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Policy.{name} must be a bool, got {getattr(self, name)!r}")
        if self.progress is not None and not isinstance(self.progress, bool):
            raise TypeError(f"Policy.progress must be a bool or None, got {self.progress!r}")
        if self.on_cache_miss not in ("heuristic", "warn", "error"):
            raise ValueError(f"on_cache_miss must be 'heuristic', 'warn' or 'error', got {self.on_cache_miss!r}")
        if self.autotune_mode not in ("fwd", "fwdbwd"):
            raise ValueError(f"autotune_mode must be 'fwd' or 'fwdbwd', got {self.autotune_mode!r}")
        if not isinstance(self.autotune_repeats, int) or self.autotune_repeats < 1:
            raise ValueError(f"autotune_repeats must be a positive int, got {self.autotune_repeats!r}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if self.backends_allow is not None:
            object.__setattr__(self, "backends_allow", frozenset(self.backends_allow))
        object.__setattr__(self, "backends_deny", frozenset(self.backends_deny))

    def backend_allowed(self, name: str) -> bool:
        """Whether the backend plugin ``name`` may be loaded and used under this policy."""
        if name in self.backends_deny:
            return False
        return self.backends_allow is None or name in self.backends_allow

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, strict: bool = True) -> Policy:
        """The policy that the environment variables describe (see the module docstring).

        ``strict``: raise ``ValueError`` for a bad value; otherwise each bad variable is
        reported (a warning naming it) and ignored alone, the others still apply.
        """
        env = os.environ if env is None else env
        readers = {
            # Earlier releases' names first: the names of this library, read after them, win.
            "EJKERNEL_AUTOTUNE_POLICY": lambda raw: {"autotune": _earlier_autotune_policy(raw)},
            "EJKERNEL_PERSISTENT_CACHE_DIR": lambda raw: {"cache_dir": Path(raw).expanduser()},
            "EJKERNEL_AUTOTUNE": lambda raw: {"autotune": _env_bool(env, "EJKERNEL_AUTOTUNE", False)},
            "EJKERNEL_PERSISTENT_CACHE": lambda raw: {
                "persistent_cache": _env_bool(env, "EJKERNEL_PERSISTENT_CACHE", True)
            },
            "EJKERNEL_CHECKS": lambda raw: {
                "value_checks": "checkify"
                if raw.strip().lower() == "checkify"
                else _env_bool(env, "EJKERNEL_CHECKS", False)
            },
            "EJKERNEL_AUTOTUNE_MODE": lambda raw: {"autotune_mode": raw.strip().lower()},
            "EJKERNEL_CACHE_MISS": lambda raw: {"on_cache_miss": raw.strip().lower()},
            "EJKERNEL_CACHE_DIR": lambda raw: {"cache_dir": Path(raw).expanduser()},
            "EJKERNEL_BACKENDS": lambda raw: dict(
                zip(("backends_allow", "backends_deny"), parse_backend_list(raw), strict=True)
            ),
        }
        kwargs: dict = {}
        for name, read in readers.items():
            raw = env.get(name)
            if raw is None or not raw.strip():
                continue
            try:
                value = read(raw)
                cls(**value)  # each variable validated on its own
            except (ValueError, TypeError) as e:
                if strict:
                    raise ValueError(f"{name}={raw!r}: {e}") from None
                import logging

                logging.getLogger("ejkernel").warning("ignoring %s=%r: %s", name, raw, e)
                continue
            kwargs.update(value)
        return cls(**kwargs)


def _earlier_autotune_policy(raw: str) -> bool:
    """Earlier releases' ``EJKERNEL_AUTOTUNE_POLICY`` (their cache-miss fallback) as ``autotune``."""
    value = raw.strip().lower()
    if value not in ("autotune", "heuristics"):
        raise ValueError(f"must be 'autotune' or 'heuristics', got {raw!r}")
    return value == "autotune"


def _initial_policy() -> Policy:
    # A bad variable must not make `import ejkernel` fail, nor cost the good ones.
    return Policy.from_env(strict=False)


_DEFAULT = _initial_policy()
_CURRENT: contextvars.ContextVar[Policy] = contextvars.ContextVar("ejkernel_policy", default=_DEFAULT)


def default_policy() -> Policy:
    """The policy set at import from the environment."""
    return _DEFAULT


def current_policy() -> Policy:
    """The policy in force here."""
    return _CURRENT.get()


@contextlib.contextmanager
def policy(base: Policy | None = None, /, **changes) -> Iterator[Policy]:
    """Change the policy for the length of a ``with`` block.

    ``with ejkernel.ops.policy(autotune=True, on_cache_miss="error"): ...`` changes those fields
    of the policy in force; ``policy(Policy(...))`` replaces it whole. Blocks nest; leaving one
    restores what was in force before.
    """
    start = current_policy() if base is None else base
    new = dataclasses.replace(start, **changes) if changes else start
    token = _CURRENT.set(new)
    try:
        yield new
    finally:
        _CURRENT.reset(token)
