"""The public function ``deepseek_attn``."""

from __future__ import annotations

from jaxtyping import Array, Float

from ..executor import define
from .op import DeepSeekAttn

__all__ = ["deepseek_attn"]


@define(DeepSeekAttn)
def deepseek_attn(
    query: Float[Array, "batch seq_q num_heads q_head_dim"],
    key_value: Float[Array, "batch seq_k kv_lora_rank"],
    w_kc: Float[Array, "kv_lora_rank num_kv_heads qk_nope_head_dim"],
    w_vc: Float[Array, "kv_lora_rank num_kv_heads value_head_dim"],
    query_index: Float[Array, "batch seq_q index_heads index_head_dim"],
    key_index: Float[Array, "batch seq_k index_head_dim"],
    index_weights: Float[Array, "batch seq_q index_heads"],
    index_topk: int = 2048,
    softmax_scale: float | None = None,
    index_softmax_scale: float | None = None,
    b_q: Float[Array, "batch seq_q qk_rope_head_dim"] | None = None,
    b_k: Float[Array, "batch seq_k qk_rope_head_dim"] | None = None,
    causal: bool = True,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
    """DeepSeek sparse attention (DSA, DeepSeek-V3.2): a lightning indexer picks, for each query,
    the ``index_topk`` keys it scores highest, and multi-head latent attention (``flash_mla``'s
    math) attends only those.

    The indexer (float32)::

        I[i, t] = Σ_j index_weights[i, j] · relu(index_softmax_scale · query_index[i, j] · key_index[t])

    Query ``i`` attends the ``min(index_topk, seq_k)`` keys of highest ``I[i, :]`` among those it
    may see (``t <= i + seq_k - seq_q`` when ``causal``; ties go to the lower key index), and
    always its own position ``i + seq_k - seq_q``, as ejkernel's earlier ``deepseek_attn`` did.
    With ``index_topk >= seq_k`` every visible key is kept: the result is ``flash_mla``'s. The
    attention over the kept keys is ``flash_mla``'s (see its docstring for ``query``, ``b_q``,
    ``b_k`` and the absorbed form the implementations compute).

    The selection is not differentiable: gradients flow to ``query``, ``key_value``, ``w_kc``,
    ``w_vc``, ``b_q`` and ``b_k`` through the attention over the kept keys; ``query_index``,
    ``key_index`` and ``index_weights`` get none (train the indexer with its own loss, as
    DeepSeek-V3.2 does). The XLA implementation computes the indexer's scores and the kept-key
    mask per query-key pair (``[batch, seq_q, seq_k]``, not per head), and the attention
    blockwise. The Triton implementation takes the same selection as key indices
    (``[batch, seq_q, min(index_topk, seq_k) + 1]``) and attends only those rows, gathered per
    token (its work grows with ``index_topk``, not ``seq_k``); its backward is the same gathered
    attention in JAX. Neither has a fused indexer: its scores are ``[batch, seq_q, index_heads,
    seq_k]`` float32 before the sum over heads.

    Args:
        query, key_value, w_kc, w_vc, b_q, b_k: as in :func:`ejkernel.flash_mla`.
        query_index: the indexer's queries ``[batch, seq_q, index_heads, index_head_dim]``.
        key_index: the indexer's keys ``[batch, seq_k, index_head_dim]`` (shared by its heads).
        index_weights: the indexer's per-head weights ``[batch, seq_q, index_heads]``.
        index_topk: keys kept per query (>= 1).
        softmax_scale: default ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``.
        index_softmax_scale: the indexer's scale, default ``1 / sqrt(index_head_dim)``.
        causal: key ``t`` is visible to query ``i`` when ``t <= i + seq_k - seq_q`` (default True).
        platform, cfg: implementation and :class:`DeepSeekAttnConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads may be sharded.

    Returns:
        ``[batch, seq_q, num_heads, value_head_dim]`` in the query's dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> ks = jax.random.split(jax.random.key(0), 7)
        >>> q = jax.random.normal(ks[0], (1, 32, 4, 16))
        >>> c = jax.random.normal(ks[1], (1, 32, 64))
        >>> w_kc = jax.random.normal(ks[2], (64, 4, 16)) / 8
        >>> w_vc = jax.random.normal(ks[3], (64, 4, 16)) / 8
        >>> qi = jax.random.normal(ks[4], (1, 32, 2, 8))
        >>> ki = jax.random.normal(ks[5], (1, 32, 8))
        >>> wi = jax.random.normal(ks[6], (1, 32, 2))
        >>> ejkernel.deepseek_attn(q, c, w_kc, w_vc, qi, ki, wi, index_topk=8).shape
        (1, 32, 4, 16)
    """
    raise NotImplementedError  # define() supplies the body
