"""Host side of the Triton ``deepseek_attn``: the indexer's scores and top-k stay in JAX
(``families.latent_attention.index_selection``, shared with the XLA implementation and the
reference: one definition of the selection, and ``jax.lax.top_k`` is XLA's tuned top-k); the
absorbed operands and the ``w_vc`` projection are the shared JAX of the absorbed form; the sparse
attention over the selected latent rows is the Triton kernel, whose backward is the VJP of the
same attention in plain JAX (``gathered_latent_attention``, recomputed chunk by chunk)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from ejkernel.ops.deepseek_attn import DeepSeekAttnArgs
from ejkernel.ops.families.latent_attention import (
    absorbed_operands,
    gathered_latent_attention,
    index_selection,
    project_latent_output,
)

from .._launch import dot_precision, launch
from ..ragged_page_attention_v2.heuristics import _pow2
from ._kernel import dsa_sparse_fwd_kernel
from .heuristics import Tiles

# Queries per step of the backward's recomputation: its gathered rows [chunk, slots, lanes].
BWD_CHUNK = 64


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernel is compiled for (hashable: the custom VJP's static argument)."""

    lora: int
    scale: float
    causal: bool
    tiles: Tiles


def _forward(spec: Spec, q, kv, sel) -> jax.Array:
    b, sq, h, d = (int(n) for n in q.shape)
    sk, n = int(kv.shape[1]), int(sel.shape[-1])
    r, rope = spec.lora, d - spec.lora
    t = spec.tiles
    (out,) = launch(
        dsa_sparse_fwd_kernel,
        q, kv, sel, np.float32(spec.scale),
        out_shape=[jax.ShapeDtypeStruct((b, sq, h, r), q.dtype)],
        grid=(b * sq, -(-h // t.block_h)),
        num_warps=t.num_warps,
        num_stages=t.num_stages,
        name="ejkernel_dsa_sparse_fwd",
        SEQ_Q=sq, SEQ_K=sk, NUM_HEADS=h, TOPK=n, LORA=r, LORA_PAD=_pow2(r), ROPE=rope, ROPE_PAD=_pow2(rope),
        BLOCK_H=t.block_h, BLOCK_K=t.block_n, CAUSAL=spec.causal,
        # float32 inputs: three TF32 products per dot keep float32 accuracy on the tensor cores.
        DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    return out


def _jax_attention(spec: Spec, q, kv, sel) -> jax.Array:
    return gathered_latent_attention(q, kv, sel, lora=spec.lora, scale=spec.scale, causal=spec.causal, chunk=BWD_CHUNK)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _sparse(spec: Spec, q, kv, sel):
    return _forward(spec, q, kv, sel)


def _sparse_fwd(spec: Spec, q, kv, sel):
    return _forward(spec, q, kv, sel), (q, kv, sel)


def _sparse_bwd(spec: Spec, res, dout):
    q, kv, sel = res
    _, vjp = jax.vjp(lambda q, kv: _jax_attention(spec, q, kv, sel), q, kv)
    return (*vjp(dout), None)


_sparse.defvjp(_sparse_fwd, _sparse_bwd)


def deepseek_attn(args: DeepSeekAttnArgs, tiles: Tiles) -> jax.Array:
    sel = index_selection(
        args.query_index,
        args.key_index,
        args.index_weights,
        topk=args.index_topk,
        scale=args.index_softmax_scale,
        causal=args.causal,
    )
    q, k, _ = absorbed_operands(args)  # k: [b, sk, 1, lora + rope], the values its first lora lanes
    spec = Spec(args.kv_lora_rank, args.softmax_scale, args.causal, tiles)
    return project_latent_output(args, _sparse(spec, q, k[:, :, 0], sel))


__all__ = ["deepseek_attn"]
