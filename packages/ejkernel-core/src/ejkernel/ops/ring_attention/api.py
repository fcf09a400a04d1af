"""The public function ``ring_attention``."""

from __future__ import annotations

from typing import Any, Literal

import jax
from jaxtyping import Array, Float

from ...types.mask_info import MaskInfo
from ..executor import define
from .op import RingAttention

__all__ = ["ring_attention"]


@define(RingAttention)
def ring_attention(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    key: Float[Array, "batch seq_k num_kv_heads head_dim"],
    value: Float[Array, "batch seq_k num_kv_heads value_head_dim"],
    bias: Float[Array, "..."] | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    dropout_rng: Any = None,
    *,
    axis_name: str | tuple[str, ...] | None = None,
    mask_info: MaskInfo | None = None,
    causal: bool = False,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    softmax_scale: float | None = None,
    layout: Literal["contiguous", "zigzag"] = "contiguous",
    query_chunk_size: int | None = None,
    key_chunk_size: int | None = None,
    causal_block_size: int | None = None,
    deterministic: bool = True,
    pdrop: float = 0.0,
    float32_logits: bool = True,
    policy: Any = None,
    prevent_cse: bool = True,
    precision: Any = jax.lax.Precision.DEFAULT,
    dtype: Any = None,
    cache_idx: Any = None,
    attention_sink_size: int = 0,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
    """Exact attention with the sequence sharded over a mesh axis: keys and values travel a ring.

    Each device keeps its query shard and passes its key/value shard (with its segment ids) to
    the next device over ``axis_name`` with ``jax.lax.ppermute``, merging each block's result
    by log-sum-exp; the next transfer overlaps the current block. The backward is a ring too
    (dK/dV travel with K/V); memory per device does not grow with the number of devices. The
    result equals ``flash_attention`` on the whole sequence.

    Call it inside ``jax.shard_map`` with the sequence axis sharded over ``axis_name`` (the
    arguments are then the local shards), or pass ``mesh``/``in_specs`` and it sets up the
    ``shard_map`` itself (the arguments are then the global arrays).

    Args:
        query: ``[batch, seq_q, num_heads, head_dim]`` (the local shard inside ``shard_map``).
        key: ``[batch, seq_k, num_kv_heads, head_dim]``; GQA/MQA as in ``flash_attention``
            (only the key/value heads travel).
        value: ``[batch, seq_k, num_kv_heads, value_head_dim]``.
        bias: added to the logits (after the soft cap), ``[batch or 1, num_heads or 1, seq_q or 1,
            all keys or 1]``: rows follow the (local) queries, the last axis spans *every* key of
            the ring in layout order (``axis_size · seq_k`` columns inside ``shard_map``). Quadratic
            in the sequence unless broadcast. Differentiable.
        axis_name: the mesh axis (or tuple of axes) the sequence is sharded over. ``None``
            (the default): with ``mesh=``/``in_specs=``, the axis that shards the query's
            sequence; otherwise the sequence is not sharded (the local arrays are the whole
            sequence: a ring of one device, as earlier releases did without ``axis_name``).
            Inside your own ``shard_map`` over a sequence axis, pass it.
        mask_info: segment ids (packed sequences may cross shard boundaries; ``-1`` = padding),
            a pairwise mask (shaped like ``bias``, full rows), causal / window patterns.
        causal: query ``i`` attends keys ``j <= i`` (global positions; needs ``seq_q == seq_k``).
        sliding_window: ``w`` or ``(left, right)``: query ``i`` attends keys
            ``i - left <= j <= i + right`` (global positions). Needs an inner kernel that honours
            ``AttentionArgs.position_offset``.
        logits_soft_cap: ``cap · tanh(logits / cap)``, before ``bias``.
        softmax_scale: multiplies ``q kᵀ``; default ``1/sqrt(head_dim)``.
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head), ``[num_sinks]`` (any other length: shared by every head) or ``[num_heads, num_sinks]``; they join
            each row's denominator once. Differentiable.
        layout: how the sequence is split over ``axis_name``: ``"contiguous"`` (device ``r`` holds
            the ``r``-th slice) or ``"zigzag"`` (device ``r`` holds chunks ``r`` and ``2P - 1 - r``
            of ``2P``, see :func:`zigzag_permute`), which balances the causal work across devices.
            Every array indexed by the sequence must be in this layout; so is the output.
        dropout_rng, pdrop, deterministic: earlier releases' dropout; ``pdrop > 0`` with
            ``deterministic=False`` is refused (the ring has no dropout), otherwise ignored.
        query_chunk_size, key_chunk_size: config hints: the inner kernel's forward
            ``q_blocksize`` / ``kv_blocksize`` (an explicit ``cfg`` wins).
        causal_block_size: earlier releases' blockwise-causal tiling: set (any size), it means
            ``causal=True``, as it did there; the size itself only tiled the old kernel.
        float32_logits, policy, prevent_cse, dtype: accepted from earlier releases and ignored:
            logits are always float32, the backward is the ring's own (no rematerialization
            policy), and the output has the query's dtype.
        precision: ``DEFAULT`` only, as in ``flash_attention``.
        attention_sink_size: ``n``: the first ``n`` keys of the sequence (global positions) are
            exempt from ``sliding_window`` (StreamingLLM's attention sinks), as in earlier
            releases; the causal mask, segments and masks still apply to them. Without a window
            it changes nothing. Learned sink logits are ``softmax_aux``.
        cache_idx: refused when set (use ``page_attention`` for decoding into a cache).
        platform: ``"auto"`` or the platform of the inner flash-attention kernel.
        cfg: a :class:`RingAttentionConfig` (the inner kernel's tiling).
        mesh, in_specs, out_specs: run under ``jax.shard_map`` on ``mesh``: ``in_specs`` are the
            PartitionSpecs of ``(query, key, value[, bias])`` with the sequence axis sharded over
            ``axis_name`` (batch and heads may be sharded over other axes); the sequence length
            must split evenly. ``out_specs`` defaults to the query's.

    Returns:
        ``[batch, seq_q, num_heads, value_head_dim]`` in the query's dtype and layout.

    Example:
        >>> import jax, numpy as np, ejkernel
        >>> from jax.sharding import Mesh, PartitionSpec as P
        >>> mesh = Mesh(np.array(jax.devices()), ("sp",))
        >>> n = len(jax.devices())
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 256 * n, 4, 64))
        >>> spec = P(None, "sp", None, None)
        >>> out = ejkernel.ring_attention(q, k, v, axis_name="sp", causal=True, mesh=mesh, in_specs=(spec,) * 3)
        >>> out.shape == q.shape
        True
    """
    raise NotImplementedError  # define() supplies the body
