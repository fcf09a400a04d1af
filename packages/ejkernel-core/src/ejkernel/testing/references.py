"""Naive references of every op: plain ``jnp``, float32 at HIGHEST precision by default.

Each op keeps its reference in its folder (``ejkernel/ops/<op>/reference.py``); this module
gathers them: ``references.<op>_reference`` (e.g. ``page_attention_reference``), or
:func:`reference_of`. Every reference takes the op's parameters plus ``dtype=`` and
``precision=`` (to measure how much error low precision alone makes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ops.flash_attention.reference import HIGHEST, attention_reference
from ..ops.op import list_ops, op_class
from ..ops.page_attention.reference import page_attention_reference

__all__ = ["HIGHEST", "attention_reference", "page_attention_reference", "reference_of"]


def reference_of(op: str) -> Callable[..., Any]:
    """The float32 reference of the op named ``op``."""
    return op_class(op).get_reference()


def __getattr__(name: str) -> Any:
    if name.endswith("_reference") and name[: -len("_reference")] in list_ops():
        return reference_of(name[: -len("_reference")])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
