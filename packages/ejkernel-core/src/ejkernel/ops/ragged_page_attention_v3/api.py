"""The public function ``ragged_page_attention_v3``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import RaggedPageAttentionv3

__all__ = ["ragged_page_attention_v3"]


@define(RaggedPageAttentionv3)
def ragged_page_attention_v3(
    queries: Float[Array, "total_tokens num_heads head_dim"],
    keys: Float[Array, "total_tokens num_kv_heads head_dim"],
    values: Float[Array, "total_tokens num_kv_heads head_dim"],
    kv_cache: Array,
    kv_lens: Int[Array, "max_num_seqs"],
    block_tables: Int[Array, "table_entries"],
    query_start_loc: Int[Array, "max_num_seqs_plus_1"],
    distribution: Int[Array, "3"],
    softmax_aux: Float[Array, "num_heads"] | Float[Array, "num_heads num_sinks"] | None = None,
    *,
    softmax_scale: float = 1.0,
    sliding_window: int | tuple[int, int] | None = None,
    logits_soft_cap: float | None = None,
    q_scale: float | None = None,
    k_scale: float | None = None,
    v_scale: float | None = None,
    vmem_limit_bytes: int | None = None,
) -> tuple[Float[Array, "total_tokens num_heads head_dim"], Array]:
    """One serving step (inference only): writes the step's new keys and values into a packed
    paged KV cache, then attends it with the packed query tokens of many sequences (prefill chunks
    and decodes mixed). Returns the attention output and the updated cache.

    Sequence ``i < num_seqs`` (``num_seqs = distribution[2]``) owns rows ``query_start_loc[i]``
    to ``query_start_loc[i + 1] - 1`` of ``queries``, ``keys`` and ``values``: the last ``q_len``
    tokens of its ``kv_lens[i]`` (which counts them). Row ``j`` of it sits at position ``p =
    kv_lens[i] - q_len + j``: its key and value are written to page ``block_tables[i *
    pages_per_seq + p // page_size]``, slot ``p % page_size``, and its query attends the cached
    tokens up to ``p`` (causal, aligned bottom-right), its own included. Nothing else of the
    cache changes: pages and slots no sequence uses may hold anything (even NaN) and come back
    bit for bit. Rows past ``query_start_loc[num_seqs]`` (padding) write nothing and come out zero.

    The cache is the TPU kernel's packed layout ``[num_pages, page_size, ceil(2 * num_kv_heads /
    kv_packing), kv_packing, head_dim_padded]``: keys and values interleaved over combined heads
    (``2h`` the key of kv head ``h``, ``2h + 1`` its value), combined head ``c`` at ``[...,
    c // kv_packing, c % kv_packing, :]``, ``kv_packing = 32 / bits`` of the dtype (float32 1,
    bfloat16/float16 2), ``head_dim_padded`` a multiple of 128 at least ``head_dim`` (padding
    lanes written zero). :func:`ragged_page_attention_v3_cache_shape` gives the shape,
    :func:`ragged_page_attention_v3_pack_cache` builds one from key and value pages.

    The cache is donated: an eager call consumes ``kv_cache`` (the array passed is deleted; use
    the returned one) and writes the new tokens in place. Under your own ``jax.jit``, pass
    ``donate_argnums`` for the cache to get the same in-place update; without it XLA keeps the
    old cache and writes a copy.

    Args:
        queries: ``[total_tokens, num_heads, head_dim]``; ``num_heads`` a multiple of ``num_kv_heads``.
        keys, values: ``[total_tokens, num_kv_heads, head_dim]``, the new tokens' (one per query
            row), in the queries' dtype.
        kv_cache: the packed cache (above), in the queries' dtype.
        kv_lens: ``[max_num_seqs]`` int32, each sequence's length after this step, in
            ``[q_len, pages_per_seq * page_size]``.
        block_tables: ``[max_num_seqs * pages_per_seq]`` int32, sequence ``i``'s pages at
            ``[i * pages_per_seq, (i + 1) * pages_per_seq)`` (those it uses in ``[0, num_pages)``).
        query_start_loc: ``[max_num_seqs + 1]`` int32, starting at 0, non-decreasing over the first
            ``num_seqs + 1`` entries, ``query_start_loc[num_seqs] <= total_tokens``.
        distribution: ``[3]`` int32 ``(decode_end, prefill_end, num_seqs)``: sequences
            ``[0, decode_end)`` decode one token, ``[decode_end, prefill_end)`` are prefill
            chunks, the rest up to ``num_seqs`` mixed; ``0 <= decode_end <= prefill_end <=
            num_seqs <= max_num_seqs``. It may be traced (the batch is padded to
            ``max_num_seqs``). The XLA implementation reads only ``num_seqs``; the split is a
            hint for device kernels (``decode_end == num_seqs``: a decode-only step, which a GPU
            decode kernel serves). The index arrays are checked when concrete; under ``jit``
            only with :func:`ejkernel.checks` on.
        softmax_aux: attention-sink logits ``[num_heads]`` (one per head) or ``[num_heads, num_sinks]``.
        softmax_scale: multiplies the logits (default 1.0, as the TPU kernel's; pass
            ``head_dim ** -0.5`` for the usual scaling).
        sliding_window: ``w`` or ``(left, right)``: each row attends only the last ``left + 1``
            tokens up to its position (``right`` has no effect under the causal mask).
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        q_scale, k_scale, v_scale: scales of a quantized (fp8/int8) cache: not supported yet
            (every implementation declines such a call, as it declines an 8-bit cache).
        vmem_limit_bytes: the TPU kernel's scoped-memory limit; accepted and ignored (it tunes
            how that kernel runs, not the result).
        platform, cfg: implementation and :class:`RaggedPageAttentionv3Config`.
        mesh, in_specs, out_specs: run under ``shard_map`` (every array replicated: no axis of
            this op may be sharded yet); ``out_specs`` a pair (output, cache).

    Returns:
        ``(output, kv_cache)``: ``[total_tokens, num_heads, head_dim]`` in the queries' dtype, and
        the updated cache.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> shape = ejkernel.ragged_page_attention_v3_cache_shape(16, 8, 2, 32, jnp.float32)
        >>> cache = jnp.zeros(shape)                                  # 16 pages of 8 tokens, 2 kv heads
        >>> q = jax.random.normal(jax.random.key(1), (5, 4, 32))      # 1 decode + a 4-token chunk
        >>> k = v = jax.random.normal(jax.random.key(2), (5, 2, 32))
        >>> tables = jnp.arange(16, dtype=jnp.int32)                  # 8 pages per sequence
        >>> lens, qsl = jnp.array([9, 20]), jnp.array([0, 1, 5])
        >>> out, cache = ejkernel.ragged_page_attention_v3(
        ...     q, k, v, cache, lens, tables, qsl, jnp.array([1, 1, 2]), softmax_scale=32**-0.5)
        >>> out.shape, cache.shape
        ((5, 4, 32), (16, 8, 2, 1, 128))
    """
    raise NotImplementedError  # define() supplies the body
