"""The public function ``gla_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import GLAttention

__all__ = ["gla_attention"]


@define(GLAttention)
def gla_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_kv_heads head_dim"],
    value: Float[Array, "batch seq num_kv_heads value_head_dim"],
    g: Float[Array, "batch seq num_heads head_dim"] | None = None,
    g_gamma: Float[Array, "num_heads"] | None = None,
    initial_state: Float[Array, "num_states num_heads head_dim value_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    gate: Float[Array, "batch seq num_heads head_dim"] | None = None,
) -> (
    Float[Array, "batch seq num_heads value_head_dim"]
    | tuple[
        Float[Array, "batch seq num_heads value_head_dim"], Float[Array, "num_states num_heads head_dim value_head_dim"]
    ]
):
    """Gated linear attention (GLA, Yang et al. 2024), chunked: memory linear in the length.

    Per sequence and query head, with the state ``S`` ``[head_dim, value_head_dim]``::

        S_t = diag(exp(g_t + g_gamma)) · S_{t-1} + k_tᵀ v_t        o_t = softmax_scale · q_t S_t

    Gates are log-space decays (``log_sigmoid`` of a projection in GLA), so products of many
    gates never leave float32's range: chunks are gated per pair of positions, exactly.

    Args:
        query: ``[batch, seq, num_heads, head_dim]``.
        key: ``[batch, seq, num_kv_heads, head_dim]``; query head ``j`` reads key/value head
            ``j // (num_heads // num_kv_heads)``.
        value: ``[batch, seq, num_kv_heads, value_head_dim]``.
        g: ``[batch, seq, num_heads, head_dim]`` log decay per key channel (float32 advised).
        g_gamma: ``[num_heads]`` constant log decay per head (added to ``g``).
        initial_state: ``[batch, num_heads, head_dim, value_head_dim]``, or ``[num_seqs, ...]``
            with ``cu_seqlens``; zeros when absent.
        cu_seqlens: ``[num_seqs + 1]`` int cumulative lengths of sequences packed in one row
            (``batch == 1``; starts at 0, ends at ``seq``; empty sequences allowed): the state
            resets at each boundary. Checked when concrete; under ``jit`` with
            :func:`ejkernel.checks` on.
        softmax_scale: multiplies ``q``; default ``1/sqrt(head_dim)``.
        reverse: run each sequence from its last token to its first.
        return_state: also return the final state of each sequence (float32, or the dtype of
            ``initial_state``).
        gate: the earlier releases' keyword for ``g`` (``gla_attention(q, k, v, gate=g)``);
            passing both is an error.
        platform, cfg: implementation and :class:`GLAttentionConfig` (``chunk_size``...).
        mesh, in_specs, out_specs: run under ``shard_map``; batch (not with ``cu_seqlens``) and
            heads may be sharded.

    Decode: one token per sequence is a call with ``seq == 1``, ``initial_state=state`` and
    ``return_state=True`` (a single-step path, no chunking).

    Returns:
        ``out [batch, seq, num_heads, value_head_dim]`` in the query's dtype, or
        ``(out, final_state [num_states, num_heads, head_dim, value_head_dim])``.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (2, 100, 4, 32))
        >>> g = jax.nn.log_sigmoid(jax.random.normal(jax.random.key(1), (2, 100, 4, 32)))
        >>> out, state = ejkernel.gla_attention(q, k, v, g, return_state=True)
        >>> out.shape, state.shape
        ((2, 100, 4, 32), (2, 4, 32, 32))
    """
    raise NotImplementedError  # define() supplies the body
