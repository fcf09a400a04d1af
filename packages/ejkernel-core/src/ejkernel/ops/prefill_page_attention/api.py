"""The public function ``prefill_page_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import DEFAULT_MASK_VALUE, PrefillPageAttention

__all__ = ["prefill_page_attention"]


@define(PrefillPageAttention)
def prefill_page_attention(
    query: Float[Array, "chunk_size num_heads head_dim"],
    key_cache: Float[Array, "num_kv_heads total_num_pages page_size head_dim"],
    value_cache: Float[Array, "num_kv_heads total_num_pages page_size head_dim"],
    context_len: Int[Array, "1"],
    page_indices: Int[Array, "num_pages"],
    *,
    softmax_scale: float | None = None,
    mask_value: float = DEFAULT_MASK_VALUE,
    attn_logits_soft_cap: float | None = None,
    sliding_window: int | None = None,
) -> Float[Array, "chunk_size num_heads head_dim"]:
    """Attention of one sequence's chunk of new queries over its pages of a paged KV cache whose
    kv heads come first (JetStream layout; inference only).

    The queries are the last ``chunk_size`` tokens of the sequence's ``context_len`` (their keys
    and values already in the cache): row ``j`` sits at position ``context_len - chunk_size + j``
    and attends the cached tokens up to it (causal, aligned bottom-right). Token ``t`` lives in
    page ``page_indices[t // page_size]`` at slot ``t % page_size``. Pages and slots the context
    does not use may hold anything (even NaN), and so may the entries of ``page_indices`` past
    the context's last page.

    Args:
        query: ``[chunk_size, num_heads, head_dim]``; ``num_heads`` a multiple of ``num_kv_heads``
            (query head ``i`` reads kv head ``i // (num_heads // num_kv_heads)``).
        key_cache, value_cache: ``[num_kv_heads, total_num_pages, page_size, head_dim]``, read in
            place (never copied).
        context_len: ``[1]`` int, in ``[chunk_size, num_pages * page_size]``.
        page_indices: ``[num_pages]`` int, the sequence's pages in order; those the context uses
            in ``[0, total_num_pages)``. The index arrays are checked when concrete; under ``jit``
            only with :func:`ejkernel.checks` on.
        softmax_scale: default ``1/sqrt(head_dim)``.
        mask_value: accepted from earlier releases and ignored: masked keys are left out of the
            softmax exactly, whatever its value (it cannot change the result: every row attends
            at least its own token).
        attn_logits_soft_cap: ``cap · tanh(logits / cap)``.
        sliding_window: ``w``: each row attends only the last ``w`` tokens up to its position
            (its own included).
        platform, cfg: implementation and :class:`PrefillPageAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map`` (every array replicated: no axis of
            this op may be sharded yet).

    Returns:
        ``[chunk_size, num_heads, head_dim]`` in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> kc = jax.random.normal(jax.random.key(0), (2, 16, 8, 32))  # 2 kv heads, 16 pages of 8 tokens
        >>> vc = jax.random.normal(jax.random.key(1), (2, 16, 8, 32))
        >>> q = jax.random.normal(jax.random.key(2), (6, 4, 32))        # the last 6 tokens of 20
        >>> pages = jnp.array([5, 2, 11], jnp.int32)
        >>> ejkernel.prefill_page_attention(q, kc, vc, jnp.array([20]), pages).shape
        (6, 4, 32)
    """
    raise NotImplementedError  # define() supplies the body
