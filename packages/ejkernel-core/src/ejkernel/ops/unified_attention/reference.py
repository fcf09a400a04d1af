"""The reference of ``unified_attention``: per sequence, gather its blocks of each cache, then
naive causal attention of its queries (bottom-right) with vLLM's biases (ALiBi, the query-query
bias) and sinks (float32 at HIGHEST precision by default). The index arrays must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import ragged_reference, sinks_per_head
from ..flash_attention.reference import HIGHEST

__all__ = ["reference", "unified_attention_reference"]


def unified_attention_reference(
    queries: Any,
    key_cache: Any,
    value_cache: Any,
    kv_lens: Any,
    block_tables: Any,
    query_start_loc: Any,
    alibi_slopes: Any = None,
    qq_bias: Any = None,
    softmax_aux: Any = None,
    *,
    softmax_scale: float | None = None,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
    return_lse: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
    **ignored: Any,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The reference of ``unified_attention`` (``ignored``: ``causal``, which must be true, and
    ``seq_threshold_3d``, a tuning option)."""
    bs = key_cache.shape[1]
    tables, lens, qsl = np.asarray(block_tables), np.asarray(kv_lens), np.asarray(query_start_loc)

    def read_sequence(i: int, kv_len: int) -> tuple[Any, Any]:
        blocks = tables[i, : -(-kv_len // bs)]
        return tuple(c[blocks].reshape(-1, *c.shape[2:])[:kv_len] for c in (key_cache, value_cache))

    def bias(i: int, pos: Any, key: Any) -> Any:
        ctx = int(lens[i]) - int(qsl[i + 1] - qsl[i])  # tokens before the step's queries
        rel = key - ctx  # [1, kv_len]
        out = jnp.zeros((queries.shape[1], *np.broadcast_shapes(pos.shape, key.shape)), dtype)
        if alibi_slopes is not None:
            out = out + alibi_slopes.astype(dtype)[:, None, None] * jnp.asarray(rel, dtype)
        if qq_bias is not None:
            n = qq_bias.shape[0]
            inside = (rel >= 0) & (rel < n)
            qq = qq_bias[np.clip(pos - ctx, 0, n - 1), np.clip(rel, 0, n - 1)]
            out = out + jnp.where(inside, qq.astype(dtype), 0)[None]
        return out

    return ragged_reference(
        queries,
        read_sequence,
        kv_lens,
        query_start_loc,
        len(lens),
        value_dim=value_cache.shape[-1],
        scale=softmax_scale,
        soft_cap=logits_soft_cap,
        sinks=sinks_per_head(softmax_aux, queries.shape[1]),
        window=None if sliding_window is None else (sliding_window - 1, 0),
        bias=bias if alibi_slopes is not None or qq_bias is not None else None,
        dtype=dtype,
        precision=precision,
        return_lse=return_lse,
    )


reference = unified_attention_reference
