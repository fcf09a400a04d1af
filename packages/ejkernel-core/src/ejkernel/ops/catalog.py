"""Finding the ops: every folder of ``ejkernel/ops/`` that holds an ``op.py`` is an op.

:func:`load_builtin_ops` imports them (``ejkernel`` does it at import), which enters each op in
the table that :func:`~ejkernel.ops.op.list_ops` reads; :func:`op_exports` gathers their public
names for ``ejkernel`` and ``ejkernel.modules``. Adding an op folder needs no edit here.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from .op import list_ops, op_class

__all__ = ["load_builtin_ops", "op_exports"]

_LOADED = False


def load_builtin_ops() -> list[str]:
    """Import every op folder of ``ejkernel.ops`` (once); returns the names of all ops."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        here = Path(__file__).parent
        for info in pkgutil.iter_modules([str(here)]):
            if info.ispkg and not info.name.startswith("_") and (here / info.name / "op.py").exists():
                importlib.import_module(f"{__package__}.{info.name}")
    return list_ops()


def op_exports() -> dict[str, Any]:
    """Every op's public names (function, Op class, Config class, aliases, helpers)."""
    out: dict[str, Any] = {}
    for name in list_ops():
        out.update(op_class(name).exports())
    return out
