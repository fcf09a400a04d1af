"""The earlier import path ``ejkernel.ops.utils.serialize`` (see :mod:`ejkernel.compat.ops`)."""

from ...compat.ops import from_json, to_json

__all__ = ["from_json", "to_json"]
