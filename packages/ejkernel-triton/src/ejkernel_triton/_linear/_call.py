"""Host side of the Triton chunked linear attention: chunk tables, launches, custom VJP.

``linear_attention(problem, chunk, block_v, warps, stages)`` computes a
:class:`~ejkernel.ops.families.linear_attention.LinearProblem` (no value gate) and is
differentiable in q, k, v, the key gate and the initial state. A scalar gate alone (no key gate)
reaches the kernels as ``[tokens, heads]`` (``Spec.scalar_gate``), with a key gate it is added to
every key channel; ``reverse`` flips the rows (and mirrors ``cu_seqlens``) around the kernels.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.families.linear_attention import LinearProblem

from .._launch import launch
from ._kernel import (
    linear_bwd_dh_kernel,
    linear_bwd_dqk_kernel,
    linear_bwd_dv_kernel,
    linear_fwd_h_kernel,
    linear_fwd_o_kernel,
)

F32 = jnp.float32


# The chunk-parallel backward kernels (dv, dq/dk/dg) at 128-token chunks: at least this many warps
# (their [128, 128] float32 score tiles; 4 warps ran the backward 1.6x slower: impl.LONG_SCALAR_CHUNK).
WIDE_CHUNK_WARPS = 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _tile(n: int, cap: int | None = None) -> int:
    """A block over a dim of size ``n``: a power of two, at most ``cap``, and at least 16, the
    smallest operand ``tl.dot`` takes (the loads and stores are masked to the dim)."""
    b = _pow2(n) if cap is None else min(cap, _pow2(n))
    return max(16, b)


@dataclasses.dataclass(frozen=True)
class Spec:
    """Static description of one call (hashable: the custom VJP's non-differentiable argument)."""

    tokens: int  # rows of the flattened [tokens, heads, dim] tensors
    batch: int  # batch rows (1 with cu_seqlens)
    seq: int
    num_seqs: int
    n_chunks: int  # chunk slots (an upper bound with cu_seqlens)
    heads: int
    kv_heads: int
    head_dim: int
    value_head_dim: int
    chunk: int
    block_v: int
    warps: int
    stages: int
    scale: float
    varlen: bool
    # The state kernels' K and V tiles (at most): each program walks every chunk of its sequence
    # in turn, so smaller tiles trade bigger products for more programs running side by side.
    state_block: int = 64
    # The gate is one number per token and head (``g`` is [tokens, heads], no per-channel gate):
    # the intra-chunk scores are (q kᵀ) ⊙ exp(G_t − G_s), one product for any decay, and the gate's
    # traffic is 1/K of a per-channel gate's.
    scalar_gate: bool = False
    # The factored intra-chunk products' operands of a per-channel gate (``_kernel._fdot``): "ieee"
    # (float32 inputs) or "tf32" (16-bit inputs: tensor cores; "bf16" operands ran 20% faster on
    # gla but failed recurrent_attention's gk-gamma-gqa-bfloat16 tolerance on an H200).
    factor_prec: str = "ieee"

    @property
    def prec(self) -> str:
        return "ieee"  # float32 inputs: no TF32 in the products (16-bit inputs ignore it)

    def consts(self, **extra: Any) -> dict[str, Any]:
        return dict(H=self.heads, K=self.head_dim, V=self.value_head_dim, BT=self.chunk, PREC=self.prec, **extra)


def chunk_tables(cu: jax.Array, spec: Spec) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``choff [num_seqs + 1]`` (first chunk of each sequence) and ``chunk_start``,
    ``chunk_end [n_chunks]`` (token rows; empty for unused slots). Traced-safe."""
    n, c = spec.num_seqs, spec.chunk
    lens = cu[1:] - cu[:-1]
    nch = (lens + c - 1) // c
    choff = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(nch).astype(jnp.int32)])
    idx = jnp.arange(spec.n_chunks, dtype=jnp.int32)
    seq = jnp.clip(jnp.searchsorted(choff[1:], idx, side="right"), 0, n - 1).astype(jnp.int32)
    start = cu[seq] + (idx - choff[seq]) * c
    end = jnp.minimum(start + c, cu[seq + 1])
    valid = idx < choff[n]
    return choff, jnp.where(valid, start, 0).astype(jnp.int32), jnp.where(valid, end, 0).astype(jnp.int32)


def _forward(spec: Spec, q, k, v, g, h0, cu, choff, cstart, cend):
    """``o [tokens, H, V]`` and ``ht [num_seqs, H, K, V]`` float32."""
    hs, ht = fwd_states(spec, k, v, g, h0, cu, choff, q.dtype)
    return fwd_output(spec, q, k, v, g, hs, cstart, cend), ht


# Grids put the long axis (sequences x heads, chunks) first: CUDA allows 2**31 - 1 programs on
# axis 0 but 65535 on axes 1 and 2.


def state_block(rows: int, k: int, v: int) -> int:
    """The state kernels' tile (``Spec.state_block``) for ``rows`` sequences x heads: 64, or 32
    where 64-wide tiles give fewer than 128 programs (each walks its sequence's every chunk, so
    a long single sequence, e.g. B1 H16 D128, would leave half of an H100's 132 SMs idle)."""
    return 32 if rows * _cdiv(k, 64) * _cdiv(v, 64) < 128 else 64


def fwd_states(spec: Spec, k, v, g, h0, cu, choff, dtype):
    """The chunk-state recurrence: ``hs [n_chunks, H, K, V]`` (``dtype``), ``ht`` float32."""
    H, K, V = spec.heads, spec.head_dim, spec.value_head_dim
    bk, bv = _tile(K, spec.state_block), _tile(V, spec.state_block)
    # The chunk states are stored in the inputs' dtype: the products that read them take that
    # dtype anyway (fla does the same), and they are the kernels' largest traffic.
    hs, ht = launch(
        linear_fwd_h_kernel, k, v, g, h0, cu, choff,
        out_shape=[
            jax.ShapeDtypeStruct((spec.n_chunks, H, K, V), dtype),
            jax.ShapeDtypeStruct((spec.num_seqs, H, K, V), F32),
        ],
        grid=(spec.num_seqs * H, _cdiv(K, bk), _cdiv(V, bv)),
        num_warps=spec.warps, num_stages=spec.stages, name="ejkernel_linear_fwd_h",
        **spec.consts(HKV=spec.kv_heads, BK=bk, BV=bv, SCALAR=spec.scalar_gate),
    )  # fmt: skip
    return hs, ht


def fwd_output(spec: Spec, q, k, v, g, hs, cstart, cend):
    """``o [tokens, H, V]`` from the chunk states and the intra-chunk scores."""
    H, K, V = spec.heads, spec.head_dim, spec.value_head_dim
    bv_o = _tile(V, spec.block_v)
    (o,) = launch(
        linear_fwd_o_kernel, q, k, v, g, hs, cstart, cend, np.float32(spec.scale),
        out_shape=[jax.ShapeDtypeStruct((spec.tokens, H, V), q.dtype)],
        grid=(spec.n_chunks, H),
        num_warps=spec.warps, num_stages=spec.stages, name="ejkernel_linear_fwd_o",
        **spec.consts(HKV=spec.kv_heads, BK=_tile(K), BV=bv_o, SCALAR=spec.scalar_gate, FPREC=spec.factor_prec),
    )  # fmt: skip
    return o


def _backward(spec: Spec, q, k, v, g, cu, choff, cstart, cend, hs, do, dht):
    do = do.astype(q.dtype)
    dhs, dh0 = bwd_states(spec, q, g, do, dht, cu, choff)
    dq, dk, dv, dg = bwd_inputs(spec, q, k, v, g, do, hs, dhs, cstart, cend)
    return dq, dk, dv, dg, dh0


def bwd_states(spec: Spec, q, g, do, dht, cu, choff):
    """The reverse recurrence of the state gradients: ``dhs`` (``q``'s dtype), ``dh0`` float32."""
    H, K, V = spec.heads, spec.head_dim, spec.value_head_dim
    bk, bv = _tile(K, spec.state_block), _tile(V, spec.state_block)
    dhs, dh0 = launch(
        linear_bwd_dh_kernel, q, g, do, dht, cu, choff, np.float32(spec.scale),
        out_shape=[
            jax.ShapeDtypeStruct((spec.n_chunks, H, K, V), q.dtype),
            jax.ShapeDtypeStruct((spec.num_seqs, H, K, V), F32),
        ],
        grid=(spec.num_seqs * H, _cdiv(K, bk), _cdiv(V, bv)),
        num_warps=spec.warps, num_stages=spec.stages, name="ejkernel_linear_bwd_dh",
        **spec.consts(BK=bk, BV=bv, SCALAR=spec.scalar_gate),
    )  # fmt: skip
    return dhs, dh0


def bwd_inputs(spec: Spec, q, k, v, g, do, hs, dhs, cstart, cend):
    """``dq, dk, dv, dg`` (float32; ``dk``, ``dv`` per query head; ``dg`` shaped as ``g``): ``dv``
    one program per (chunk, head), the others one per (key tile, chunk, head)."""
    H, K, V = spec.heads, spec.head_dim, spec.value_head_dim
    bv = _tile(V, spec.block_v)
    warps = max(spec.warps, WIDE_CHUNK_WARPS) if spec.chunk >= 128 else spec.warps
    (dv,) = launch(
        linear_bwd_dv_kernel, q, k, g, do, dhs, cstart, cend, np.float32(spec.scale),
        out_shape=[jax.ShapeDtypeStruct((spec.tokens, H, V), F32)],
        grid=(spec.n_chunks, H),
        num_warps=warps, num_stages=spec.stages, name="ejkernel_linear_bwd_dv",
        **spec.consts(HKV=spec.kv_heads, BK=_tile(K), BV=bv, SCALAR=spec.scalar_gate, FPREC=spec.factor_prec),
    )  # fmt: skip
    bk = _tile(K, 64)
    # A scalar gate's gradient: each key tile's share, summed here ([tokens, H, key tiles]).
    dg_shape = (spec.tokens, H, _cdiv(K, bk)) if spec.scalar_gate else (spec.tokens, H, K)
    dq, dk, dg = launch(
        linear_bwd_dqk_kernel, q, k, v, g, do, hs, dhs, cstart, cend, np.float32(spec.scale),
        out_shape=[jax.ShapeDtypeStruct(s, F32) for s in ((spec.tokens, H, K), (spec.tokens, H, K), dg_shape)],
        grid=(spec.n_chunks, _cdiv(K, bk), H),
        num_warps=warps, num_stages=spec.stages, name="ejkernel_linear_bwd_dqk",
        **spec.consts(HKV=spec.kv_heads, BK=bk, BV=bv, SCALAR=spec.scalar_gate, FPREC=spec.factor_prec),
    )  # fmt: skip
    if spec.scalar_gate:
        dg = dg.sum(-1)
    return dq, dk, dv, dg


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(spec: Spec, q, k, v, g, h0, cu, choff, cstart, cend):
    return _forward(spec, q, k, v, g, h0, cu, choff, cstart, cend)


def _core_fwd(spec: Spec, q, k, v, g, h0, cu, choff, cstart, cend):
    o, ht = _forward(spec, q, k, v, g, h0, cu, choff, cstart, cend)
    # The chunk states are recomputed in the backward pass (one state per chunk is as large as
    # the inputs at head dims ~ chunk size: not worth keeping).
    return (o, ht), (q, k, v, g, h0, cu, choff, cstart, cend)


def _core_bwd(spec: Spec, res, cts):
    q, k, v, g, h0, cu, choff, cstart, cend = res
    do, dht = cts
    hs, _ = fwd_states(spec, k, v, g, h0, cu, choff, q.dtype)  # the states only: no output kernel
    dht = dht.astype(F32)
    dq, dk, dv, dg, dh0 = _backward(spec, q, k, v, g, cu, choff, cstart, cend, hs, do, dht)
    rep = spec.heads // spec.kv_heads
    if rep > 1:
        dk = dk.reshape(spec.tokens, spec.kv_heads, rep, -1).sum(2)
        dv = dv.reshape(spec.tokens, spec.kv_heads, rep, -1).sum(2)
    return (
        dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dg.astype(g.dtype), dh0.astype(h0.dtype),
        None, None, None, None,
    )  # fmt: skip


_core.defvjp(_core_fwd, _core_bwd)


def linear_attention(p: LinearProblem, chunk: int, block_v: int, warps: int, stages: int) -> tuple[Any, Any]:
    """``(out [b, t, h, dv], final_state [num_seqs, h, dk, dv] float32)`` of ``p`` (``gv`` unsupported)."""
    if p.gv is not None:
        raise ValueError("the Triton linear attention has no value gate (gv)")
    b, t, h, dk = p.q.shape
    hk, dv = p.k.shape[2], p.v.shape[3]
    scalar = p.gk is None
    if scalar:
        g = jnp.zeros((b, t, h), F32) if p.gs is None else p.gs.astype(F32)
    else:
        g = p.gk.astype(F32) if p.gs is None else p.gk.astype(F32) + p.gs.astype(F32)[..., None]
    q, k, v, cu, h0 = p.q, p.k, p.v, p.cu_seqlens, p.initial_state
    varlen = cu is not None
    n_seqs = p.num_seqs
    h0 = jnp.zeros((n_seqs, h, dk, dv), F32) if h0 is None else h0
    if p.reverse:
        q, k, v, g = (jnp.flip(x, 1) for x in (q, k, v, g))
        if varlen:
            cu, h0 = t - cu[::-1], h0[::-1]
    if varlen:
        cu = cu.astype(jnp.int32)
        n_chunks = _cdiv(t, chunk) + n_seqs
    else:
        cu = jnp.arange(b + 1, dtype=jnp.int32) * t
        n_chunks = b * _cdiv(t, chunk)
    spec = Spec(
        tokens=b * t, batch=b, seq=t, num_seqs=n_seqs, n_chunks=n_chunks, heads=h, kv_heads=hk, head_dim=dk,
        value_head_dim=dv, chunk=chunk, block_v=block_v, warps=warps, stages=stages, scale=float(p.scale),
        varlen=varlen, scalar_gate=scalar, state_block=state_block(n_seqs * h, dk, dv),
        factor_prec={"bfloat16": "tf32", "float16": "tf32"}.get(jnp.dtype(q.dtype).name, "ieee"),
    )  # fmt: skip
    choff, cstart, cend = chunk_tables(cu, spec)
    flat = [x.reshape(b * t, *x.shape[2:]) for x in (q, k, v, g)]
    o, ht = _core(spec, *flat, h0, cu, choff, cstart, cend)
    o = o.reshape(b, t, h, dv)
    if p.reverse:
        o = jnp.flip(o, 1)
        if varlen:
            ht = ht[::-1]
    return o, ht
