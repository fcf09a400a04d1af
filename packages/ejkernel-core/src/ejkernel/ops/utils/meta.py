"""The earlier ``ejkernel.ops.utils.meta`` (op labels stamped into HLO): gone. Importing one of
its names raises an ImportError saying what to use (``ejkernel.ops.record_dispatches``)."""

from ...compat.ops import module_getattr

__all__: list[str] = []

__getattr__ = module_getattr(__name__)
