"""Host side of the TPU ``blocksparse_attention``: the block schedules, the custom VJP, the sink
gradient.

The schedule is the core's (``BlockSparseAttentionArgs.layout``), built at each pass's tile
sizes: the same metadata the XLA and Triton implementations follow. Operands are padded to
whole tiles (zeros change no logit; padding keys are masked by the schedule's fine masks).
"""

from __future__ import annotations

import functools

import jax

from ejkernel.ops.blocksparse_attention import BlockSparseAttentionArgs, BlockSparseAttentionConfig
from ejkernel.ops.families.attention_math import softmax_aux_grad

from ._bwd import backward
from ._fwd import forward
from ._spec import Spec
from .heuristics import effective_blocks


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bsa(spec: Spec, q, k, v, sinks, layouts, masks):
    return forward(spec, layouts[0], q, k, v, sinks, masks)[0]


def _bsa_fwd(spec: Spec, q, k, v, sinks, layouts, masks):
    out, lse = forward(spec, layouts[0], q, k, v, sinks, masks)
    return out, (q, k, v, sinks, layouts, masks, out, lse)


def _bsa_bwd(spec: Spec, res, dout):
    q, k, v, sinks, layouts, masks, out, lse = res
    dq, dk, dv, delta = backward(spec, layouts[1], q, k, v, masks, out, lse, dout)
    dsinks = None if sinks is None else softmax_aux_grad(sinks, lse, delta).astype(sinks.dtype)
    return (dq, dk, dv, dsinks, *jax.tree.map(lambda x: None, (layouts, masks)))


_bsa.defvjp(_bsa_fwd, _bsa_bwd)


def blocksparse_attention(args: BlockSparseAttentionArgs, cfg: BlockSparseAttentionConfig) -> jax.Array:
    """The op on canonical arguments (BHSD), differentiable."""
    f, g = cfg.fwd_params, cfg.bwd_params
    assert f is not None and g is not None and f.q_blocksize and f.kv_blocksize and g.q_blocksize and g.kv_blocksize
    fwd = effective_blocks(args, f.q_blocksize, f.kv_blocksize)
    bwd = effective_blocks(args, g.q_blocksize, g.kv_blocksize)
    mask = args.attention_mask
    spec = Spec(
        seq_q=args.seq_q,
        seq_k=args.seq_k,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        head_dim=args.head_dim,
        head_dim_v=args.value_head_dim,
        soft_cap=args.logits_soft_cap,
        scale=float(args.softmax_scale),
        num_sinks=0 if args.softmax_aux is None else int(args.softmax_aux.shape[1]),
        has_segments=args.q_segment_ids is not None,
        mask_bh=None if mask is None else (mask.shape[0] > 1, mask.shape[1] > 1),
        fwd_blocks=fwd,
        bwd_blocks=bwd,
    )
    layouts = (args.layout(*fwd), args.layout(*bwd))
    masks = (args.q_segment_ids, args.kv_segment_ids, mask)
    return _bsa(spec, args.query, args.key, args.value, args.softmax_aux, layouts, masks)
