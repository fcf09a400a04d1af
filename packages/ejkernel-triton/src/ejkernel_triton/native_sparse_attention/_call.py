"""Host side of the Triton ``native_sparse_attention``: the other branches and the selection
are the core's blocked JAX (``ejkernel.ops.native_sparse_attention.branches``); the selected
branch's forward is the Triton kernel, its backward the JAX branch's VJP (recomputed, chunked)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import triton

from ejkernel.ops.native_sparse_attention import NativeSparseAttentionArgs, NativeSparseAttentionConfig
from ejkernel.ops.native_sparse_attention.branches import Tokens, selected_branch, sparse_attention

from .._grid import folded
from .._launch import dot_precision, launch
from ._kernel import nsa_selected_fwd_kernel


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the kernel is compiled for (hashable: the custom VJP's static argument)."""

    block_size: int
    scale: float
    chunk: int
    block_k: int
    num_warps: int
    num_stages: int


def _forward(spec: Spec, q, k, v, sel, pos, bos) -> jax.Array:
    b, t, hq, d = q.shape
    h, dv, s = k.shape[2], v.shape[3], sel.shape[3]
    g = hq // h
    (out,) = launch(
        nsa_selected_fwd_kernel,
        q, k, v, sel, pos, bos, np.float32(spec.scale), t,
        out_shape=[jax.ShapeDtypeStruct((b, t, hq, dv), jnp.float32)],
        grid=folded(t, b * h),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        name="ejkernel_nsa_selected_fwd",
        H=h, G=g, D=d, DV=dv, S=s, BS=spec.block_size,
        BLOCK_G=max(16, triton.next_power_of_2(g)),
        BLOCK_K=spec.block_k,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_DV=max(16, triton.next_power_of_2(dv)),
        # float32 inputs take three TF32 passes (plain TF32 loses float32's precision)
        DOT_PRECISION=dot_precision(q.dtype),
    )  # fmt: skip
    return out


def _xla_branch(spec: Spec, q, k, v, sel, pos, bos) -> jax.Array:
    tok = Tokens(pos=pos, bos=bos, cbase=jnp.zeros_like(pos), num_cmp=0)
    return selected_branch(q, k, v, sel, tok, block_size=spec.block_size, scale=spec.scale, chunk=spec.chunk)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _selected(spec: Spec, q, k, v, sel, pos, bos):
    return _forward(spec, q, k, v, sel, pos, bos)


def _selected_fwd(spec: Spec, q, k, v, sel, pos, bos):
    return _forward(spec, q, k, v, sel, pos, bos), (q, k, v, sel, pos, bos)


def _selected_bwd(spec: Spec, res, dout):
    q, k, v, sel, pos, bos = res
    _, vjp = jax.vjp(lambda q, k, v: _xla_branch(spec, q, k, v, sel, pos, bos), q, k, v)
    return (*vjp(dout), None, None, None)


_selected.defvjp(_selected_fwd, _selected_bwd)


def native_sparse_attention(args: NativeSparseAttentionArgs, cfg: NativeSparseAttentionConfig) -> jax.Array:
    assert cfg.block_q and cfg.block_k and cfg.num_warps and cfg.num_stages

    def attend(q, k, v, sel, tok: Tokens, *, block_size: int, scale: float, chunk: int) -> jax.Array:
        spec = Spec(block_size, scale, chunk, cfg.block_k, cfg.num_warps, cfg.num_stages)
        return _selected(spec, q, k, v, sel.astype(jnp.int32), tok.pos, tok.bos)

    return sparse_attention(args, cfg.block_q, attend)


__all__ = ["native_sparse_attention"]
