"""The public function ``flash_mla_decode``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import FlashMLADecode

__all__ = ["flash_mla_decode"]


@define(FlashMLADecode)
def flash_mla_decode(
    query: Float[Array, "batch seq_q num_heads head_dim"],
    latent_cache: Float[Array, "num_pages page_size head_dim"],
    context_lens: Int[Array, "batch"],
    block_tables: Int[Array, "batch max_pages"],
    *,
    kv_lora_rank: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    return_lse: bool = False,
) -> Float[Array, "batch seq_q num_heads kv_lora_rank"] | tuple[Array, Array]:
    """Multi-head latent attention decode (DeepSeek-V2/V3 MLA) over a paged latent cache, in the
    absorbed form: FlashMLA's ``flash_mla_with_kvcache`` (inference only).

    Each cached token is one latent row ``[c | k_rope]`` (``kv_lora_rank`` latent lanes, then the
    rotary lanes; DeepSeek-V3: 512 + 64), shared by every head: the key of every head is the whole
    row and its value the first ``kv_lora_rank`` lanes. The caller has absorbed the key
    up-projection into the query (``q = [q_nope @ w_kcᵀ | q_rope]``, ``head_dim = kv_lora_rank +
    rope``) and applies the value up-projection to the latent output (``out @ w_vc``)::

        s = softmax_scale · q · latent_cache[t]         # every head, one row per cached token
        out = softmax(s) @ latent_cache[t, :kv_lora_rank]

    A latent row is read once for all heads (and all query tokens of the step), so the step is
    about ``2·h·seq_q·(head_dim + kv_lora_rank)`` FLOPs per byte-row read: near the compute
    roofline at 128 heads, not only memory-bound.

    How it relates to :func:`ejkernel.flash_mla`: that op takes the latent ``key_value`` dense
    (one row per token, ``[batch, seq_k, kv_lora_rank]``) with the projections ``w_kc``/``w_vc``
    and applies them itself; this one reads the latent through a block table and leaves the
    projections to the caller, as serving engines (vLLM, SGLang) do around FlashMLA. Gathering a
    sequence's pages into ``key_value``/``b_k`` and calling ``flash_mla`` on the last ``seq_q``
    queries gives the same result. Prefill is the non-absorbed form: materialize each head's keys
    and values (``K = [c @ w_kc | k_rope]``, ``V = c @ w_vc``) and call
    :func:`ejkernel.flash_attention` on them (cheaper than the absorbed form when the queries are
    many: ``qk_nope_head_dim`` is smaller than ``kv_lora_rank``).

    The cache is read where it is, never copied; pages and slots past a sequence's context may
    hold anything (even NaN). A FlashMLA cache ``[num_pages, page_size, 1, head_dim]`` is this
    layout with a unit axis: reshape it inside your ``jit`` (free there).

    Args:
        query: ``[batch, seq_q, num_heads, head_dim]`` (``seq_q``: 1 for decode, a few with
            speculative / multi-token prediction), the absorbed queries ``[q_nope·w_kcᵀ | q_rope]``.
        latent_cache: ``[num_pages, page_size, head_dim]``, the query's dtype.
        context_lens: ``[batch]`` int: cached tokens of each sequence, the step's own included,
            each in ``[0, max_pages * page_size]``. 0 gives a zero output (and ``-inf`` lse).
        block_tables: ``[batch, max_pages]`` int page indices; those a sequence uses (its first
            ``ceil(context_lens[b] / page_size)``) in ``[0, num_pages)``, the rest anything.
            ``context_lens`` and ``block_tables`` are checked when concrete; under ``jit`` only
            with :func:`ejkernel.checks` on.
        kv_lora_rank: the latent lanes of a row (the value's width; FlashMLA's ``head_dim_v``),
            at most ``head_dim``.
        softmax_scale: default ``head_dim ** -0.5`` (FlashMLA's); DeepSeek models pass
            ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5`` times their YaRN factor.
        causal: query token ``i`` sits at position ``context_lens[b] - seq_q + i`` and attends
            the cached tokens up to it (a token at a negative position sees none: zero output).
            ``False``: every query token attends the whole context.
        return_lse: also return the log-sum-exp of each row's scaled logits, to merge with
            attention over other keys (``lse = logaddexp(lse1, lse2)``, ``out = exp(lse1 - lse)
            · out1 + exp(lse2 - lse) · out2``).
        platform, cfg: implementation and :class:`FlashMLADecodeConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch (query, context_lens,
            block_tables) and heads (query) may be sharded, the cache is replicated.

    Returns:
        ``[batch, seq_q, num_heads, kv_lora_rank]`` in the query's dtype; with ``return_lse``,
        also ``lse [batch, seq_q, num_heads]`` float32 (natural log; ``-inf`` for a row that
        attends nothing).

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> cache = jax.random.normal(jax.random.key(0), (32, 16, 64 + 16))  # 32 pages of 16 rows
        >>> q = jax.random.normal(jax.random.key(1), (4, 1, 8, 64 + 16))     # 4 sequences, 8 heads
        >>> tables = jnp.arange(32, dtype=jnp.int32).reshape(4, 8)
        >>> lens = jnp.array([1, 17, 100, 128], jnp.int32)
        >>> ejkernel.flash_mla_decode(q, cache, lens, tables, kv_lora_rank=64).shape
        (4, 1, 8, 64)
    """
    raise NotImplementedError  # define() supplies the body
