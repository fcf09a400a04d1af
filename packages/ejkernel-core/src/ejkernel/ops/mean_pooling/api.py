"""The public function ``mean_pooling``."""

from __future__ import annotations

from jaxtyping import Array, Bool, Float, Int

from ..executor import define
from .op import MeanPooling

__all__ = ["mean_pooling"]


@define(MeanPooling)
def mean_pooling(
    x: Float[Array, "batch seq hidden_dim"] | Float[Array, "tokens hidden_dim"],
    cu_seqlens: Int[Array, "num_seqs_plus_1"] | Bool[Array, "batch seq"] | None = None,
    *,
    attention_mask: Bool[Array, "batch seq"] | Int[Array, "batch seq"] | None = None,
    chunk_size: int | None = None,
) -> Float[Array, "batch hidden_dim"] | Float[Array, "num_seqs hidden_dim"]:
    """The mean of each sequence's valid tokens (sentence embeddings from token states).

    Three forms:

    - dense: ``x [batch, seq, hidden]`` → ``[batch, hidden]`` (``x [seq, hidden]`` → ``[hidden]``);
    - masked: the same with ``attention_mask [batch, seq]`` (bool, or int where nonzero counts):
      the mean over the tokens the mask keeps. As in earlier releases the mask may also be the
      second positional argument, ``mean_pooling(hidden_states, attention_mask)``: a second array
      that is 2-D or bool is read as the mask;
    - packed: ``x [tokens, hidden]`` with ``cu_seqlens [num_seqs + 1]`` → ``[num_seqs, hidden]``;
      sequence ``i`` is rows ``cu_seqlens[i] .. cu_seqlens[i + 1] - 1``. Rows past
      ``cu_seqlens[-1]`` are padding: never read, and their gradient is zero. A mask
      ``[tokens]`` may be combined with it.

    A sequence with no valid token (empty, or fully masked) pools to zeros, never NaN; tokens
    that do not count are never read (they may hold anything, NaN too). Sums accumulate in
    float32; the output has ``x``'s dtype. Differentiable in ``x`` (the gradient of a token is
    ``dout / count`` of its sequence, zero where it does not count).

    Args:
        x: token states, ``[batch, seq, hidden]``, ``[seq, hidden]`` or packed ``[tokens, hidden]``.
        cu_seqlens: ``[num_seqs + 1]`` int cumulative lengths of packed sequences: starting at 0,
            never decreasing, at most ``tokens``. Checked when concrete; under ``jit`` only with
            :func:`ejkernel.checks` on (unchecked, a bad value gives undefined results).
        attention_mask: ``x``'s shape without the hidden axis, bool or int.
        chunk_size: earlier releases' tokens per kernel step; a hint for
            ``MeanPoolingConfig.block_size`` (a power of two; ``cfg`` wins). ``None``: the
            implementation chooses.
        platform, cfg: implementation and :class:`MeanPoolingConfig`.
        mesh, in_specs, out_specs: run under ``shard_map``; only the hidden axis may be sharded.

    Returns:
        ``[batch, hidden]`` (dense), ``[hidden]`` (one ``[seq, hidden]`` sequence) or
        ``[num_seqs, hidden]`` (packed), in ``x``'s dtype.

    Example:
        >>> import jax, jax.numpy as jnp, ejkernel
        >>> x = jax.random.normal(jax.random.key(0), (2, 5, 8))
        >>> mask = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
        >>> ejkernel.mean_pooling(x, attention_mask=mask).shape
        (2, 8)
        >>> packed = x.reshape(10, 8)
        >>> ejkernel.mean_pooling(packed, jnp.array([0, 3, 10], jnp.int32)).shape
        (2, 8)
    """
    raise NotImplementedError  # define() supplies the body
