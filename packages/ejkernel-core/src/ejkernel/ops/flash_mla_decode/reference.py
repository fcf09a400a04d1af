"""The reference of ``flash_mla_decode``: per sequence, gather its pages of the latent cache, then
naive attention of its query tokens (keys: the whole rows, values: their first ``kv_lora_rank``
lanes), float32 at HIGHEST precision by default. The index arrays must be concrete."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..families.serving import ragged_reference
from ..flash_attention.reference import HIGHEST

__all__ = ["flash_mla_decode_reference", "reference"]


def flash_mla_decode_reference(
    query: Any,
    latent_cache: Any,
    context_lens: Any,
    block_tables: Any,
    *,
    kv_lora_rank: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    return_lse: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The reference of ``flash_mla_decode`` (same arguments; ``dtype``/``precision``: the
    compute dtype and matmul precision)."""
    b, sq, h, d = query.shape
    page_size = latent_cache.shape[1]
    tables = np.asarray(block_tables)

    def read_sequence(i: int, n: int) -> tuple[Any, Any]:
        rows = latent_cache[tables[i, : -(-n // page_size)]].reshape(-1, d)[:n, None, :]  # [n, 1, d]
        return rows, rows[..., :kv_lora_rank]

    out = ragged_reference(
        query.reshape(b * sq, h, d),
        read_sequence,
        context_lens,
        np.arange(b + 1) * sq,
        b,
        value_dim=kv_lora_rank,
        scale=softmax_scale if softmax_scale is not None else d**-0.5,
        soft_cap=None,
        sinks=None,
        window=None,
        causal=causal,
        dtype=dtype,
        precision=precision,
        return_lse=return_lse,
    )
    if return_lse:
        o, lse = out
        return o.reshape(b, sq, h, kv_lora_rank), lse.reshape(b, sq, h)
    return out.reshape(b, sq, h, kv_lora_rank)


reference = flash_mla_decode_reference
