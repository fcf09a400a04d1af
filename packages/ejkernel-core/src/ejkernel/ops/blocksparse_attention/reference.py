"""The reference of ``blocksparse_attention``: dense masked softmax attention in float32 (HIGHEST
precision by default), quadratic memory.

The mask is built from index grids straight from the documented semantics (causal, window and
chunks from the keyword arguments, segments and pairwise masks by comparison); a
``mask_builder``'s :class:`~.mask.SparseMask` contributes its dense form. Nothing of the block
classification is used, so a wrong schedule cannot hide here.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo, canonical_window
from .mask import SparseMask

__all__ = ["blocksparse_attention_reference", "reference"]

HIGHEST = jax.lax.Precision.HIGHEST


def _builder_mask(builder: Any, sq: int, sk: int, h: int) -> np.ndarray:
    from .op import _from_builder

    m: SparseMask = _from_builder("blocksparse_attention_reference", builder, sq, sk, h)
    return m.dense(sq, sk)


def blocksparse_attention_reference(
    query: Any,
    key: Any,
    value: Any,
    softmax_aux: Any = None,
    bias: Any = None,
    *,
    mask_info: MaskInfo | None = None,
    attention_mask: Any = None,
    logits_soft_cap: float | None = None,
    softmax_scale: float | None = None,
    mask_builder: Any = None,
    sliding_window: int | tuple[int, int] | None = None,
    chunk_size: int | None = None,
    causal: bool = True,
    sequence_parallelism_mesh_axis_name: Any = None,
    qkv_layouts: Any = None,
    fused_backward: bool = False,
    purify: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = HIGHEST,
) -> Any:
    """The reference of ``blocksparse_attention`` (same arguments; BHSD). ``dtype``/``precision``:
    compute dtype and matmul precision. The options the op refuses (sequence parallelism,
    ``qkv_layouts``, ``fused_backward``, ``purify``) change nothing here."""
    b, h, sq, d = query.shape
    hk, sk = key.shape[1], key.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    i = jnp.arange(sq)[:, None]
    j = jnp.arange(sk)[None, :]
    pos = i + (sk - sq)
    allowed = jnp.ones((b, h, sq, sk), bool)
    window = canonical_window(sliding_window)
    if mask_info is not None:
        causal = causal or mask_info.causal
        window = window or mask_info.sliding_window
        if mask_info.q_segment_ids is not None:
            qs, ks = mask_info.q_segment_ids, mask_info.kv_segment_ids
            allowed &= ((qs[:, :, None] == ks[:, None, :]) & (qs[:, :, None] >= 0))[:, None]
        if mask_info.stored_attention_mask is not None:
            allowed &= jnp.asarray(mask_info.stored_attention_mask).astype(bool)
    if causal:
        allowed &= j <= pos
    if window is not None:
        allowed &= (j >= pos - window[0]) & (j <= pos + window[1])
    if chunk_size is not None:
        allowed &= (pos // chunk_size) == (j // chunk_size)
    if mask_builder is not None:
        allowed &= jnp.asarray(_builder_mask(mask_builder, sq, sk, h))
    if attention_mask is not None:
        allowed &= jnp.asarray(attention_mask).astype(bool)

    g = h // hk
    k = jnp.repeat(key.astype(dtype), g, axis=1)  # query head j ↔ kv head j // g
    v = jnp.repeat(value.astype(dtype), g, axis=1)
    s = jnp.einsum("bhqd,bhkd->bhqk", query.astype(dtype), k, precision=precision) * jnp.asarray(scale, dtype)
    if logits_soft_cap is not None:
        s = logits_soft_cap * jnp.tanh(s / logits_soft_cap)
    if bias is not None:
        s = s + jnp.reshape(bias, (1,) * (4 - bias.ndim) + tuple(bias.shape)).astype(dtype)
    s = jnp.where(allowed, s, -jnp.inf)
    if softmax_aux is not None:
        aux = softmax_aux
        if aux.ndim == 1:
            aux = aux[:, None] if aux.shape[0] == h else jnp.broadcast_to(aux[None, :], (h, aux.shape[0]))
        sinks = jnp.broadcast_to(aux.astype(dtype)[None, :, None, :], (b, h, sq, aux.shape[1]))
        s_all = jnp.concatenate([s, sinks], axis=-1)
    else:
        s_all = s
    m = jax.lax.stop_gradient(jnp.max(s_all, axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0)
    e = jnp.exp(s_all - m)
    denom = e.sum(axis=-1, keepdims=True)
    p = (e / jnp.where(denom > 0, denom, 1))[..., :sk]
    return jnp.einsum("bhqk,bhkd->bhqd", p, v, precision=precision)


reference = blocksparse_attention_reference
