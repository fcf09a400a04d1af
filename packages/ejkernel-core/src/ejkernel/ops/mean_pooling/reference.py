"""The reference of ``mean_pooling``: a loop over sequences, each a plain mean of its valid rows
(float32 by default). ``cu_seqlens`` and ``attention_mask`` must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["mean_pooling_reference", "reference"]


def mean_pooling_reference(
    x: Any,
    cu_seqlens: Any = None,
    *,
    attention_mask: Any = None,
    chunk_size: int | None = None,
    dtype: Any = jnp.float32,
    precision: Any = None,
) -> jax.Array:
    """Mean of each sequence's valid rows, computed in ``dtype`` (zeros for a sequence with none).
    Same forms as ``mean_pooling`` (a 2-D or bool second argument is the mask)."""
    del chunk_size, precision  # tuning knob; no products here
    if cu_seqlens is not None and (np.ndim(cu_seqlens) > 1 or np.asarray(cu_seqlens).dtype == np.bool_):
        cu_seqlens, attention_mask = None, cu_seqlens
    x = jnp.asarray(x)
    hidden = x.shape[-1]
    if cu_seqlens is not None:
        cu = np.asarray(cu_seqlens)
        rows = [np.arange(cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
        flat, lead = x, (len(cu) - 1,)
    else:
        seq = x.shape[-2]
        lead = x.shape[:-2]
        flat = x.reshape(-1, hidden)
        rows = [np.arange(i * seq, (i + 1) * seq) for i in range(int(np.prod(lead, dtype=np.int64)))]
    mask = None if attention_mask is None else np.asarray(attention_mask).reshape(-1) != 0
    outs = []
    for r in rows:
        if mask is not None:
            r = r[mask[r]]
        if r.size == 0:
            outs.append(jnp.zeros((hidden,), dtype))
            continue
        v = flat[jnp.asarray(r)].astype(dtype)
        outs.append(jnp.sum(v, axis=0) / jnp.asarray(r.size, dtype))
    out = jnp.stack(outs) if outs else jnp.zeros((0, hidden), dtype)
    return out.reshape(*lead, hidden)


reference = mean_pooling_reference
