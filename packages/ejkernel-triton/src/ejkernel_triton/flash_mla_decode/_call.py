"""Host side of the Triton paged latent decode: the launch, and the merge of the splits (XLA: one
fused reduction over the split axis, as ``page_attention``'s splits are merged)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.families.serving import finish, merge_splits, state_lse

from .._launch import dot_precision, launch
from ..ragged_page_attention_v2.heuristics import _pow2
from ._kernel import mla_decode_kernel
from .heuristics import Tiles

F32 = jnp.float32


def mla_decode(
    q: Any,
    cache: Any,
    context_lens: Any,
    block_tables: Any,
    *,
    kv_lora_rank: int,
    scale: float,
    causal: bool,
    tiles: Tiles,
) -> tuple[jax.Array, jax.Array]:
    """``(out [b, sq, h, kv_lora_rank], lse [b, sq, h])`` of queries ``q [b, sq, h, d]`` over the
    latent ``cache [pages, page_size, d]`` (see the kernel's docstring)."""
    b, sq, h, d = (int(n) for n in q.shape)
    r, rope = kv_lora_rank, d - kv_lora_rank
    rows = sq * h
    head_blocks = -(-rows // tiles.block_h)
    splits = tiles.num_splits
    one = splits == 1
    # The outputs of the other path are never written: one element stands for each.
    out_shape = [
        jax.ShapeDtypeStruct((b, sq, h, r) if one else (1,), q.dtype),
        jax.ShapeDtypeStruct((b, sq, h) if one else (1,), F32),
        jax.ShapeDtypeStruct((1,) if one else (b, splits, rows), F32),
        jax.ShapeDtypeStruct((1,) if one else (b, splits, rows), F32),
        jax.ShapeDtypeStruct((1,) if one else (b, splits, rows, r), F32),
    ]
    out, lse, pm, pl, pacc = launch(
        mla_decode_kernel,
        q, cache, block_tables.astype(jnp.int32), context_lens.astype(jnp.int32), np.float32(scale),
        out_shape=out_shape,
        grid=(b * splits * head_blocks,),
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
        name="ejkernel_mla_decode",
        stride_bt=int(block_tables.shape[1]), SEQ_Q=sq, NUM_HEADS=h, PAGE_SIZE=int(cache.shape[1]),
        LORA=r, LORA_PAD=_pow2(r), ROPE=rope, ROPE_PAD=_pow2(rope),
        BLOCK_H=tiles.block_h, BLOCK_N=tiles.block_n, NUM_HEAD_BLOCKS=head_blocks, NUM_SPLITS=splits,
        CAUSAL=causal,
        # float32 inputs: three TF32 products per dot keep float32 accuracy on the tensor cores.
        DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    if one:
        return out, lse
    # [b, rows, splits(, r)]: the split axis after the rows.
    state = merge_splits(jnp.swapaxes(pm, 1, 2), jnp.swapaxes(pl, 1, 2), jnp.swapaxes(pacc, 1, 2))
    out = finish(state).reshape(b, sq, h, r).astype(q.dtype)
    return out, state_lse(state).reshape(b, sq, h)
