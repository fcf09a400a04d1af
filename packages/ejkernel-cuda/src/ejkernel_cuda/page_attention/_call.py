"""Host wrapper of the CUDA paged decode: the XLA FFI call of ``ejkernel_cuda_paged_decode``
(csrc/page_attention/ffi.cc) with its split-K scratch buffers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.page_attention import PageAttentionArgs

from .. import _ffi

__all__ = ["TARGET", "paged_decode"]

TARGET = "ejkernel_cuda_paged_decode"


def paged_decode(
    args: PageAttentionArgs, *, partition: int, splits: int, stages: int, variant: int, window_left: int | None
) -> jax.Array:
    """Launch the two-pass decode: ``splits`` partitions of ``partition`` tokens, a K/V ring of
    ``stages`` slots, pass 1's lane ``variant``; ``window_left``: the sliding window's left
    extent (``None``: none)."""
    _ffi.ensure_registered()
    q = args.query
    b, h, d = (int(x) for x in q.shape)
    if args.softmax_aux is not None:
        sinks = args.softmax_aux.astype(jnp.float32)
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
        args.key_cache,
        args.value_cache,
        args.context_lens,
        args.block_tables,
        sinks,
        scale=np.float32(args.softmax_scale),
        soft_cap=np.float32(args.logits_soft_cap or 0.0),
        window_left=np.int32(-1 if window_left is None else window_left),
        partition=np.int32(partition),
        num_sinks=np.int32(num_sinks),
        stages=np.int32(stages),
        variant=np.int32(variant),
        heads_major=np.int32(args.heads_major),  # the kernel reads either cache layout in place
    )
    return out[:, None] if args.query_had_seq_axis else out
