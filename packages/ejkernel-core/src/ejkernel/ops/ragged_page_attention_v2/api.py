"""The public function ``ragged_page_attention_v2``."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..executor import define
from .op import RaggedPageAttentionv2

__all__ = ["ragged_page_attention_v2"]


@define(RaggedPageAttentionv2)
def ragged_page_attention_v2(
    queries: Float[Array, "total_tokens num_heads head_dim"],
    kv_pages: Float[Array, "num_pages page_size num_combined_kv_heads head_dim"],
    context_lens: Int[Array, "num_seqs"],
    block_tables: Int[Array, "num_seqs pages_per_seq"],
    query_start_loc: Int[Array, "num_seqs_plus_1"],
    num_seqs: Int[Array, ""] | Int[Array, "1"] | int,
    softmax_aux: Float[Array, "num_sinks"] | Float[Array, "num_heads num_sinks"] | None = None,
    *,
    softmax_scale: float | None = None,
    logits_soft_cap: float | None = None,
    compute_dtype: Any = jnp.bfloat16,
    optimized: bool = False,
    sliding_window: int | tuple[int, int] | None = None,
    mask_value: float | None = None,
    vmem_limit_bytes: int | None = None,
) -> Float[Array, "total_tokens num_heads head_dim"]:
    """Attention of packed query tokens of many sequences (prefill chunks and decodes mixed) over
    one paged KV cache whose heads interleave keys and values (inference only).

    Sequence ``i < num_seqs`` owns query rows ``query_start_loc[i]`` to ``query_start_loc[i + 1] - 1``,
    the last ``q_len`` tokens of its ``context_lens[i]`` (their keys and values already in the
    cache): row ``j`` of it sits at position ``context_lens[i] - q_len + j`` and attends the cached
    tokens up to it (causal, aligned bottom-right). Token ``t`` lives in page
    ``block_tables[i, t // page_size]`` at slot ``t % page_size``; its key is head ``2h`` and its
    value head ``2h + 1`` of ``kv_pages``. Pages and slots no sequence uses may hold anything
    (even NaN). Rows past ``query_start_loc[num_seqs]`` (padding) come out zero, as do sequences
    with no query.

    Args:
        queries: ``[total_tokens, num_heads, head_dim]``; ``num_heads`` a multiple of ``num_kv_heads``.
        kv_pages: ``[num_pages, page_size, 2 * num_kv_heads, head_dim]``, keys at even heads,
            values at odd ones; read in place (never copied).
        context_lens: ``[max_num_seqs]`` int, each in ``[q_len, pages_per_seq * page_size]``.
        block_tables: ``[max_num_seqs, pages_per_seq]`` int page indices in ``[0, num_pages)``
            (those a sequence uses).
        query_start_loc: ``[max_num_seqs + 1]`` int, starting at 0, non-decreasing over the first
            ``num_seqs + 1`` entries, ``query_start_loc[num_seqs] <= total_tokens``.
        num_seqs: the live sequences (an int, a 0-D or ``[1]`` int array; may be traced: the batch
            is padded to ``max_num_seqs``). The index arrays are checked when concrete; under
            ``jit`` only with :func:`ejkernel.checks` on.
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head), ``[num_sinks]`` (any
            other length: shared by every head) or ``[num_heads, num_sinks]``.
        softmax_scale: default ``1/sqrt(head_dim)``.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        sliding_window: ``w`` or ``(left, right)``: each row attends only the last ``left + 1``
            tokens up to its position (``right`` has no effect under the causal mask).
        compute_dtype, optimized, mask_value, vmem_limit_bytes: accepted from earlier releases and
            ignored: they tuned how the TPU kernel ran, not the result (matmuls run in the inputs'
            dtype with float32 accumulation; a row with nothing to attend is zero whatever
            ``mask_value``).
        platform, cfg: implementation and :class:`RaggedPageAttentionv2Config`.
        mesh, in_specs, out_specs: run under ``shard_map`` (every array replicated: no axis of
            this op may be sharded yet).

    Returns:
        ``[total_tokens, num_heads, head_dim]`` in the queries' dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> kv = jax.random.normal(jax.random.key(0), (16, 8, 4, 32))    # 16 pages of 8 tokens, 2 kv heads
        >>> q = jax.random.normal(jax.random.key(1), (5, 4, 32))         # 1 decode + a 4-token chunk
        >>> tables = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
        >>> ejkernel.ragged_page_attention_v2(q, kv, jnp.array([9, 20]), tables, jnp.array([0, 1, 5]), 2).shape
        (5, 4, 32)
    """
    raise NotImplementedError  # define() supplies the body
