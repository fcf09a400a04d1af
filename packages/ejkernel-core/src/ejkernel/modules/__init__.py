"""The ops: a function, a Module (the op class) and a Config class each.

``flash_attention(q, k, v, ...)`` is the function form; ``FlashAttention`` is the same op as a
module for an :class:`~ejkernel.ops.Executor` (``executor(FlashAttention(), q, k, v, ...)``),
configured by ``FlashAttentionConfig``. The names are gathered from every op's folder
(``ejkernel/ops/<op>/``); an op defined later (e.g. by a plugin) appears here too.
"""

from __future__ import annotations

from typing import Any

from ..ops.catalog import load_builtin_ops, op_exports
from ..ops.executor import Executor, create_default_executor

load_builtin_ops()
globals().update(op_exports())

__all__ = ["Executor", "create_default_executor"]
__all__ += sorted(op_exports())


def __getattr__(name: str) -> Any:
    exports = op_exports()
    if name in exports:
        return exports[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *op_exports()})
