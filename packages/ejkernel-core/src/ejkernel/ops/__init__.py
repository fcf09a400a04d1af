"""The kernel framework: op definitions, registry, config selection, autotuning and caches.

Import order matters only inside this package: each module imports the ones above it.
"""

from .autotune import Autotuner, CandidateResult, TuneResult, time_callable
from .cache import SCHEMA_VERSION, CacheRecord, ConfigCache, PersistentCache, cache_key
from .config import BwdParams, FwdParams, OpConfig
from .device import DeviceInfo, device_fingerprint, device_for_arrays
from .executor import (
    CallOptions,
    Dispatch,
    Executor,
    create_default_executor,
    default_executor,
    record_dispatches,
)
from .kernel import Kernel, args_record, array_field, array_fields, describe_array, get_op, list_ops
from .policy import Policy, current_policy, default_policy, policy
from .registry import Backend, BackendInfo, KernelImpl, KernelRegistry, Platform, kernel_registry
from .selection import ConfigSelectorChain, Tier, current_overlay, overlay

__all__ = [
    "SCHEMA_VERSION",
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
    "Dispatch",
    "Executor",
    "FwdParams",
    "Kernel",
    "KernelImpl",
    "KernelRegistry",
    "OpConfig",
    "PersistentCache",
    "Platform",
    "Policy",
    "Tier",
    "TuneResult",
    "args_record",
    "array_field",
    "array_fields",
    "cache_key",
    "create_default_executor",
    "current_overlay",
    "current_policy",
    "default_executor",
    "default_policy",
    "describe_array",
    "device_fingerprint",
    "device_for_arrays",
    "get_op",
    "kernel_registry",
    "list_ops",
    "overlay",
    "policy",
    "record_dispatches",
    "time_callable",
]
