"""The public function ``page_attention``."""

from __future__ import annotations

from typing import Literal

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import PageAttention

__all__ = ["page_attention"]


@define(PageAttention)
def page_attention(
    query: Float[Array, "batch num_heads head_dim"] | Float[Array, "batch 1 num_heads head_dim"],
    key_cache: Float[Array, "num_blocks block_size num_kv_heads head_dim"]
    | Float[Array, "num_blocks num_kv_heads block_size head_dim"],
    value_cache: Float[Array, "num_blocks block_size num_kv_heads value_head_dim"]
    | Float[Array, "num_blocks num_kv_heads block_size value_head_dim"],
    context_lens: Int[Array, "batch"],
    block_tables: Int[Array, "batch max_blocks"],
    *,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    sliding_window: int | tuple[int, int] | None = None,
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    cache_layout: Literal["blocks_tokens_heads", "blocks_heads_tokens"] = "blocks_tokens_heads",
    attn_scale: float | None = None,
    attn_logits_soft_cap: float | None = None,
    num_splits: int | None = None,
    pages_per_compute_block: int | None = None,
    max_context_len: int | None = None,
    mask_value: float | None = None,
    megacore_mode: str | None = None,
    inline_seq_dim: bool = True,
) -> Float[Array, "batch num_heads value_head_dim"] | Float[Array, "batch 1 num_heads value_head_dim"]:
    """Attention of one new token per sequence over a paged KV cache (decode).

    Sequence ``b`` has ``context_lens[b]`` cached tokens; token ``t`` lives in page
    ``block_tables[b, t // block_size]`` at slot ``t % block_size``. The query sits at the last
    position, ``context_lens[b] - 1``, so it attends every cached token (no causal mask needed).
    Pages past the context may hold anything (even NaN): they are never read into the result.

    The caches are read where they are, in either layout (``cache_layout``): no implementation
    copies or transposes them.

    Args:
        query: ``[batch, num_heads, head_dim]`` or ``[batch, 1, num_heads, head_dim]``;
            ``num_heads`` a multiple of ``num_kv_heads``.
        key_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]`` (with
            ``cache_layout="blocks_heads_tokens"``: ``[num_blocks, num_kv_heads, block_size, head_dim]``).
        value_cache: ``[num_blocks, block_size, num_kv_heads, value_head_dim]``, in the key cache's layout.
        context_lens: ``[batch]`` int, each in ``[0, max_blocks * block_size]`` (0 → zeros out).
        block_tables: ``[batch, max_blocks]`` int page indices, each used one (the first
            ``ceil(context_lens[b] / block_size)`` of a row) in ``[0, num_blocks)``.
            ``context_lens`` and ``block_tables`` are checked when concrete; under ``jit`` only
            with :func:`ejkernel.checks` on. Unchecked, an out-of-range value gives undefined
            results: XLA clamps the page index (attends the wrong page), the GPU kernels read
            outside the cache.
        softmax_scale: default ``1/sqrt(head_dim)``.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        sliding_window: ``w`` or ``(left, right)``: attend only the last ``left + 1`` tokens
            (``right`` has no effect: no cached token follows the query).
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head), ``[num_sinks]`` (any other length: shared by every head) or ``[num_heads, num_sinks]``.
        cache_layout: how the caches are laid out: ``"blocks_tokens_heads"`` (default, this
            library's: ``[num_blocks, block_size, num_kv_heads, dim]``) or ``"blocks_heads_tokens"``
            (earlier ejkernel releases': ``[num_blocks, num_kv_heads, block_size, dim]``; the
            default of their import paths, ``ejkernel.kernels._<backend>.page_attention``). It is
            never guessed from the shapes, which often fit both (a cache ``[n, 16, 4, 128]``
            with 16 query heads is 16-token pages of 4 kv heads or 4-token pages of 16).
        attn_scale, attn_logits_soft_cap: earlier names of ``softmax_scale``, ``logits_soft_cap``.
        num_splits, pages_per_compute_block: config hints (``PageAttentionConfig.num_splits``,
            and ``tokens_per_block = pages_per_compute_block * block_size``); ``cfg`` wins.
        max_context_len, mask_value, megacore_mode, inline_seq_dim: accepted from earlier
            releases and ignored: they tuned how the old kernels ran, not the result (a sequence
            attends exactly its ``context_lens`` tokens; an empty one returns zeros whatever
            ``mask_value``).
        platform, cfg: implementation and :class:`PageAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; heads (query heads and the caches'
            kv heads together) and batch (query, context_lens, block_tables) may be sharded.

    Returns:
        The query's shape with ``value_head_dim`` last, in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> kc = vc = jax.random.normal(jax.random.key(0), (64, 16, 2, 64))   # 64 pages of 16 tokens
        >>> q = jax.random.normal(jax.random.key(1), (4, 8, 64))
        >>> tables = jnp.arange(64, dtype=jnp.int32).reshape(4, 16)
        >>> ejkernel.page_attention(q, kc, vc, jnp.array([1, 17, 200, 256]), tables).shape
        (4, 8, 64)
    """
    raise NotImplementedError  # define() supplies the body
