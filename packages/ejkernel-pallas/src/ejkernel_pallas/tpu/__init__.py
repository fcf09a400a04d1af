"""Mosaic TPU kernels: ``flash_attention`` (forward and backward), ``page_attention`` (decode),
``ragged_page_attention_v2`` (mixed prefill and decode over a paged cache) and ``grouped_matmul``
(megablox gmm/tgmm).

Each op folder holds ``impl.py`` (what the implementation declares it supports, its configs),
``heuristics.py`` (block sizes: pure functions of shapes and dtype) and the kernels with their
host wrappers.
:func:`interpret_mode` runs them on any machine in Pallas' TPU interpreter. Importing this
package (what registration does) does not import Pallas; the kernels import it when first traced.
"""

from __future__ import annotations

from typing import Any

from ._tiling import tpu_decline

__all__ = ["interpret_mode", "tpu_decline"]


def __getattr__(name: str) -> Any:
    if name == "interpret_mode":
        from ._pallas import interpret_mode

        return interpret_mode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
