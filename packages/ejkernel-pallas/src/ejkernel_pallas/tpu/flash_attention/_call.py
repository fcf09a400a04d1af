"""Host side of the TPU flash attention: layout, the custom VJP, the sink gradient.

The kernels work head-major (``[batch, heads, seq, head_dim]``: a ``[block, head_dim]`` tile is
contiguous), so BSHD inputs are transposed once on the way in and the output once on the way
out; JAX differentiates those transposes itself.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ejkernel.ops import BwdParams, FwdParams
from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import softmax_aux_grad

from ._bwd import backward
from ._fwd import forward
from ._spec import Spec
from .heuristics import effective_blocks


def make_spec(a: AttentionArgs, fwd: FwdParams, bwd: BwdParams) -> Spec:
    assert fwd.q_blocksize and fwd.kv_blocksize and bwd.q_blocksize and bwd.kv_blocksize
    return Spec(
        seq_q=a.seq_q,
        seq_k=a.seq_k,
        num_heads=a.num_heads,
        num_kv_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        head_dim_v=a.value_head_dim,
        causal=a.causal,
        window=a.sliding_window,
        soft_cap=a.logits_soft_cap,
        scale=float(a.softmax_scale),
        num_sinks=0 if a.softmax_aux is None else int(a.softmax_aux.shape[1]),
        has_segments=a.has_segments,
        fwd_blocks=effective_blocks(fwd.q_blocksize, fwd.kv_blocksize, a.seq_q, a.seq_k, a.dtype),
        bwd_blocks=effective_blocks(bwd.q_blocksize, bwd.kv_blocksize, a.seq_q, a.seq_k, a.dtype),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(spec: Spec, q, k, v, q_seg, kv_seg, sinks):
    return forward(spec, q, k, v, q_seg, kv_seg, sinks)[0]


def _attention_fwd(spec: Spec, q, k, v, q_seg, kv_seg, sinks):
    out, lse = forward(spec, q, k, v, q_seg, kv_seg, sinks)
    return out, (q, k, v, q_seg, kv_seg, sinks, out, lse)


def _attention_bwd(spec: Spec, res, dout):
    q, k, v, q_seg, kv_seg, sinks, out, lse = res
    dq, dk, dv, delta = backward(spec, q, k, v, q_seg, kv_seg, out, lse, dout)
    dsinks = None
    if sinks is not None:
        dsinks = softmax_aux_grad(sinks, lse, delta).astype(sinks.dtype)
    return dq, dk, dv, None, None, dsinks


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(args: AttentionArgs, fwd: FwdParams, bwd: BwdParams) -> jax.Array:
    """The op on canonical arguments (``ejkernel.ops.families.attention``), differentiable."""
    spec = make_spec(args, fwd, bwd)
    bhsd = functools.partial(jnp.swapaxes, axis1=1, axis2=2)
    out = _attention(
        spec,
        bhsd(args.query),
        bhsd(args.key),
        bhsd(args.value),
        args.q_segment_ids,
        args.kv_segment_ids,
        args.softmax_aux,
    )
    return bhsd(out)
