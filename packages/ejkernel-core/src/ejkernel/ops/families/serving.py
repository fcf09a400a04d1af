"""Pieces the serving-attention ops (ragged decode, ragged paged attention) share, in every
backend's blocked XLA form and in their bindings:

- :func:`gather_pages`: a block of each row's pages, as one run of tokens, read from the cache
  in place (index-clamped, so a garbage entry in an unused table slot cannot fault);
- :func:`sinks_per_head`: ``softmax_aux`` as ``[num_heads, num_sinks]`` (a 1-D ``[num_heads]`` is
  one sink per head, any other length is shared by every head);
- :func:`masked_attention_reference`: the references' naive dense attention under an explicit
  mask (every logit at once, in the reference's dtype and precision);
- :class:`SoftmaxState`, :func:`masked_logits`, :func:`merge_block`, :func:`merge_sinks`,
  :func:`finish`: the online softmax over blocks of keys, so a kernel holds one block of logits
  at a time instead of the whole context. Rows that see no key finish as exact zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "FEATURES",
    "SoftmaxState",
    "finish",
    "gather_pages",
    "masked_attention_reference",
    "masked_logits",
    "merge_block",
    "merge_sinks",
    "sinks_per_head",
]

#: The features of the decode and serving ops (``page_attention``, ``ragged_decode_attention``,
#: ``ragged_page_attention_v2``): an implementation declines by these names.
FEATURES: dict[str, tuple[str, Any]] = {
    "softmax_aux": ("attention sinks", lambda a: a.softmax_aux is not None),
    "sliding_window": ("attend only the last left + 1 tokens", lambda a: a.sliding_window is not None),
    "logits_soft_cap": ("cap · tanh(logits / cap)", lambda a: a.logits_soft_cap is not None),
    "gqa": ("fewer key/value heads than query heads", lambda a: a.num_heads != a.num_kv_heads),
    "value_head_dim": ("value head dim differs from the query's", lambda a: a.value_head_dim != a.head_dim),
}


F32 = jnp.float32


def sinks_per_head(aux: Any, num_heads: int) -> Any:
    """``softmax_aux`` as ``[num_heads, num_sinks]``: a 1-D array of ``num_heads`` values is one sink
    per head; any other length is a set of sinks every head shares; 2-D passes unchanged."""
    if aux is None or aux.ndim != 1:
        return aux
    if aux.shape[0] == num_heads:
        return aux[:, None]
    return jnp.broadcast_to(aux[None, :], (num_heads, aux.shape[0]))


def gather_pages(cache: Any, pages: Any) -> jax.Array:
    """``cache[pages]`` for a page cache ``[num_pages, page_size, *rest]`` and page indices
    ``[*rows, n]``: ``[*rows, n * page_size, *rest]``, the rows' tokens in page order."""
    x = cache.at[pages].get(mode="clip")
    return x.reshape(*pages.shape[:-1], pages.shape[-1] * cache.shape[1], *cache.shape[2:])


def masked_attention_reference(
    q: Any,
    k: Any,
    v: Any,
    valid: Any,
    *,
    scale: float,
    soft_cap: float | None,
    sinks: Any,
    dtype: Any,
    precision: Any,
) -> jax.Array:
    """Naive attention for the references: ``q [..., rows, h, d]`` over ``k``/``v``
    ``[..., keys, hk, d]`` (query head ``i`` reads kv head ``i // (h // hk)``) where ``valid
    [..., rows, keys]``; ``sinks`` ``[h, num_sinks]`` or ``None``. Masked keys' values are zeroed
    first (they may be NaN); a row with no valid key is zero."""
    h, hk = q.shape[-2], k.shape[-2]
    heads = jnp.arange(h) // (h // hk)
    k = jnp.where(valid.any(axis=-2)[..., None, None], k.astype(dtype), 0)[..., heads, :]
    v = jnp.where(valid.any(axis=-2)[..., None, None], v.astype(dtype), 0)[..., heads, :]
    logits = jnp.einsum("...qhd,...khd->...hqk", q.astype(dtype), k, precision=precision) * scale
    if soft_cap is not None:
        logits = soft_cap * jnp.tanh(logits / soft_cap)
    logits = jnp.where(valid[..., None, :, :], logits, -jnp.inf)
    n = logits.shape[-1]
    if sinks is not None:
        s = jnp.broadcast_to(sinks.astype(dtype)[:, None, :], (*logits.shape[:-1], sinks.shape[-1]))
        logits = jnp.concatenate([logits, s], axis=-1)
    m = jnp.max(logits, axis=-1, keepdims=True)
    e = jnp.exp(logits - jnp.where(jnp.isfinite(m), m, 0))
    denom = e.sum(axis=-1, keepdims=True)
    p = (e / jnp.where(denom > 0, denom, 1))[..., :n]
    return jnp.einsum("...hqk,...khd->...qhd", p, v, precision=precision)


class SoftmaxState(NamedTuple):
    """The running row max ``m``, row sum ``l`` and unnormalized output ``acc`` (float32)."""

    m: jax.Array
    l: jax.Array  # noqa: E741 - the usual name of the softmax denominator
    acc: jax.Array

    @classmethod
    def zeros(cls, rows: tuple[int, ...], value_dim: int) -> SoftmaxState:
        return cls(jnp.full(rows, -jnp.inf, F32), jnp.zeros(rows, F32), jnp.zeros((*rows, value_dim), F32))


def masked_logits(logits: Any, valid: Any, scale: float, soft_cap: float | None) -> jax.Array:
    """Scaled (and soft-capped) float32 logits, ``-inf`` where ``valid`` is false. ``where`` rather
    than arithmetic masking, so garbage (even NaN) in keys that are not attended never leaks."""
    x = logits.astype(F32) * scale
    if soft_cap is not None:
        x = soft_cap * jnp.tanh(x / soft_cap)
    return jnp.where(valid, x, -jnp.inf)


def merge_block(state: SoftmaxState, logits: Any, pv: Callable[[jax.Array], jax.Array]) -> SoftmaxState:
    """Fold one block of masked logits (``[*rows, block]``) into ``state``; ``pv(p)`` is the
    block's probabilities times its values (``[*rows, value_dim]``), whose values must be zero
    where the logits are masked (``0 · NaN`` is NaN)."""
    m_new = jnp.maximum(state.m, logits.max(axis=-1))
    # A row that has seen only masked keys keeps m = -inf: shift by 0 so exp gives 0, not NaN.
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    p = jnp.exp(logits - m_safe[..., None])
    alpha = jnp.exp(state.m - m_safe)
    return SoftmaxState(m_new, state.l * alpha + p.sum(axis=-1), state.acc * alpha[..., None] + pv(p))


def merge_sinks(state: SoftmaxState, sinks: Any) -> SoftmaxState:
    """Add attention-sink logits (``[*rows, num_sinks]``, broadcast to the rows): they join the
    denominator and contribute no value."""
    sinks = sinks.astype(F32)
    m_new = jnp.maximum(state.m, sinks.max(axis=-1))
    alpha = jnp.exp(state.m - m_new)
    l_new = state.l * alpha + jnp.exp(sinks - m_new[..., None]).sum(axis=-1)
    return SoftmaxState(m_new, l_new, state.acc * alpha[..., None])


def finish(state: SoftmaxState) -> jax.Array:
    """The normalized output (float32); rows that attended nothing are exactly zero."""
    return state.acc / jnp.where(state.l > 0, state.l, 1.0)[..., None]
