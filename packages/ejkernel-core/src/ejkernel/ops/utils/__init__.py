"""The earlier import path ``ejkernel.ops.utils`` (ejkernel 0.0.16), kept for existing code.

Its names are those of :mod:`ejkernel.compat.ops`; ``FwdParams``/``BwdParams`` here take the
earlier field names (:mod:`ejkernel.ops.utils.datacarrier`). The HLO-label helpers (``label``,
``labels_to_configs``, ...) are gone: importing one raises an ImportError saying what to use.
"""

from ...compat.ops import (
    abstractify,
    default_key_builder_with_sharding,
    device_kind,
    from_json,
    get_device_platform,
    module_getattr,
    sharding_fingerprint,
    short_hash,
    stable_json,
    to_json,
)
from ..device import device_fingerprint
from .datacarrier import BwdParams, FwdParams

__all__ = [
    "BwdParams",
    "FwdParams",
    "abstractify",
    "default_key_builder_with_sharding",
    "device_fingerprint",
    "device_kind",
    "from_json",
    "get_device_platform",
    "sharding_fingerprint",
    "short_hash",
    "stable_json",
    "to_json",
]

__getattr__ = module_getattr(__name__)
