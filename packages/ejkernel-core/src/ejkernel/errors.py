"""Exceptions raised by ejkernel.

Input validation raises the built-in ``ValueError`` / ``TypeError`` (naming the argument and the
shapes). The classes here cover what goes wrong after validation: no implementation accepts a
call, or no config can be resolved for it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BackendUnavailableError",
    "ConfigResolutionError",
    "EjkernelError",
    "NoImplementationError",
    "UnknownPlatformError",
    "UnsupportedError",
]


class EjkernelError(Exception):
    """Base class of ejkernel's own errors."""


class UnsupportedError(EjkernelError, NotImplementedError):
    """An implementation declined a call (a feature, dtype, shape or device it does not support).

    Attributes:
        op: the op name, e.g. ``"flash_attention"`` (also ``algorithm``, its earlier name).
        implementation: the declining implementation's name, e.g. ``"triton"``.
        reason: why it declined, in words.
    """

    def __init__(self, op: str, implementation: str, reason: str):
        self.op = self.algorithm = op
        self.implementation = implementation
        self.reason = reason
        super().__init__(f"{op}: implementation {implementation!r} declined: {reason}")


class NoImplementationError(EjkernelError, RuntimeError):
    """No registered implementation accepted a call.

    ``reasons`` maps each implementation that was considered to the reason it declined; an empty
    mapping means none is registered (install a backend, e.g. ``pip install 'ejkernel-core[xla]'``).
    """

    def __init__(self, op: str, reasons: dict[str, str], hint: str = ""):
        self.op = self.algorithm = op
        self.reasons = dict(reasons)
        if reasons:
            lines = "\n".join(f"  - {name}: {why}" for name, why in reasons.items())
            msg = f"no implementation of {op!r} accepts this call:\n{lines}"
        else:
            msg = f"no implementation of {op!r} is registered"
        if hint:
            msg += f"\n{hint}"
        super().__init__(msg)


class BackendUnavailableError(NoImplementationError):
    """``platform=`` names a backend that cannot serve the op here, and says which of these it is.

    Attributes:
        op: the op name.
        backend: the backend named (its entry-point name, e.g. ``"cuda"``).
        status: ``"not installed"``, ``"failed to import"``, ``"failed to register"``,
            ``"disabled"`` (by the policy) or ``"no implementation"`` (installed and loaded, but
            it does not implement the op).
        reason: the detail: the import error, what the backend implements instead, ...
        install: the command that installs (or reinstalls) it, when known.
        installed: the implementations of the op installed here (their ``platform=`` names).
    """

    def __init__(
        self,
        op: str,
        backend: str,
        status: str,
        reason: str,
        *,
        install: str | None = None,
        installed: Sequence[str] = (),
    ):
        self.op = self.algorithm = op
        self.reasons = {}
        self.backend = backend
        self.status = status
        self.reason = reason
        self.install = install
        self.installed = list(installed)
        msg = f"{op}: platform={backend!r}: the backend {backend!r} {reason}"
        if install:
            msg += f"\n{'reinstall' if status.startswith('failed') else 'install'} it: {install}"
        msg += f"\nimplementations of {op} installed here: {', '.join(self.installed) or 'none'}"
        msg += " (`ejkernel info` lists every backend and its status)"
        EjkernelError.__init__(self, msg)


class UnknownPlatformError(EjkernelError, ValueError):
    """``platform=`` names neither a platform nor an implementation of the op (a wrong argument).

    Attributes:
        op: the op name.
        platform: what was asked for.
        installed: the implementations of the op installed here (their ``platform=`` names).
        failed: backends that failed to load, by name, with their errors (the implementation
            asked for may be one of theirs).
    """

    def __init__(
        self,
        op: str,
        platform: str,
        installed: list[str],
        platforms: list[str],
        failed: dict[str, str] | None = None,
    ):
        self.op = self.algorithm = op
        self.platform = platform
        self.installed = list(installed)
        self.failed = dict(failed or {})
        msg = (
            f"{op}: unknown platform {platform!r}; installed for {op}: {', '.join(installed) or 'none'} "
            f"(platform= takes 'auto', a platform of {platforms} or an implementation's name)"
        )
        if self.failed:
            lines = "\n".join(f"  - {name}: {err}" for name, err in self.failed.items())
            msg += f"\nbackends that failed to load (one of them may provide {platform!r}):\n{lines}"
        super().__init__(msg)


class ConfigResolutionError(EjkernelError, RuntimeError):
    """No config could be resolved for a call (the seventh tier of config selection).

    Raised when the policy forbids falling back to heuristics on a cache miss, or when every
    tier failed; ``attempts`` lists what each tier reported.
    """

    def __init__(self, key: str, attempts: Sequence[str]):
        self.key = key
        self.attempts = list(attempts)
        lines = "\n".join(f"  - {a}" for a in attempts)
        super().__init__(f"no config resolved for {key}:\n{lines}")
