"""The reference of ``ragged_page_attention_v2``: per sequence, gather its pages, split keys (even
heads) from values (odd heads), then naive causal attention of its queries (bottom-right) (float32 at HIGHEST
precision by default). The index arrays must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import masked_attention_reference, sinks_per_head
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
    t_all, h, d = queries.shape
    ps = kv_pages.shape[1]
    lens, tables = np.asarray(context_lens), np.asarray(block_tables)
    qsl, n = np.asarray(query_start_loc), int(np.asarray(num_seqs).reshape(()))
    left = (
        None if sliding_window is None else (sliding_window if isinstance(sliding_window, int) else sliding_window[0])
    )
    aux = sinks_per_head(softmax_aux, h)
    scale = softmax_scale if softmax_scale is not None else d**-0.5
    rows = [jnp.zeros((int(qsl[0]), h, d), dtype)]
    for i in range(n):
        lo, hi, kv_len = int(qsl[i]), int(qsl[i + 1]), int(lens[i])
        if hi == lo:
            continue
        kv = kv_pages[tables[i, : -(-kv_len // ps)]].reshape(-1, *kv_pages.shape[2:])[:kv_len]
        pos = kv_len - (hi - lo) + np.arange(hi - lo)[:, None]  # each query's position
        t = np.arange(kv_len)[None, :]
        valid = (t <= pos) & (t >= pos - left) if left is not None else t <= pos
        rows.append(
            masked_attention_reference(
                queries[lo:hi],
                kv[:, 0::2],
                kv[:, 1::2],
                jnp.asarray(valid),
                scale=scale,
                soft_cap=logits_soft_cap,
                sinks=aux,
                dtype=dtype,
                precision=precision,
            )
        )
    rows.append(jnp.zeros((t_all - int(qsl[n]), h, d), dtype))
    out = jnp.concatenate(rows).astype(dtype)
    return out


reference = ragged_page_attention_v2_reference
