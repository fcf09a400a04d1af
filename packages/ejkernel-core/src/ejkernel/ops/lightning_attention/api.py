"""The public function ``lightning_attention``."""

from __future__ import annotations

from jaxtyping import Array, Float, Int

from ..executor import define
from .op import LightningAttention

__all__ = ["lightning_attention"]


@define(LightningAttention)
def lightning_attention(
    query: Float[Array, "batch seq num_heads head_dim"],
    key: Float[Array, "batch seq num_kv_heads head_dim"],
    value: Float[Array, "batch seq num_kv_heads value_head_dim"],
    initial_state: Float[Array, "num_states num_heads head_dim value_head_dim"] | None = None,
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | None = None,
    *,
    layer_idx: int | None = None,
    num_layers: int | None = None,
    softmax_scale: float | None = None,
    reverse: bool = False,
    return_state: bool = False,
    decay: Float[Array, "num_heads"] | None = None,
) -> (
    Float[Array, "batch seq num_heads value_head_dim"]
    | tuple[
        Float[Array, "batch seq num_heads value_head_dim"], Float[Array, "num_states num_heads head_dim value_head_dim"]
    ]
):
    """Lightning attention (Lightning Attention-2, as fla-core defines it): linear attention with
    a constant decay per head that weakens with depth, chunked (memory linear in the length).

    ``S_t = exp(γ_h) · S_{t-1} + k_tᵀ v_t``, ``o_t = softmax_scale · q_t S_t`` with
    ``γ_h = -(8 / num_heads) · (1 - layer_idx / num_layers) · h`` (fla-core's
    ``chunk_lightning_attn``; head 0 does not decay). The original Lightning Attention-2 /
    MiniMax code uses ALiBi slopes instead: pass them as ``decay=slopes``.

    Args:
        query, key, value: as in :func:`ejkernel.gla_attention` (GQA, decode with ``seq == 1``).
        initial_state, cu_seqlens: as in :func:`ejkernel.gla_attention` (varlen).
        softmax_scale, reverse, return_state: as in :func:`ejkernel.gla_attention`.
        layer_idx: this layer's index, in ``[0, num_layers)`` (required unless ``decay`` is given).
        num_layers: layers of the model (required unless ``decay`` is given).
        decay: ``[num_heads]`` explicit per-head decay rates ``λ_h >= 0`` instead of the
            layer-derived ones (the earlier releases' keyword; Lightning Attention-2 / MiniMax
            slopes): ``S_t = exp(-λ_h) · S_{t-1} + k_tᵀ v_t``, i.e. ``γ_h = -decay[h]``. Not
            together with ``layer_idx``/``num_layers``.
        platform, cfg: implementation and :class:`LightningAttentionConfig`.
        mesh, in_specs, out_specs: as in :func:`ejkernel.gla_attention`.

    Returns:
        ``out [batch, seq, num_heads, value_head_dim]`` or ``(out, final_state)``.

    Example:
        >>> import jax, ejkernel
        >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 64, 8, 32))
        >>> ejkernel.lightning_attention(q, k, v, layer_idx=3, num_layers=24).shape
        (1, 64, 8, 32)
    """
    raise NotImplementedError  # define() supplies the body
