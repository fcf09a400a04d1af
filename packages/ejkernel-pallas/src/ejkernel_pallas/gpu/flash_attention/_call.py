"""Host side of the Mosaic GPU flash attention: padding to the tiles, the custom VJP."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ._bwd import dkdv, dq
from ._fwd import COMPUTE_WGS, LOG2E, Spec, forward


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _pad(x: jax.Array, n: int) -> jax.Array:
    return x if x.shape[1] == n else jnp.pad(x, ((0, 0), (0, n - x.shape[1]), (0, 0), (0, 0)))


def specs_for(
    q, k, *, causal: bool, scale: float, soft_cap: float | None, fwd: tuple[int, int, int], bwd: tuple[int, int, int],
    interpret: bool,
) -> tuple[Spec, Spec]:  # fmt: skip
    """The forward's and the backward's launch specs over one padding of both lengths."""
    sq, sk = q.shape[1], k.shape[1]
    sq_p = _round_up(sq, max(COMPUTE_WGS * fwd[0], bwd[0]))
    sk_p = _round_up(sk, max(fwd[1], bwd[1]))
    common = dict(
        seq_q=sq, seq_k=sk, seq_q_padded=sq_p, seq_k_padded=sk_p, num_heads=q.shape[2], num_kv_heads=k.shape[2],
        head_dim=q.shape[3], causal=causal, scale=scale, soft_cap=soft_cap, interpret=interpret,
    )  # fmt: skip
    return (
        Spec(block_q=fwd[0], block_kv=fwd[1], stages=fwd[2], **common),
        Spec(block_q=bwd[0], block_kv=bwd[1], stages=bwd[2], **common),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def attention(q, k, v, specs):
    """Output ``[b, sq, h, d]``; differentiable in ``q``, ``k``, ``v``."""
    return _fwd_rule(q, k, v, specs)[0]


def _fwd_rule(q, k, v, specs):
    f, _ = specs
    qp, kp, vp = _pad(q, f.seq_q_padded), _pad(k, f.seq_k_padded), _pad(v, f.seq_k_padded)
    out, lse = forward(f, qp, kp, vp)
    return out[:, : f.seq_q], (qp, kp, vp, out, lse)


def _bwd_rule(specs, res, dout):
    _, s = specs
    qp, kp, vp, out, lse = res
    dop = _pad(dout.astype(qp.dtype), s.seq_q_padded)
    delta = jnp.einsum("bqhd,bqhd->bhq", dop.astype(jnp.float32), out.astype(jnp.float32))
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)  # no key seen: probabilities exactly 0
    dqp = dq(s, qp, kp, vp, dop, lse2, delta)
    dkp, dvp = dkdv(s, qp, kp, vp, dop, lse2, delta)
    b, sk_p, h, d = dkp.shape
    hk = kp.shape[2]
    dkp = dkp.astype(jnp.float32).reshape(b, sk_p, hk, h // hk, d).sum(3)
    dvp = dvp.astype(jnp.float32).reshape(b, sk_p, hk, h // hk, d).sum(3)
    sq, sk = s.seq_q, s.seq_k
    return dqp[:, :sq], dkp[:, :sk].astype(kp.dtype), dvp[:, :sk].astype(vp.dtype)


attention.defvjp(_fwd_rule, _bwd_rule)
