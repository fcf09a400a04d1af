"""The public function ``flash_mla`` (earlier name ``mla_attention``)."""

from __future__ import annotations

from typing import Any

from jaxtyping import Array, Bool, Float, Int

from ..executor import define
from .op import FlashMLA

__all__ = ["flash_mla", "mla_attention"]


@define(FlashMLA)
def flash_mla(
    query: Float[Array, "batch seq_q num_heads q_head_dim"],
    key_value: Float[Array, "batch seq_k kv_lora_rank"],
    w_kc: Float[Array, "kv_lora_rank num_kv_heads qk_nope_head_dim"],
    w_vc: Float[Array, "kv_lora_rank num_kv_heads value_head_dim"],
    b_q: Float[Array, "batch seq_q qk_rope_head_dim"] | None = None,
    b_k: Float[Array, "batch seq_k qk_rope_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
    attention_mask: Bool[Array, "batch num_heads_or_1 seq_q seq_k"] | None = None,
    bias: Float[Array, "batch num_heads_or_1 seq_q seq_k"] | None = None,
    softmax_aux: Float[Array, "num_heads num_sinks"] | Float[Array, "num_sinks"] | None = None,
    logits_soft_cap: float | None = None,
    deterministic: bool = True,
    dropout_rng: Any = None,
    dropout_prob: float = 0.0,
    sliding_window: int | tuple[int, int] | None = None,
    softmax_dtype: Any = None,
) -> Float[Array, "batch seq_q num_heads value_head_dim"]:
    """Multi-head latent attention (MLA, DeepSeek-V2/V3): every head's keys and values are
    projections of one shared latent ``key_value``, never materialized.

    With ``c = key_value``, ``G = num_heads // num_kv_heads`` and query head ``j`` using the
    projections of kv head ``j // G``::

        k_nope = c @ w_kc[:, j // G]      v = c @ w_vc[:, j // G]
        s = softmax_scale · (q_nope · k_nope + q_rope · k_rope)
        out = softmax(s) @ v              # [batch, seq_q, num_heads, value_head_dim]

    The nope and rope parts come from ``query``, ``b_q`` and ``b_k`` in one of three ways:

    - no ``b_q``/``b_k``: ``query`` is ``q_nope`` (``q_head_dim = qk_nope_head_dim``), no rope term;
    - ``b_k`` only: ``query = [q_nope | q_rope]`` (``q_head_dim = qk_nope_head_dim +
      qk_rope_head_dim``), ``q_rope`` per head, ``k_rope = b_k`` shared by all heads;
    - ``b_q`` and ``b_k``: ``query`` is ``q_nope``; ``q_rope = b_q`` and ``k_rope = b_k`` are both
      shared by all heads. (``b_q`` alone is an error.)

    The implementations compute the absorbed form (DeepSeek-V2 §2.1.2, FlashMLA): each query's
    nope part is absorbed into the latent space (``q_nope @ w_kcᵀ``), all heads attend the one
    latent ``[c | k_rope]`` multi-query style, and each head's latent output is projected by
    ``w_vc``: one latent row (e.g. DeepSeek-V3's 512 + 64) is read per key for all heads. A decode
    step is ``seq_q = 1`` (or a few tokens) against the whole latent cache: ``causal`` and
    ``sliding_window`` align the queries with the last keys. The non-absorbed form (prefill on
    keys and values materialized per head, ``K = [c @ w_kc | k_rope]``, ``V = c @ w_vc``) is
    :func:`ejkernel.flash_attention` on those arrays. Decode over a paged latent cache (serving:
    the queries already absorbed, the latent output returned for the caller's ``w_vc``) is
    :func:`ejkernel.flash_mla_decode`.

    Differentiable in ``query``, ``key_value``, ``w_kc``, ``w_vc``, ``b_q``, ``b_k``, ``bias``
    and ``softmax_aux``; the XLA implementation's backward is blockwise (FlashAttention-2) in
    the absorbed form, linear in memory. ``mla_attention`` is this function under the name of
    ejkernel 0.0.16 (whose parameters are a subset of these).

    Args:
        query: ``[batch, seq_q, num_heads, q_head_dim]`` (see the three forms above).
        key_value: the latent, ``[batch, seq_k, kv_lora_rank]``, the query's dtype.
        w_kc: key up-projection ``[kv_lora_rank, num_kv_heads, qk_nope_head_dim]``;
            ``num_heads`` a multiple of ``num_kv_heads``.
        w_vc: value up-projection ``[kv_lora_rank, num_kv_heads, value_head_dim]``.
        b_q: the queries' rotary part shared by all heads, ``[batch, seq_q, qk_rope_head_dim]``.
        b_k: the keys' rotary part shared by all heads, ``[batch, seq_k, qk_rope_head_dim]``.
        cu_seqlens: ``[num_seqs + 1]`` int cumulative lengths of sequences packed along one row
            (``batch == 1``, ``seq_q == seq_k``); a query attends only its own sequence.
        softmax_scale: default ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``.
        causal: key ``t`` is visible to query ``i`` when ``t <= i + seq_k - seq_q``.
        attention_mask: bool (or int, nonzero = attend) ``[batch or 1, num_heads or 1, seq_q, seq_k]``.
        bias: additive, broadcastable to ``[batch, num_heads, seq_q, seq_k]``; added after the
            soft cap.
        softmax_aux: attention-sink logits: ``[num_heads, num_sinks]``, ``[num_heads]`` or a
            shared ``[num_sinks]``; they join each row's softmax denominator.
        logits_soft_cap: ``cap · tanh(logits / cap)``.
        deterministic, dropout_rng, dropout_prob: attention dropout is not supported: a call
            with ``dropout_prob > 0`` and ``deterministic=False`` raises ``ValueError``.
        sliding_window: ``w`` or ``(left, right)``: query ``i`` sees keys
            ``i + off - left .. i + off + right`` (``off = seq_k - seq_q``).
        softmax_dtype: ``None`` or float32 (the softmax runs in float32); others raise.
        platform, cfg: implementation and :class:`FlashMLAConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads (query heads and
            kv heads together) may be sharded.

    Returns:
        ``[batch, seq_q, num_heads, value_head_dim]`` in the query's dtype; a query row that
        sees no key is zero.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> ks = jax.random.split(jax.random.key(0), 5)
        >>> q = jax.random.normal(ks[0], (2, 16, 8, 32 + 16))       # [q_nope | q_rope]
        >>> c = jax.random.normal(ks[1], (2, 16, 64))               # kv_lora_rank 64
        >>> w_kc = jax.random.normal(ks[2], (64, 8, 32)) / 8
        >>> w_vc = jax.random.normal(ks[3], (64, 8, 24)) / 8
        >>> k_rope = jax.random.normal(ks[4], (2, 16, 16))
        >>> ejkernel.flash_mla(q, c, w_kc, w_vc, b_k=k_rope, causal=True).shape
        (2, 16, 8, 24)
    """
    raise NotImplementedError  # define() supplies the body


mla_attention = flash_mla
