"""The reference of ``ragged_page_attention_v3``: write each live sequence's new keys and values
into a copy of the packed cache (slot by slot, from the concrete index arrays), then per sequence
gather its pages, unpack keys and values and run naive causal attention of its queries
(bottom-right; float32 at HIGHEST precision by default). Returns ``(output, updated cache)``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import ragged_reference, sinks_per_head
from ..flash_attention.reference import HIGHEST
from .kv_cache import pack_heads, unpack_heads

__all__ = ["ragged_page_attention_v3_reference", "reference"]


def ragged_page_attention_v3_reference(
    queries: Any,
    keys: Any,
    values: Any,
    kv_cache: Any,
    kv_lens: Any,
    block_tables: Any,
    query_start_loc: Any,
    distribution: Any,
    softmax_aux: Any = None,
    *,
    softmax_scale: float | None = 1.0,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    **ignored: Any,
) -> tuple[jax.Array, jax.Array]:
    """The reference of ``ragged_page_attention_v3`` (``ignored``: ``vmem_limit_bytes``). The
    index arrays must be concrete; the cache comes back in its own dtype."""
    ps, d, hk = kv_cache.shape[1], queries.shape[2], keys.shape[1]
    lens, qsl = np.asarray(kv_lens), np.asarray(query_start_loc)
    n = int(np.asarray(distribution)[2])
    tables = np.asarray(block_tables).reshape(lens.shape[0], -1)
    rows, pages, slots = [], [], []
    for i in range(n):
        q_len = int(qsl[i + 1] - qsl[i])
        for j in range(q_len):
            p = int(lens[i]) - q_len + j
            rows.append(int(qsl[i]) + j)
            pages.append(int(tables[i, p // ps]))
            slots.append(p % ps)
    cache = kv_cache
    if rows:
        new = pack_heads(keys[np.asarray(rows)], values[np.asarray(rows)], kv_cache.dtype)
        cache = kv_cache.at[np.asarray(pages), np.asarray(slots)].set(new)

    def read_sequence(i: int, kv_len: int) -> tuple[Any, Any]:
        seq = cache[tables[i, : -(-kv_len // ps)]].reshape(-1, *cache.shape[2:])[:kv_len]
        return unpack_heads(seq, hk, d)

    out = ragged_reference(
        queries,
        read_sequence,
        lens,
        qsl,
        n,
        value_dim=d,
        scale=1.0 if softmax_scale is None else softmax_scale,
        soft_cap=logits_soft_cap,
        sinks=sinks_per_head(softmax_aux, queries.shape[1]),
        window=sliding_window,
        dtype=dtype,
        precision=precision,
    )
    return out, cache


reference = ragged_page_attention_v3_reference
