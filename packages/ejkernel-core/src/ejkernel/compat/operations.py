"""The earlier import path ``ejkernel.modules.operations`` (ejkernel 0.0.16), kept for existing code:
importing it imports this module (under both names).

The same names as :mod:`ejkernel.modules` (every op's function, Module and Config class, from
the op table), plus ``ejkernel.modules.operations.configs`` and one submodule per op
(``ejkernel.modules.operations.flash_attention``, ...: the op's folder). A name of an op that
ejkernel does not implement raises an ImportError listing the ops it does.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ..ops.catalog import load_builtin_ops, op_exports
from ..ops.op import list_ops, op_class
from . import operation_configs as configs
from .ops import module_getattr

_PATH = "ejkernel.modules.operations"

load_builtin_ops()
globals().update(op_exports())


def _op_folders() -> dict[str, Any]:
    """Each op defined in a folder named after it (``ejkernel/ops/flash_attention/``), by name."""
    out = {}
    for name in list_ops():
        package = op_class(name).__module__.rpartition(".")[0]
        if package.rpartition(".")[2] == name:
            out[name] = importlib.import_module(package)
    return out


# `from ejkernel.modules.operations.flash_attention import FlashAttention` imports the op's folder;
# the package attribute of the same name stays the function, as it was.
for _name, _module in _op_folders().items():
    sys.modules.setdefault(f"{_PATH}.{_name}", _module)
sys.modules.setdefault(f"{_PATH}.configs", configs)

__all__ = ["configs", *sorted(op_exports())]


def _find(name: str) -> Any:
    return op_exports()[name]  # ops defined after import (a plugin's) too


def _explain(name: str) -> str:
    return f"ejkernel implements the ops {', '.join(list_ops())} (ejkernel.list_ops()); {name!r} is none of their names"


__getattr__ = module_getattr(_PATH, _find, _explain)


def __dir__() -> list[str]:
    return sorted({*globals(), *op_exports()})
