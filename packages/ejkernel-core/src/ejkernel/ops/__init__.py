"""The op framework: op definitions, registry, config selection, autotuning, caches, timing.

The ops themselves live in this package too, one folder each (``ejkernel/ops/flash_attention/``,
...): see :mod:`ejkernel.ops.op` for the folder's vocabulary. Modules here import only the
ones above them in this list: ``config``, ``policy``, ``checks``, ``device``, ``resources``,
``args``, ``op``, ``impl``, ``cache``, ``timing``, ``autotune``, ``registry``, ``selection``,
``executor``, ``catalog``, ``support`` (the op × backend table). ``kv_cache``
(:func:`~ejkernel.ops.kv_cache.write_kv_pages`, writing a serving step's keys and values into a paged
cache) is plain JAX beside them, exported as ``ejkernel.write_kv_pages``.

The earlier ``ejkernel.ops`` API's names (``Kernel``, ``Tuner``, ``autotune``, ...) are served
from :mod:`ejkernel.compat.ops`, which is imported the first time one of them is read. Its
``benchmark`` function is ``ejkernel.ops.compat.benchmark``: ``ejkernel.ops.benchmark`` is the op
benchmark suite (``ejkernel bench``).
"""

from typing import Any

from .. import _compat_loader
from .args import Args, ArgSpec, ShardPlan, array, describe_array, static
from .autotune import Autotuner, CandidateResult, TuneResult
from .cache import SCHEMA_VERSION, CacheRecord, ConfigCache, PersistentCache, cache_key
from .catalog import load_builtin_ops, op_exports
from .checks import ValueRule, checks, checks_enabled, enforce
from .config import BwdParams, FwdParams, OpConfig, tile
from .device import DeviceInfo, device_fingerprint, device_for_arrays
from .executor import (
    CallOptions,
    Dispatch,
    Executor,
    bind,
    create_default_executor,
    default_executor,
    define,
    record_dispatches,
    run_impl,
    run_next,
)
from .impl import Backend, KernelImpl, Platform, SizeRule, check_config, declared_decline
from .op import Op, get_op, list_ops, op_class
from .policy import Policy, current_policy, default_policy, policy
from .registry import BackendInfo, KernelRegistry, kernel_registry
from .resources import DeviceProfile, Need, profile_for
from .selection import ConfigSelectorChain, Tier, current_overlay, overlay, resolve_config
from .timing import device_ms, time_callable

# ``ejkernel.ops.autotune`` is the earlier API's decorator (see __getattr__), as it was, not the
# submodule of the same name that the import above bound here.
globals().pop("autotune", None)

__all__ = [
    "SCHEMA_VERSION",
    "ArgSpec",
    "Args",
    "Autotuner",
    "Backend",
    "BackendInfo",
    "BwdParams",
    "CacheRecord",
    "CallOptions",
    "CandidateResult",
    "ConfigCache",
    "ConfigSelectorChain",
    "DeviceInfo",
    "DeviceProfile",
    "Dispatch",
    "Executor",
    "FwdParams",
    "Kernel",
    "KernelImpl",
    "KernelRegistry",
    "Need",
    "Op",
    "OpConfig",
    "PersistentCache",
    "Platform",
    "Policy",
    "ShardPlan",
    "SizeRule",
    "Tier",
    "TuneResult",
    "ValueRule",
    "array",
    "bind",
    "cache_key",
    "check_config",
    "checks",
    "checks_enabled",
    "create_default_executor",
    "current_overlay",
    "current_policy",
    "declared_decline",
    "default_executor",
    "default_policy",
    "define",
    "describe_array",
    "device_fingerprint",
    "device_for_arrays",
    "device_ms",
    "enforce",
    "get_op",
    "kernel_registry",
    "list_ops",
    "load_builtin_ops",
    "op_class",
    "op_exports",
    "overlay",
    "policy",
    "profile_for",
    "record_dispatches",
    "resolve_config",
    "run_impl",
    "run_next",
    "static",
    "tile",
    "time_callable",
]
# The earlier API's names: reading one loads ejkernel.compat (see __getattr__).
__all__ += sorted(_compat_loader.OPS_MAPPED_NAMES - set(__all__))


def __getattr__(name: str) -> Any:
    if name in _compat_loader.OPS_NAMES:
        return _compat_loader.load().ops.ops_getattr(name)
    if name == "compat":
        import importlib

        return importlib.import_module(f"{__name__}.compat")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
