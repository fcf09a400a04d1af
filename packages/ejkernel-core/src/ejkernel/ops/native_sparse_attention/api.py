"""The public function ``native_sparse_attention``."""

from __future__ import annotations

from typing import Any

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import NativeSparseAttention

__all__ = ["apply_native_sparse_attention", "native_sparse_attention"]


@define(NativeSparseAttention)
def native_sparse_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_kv_heads head_dim"],
    value: Float[Array, "batch seq num_kv_heads value_head_dim"],
    g_cmp: Float[Array, "batch seq num_heads"] | None = None,
    g_slc: Float[Array, "batch seq num_heads"] | None = None,
    block_indices: Int[Array, "batch seq num_kv_heads num_selected_blocks"] | None = None,
    block_counts: Int[Array, "batch seq num_kv_heads"] | int = 16,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    g_swa: Float[Array, "batch seq num_heads"] | None = None,
    *,
    softmax_scale: float | None = None,
    block_size: int | None = None,
    window_size: int | None = None,
) -> Float[Array, "batch seq num_heads value_head_dim"]:
    """Native Sparse Attention (NSA, DeepSeek 2025): causal attention through three branches.

    Keys and values are cut into blocks of ``block_size`` tokens (per sequence: block ``j`` of a
    sequence is its tokens ``j·block_size .. (j+1)·block_size - 1``). For the token at position
    ``t`` of its sequence and query head ``h`` (kv head ``h // (num_heads // num_kv_heads)``):

    - **compressed** (when ``g_cmp`` is given): attention over the block means of the keys and
      values (mean pooling), each block once complete (``(j + 1)·block_size - 1 <= t``); zeros
      before the first block completes;
    - **selected**: attention over the keys ``<= t`` of the token's selected blocks. With
      ``g_cmp``, the blocks are selected per token and kv head (shared by the kv head's query
      heads): the token's own block first, then its earlier blocks by importance, the compressed
      attention probability summed over the group's query heads; the top ``block_counts`` (ties:
      the lower block). Computed in float32, not differentiated. Without ``g_cmp``,
      ``block_indices`` gives them: the first ``block_counts`` slots count; negative blocks,
      blocks starting after ``t``, and repeats are ignored (the keys are the union of the
      blocks). A token with no key gives zeros;
    - **sliding window** (when ``window_size`` and ``g_swa`` are given): attention over the keys
      ``t - window_size + 1 .. t``.

    The output is ``g_slc·o_slc + g_cmp·o_cmp + g_swa·o_swa`` per token and head (``g_slc``
    ``None``: weight 1; a branch whose gate is ``None`` is not computed). Differentiable in
    query, key, value and the gates (the selection is not differentiated).

    Args:
        query: ``[batch, seq, num_heads, head_dim]``.
        key: ``[batch, seq, num_kv_heads, head_dim]``, ``num_heads`` a multiple of ``num_kv_heads``.
        value: ``[batch, seq, num_kv_heads, value_head_dim]``.
        g_cmp, g_slc, g_swa: gates ``[batch, seq, num_heads]`` (any float dtype) of the branches.
        block_indices: ``[batch, seq, num_kv_heads, num_selected_blocks]`` int: block numbers
            within each token's sequence (ignored, with a warning, when ``g_cmp`` is given).
        block_counts: how many selected blocks count: an int for every token (default 16) or
            ``[batch, seq, num_kv_heads]`` int (with ``g_cmp`` an array ranks every block, then
            keeps each token's count; an int keeps the work bounded).
        cu_seqlens: ``[num_seqs + 1]`` int cumulative lengths of sequences packed in one batch row
            (batch must be 1); rows past ``cu_seqlens[-1]`` are padding: never read, zero output.
            Checked when concrete (under ``jit`` with :func:`ejkernel.checks` on).
        softmax_scale: default ``1/sqrt(head_dim)``.
        block_size: tokens per block (compression and selection); default 64, or the config's
            ``block_size`` (the earlier releases' place for it).
        window_size: tokens of the sliding window (with ``g_swa``).
        platform, cfg: implementation and :class:`NativeSparseAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads (query and kv heads
            together) may be sharded, the sequence may not.

    Returns:
        ``[batch, seq, num_heads, value_head_dim]`` in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q = jax.random.normal(jax.random.key(0), (1, 256, 8, 32))
        >>> k = v = jax.random.normal(jax.random.key(1), (1, 256, 2, 32))
        >>> g = jnp.full((1, 256, 8), 0.5)
        >>> ejkernel.native_sparse_attention(q, k, v, g, g, block_counts=2, block_size=32).shape
        (1, 256, 8, 32)
    """
    raise NotImplementedError  # define() supplies the body


def apply_native_sparse_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_kv_heads head_dim"],
    value: Float[Array, "batch seq num_kv_heads value_head_dim"],
    block_indices: Int[Array, "batch seq num_kv_heads num_selected_blocks"],
    block_counts: Int[Array, "batch seq num_kv_heads"] | int = 16,
    block_size: int = 64,
    softmax_scale: float | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    token_indices: Any = None,
    *,
    platform: str | None = None,
    cfg: Any = None,
) -> Float[Array, "batch seq num_heads value_head_dim"]:
    """The selected-blocks branch alone, with explicit ``block_indices`` (the earlier releases'
    kernel-level form): ``native_sparse_attention(query, key, value, block_indices=...,
    block_counts=..., cu_seqlens=..., block_size=..., softmax_scale=...)`` without gates.
    ``token_indices`` (each packed token's sequence and position) is derived from
    ``cu_seqlens`` here; it is accepted for the earlier signature and not read."""
    del token_indices
    return native_sparse_attention(
        query,
        key,
        value,
        block_indices=block_indices,
        block_counts=block_counts,
        cu_seqlens=cu_seqlens,
        softmax_scale=softmax_scale,
        block_size=block_size,
        platform=platform,
        cfg=cfg,
    )
