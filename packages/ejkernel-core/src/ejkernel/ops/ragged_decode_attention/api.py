"""The public function ``ragged_decode_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import RaggedDecodeAttention

__all__ = ["ragged_decode_attention"]


@define(RaggedDecodeAttention)
def ragged_decode_attention(
    query: Float[Array, "batch num_heads head_dim"] | Float[Array, "batch 1 num_heads head_dim"],
    key: Float[Array, "batch kv_len num_kv_heads head_dim"],
    value: Float[Array, "batch kv_len num_kv_heads value_head_dim"],
    sequence_start: Int[Array, "batch"],
    sequence_end: Int[Array, "batch"],
    softmax_aux: Float[Array, "num_sinks"] | Float[Array, "num_heads num_sinks"] | None = None,
    *,
    softmax_scale: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
) -> Float[Array, "batch num_heads value_head_dim"] | Float[Array, "batch 1 num_heads value_head_dim"]:
    """Attention of one new token per sequence over a contiguous KV cache (decode, inference only).

    Sequence ``b`` attends its keys ``sequence_start[b] <= t < sequence_end[b]`` of ``key[b]`` /
    ``value[b]``; its query is the token at ``sequence_end[b] - 1``. Slots outside the range may
    hold anything (even NaN): they never reach the result. An empty range
    (``sequence_start[b] == sequence_end[b]``) gives a zero output row.

    Args:
        query: ``[batch, num_heads, head_dim]`` or ``[batch, 1, num_heads, head_dim]``;
            ``num_heads`` a multiple of ``num_kv_heads``.
        key: ``[batch, kv_len, num_kv_heads, head_dim]``.
        value: ``[batch, kv_len, num_kv_heads, value_head_dim]``.
        sequence_start, sequence_end: ``[batch]`` int, ``0 <= start <= end <= kv_len``; checked
            when concrete (under ``jit`` only with :func:`ejkernel.checks` on).
        softmax_aux: attention-sink logits: ``[num_heads]`` (one per head), ``[num_sinks]`` (any
            other length: shared by every head) or ``[num_heads, num_sinks]``.
        softmax_scale: default ``1/sqrt(head_dim)``.
        sliding_window: ``w`` or ``(left, right)``: attend only the last ``left + 1`` tokens of the
            range (``right`` has no effect: no cached token follows the query).
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        platform, cfg: implementation and :class:`RaggedDecodeAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads (query heads and kv
            heads together) may be sharded, the KV length may not.

    Returns:
        The query's shape with ``value_head_dim`` last, in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> k = v = jax.random.normal(jax.random.key(0), (3, 64, 2, 32))
        >>> q = jax.random.normal(jax.random.key(1), (3, 8, 32))
        >>> ejkernel.ragged_decode_attention(q, k, v, jnp.array([0, 10, 5]), jnp.array([64, 20, 5])).shape
        (3, 8, 32)
    """
    raise NotImplementedError  # define() supplies the body
