"""The semantics of dense attention as kernels compute them: shared by every backend and the
references, so that all of them agree to the bit where it matters (dropout) and by construction
elsewhere (which keys a row sees).

- :func:`key_bounds`: each query row's half-open key range ``[lo, hi)`` (causal, sliding window,
  ``position_offset``, varlen).
- :func:`dropout_keep_mask`: the counter-based hash that decides which probabilities dropout
  keeps: independent of tiling, so every backend and the reference draw the same mask.
- :func:`output_rowsum`, :func:`softmax_aux_grad`: pieces of the FA2 backward.
- :func:`vary_like`: loop carries that must run inside ``shard_map(check_vma=True)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from .attention import AttentionArgs

__all__ = [
    "GOLDEN",
    "dropout_keep_mask",
    "dropout_threshold",
    "key_bounds",
    "output_rowsum",
    "softmax_aux_grad",
    "vary_like",
    "varying_axes",
]


def key_bounds(args: AttentionArgs) -> tuple[jax.Array, jax.Array]:
    """Per query row, the half-open range ``[lo, hi)`` of key indices it may attend.

    Combines causal, sliding window, ``position_offset`` and varlen (segment ids and pairwise
    masks apply on top, elementwise). Rows outside every varlen sequence get an empty range.
    Returns two int32 ``[seq_q]`` arrays; works under ``jit``.
    """
    sq, sk = args.seq_q, args.seq_k
    i = jnp.arange(sq, dtype=jnp.int32)
    left, right = args.sliding_window if args.sliding_window is not None else (None, None)
    if args.position_offset is not None and args.cum_seqlens_q is not None:
        raise ValueError("position_offset cannot be combined with cum_seqlens (varlen)")
    if args.cum_seqlens_q is None:
        off = sk - sq if args.position_offset is None else jnp.asarray(args.position_offset, jnp.int32)
        pos = i + off
        k_start = jnp.zeros_like(i)
        len_k = jnp.full_like(i, sk)
        valid = jnp.ones_like(i, dtype=bool)
    else:
        cu_q, cu_k = args.cum_seqlens_q, args.cum_seqlens_k
        n = cu_q.shape[0] - 1
        s = jnp.clip(jnp.searchsorted(cu_q, i, side="right").astype(jnp.int32) - 1, 0, n - 1)
        valid = (i >= cu_q[0]) & (i < cu_q[n])
        len_q = cu_q[s + 1] - cu_q[s]
        k_start = cu_k[s]
        len_k = cu_k[s + 1] - cu_k[s]
        pos = i - cu_q[s] + (len_k - len_q)
    lo_rel = jnp.zeros_like(i)
    hi_rel = len_k
    if args.causal:
        hi_rel = jnp.minimum(hi_rel, pos + 1)
    if left is not None:
        lo_rel = jnp.maximum(lo_rel, pos - left)
        hi_rel = jnp.minimum(hi_rel, pos + right + 1)
    lo = k_start + jnp.clip(lo_rel, 0, len_k)
    hi = k_start + jnp.clip(hi_rel, 0, len_k)
    hi = jnp.maximum(hi, lo)
    lo = jnp.where(valid, lo, 0)
    hi = jnp.where(valid, hi, 0)
    return lo, hi


def varying_axes(x: Any) -> frozenset:
    mat = getattr(jax.typeof(x), "mat", None)
    return frozenset(getattr(mat, "varying", ()))


def vary_like(tree: Any, *refs: Any) -> Any:
    """``tree`` marked as varying over every manual mesh axis that any of ``refs`` varies over.

    Inside ``shard_map(check_vma=True)`` a loop carry must keep its type: an initial value built
    from constants (``jnp.zeros``) does not vary over the mesh axes while the values computed
    from sharded inputs do. Elsewhere (outside ``shard_map``, ``check_vma=False``) it returns
    ``tree`` unchanged.
    """
    want = frozenset().union(*(varying_axes(r) for r in jax.tree.leaves(refs)))
    if not want:
        return tree

    def cast(x: Any) -> Any:
        missing = tuple(sorted(want - varying_axes(x), key=str))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)


def output_rowsum(dout: Any, out: Any) -> jax.Array:
    """``D = rowsum(dO ∘ O)`` of BSHD ``dout`` and ``out``: float32 ``[b, h, sq]``, computed
    elementwise (exact float32: an einsum is a matmul, TF32 on GPUs and bfloat16 passes on TPUs)."""
    return (dout.astype(jnp.float32) * out.astype(jnp.float32)).sum(axis=-1).transpose(0, 2, 1)


def softmax_aux_grad(aux: Any, lse: Any, delta: Any) -> jax.Array:
    """Gradient of the sinks ``softmax_aux [h, n]``: ``d(sink) = -Σ_rows exp(sink - lse) · D``, with
    each row's log-sum-exp ``lse`` and ``D = rowsum(dO ∘ O)``, both float32 ``[b, h, sq]`` (a sink
    takes probability mass from every key but carries no value; a row with ``lse = -inf`` adds 0).
    Float32 ``[h, n]``."""
    lse = jnp.where(lse == -jnp.inf, jnp.inf, lse)
    p_sink = jnp.exp(aux.astype(jnp.float32)[None, :, None, :] - lse[..., None])  # [b, h, sq, n]
    return -(p_sink * delta[..., None]).sum(axis=(0, 2))


GOLDEN = 0x9E3779B9


def _fmix32(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finalizer (an invertible mix; uint32 arithmetic wraps)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def dropout_threshold(rate: float) -> int:
    """Keep an element when its 32-bit hash is >= this: ``P(keep) = 1 - rate``."""
    return min(round(rate * 2**32), 2**32 - 1)


def dropout_keep_mask(seed: Any, batch_head: Any, q_idx: Any, k_idx: Any, rate: float) -> jax.Array:
    """Which attention probabilities dropout keeps (broadcasting the index arrays).

    Args:
        seed: uint32 scalar.
        batch_head: ``batch_index * num_heads + query_head`` (global query head).
        q_idx, k_idx: global query and key token indices (packed indices for varlen).
        rate: the dropout probability.
    """
    u32 = jnp.uint32
    bh = jnp.asarray(batch_head).astype(u32)
    s = _fmix32(jnp.asarray(seed).astype(u32) ^ _fmix32(bh * u32(GOLDEN) + u32(0x7F4A7C15)))
    h = _fmix32(s ^ (jnp.asarray(q_idx).astype(u32) * u32(0x27D4EB2F)))
    h = _fmix32(h ^ (jnp.asarray(k_idx).astype(u32) * u32(0x165667B1)))
    return h >= u32(dropout_threshold(rate))
