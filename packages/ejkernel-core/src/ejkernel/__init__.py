"""ejkernel: one JAX API for fast attention kernels, many backends behind it.

>>> import ejkernel
>>> out = ejkernel.flash_attention(q, k, v, causal=True)     # doctest: +SKIP

Every op (``ejkernel.list_ops()``) is exported here with its Module and Config classes.
Backends (``ejkernel-xla``, ``ejkernel-triton``, ...) are separate distributions discovered
through the ``ejkernel.backends`` entry point; ``ejkernel.backends()`` lists them and their status.
``ejkernel.write_kv_pages`` writes a serving step's keys and values into a paged KV cache
(:mod:`ejkernel.ops.kv_cache`).
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import Any

from . import _compat_loader, errors, ops, types
from .errors import ConfigResolutionError, NoImplementationError, UnsupportedError
from .ops import (
    Backend,
    BackendInfo,
    BwdParams,
    FwdParams,
    Platform,
    Policy,
    checks,
    checks_enabled,
    kernel_registry,
    list_ops,
    policy,
)
from .ops.catalog import load_builtin_ops, op_exports
from .types import MaskInfo

load_builtin_ops()
from . import modules  # noqa: E402  (after the ops are loaded)
from .ops.kv_cache import write_kv_pages  # noqa: E402

globals().update(op_exports())

try:
    __version__ = _version("ejkernel-core")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"


def backends(*, include_missing: bool = False) -> list[BackendInfo]:
    """The installed backend plugins and their status (loaded, failed with its error, disabled);
    with ``include_missing``, also the first-party backends that are not installed, each with
    its install command."""
    return kernel_registry.backends(include_missing=include_missing)


__all__ = [
    "Backend",
    "BackendInfo",
    "BwdParams",
    "ConfigResolutionError",
    "FwdParams",
    "MaskInfo",
    "NoImplementationError",
    "Platform",
    "Policy",
    "UnsupportedError",
    "__version__",
    "backends",
    "checks",
    "checks_enabled",
    "errors",
    "kernel_registry",
    "list_ops",
    "modules",
    "ops",
    "policy",
    "types",
    "write_kv_pages",
]
__all__ += sorted(op_exports())


def __getattr__(name: str) -> Any:
    exports = op_exports()  # ops defined after import (a plugin's, a test's)
    if name in exports:
        return exports[name]
    if name == "compat":  # the earlier releases' API, imported on first use (ejkernel._compat_loader)
        return _compat_loader.load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *op_exports()})
