"""The reference of ``scaled_dot_product_attention``: the dense attention reference, with
per-example lengths (``cum_seqlens_q/k``) as a pairwise mask and packed boundaries under
``cu_seqlens_q/k``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...types.mask_info import MaskInfo
from ..flash_attention.reference import attention_reference

__all__ = ["reference"]


def reference(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    cum_seqlens_q: Any = None,
    cum_seqlens_k: Any = None,
    softmax_aux: Any = None,
    *,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    mask_info: MaskInfo | None = None,
    **kwargs: Any,
) -> Any:
    """``attention_reference`` where query ``i`` of example ``b`` attends only if
    ``i < cum_seqlens_q[b]`` and key ``j`` is attended only if ``j < cum_seqlens_k[b]`` (lengths
    must be concrete); ``cu_seqlens_q/k`` are the packed boundaries."""
    if cum_seqlens_q is not None or cum_seqlens_k is not None:
        b, sq, sk = query.shape[0], query.shape[1], key.shape[1]
        q_ok = np.ones((b, sq), bool) if cum_seqlens_q is None else np.arange(sq) < np.asarray(cum_seqlens_q)[:, None]
        k_ok = np.ones((b, sk), bool) if cum_seqlens_k is None else np.arange(sk) < np.asarray(cum_seqlens_k)[:, None]
        pair = (q_ok[:, :, None] & k_ok[:, None, :])[:, None]
        if mask_info is not None:
            pair = pair & np.asarray(mask_info.attention_mask)
            kwargs["causal"] = kwargs.get("causal", False) or mask_info.causal
        mask_info = MaskInfo.from_attention_mask(pair)
    return attention_reference(
        query, key, value, bias, mask_info=mask_info, cum_seqlens_q=cu_seqlens_q, cum_seqlens_k=cu_seqlens_k,
        softmax_aux=softmax_aux, **kwargs,
    )  # fmt: skip
