"""The reference of ``ring_attention``: dense attention over the whole (global, contiguous) sequence."""

from __future__ import annotations

from typing import Any

from ..flash_attention.reference import attention_reference

__all__ = ["reference"]


def reference(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    *,
    axis_name: Any = None,
    layout: str = "contiguous",
    **kwargs: Any,
) -> Any:
    """``attention_reference`` of the global arrays (``layout="contiguous"`` only: undo a zig-zag
    layout first)."""
    if layout != "contiguous":
        raise ValueError("the ring_attention reference takes the contiguous layout (zigzag_unpermute first)")
    return attention_reference(query, key, value, bias, **kwargs)
