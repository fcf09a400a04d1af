"""The reference of ``page_attention``: gather each sequence's pages, then dense attention
(float32 at HIGHEST precision by default). ``context_lens`` and ``block_tables`` must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..flash_attention.reference import HIGHEST, attention_reference

__all__ = ["page_attention_reference", "reference"]


def page_attention_reference(
    query: Any,
    key_cache: Any,
    value_cache: Any,
    context_lens: Any,
    block_tables: Any,
    *,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    softmax_aux: Any = None,
    cache_layout: str = "blocks_tokens_heads",
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> jax.Array:
    """The reference of ``page_attention``: gather each sequence's pages, then dense attention.

    ``cache_layout="blocks_heads_tokens"``: caches ``[num_blocks, num_kv_heads, block_size, dim]``."""
    if cache_layout == "blocks_heads_tokens":
        key_cache, value_cache = jnp.swapaxes(key_cache, 1, 2), jnp.swapaxes(value_cache, 1, 2)
    squeeze = query.ndim == 3
    q = query if squeeze else query[:, 0]
    lens = np.asarray(context_lens)
    tables = np.asarray(block_tables)
    bs = key_cache.shape[1]
    hk = key_cache.shape[2]
    outs = []
    for b in range(q.shape[0]):
        n = int(lens[b])
        if n == 0:
            outs.append(jnp.zeros((q.shape[1], value_cache.shape[3]), dtype))
            continue
        pages = tables[b, : -(-n // bs)]
        k = key_cache[pages].reshape(-1, hk, key_cache.shape[3])[:n]
        v = value_cache[pages].reshape(-1, hk, value_cache.shape[3])[:n]
        o = attention_reference(
            q[b][None, None],
            k[None],
            v[None],
            causal=True,
            softmax_scale=softmax_scale,
            sliding_window=sliding_window,
            logits_soft_cap=logits_soft_cap,
            softmax_aux=softmax_aux,
            dtype=dtype,
            precision=precision,
        )
        outs.append(o[0, 0])
    out = jnp.stack(outs)
    return out if squeeze else out[:, None]


reference = page_attention_reference
