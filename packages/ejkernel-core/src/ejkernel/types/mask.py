"""``ejkernel.types.mask``: :class:`MaskInfo` and the free functions on masks and segment ids.

The module of the older ejkernel, kept for code that imports from it::

    from ejkernel.types.mask import MaskInfo, segment_ids_to_mask, segment_ids_to_qkv_masks

The cu_seqlens helpers of that module (``qkv_masks_to_cu_seqlens`` and the like) exist here only
to say what to use instead: their layout was not settled (the older releases disagree), and
:meth:`MaskInfo.from_cu_seqlens` / :meth:`MaskInfo.to_cu_seqlens` cover packed sequences.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ._mask_ops import (
    get_debug_mode,
    mask_to_segment_ids,
    positions_from_segment_ids,
    segment_ids_to_mask,
    segment_ids_to_qkv_masks,
    set_debug_mode,
)
from .mask_info import MaskInfo, canonical_window

__all__ = [
    "MaskInfo",
    "attention_mask_to_qkv_cu_seqlens",
    "canonical_window",
    "cu_seqlens_to_mask",
    "get_debug_mode",
    "mask_to_segment_ids",
    "positions_from_segment_ids",
    "qkv_cu_seqlens_to_attention_mask",
    "qkv_cu_seqlens_to_qkv_masks",
    "qkv_masks_to_cu_seqlens",
    "segment_ids_to_mask",
    "segment_ids_to_qkv_masks",
    "set_debug_mode",
]

_CU_SEQLENS_HINT = (
    "is not provided by this ejkernel: the older releases disagree on its cu_seqlens layout. "
    "For sequences packed in one row use MaskInfo.from_cu_seqlens(cu_seqlens_q, cu_seqlens_k, "
    "seq_len_q=..., seq_len_k=...) and MaskInfo.to_cu_seqlens(); for padding masks use "
    "MaskInfo.from_attention_mask(mask) / MaskInfo.get_qkv_masks()"
)


def qkv_masks_to_cu_seqlens(*args: Any, **kwargs: Any) -> NoReturn:
    """Not provided; raises ``NotImplementedError`` saying what to use."""
    raise NotImplementedError(f"qkv_masks_to_cu_seqlens {_CU_SEQLENS_HINT}")


def qkv_cu_seqlens_to_qkv_masks(*args: Any, **kwargs: Any) -> NoReturn:
    """Not provided; raises ``NotImplementedError`` saying what to use."""
    raise NotImplementedError(f"qkv_cu_seqlens_to_qkv_masks {_CU_SEQLENS_HINT}")


def qkv_cu_seqlens_to_attention_mask(*args: Any, **kwargs: Any) -> NoReturn:
    """Not provided; raises ``NotImplementedError`` saying what to use."""
    raise NotImplementedError(f"qkv_cu_seqlens_to_attention_mask {_CU_SEQLENS_HINT}")


def attention_mask_to_qkv_cu_seqlens(*args: Any, **kwargs: Any) -> NoReturn:
    """Not provided; raises ``NotImplementedError`` saying what to use."""
    raise NotImplementedError(f"attention_mask_to_qkv_cu_seqlens {_CU_SEQLENS_HINT}")


def cu_seqlens_to_mask(*args: Any, **kwargs: Any) -> NoReturn:
    """Not provided; raises ``NotImplementedError`` saying what to use."""
    raise NotImplementedError(f"cu_seqlens_to_mask {_CU_SEQLENS_HINT}")
