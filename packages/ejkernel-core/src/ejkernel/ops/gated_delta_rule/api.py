"""The public function ``gated_delta_rule``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import GatedDeltaRule

__all__ = ["gated_delta_rule"]


@define(GatedDeltaRule)
def gated_delta_rule(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_heads head_dim"],
    value: Float[Array, "batch seq num_value_heads value_head_dim"],
    g: Float[Array, "batch seq num_value_heads"],
    beta: Float[Array, "batch seq num_value_heads"],
    initial_state: Float[Array, "num_states num_value_heads head_dim value_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    softmax_scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    return_state: bool = False,
) -> Float[Array, "batch seq num_value_heads value_head_dim"] | tuple[Array, Array]:
    """Gated DeltaNet (Qwen3-Next): the delta rule with a scalar decay per head and token.

    Per value head, with state ``S`` ``[head_dim, value_head_dim]`` (float32)::

        S_t = (I - beta_t k_t k_tᵀ) exp(g_t) S_{t-1} + beta_t k_t v_tᵀ
        o_t = softmax_scale · S_tᵀ q_t

    computed chunk by chunk (WY representation; memory linear in ``seq``), as fla's
    ``chunk_gated_delta_rule``; one token per sequence (decode) takes the step path.

    Args:
        query, key: ``[batch, seq, num_heads, head_dim]``.
        value: ``[batch, seq, num_value_heads, value_head_dim]``; more value heads than
            query/key heads (GVA, as Qwen3-Next): value head ``j`` uses query/key head
            ``j // (num_value_heads // num_heads)``.
        g: ``[batch, seq, num_value_heads]`` log-space decay (``<= 0``).
        beta: ``[batch, seq, num_value_heads]`` write strengths (usually a sigmoid, in (0, 1)).
        initial_state: ``[batch (or num_seqs with cu_seqlens), num_value_heads, head_dim,
            value_head_dim]``; ``None``: zeros.
        cu_seqlens: ``[num_seqs + 1]`` int offsets of packed sequences in a batch of 1 (start at
            0, end at ``seq``; empty sequences allowed); the state restarts at each sequence.
        softmax_scale: the output scale; default ``1/sqrt(head_dim)``.
        use_qk_l2norm_in_kernel: L2-normalize ``query`` and ``key`` over ``head_dim`` first
            (inside the op, gradients included). Without it, pass unit-length keys: the update
            is stable only when ``beta·|k|² <= 2``.
        return_state: also return the final state(s) (float32, ``initial_state``'s shape).
        platform, cfg: implementation and :class:`GatedDeltaRuleConfig` (``chunk_size``, ...).
        mesh, in_specs, out_specs: run under ``shard_map``; batch and heads may be sharded.

    Returns:
        ``[batch, seq, num_value_heads, value_head_dim]`` in the query's dtype, or
        ``(output, final_state)`` with ``return_state=True``.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q, k = (jax.random.normal(jax.random.key(i), (1, 64, 2, 32)) for i in (0, 1))
        >>> v = jax.random.normal(jax.random.key(2), (1, 64, 4, 32))      # 2 value heads per q/k head
        >>> g = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(3), (1, 64, 4)))
        >>> beta = jax.nn.sigmoid(jax.random.normal(jax.random.key(4), (1, 64, 4)))
        >>> ejkernel.gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True).shape
        (1, 64, 4, 32)
    """
    raise NotImplementedError  # define() supplies the body
