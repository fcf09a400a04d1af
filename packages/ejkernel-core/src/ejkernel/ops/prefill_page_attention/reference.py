"""The reference of ``prefill_page_attention``: gather the sequence's pages (kv heads first) into
``[context, num_kv_heads, head_dim]``, then naive causal attention of the chunk (bottom-right), as
one packed sequence of the serving references (float32 at HIGHEST precision by default). The
index arrays must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import ragged_reference
from ..flash_attention.reference import HIGHEST

__all__ = ["prefill_page_attention_reference", "reference"]


def prefill_page_attention_reference(
    query: Any,
    key_cache: Any,
    value_cache: Any,
    context_len: Any,
    page_indices: Any,
    *,
    softmax_scale: float | None = None,
    attn_logits_soft_cap: float | None = None,
    sliding_window: int | None = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    **ignored: Any,
) -> jax.Array:
    """The reference of ``prefill_page_attention`` (``ignored``: ``mask_value``, which does not
    change the result)."""
    ps = key_cache.shape[2]
    pages = np.asarray(page_indices)

    def read_sequence(i: int, kv_len: int) -> tuple[Any, Any]:
        used = pages[: -(-kv_len // ps)]

        def read(cache: Any) -> Any:  # [hk, n, ps, d] -> [n * ps, hk, d]
            x = cache[:, used]
            return jnp.moveaxis(x.reshape(x.shape[0], -1, x.shape[-1]), 0, 1)[:kv_len]

        return read(key_cache), read(value_cache)

    chunk = query.shape[0]
    return ragged_reference(
        query,
        read_sequence,
        np.asarray(context_len).reshape(1),
        np.array([0, chunk]),
        1,
        value_dim=value_cache.shape[-1],
        scale=softmax_scale,
        soft_cap=attn_logits_soft_cap,
        sinks=None,
        window=None if sliding_window is None else (sliding_window - 1, 0),
        dtype=dtype,
        precision=precision,
    )


reference = prefill_page_attention_reference
