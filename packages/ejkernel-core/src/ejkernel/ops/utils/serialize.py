"""The earlier import path ``ejkernel.ops.utils.serialize`` (see :mod:`ejkernel.ops.compat`)."""

from ..compat import from_json, to_json

__all__ = ["from_json", "to_json"]
