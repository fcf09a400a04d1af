"""The public function ``flash_attention``."""

from __future__ import annotations

from ..executor import define
from ..families.attention import dense_attention_signature
from .op import FlashAttention

__all__ = ["flash_attention"]


@define(FlashAttention, signature=dense_attention_signature)
def flash_attention():
    """Exact softmax attention, computed blockwise (FlashAttention-2) in memory linear in length.

    Shapes are BSHD. ``softmax(scale · q kᵀ + bias) v`` per head, where query head ``j`` uses
    key/value head ``j // (num_heads // num_kv_heads)`` (GQA; MQA when ``num_kv_heads == 1``).

    Args:
        query: ``[batch, seq_q, num_heads, head_dim]``.
        key: ``[batch, seq_k, num_kv_heads, head_dim]``.
        value: ``[batch, seq_k, num_kv_heads, value_head_dim]`` (``value_head_dim`` may differ).
        bias: added to the logits (after the soft cap); broadcastable to
            ``[batch, num_heads, seq_q, seq_k]`` with each dim 1 or full. Differentiable.
        mask_info: segment ids (packed sequences, ``-1`` = padding; ``>= -1``, checked like
            ``cum_seqlens_q``) and/or a pairwise mask, plus
            causal / sliding-window patterns (see :class:`~ejkernel.types.MaskInfo`).
        causal: query ``i`` attends keys ``j <= i + seq_k - seq_q`` (aligned bottom-right, so
            with ``seq_q > seq_k`` the first rows see nothing and return zeros).
        softmax_scale: multiplies ``q kᵀ``; default ``1/sqrt(head_dim)``.
        sliding_window: ``w`` (same as ``(w, w)``) or ``(left, right)``: query ``i`` attends keys
            ``i + off - left <= j <= i + off + right`` with ``off = seq_k - seq_q``.
        logits_soft_cap: ``cap · tanh(logits / cap)`` (Gemma 2), applied before ``bias``.
        dropout_prob: probability of dropping an attention weight (kept ones are scaled by
            ``1 / (1 - p)``). Needs ``dropout_seed``; the same seed gives the same mask.
        dropout_seed: an int or a scalar integer array (so it can change under ``jit``).
        cum_seqlens_q: ``[num_seqs + 1]`` cumulative lengths of sequences packed along ``seq_q``
            of a batch-1 query (varlen). Causal and windows apply per sequence; tokens past the
            last sequence are padding (zeros out). Must start at 0, never decrease and end at
            most at ``seq_q``: checked when concrete; under ``jit`` only with
            :func:`ejkernel.checks` on. Unchecked, a bad value gives undefined results (wrong
            sequence boundaries; a GPU kernel may read past the sequence).
        cum_seqlens_k: the same for keys; defaults to ``cum_seqlens_q`` when ``seq_q == seq_k``.
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head), ``[num_sinks]`` (any other length: shared by every head) or ``[num_heads, num_sinks]``: they
            join each row's softmax denominator and carry no value. Differentiable.
        platform: ``"auto"`` (default) or the implementation to use; an explicit one that
            declines raises :class:`~ejkernel.errors.UnsupportedError` with its reason.
        cfg: a :class:`FlashAttentionConfig` (tiling); missing fields come from the heuristic.
        mesh, in_specs, out_specs: run under ``jax.shard_map`` on ``mesh``; ``in_specs`` are the
            PartitionSpecs of ``(query, key, value[, bias])`` (batch and heads may be sharded,
            sequence and head_dim not); ``out_specs`` defaults to the query's.

    Returns:
        ``[batch, seq_q, num_heads, value_head_dim]`` in the query's dtype. Rows that may attend
        no key are zeros (never NaN).

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q = jax.random.normal(jax.random.key(0), (2, 128, 8, 64))
        >>> k = v = jax.random.normal(jax.random.key(1), (2, 128, 2, 64))   # GQA: 8 heads, 2 kv heads
        >>> ejkernel.flash_attention(q, k, v, causal=True).shape
        (2, 128, 8, 64)
    """
