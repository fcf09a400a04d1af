"""The reference of ``ragged_page_attention_v2``: per sequence, gather its pages, split keys (even
heads) from values (odd heads), then naive causal attention of its queries (bottom-right) (float32 at HIGHEST
precision by default). The index arrays must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import ragged_reference, sinks_per_head
from ..flash_attention.reference import HIGHEST

__all__ = ["ragged_page_attention_v2_reference", "reference"]


def ragged_page_attention_v2_reference(
    queries: Any,
    kv_pages: Any,
    context_lens: Any,
    block_tables: Any,
    query_start_loc: Any,
    num_seqs: Any,
    softmax_aux: Any = None,
    *,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    **ignored: Any,
) -> jax.Array:
    """The reference of ``ragged_page_attention_v2`` (``ignored``: the earlier releases' tuning
    options ``compute_dtype``, ``optimized``, ``mask_value``, ``vmem_limit_bytes``)."""
    ps, d = kv_pages.shape[1], queries.shape[2]
    tables = np.asarray(block_tables)

    def read_sequence(i: int, kv_len: int) -> tuple[Any, Any]:
        kv = kv_pages[tables[i, : -(-kv_len // ps)]].reshape(-1, *kv_pages.shape[2:])[:kv_len]
        return kv[:, 0::2], kv[:, 1::2]

    return ragged_reference(
        queries,
        read_sequence,
        context_lens,
        query_start_loc,
        num_seqs,
        value_dim=d,
        scale=softmax_scale,
        soft_cap=logits_soft_cap,
        sinks=sinks_per_head(softmax_aux, queries.shape[1]),
        window=sliding_window,
        dtype=dtype,
        precision=precision,
    )


reference = ragged_page_attention_v2_reference
