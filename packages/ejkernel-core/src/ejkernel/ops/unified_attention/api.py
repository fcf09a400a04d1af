"""The public function ``unified_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import UnifiedAttention

__all__ = ["unified_attention"]


@define(UnifiedAttention)
def unified_attention(
    queries: Float[Array, "total_tokens num_heads head_dim"],
    key_cache: Float[Array, "num_blocks block_size num_kv_heads head_dim"],
    value_cache: Float[Array, "num_blocks block_size num_kv_heads head_dim"],
    kv_lens: Int[Array, "num_seqs"],
    block_tables: Int[Array, "num_seqs max_blocks_per_seq"],
    query_start_loc: Int[Array, "num_seqs_plus_1"],
    alibi_slopes: Float[Array, "num_heads"] | None = None,
    qq_bias: Float[Array, "num_query_tokens num_query_tokens"] | None = None,
    softmax_aux: Float[Array, "num_heads"] | None = None,
    *,
    softmax_scale: float | None = None,
    causal: bool = True,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
    seq_threshold_3d: int | None = None,
    return_lse: bool = False,
) -> Float[Array, "total_tokens num_heads head_dim"] | tuple[Array, Array]:
    """vLLM's unified attention: packed query tokens of many sequences (prefill chunks and decodes
    mixed) over one paged cache of separate keys and values (inference only).

    Sequence ``i`` owns query rows ``query_start_loc[i]`` to ``query_start_loc[i + 1] - 1``, the
    last ``q_len`` tokens of its ``kv_lens[i]`` (their keys and values already in the cache): row
    ``j`` of it sits at position ``context_len + j``, where ``context_len = kv_lens[i] - q_len``,
    and attends the cached tokens up to it (causal, aligned bottom-right). Token ``t`` lives in
    block ``block_tables[i, t // block_size]`` at slot ``t % block_size``. Blocks and slots no
    sequence uses may hold anything (even NaN). Rows past ``query_start_loc[num_seqs]`` (padding)
    come out zero.

    The logit of key ``t`` is ``softmax_scale · q·k``, then soft-capped, then biased (as vLLM's
    Triton kernel does it): ``alibi_slopes[h] · (t - context_len)`` and, for keys among the step's
    own query tokens (``0 <= t - context_len < q_len``), ``qq_bias[j, t - context_len]`` (one matrix
    shared by every sequence, e.g. a speculative-decoding tree's mask, ``-inf`` allowed). Sinks
    ``softmax_aux[h]`` join each row's softmax denominator and contribute no value.

    Args:
        queries: ``[total_tokens, num_heads, head_dim]``; ``num_heads`` a multiple of
            ``num_kv_heads`` (query head ``i`` reads kv head ``i // (num_heads // num_kv_heads)``).
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, read in place
            (never copied).
        kv_lens: ``[num_seqs]`` int, each in ``[q_len, max_blocks_per_seq * block_size]``.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` int block indices in ``[0, num_blocks)``
            (those a sequence uses; the others may be anything).
        query_start_loc: ``[num_seqs + 1]`` int, starting at 0, non-decreasing, ending within
            ``total_tokens``. The index arrays are checked when concrete; under ``jit`` only with
            :func:`ejkernel.checks` on.
        alibi_slopes: ``[num_heads]`` ALiBi slopes, or ``None``.
        qq_bias: ``[num_query_tokens, num_query_tokens]``, at least as many rows as any sequence
            has queries, or ``None``.
        softmax_aux: attention-sink logits ``[num_heads]``, or ``None``.
        softmax_scale: default ``1/sqrt(head_dim)``.
        causal: must be ``True`` (vLLM's contract; ``False`` is refused).
        sliding_window: ``w``: each row attends only the last ``w`` tokens up to its position (its
            own included), vLLM's ``window_size = (w - 1, 0)``.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        seq_threshold_3d: the config's ``seq_threshold_3d`` (GPU kernels: how few decoding
            sequences switch to the segmented kernel); an explicit ``cfg`` field wins. It does not
            change the result.
        return_lse: also return each row's log-sum-exp, so a caller can merge attention over
            disjoint key sets (cascade attention: ``lse = logaddexp(lse1, lse2)``, ``out =
            exp(lse1 - lse) · out1 + exp(lse2 - lse) · out2``).
        platform, cfg: implementation and :class:`UnifiedAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map`` (every array replicated: no axis of
            this op may be sharded yet).

    Returns:
        ``[total_tokens, num_heads, head_dim]`` in the queries' dtype; with ``return_lse``, also
        ``lse [total_tokens, num_heads]`` float32: the natural log of each row's softmax
        denominator over the final (scaled, capped, biased) logits, sinks included; ``-inf`` on
        padding rows.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> kc = jax.random.normal(jax.random.key(0), (16, 8, 2, 32))   # 16 blocks of 8 tokens, 2 kv heads
        >>> vc = jax.random.normal(jax.random.key(1), (16, 8, 2, 32))
        >>> q = jax.random.normal(jax.random.key(2), (5, 4, 32))         # 1 decode + a 4-token chunk
        >>> tables = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
        >>> lens, qsl = jnp.array([9, 20], jnp.int32), jnp.array([0, 1, 5], jnp.int32)
        >>> ejkernel.unified_attention(q, kc, vc, lens, tables, qsl).shape
        (5, 4, 32)
    """
    raise NotImplementedError  # define() supplies the body
