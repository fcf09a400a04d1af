"""The earlier import path ``ejkernel.ops.utils.fingerprint`` (see :mod:`ejkernel.compat.ops`)."""

from ...compat.ops import (
    abstractify,
    default_key_builder_with_sharding,
    device_kind,
    get_device_platform,
    sharding_fingerprint,
    short_hash,
    stable_json,
)
from ..device import device_fingerprint

__all__ = [
    "abstractify",
    "default_key_builder_with_sharding",
    "device_fingerprint",
    "device_kind",
    "get_device_platform",
    "sharding_fingerprint",
    "short_hash",
    "stable_json",
]
