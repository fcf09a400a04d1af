"""Host wrapper of the CUDA paged decode: the XLA FFI call of ``ejkernel_cuda_paged_decode``
(csrc/page_attention/ffi.cc) with its split-K scratch buffers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.page_attention import PageAttentionArgs

from .. import _ffi

__all__ = ["TARGET", "decode", "paged_decode"]

TARGET = "ejkernel_cuda_paged_decode"


def paged_decode(
    args: PageAttentionArgs, *, partition: int, splits: int, stages: int, variant: int, window_left: int | None
) -> jax.Array:
    """Launch the two-pass decode: ``splits`` partitions of ``partition`` tokens, a K/V ring of
    ``stages`` slots, pass 1's lane ``variant``; ``window_left``: the sliding window's left
    extent (``None``: none)."""
    out = decode(
        args.query, args.key_cache, args.value_cache, args.context_lens, args.block_tables, args.softmax_aux,
        scale=args.softmax_scale, soft_cap=args.logits_soft_cap, window_left=window_left, partition=partition,
        splits=splits, stages=stages, variant=variant, heads_major=args.heads_major,  # either layout in place
    )  # fmt: skip
    return out[:, None] if args.query_had_seq_axis else out


def decode(
    q: jax.Array,
    k_cache: jax.Array,
    v_cache: jax.Array,
    context_lens: jax.Array,
    block_tables: jax.Array,
    sinks: jax.Array | None,
    *,
    scale: float,
    soft_cap: float | None,
    window_left: int | None,
    partition: int,
    splits: int,
    stages: int,
    variant: int,
    heads_major: bool = False,
    kv_interleaved: bool = False,
) -> jax.Array:
    """The FFI call for ``q [batch, heads, head_dim]`` over ``[blocks, block_size, kv_heads, d]``
    caches (``heads_major``: ``[blocks, kv_heads, block_size, d]``; ``kv_interleaved``: one
    ``[blocks, block_size, 2 * kv_heads, d_padded]`` cache, keys at even heads, passed as both);
    ``sinks``: ``[heads, num_sinks]`` or ``None``."""
    _ffi.ensure_registered()
    b, h, d = (int(x) for x in q.shape)
    if sinks is not None:
        sinks = sinks.astype(jnp.float32)
        num_sinks = int(sinks.shape[1])
    else:
        sinks, num_sinks = jnp.zeros((h, 1), jnp.float32), 0
    call = jax.ffi.ffi_call(
        TARGET,
        (
            jax.ShapeDtypeStruct((b, h, d), q.dtype),
            jax.ShapeDtypeStruct((b, h, splits, d), jnp.float32),  # scratch: partial outputs
            jax.ShapeDtypeStruct((b, h, splits), jnp.float32),  # scratch: partial log-sum-exps
        ),
        vmap_method="sequential",
    )
    out, _, _ = call(
        q,
        k_cache,
        v_cache,
        context_lens,
        block_tables,
        sinks,
        scale=np.float32(scale),
        soft_cap=np.float32(soft_cap or 0.0),
        window_left=np.int32(-1 if window_left is None else window_left),
        partition=np.int32(partition),
        num_sinks=np.int32(num_sinks),
        stages=np.int32(stages),
        variant=np.int32(variant),
        heads_major=np.int32(heads_major),
        kv_interleaved=np.int32(kv_interleaved),
    )
    return out
