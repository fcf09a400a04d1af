"""The public function ``kernel_delta_attention`` (alias ``kda_attention``)."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import KernelDeltaAttention

__all__ = ["kda_attention", "kernel_delta_attention"]


@define(KernelDeltaAttention)
def kernel_delta_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_heads head_dim"],
    value: Float[Array, "batch seq num_value_heads value_head_dim"],
    beta: Float[Array, "batch seq num_value_heads"],
    decay: Float[Array, "batch seq num_value_heads head_dim"] | Float[Array, "batch seq num_value_heads"] | None = None,
    initial_state: Float[Array, "num_states num_value_heads head_dim value_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    softmax_scale: float | None = None,
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
    use_chunked: bool = True,
    return_state: bool = False,
) -> Float[Array, "batch seq num_value_heads value_head_dim"] | tuple[Array, Array]:
    """Kimi Delta Attention (KDA): the gated delta rule with a per-channel decay.

    Per value head, with state ``S`` ``[head_dim, value_head_dim]`` (float32)::

        S_t = (I - beta_t k_t k_tᵀ) diag(exp(decay_t)) S_{t-1} + beta_t k_t v_tᵀ
        o_t = softmax_scale · S_tᵀ q_t

    computed chunk by chunk (the WY representation of the products of Householder-like
    updates; memory linear in ``seq``). A call with one token per sequence (decode) takes the
    step path.

    Args:
        query, key: ``[batch, seq, num_heads, head_dim]``.
        value: ``[batch, seq, num_value_heads, value_head_dim]``; ``num_value_heads`` a multiple
            of ``num_heads`` (value head ``j`` uses query/key head ``j // (num_value_heads //
            num_heads)``).
        beta: ``[batch, seq, num_value_heads]`` write strengths (usually a sigmoid, in (0, 1)).
        decay: log-space decay (``<= 0``), per channel ``[batch, seq, num_value_heads,
            head_dim]`` or per head ``[batch, seq, num_value_heads]``; ``None``: no decay.
        initial_state: ``[batch (or num_seqs with cu_seqlens), num_value_heads, head_dim,
            value_head_dim]``; ``None``: zeros.
        cu_seqlens: ``[num_seqs + 1]`` int offsets of packed sequences in a batch of 1 (start at
            0, end at ``seq``; empty sequences allowed); the state restarts at each sequence.
        softmax_scale: the output scale; default ``1/sqrt(head_dim)``.
        chunk_size: tokens per chunk (a config hint: ``KernelDeltaAttentionConfig.chunk_size``,
            a power of two in [16, 128]; an explicit ``cfg`` wins).
        use_qk_l2norm: L2-normalize ``query`` and ``key`` over ``head_dim`` first (inside the
            op, gradients included).
        use_chunked: ``False`` runs the token-by-token recurrence (a config hint:
            ``chunked=False``; its backward stores a state per token: short sequences only).
        return_state: also return the final state(s) (float32, ``initial_state``'s shape).
        platform, cfg: implementation and :class:`KernelDeltaAttentionConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads (query/key heads
            and value heads together) may be sharded.

    Returns:
        ``[batch, seq, num_value_heads, value_head_dim]`` in the query's dtype, or
        ``(output, final_state)`` with ``return_state=True``.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q, k = (jax.random.normal(jax.random.key(i), (2, 100, 4, 32)) for i in (0, 1))
        >>> v = jax.random.normal(jax.random.key(2), (2, 100, 4, 32))
        >>> beta = jax.nn.sigmoid(jax.random.normal(jax.random.key(3), (2, 100, 4)))
        >>> decay = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(4), (2, 100, 4, 32)))
        >>> out, state = ejkernel.kernel_delta_attention(q, k, v, beta, decay, return_state=True)
        >>> out.shape, state.shape
        ((2, 100, 4, 32), (2, 4, 32, 32))
    """
    raise NotImplementedError  # define() supplies the body


kda_attention = kernel_delta_attention
