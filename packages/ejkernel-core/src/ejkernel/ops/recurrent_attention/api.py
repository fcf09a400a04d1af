"""The public function ``recurrent_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import RecurrentAttention

__all__ = ["recurrent_attention"]


@define(RecurrentAttention)
def recurrent_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_kv_heads head_dim"],
    value: Float[Array, "batch seq num_kv_heads value_head_dim"],
    g: Float[Array, "batch seq num_heads head_dim"] | None = None,
    g_gamma: Float[Array, "num_heads"] | None = None,
    gk: Float[Array, "batch seq num_heads head_dim"] | None = None,
    gv: Float[Array, "batch seq num_heads value_head_dim"] | None = None,
    initial_state: Float[Array, "num_states num_heads head_dim value_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    state: Float[Array, "num_states num_heads head_dim value_head_dim"] | None = None,
) -> (
    Float[Array, "batch seq num_heads value_head_dim"]
    | tuple[
        Float[Array, "batch seq num_heads value_head_dim"], Float[Array, "num_states num_heads head_dim value_head_dim"]
    ]
):
    """The general gated linear-attention recurrence, chunked (memory linear in the length)::

        S_t = diag(exp(g_t + gk_t + g_gamma)) · S_{t-1} · diag(exp(gv_t)) + k_tᵀ v_t
        o_t = softmax_scale · q_t S_t

    GLA (``g``), Lightning / RetNet (``g_gamma``) and gated value decays (``gv``) are special
    cases. Every gate is a log-space decay; ``g`` and ``gk`` both gate the key channels (summed).

    Args:
        query, key, value: as in :func:`ejkernel.gla_attention` (GQA, decode with ``seq == 1``).
        g, g_gamma: as in :func:`ejkernel.gla_attention`.
        initial_state, cu_seqlens: as in :func:`ejkernel.gla_attention` (varlen).
        softmax_scale, reverse, return_state: as in :func:`ejkernel.gla_attention`.
        gk: ``[batch, seq, num_heads, head_dim]`` log decay per key channel (added to ``g``).
        gv: ``[batch, seq, num_heads, value_head_dim]`` log decay per value channel.
        state: the earlier releases' streaming form (``out, new_state = recurrent_attention(q,
            k, v, state=previous_state)``): ``initial_state`` that also implies
            ``return_state=True``. Not together with ``initial_state``.
        platform, cfg: implementation and :class:`RecurrentAttentionConfig`.
        mesh, in_specs, out_specs: as in :func:`ejkernel.gla_attention`.

    Returns:
        ``out [batch, seq, num_heads, value_head_dim]`` or ``(out, final_state)``.

    Example:
        >>> import jax, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 40, 2, 16))
        >>> gv = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(1), (1, 40, 2, 16)))
        >>> ejkernel.recurrent_attention(q, k, v, gv=gv).shape
        (1, 40, 2, 16)
    """
    raise NotImplementedError  # define() supplies the body
