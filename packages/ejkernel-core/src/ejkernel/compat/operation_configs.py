"""The earlier import path ``ejkernel.modules.operations.configs`` (this module, under that name).

Every op's Config class (from the op table), ``BaseOperationConfig``
(:class:`~ejkernel.ops.config.OpConfig`, their base: ``platform``, ``backend``) and
``FwdParams``/``BwdParams`` taking the earlier field names. The Config of an op ejkernel does
not implement raises an ImportError listing those it has.
"""

from __future__ import annotations

from typing import Any

from ..ops.catalog import load_builtin_ops
from ..ops.config import OpConfig
from .ops import BwdParams, FwdParams, module_getattr, operation_configs

load_builtin_ops()

BaseOperationConfig = OpConfig
globals().update(operation_configs())

__all__ = ["BaseOperationConfig", "BwdParams", "FwdParams", *sorted(operation_configs())]


def _find(name: str) -> Any:
    return operation_configs()[name]  # ops defined after import (a plugin's) too


def _explain(name: str) -> str:
    return (
        f"the op configs are {', '.join(sorted(operation_configs()))} (one per op of ejkernel.list_ops()); "
        f"{name!r} is none of them"
    )


__getattr__ = module_getattr("ejkernel.modules.operations.configs", _find, _explain)
