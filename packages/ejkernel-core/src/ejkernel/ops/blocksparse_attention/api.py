"""The public function ``blocksparse_attention``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxtyping import Array, Bool, Float

from ...types.mask_info import MaskInfo
from ..executor import define
from .op import BlockSparseAttention

__all__ = ["blocksparse_attention"]


@define(BlockSparseAttention)
def blocksparse_attention(
    query: Float[Array, "batch num_heads seq_q head_dim"],
    key: Float[Array, "batch num_kv_heads seq_k head_dim"],
    value: Float[Array, "batch num_kv_heads seq_k value_head_dim"],
    softmax_aux: Float[Array, "num_sinks"] | Float[Array, "num_heads num_sinks"] | None = None,
    bias: Float[Array, "batch num_heads seq_q seq_k"] | None = None,
    *,
    mask_info: MaskInfo | None = None,
    attention_mask: Bool[Array, "batch num_heads_or_1 seq_q seq_k"] | None = None,
    sequence_parallelism_mesh_axis_name: str | None = None,
    logits_soft_cap: float | None = None,
    qkv_layouts: tuple[Any, ...] | None = None,
    softmax_scale: float | None = None,
    mask_builder: Callable[..., Any] | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    chunk_size: int | None = None,
    causal: bool = True,
    fused_backward: bool = False,
    purify: bool = False,
) -> Float[Array, "batch num_heads seq_q value_head_dim"]:
    """Softmax attention that computes only the tiles its mask leaves visible (splash / FlexAttention style).

    Shapes are **BHSD**. The mask is the intersection of every pattern given: ``causal`` (on by
    default), ``sliding_window``, ``chunk_size``, ``mask_builder``'s mask, ``mask_info`` (segment ids:
    a document mask; its causal / window patterns; its pairwise mask) and ``attention_mask``. The
    static patterns are compiled once per shape and tiling into block metadata (each
    ``(query tile, key tile)`` empty, full or partial, partial tiles carrying their fine mask);
    segment ids and pairwise masks are classified per call. The kernels visit only non-empty
    tiles and apply a fine mask only on partial ones, so the cost follows the mask's density.
    Query head ``j`` uses key/value head ``j // (num_heads // num_kv_heads)`` (GQA/MQA).

    Positions: query ``i`` sits at key position ``i + seq_k - seq_q`` (bottom-right alignment, as
    ``flash_attention``) for ``causal`` (``j <= pos``), ``sliding_window`` ``(left, right)``
    (``pos - left <= j <= pos + right``; ``w`` means ``(w, w)``) and ``chunk_size`` ``c``
    (``pos // c == j // c``: local attention within chunks, Llama 4 style).

    Args:
        query: ``[batch, num_heads, seq_q, head_dim]``.
        key: ``[batch, num_kv_heads, seq_k, head_dim]``.
        value: ``[batch, num_kv_heads, seq_k, value_head_dim]``.
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head), ``[num_sinks]`` (any
            other length: shared by every head) or ``[num_heads, num_sinks]``: they join each
            row's softmax denominator and carry no value. Differentiable.
        bias: an additive ``[batch, num_heads, seq_q, seq_k]`` bias (or broadcastable). Accepted
            by the signature and the reference; a dense bias defeats block sparsity, so the
            implementations decline it (use ``flash_attention``).
        mask_info: a :class:`~ejkernel.types.MaskInfo`: segment ids (``-1`` = padding) make a
            document mask, classified per tile at run time; its ``causal`` / ``sliding_window``
            join the static mask; a stored pairwise mask joins ``attention_mask``.
        attention_mask: pairwise ``[batch or 1, num_heads or 1, seq_q, seq_k]`` bool (True = may
            attend), intersected with the rest. Quadratic in memory: prefer the patterns.
        sequence_parallelism_mesh_axis_name: refused when set (the schedule spans the whole
            sequence; use ``ring_attention`` for a sequence sharded over devices).
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        qkv_layouts: refused when set (earlier Triton ``SparseMask`` layouts); describe the mask
            with ``mask_builder`` instead.
        softmax_scale: multiplies ``q kᵀ``; default ``1/sqrt(head_dim)``.
        mask_builder: a callable returning the static mask: a
            :class:`~ejkernel.ops.blocksparse_attention.SparseMask` (built with ``causal_mask``,
            ``local_mask``, ``chunked_mask``, ``block_mask`` — an arbitrary ``[q_blocks, k_blocks]``
            bool mask with its block size —, ``token_mask`` and combined with ``&``) or a
            ``[seq_q, seq_k]`` bool mask. Called as ``mask_builder()`` or, if it takes
            arguments, ``mask_builder(q_len, kv_len, num_heads, head_shard_size, q_seq_shards)``.
            Its result must be concrete (it is compiled with NumPy once per shape).
        sliding_window: ``w`` or ``(left, right)``.
        chunk_size: chunked (local) attention: ``c`` positions per chunk.
        causal: the causal pattern (default ``True``; pass ``False`` for a bidirectional mask).
        fused_backward: must be ``False`` (the backward is separate dQ and dK/dV passes).
        purify: must be ``False`` (rows that see no key already return exact zeros).
        platform: ``"auto"`` (default) or the implementation to use.
        cfg: a :class:`BlockSparseAttentionConfig`; its tile sizes are also the granularity
            of the block classification.
        mesh, in_specs, out_specs: run under ``jax.shard_map``; batch and heads may be sharded,
            the sequence and head dims may not.

    Returns:
        ``[batch, num_heads, seq_q, value_head_dim]`` in the query's dtype. Rows that see no key
        are zeros (never NaN).

    Example:
        >>> import jax, ejkernel
        >>> from ejkernel.ops.blocksparse_attention import causal_mask, local_mask
        >>> q = jax.random.normal(jax.random.key(0), (1, 4, 256, 64))
        >>> k = v = jax.random.normal(jax.random.key(1), (1, 2, 256, 64))
        >>> out = ejkernel.blocksparse_attention(q, k, v, mask_builder=lambda: causal_mask() & local_mask((64, 0)))
        >>> out.shape
        (1, 4, 256, 64)
    """
    raise NotImplementedError  # define() supplies the body
