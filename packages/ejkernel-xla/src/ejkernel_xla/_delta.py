"""The XLA delta rule, shared by ``kernel_delta_attention`` and ``gated_delta_rule``: the chunked
WY algorithm of :mod:`ejkernel.ops.families.delta_rule_math` (parallel over chunks, one scan over
chunks for the state; memory linear in the sequence, gradients by JAX's autodiff) and the
token-by-token step path for decode.

A scalar gate per head (``gated_delta_rule``; ``kernel_delta_attention`` given a per-head decay)
takes :func:`scalar_gate_delta_rule`, which does the same algebra with less work per chunk than
the per-channel path (see there); a per-channel gate takes :mod:`~ejkernel.ops.families.delta_rule_math`'s
pieces as they are.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from ejkernel.ops import DeviceInfo, KernelImpl
from ejkernel.ops.families import delta_rule_math as M
from ejkernel.ops.families.delta_rule import DeltaRuleArgs, DeltaRuleConfig, recurrent_delta_rule

__all__ = ["XlaDeltaRule", "chunked_delta_rule", "scalar_gate_delta_rule", "unit_lower_inverse"]

# 64 tokens per chunk: fla's choice; the intra-chunk matmuls are 64×64, the scan has T/64 steps.
CHUNK = 64
HIGHEST = M.HIGHEST


def chunked_delta_rule(args: DeltaRuleArgs, chunk: int) -> tuple[jax.Array, jax.Array]:
    """``(output [B, T, HV, V] in the query's dtype, final states [N, HV, K, V] float32)``."""
    c = M.to_chunks(
        args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
        scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm, chunk=chunk,
    )  # fmt: skip
    precision = M.product_precision(args.value.dtype)
    if c.g is not None and c.g.shape[-1] == 1:
        out, final = scalar_gate_delta_rule(c, precision)
        return out.astype(args.value.dtype), final
    intra = M.intra_chunk(c, precision)
    states, vn, final = M.inter_chunk(c, intra, precision)
    out = M.from_chunks(c, M.chunk_output(intra, states, vn, precision))
    return out.astype(args.value.dtype), final


def _mm(spec: str, x: Any, y: Any, precision: Any) -> Any:
    return jnp.einsum(spec, x, y, precision=precision)


def _diagonal_blocks(a: Any, size: int) -> Any:
    """The ``size × size`` blocks on the diagonal of ``a [..., C, C]``: ``[..., C / size, size, size]``."""
    c = a.shape[-1]
    m = c // size
    blocks = jnp.diagonal(a.reshape(*a.shape[:-2], m, size, m, size), axis1=-4, axis2=-2)  # [..., size, size, m]
    return jnp.moveaxis(blocks, -1, -3)


def _unit_lower_inverse(a: Any, precision: Any) -> Any:
    # Blocks on the diagonal of 1, 2, 4, ... rows, each from two of half its size:
    # [[L11, 0], [A21, L22]]⁻¹ = [[X11, 0], [-X22 A21 X11, X22]] (LAPACK's recursive trtri).
    c = a.shape[-1]
    if c & (c - 1):  # not a power of two (no chunk size is): the triangular solve
        eye = jnp.eye(c, dtype=a.dtype)
        return jax.lax.linalg.triangular_solve(
            eye + a, jnp.broadcast_to(eye, a.shape), left_side=True, lower=True, unit_diagonal=True
        )
    x = jnp.ones((*a.shape[:-2], c, 1, 1), a.dtype)
    s = 1
    while s < c:
        a21 = _diagonal_blocks(a, 2 * s)[..., s:, :s]
        x = x.reshape(*x.shape[:-3], x.shape[-3] // 2, 2, s, s)
        x11, x22 = x[..., 0, :, :], x[..., 1, :, :]
        x21 = -_mm("...ij,...jk->...ik", x22, _mm("...ij,...jk->...ik", a21, x11, precision), precision)
        x = jnp.concatenate([jnp.concatenate([x11, jnp.zeros_like(x11)], -1), jnp.concatenate([x21, x22], -1)], -2)
        s *= 2
    return x.reshape(a.shape)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def unit_lower_inverse(a: Any, precision: Any = HIGHEST) -> Any:
    """``(I + a)⁻¹`` for ``a [..., C, C]`` strictly lower triangular, ``C`` a power of two, in
    batched matmuls: the inverses of the diagonal blocks of 1, 2, 4, ... rows, each from the two
    of half its size (``log2 C`` steps; the blocked inversion of LAPACK's ``trtri``, as accurate
    as a triangular solve). On the CPU about a third of the time of LAPACK's batched ``trsm``
    with the column-major copies it needs. The derivative is ``dX = -X da X`` (``da``'s strictly
    lower part; two matmuls, the backward's ``-Xᵀ ct Xᵀ``: no triangular solves)."""
    return _unit_lower_inverse(a, precision)


@unit_lower_inverse.defjvp
def _unit_lower_inverse_jvp(precision: Any, primals: Any, tangents: Any) -> Any:
    (a,), (da,) = primals, tangents
    x = unit_lower_inverse(a, precision)
    da = jnp.tril(da, -1)  # the inverse reads only the strictly lower part of a
    return x, -_mm("...ij,...jk->...ik", x, _mm("...ij,...jk->...ik", da, x, precision), precision)


def scalar_gate_delta_rule(c: M.Chunks, precision: Any = HIGHEST) -> tuple[jax.Array, jax.Array]:
    """The chunked delta rule for a scalar gate per head (``c.g [..., C, 1]``): ``(output [B, T,
    HV, V] float32, final states [N, HV, K, V] float32)``, products at ``precision``
    (:func:`~ejkernel.ops.families.delta_rule_math.product_precision`).

    The algebra of :mod:`~ejkernel.ops.families.delta_rule_math` (its docstring's steps 2-4), done
    with less work per chunk:

    - the chunks are laid out chunk-major, batch and heads merged (``[NC, R·HV, C, ...]``): the
      scan reads and writes its per-chunk slices where they lie (no transposes into and out of
      the scan's layout), with no axis of size 1 for a single batch row (with one, XLA's CPU
      backend copied the output's cotangent into the scan's layout in two passes, one of them
      several times slower than a transpose);
    - the cumulated gates ``γ`` are materialized (an optimization barrier): XLA's CPU backend
      would otherwise fuse the cumulative sum (a two-level ``reduce_window``) into every
      ``C × C`` consumer, and those fusions run several times slower than the exponentials
      themselves;
    - the pairwise decays ``exp(γ_i - γ_j)`` (masked before the exponential: exact for any gate)
      are computed once and shared by ``K Kᵀ`` and ``Q Kᵀ``;
    - ``T = (I + A)⁻¹ diag(β)`` is never formed: ``W = (I + A)⁻¹ (β ⊙ exp(γ) ⊙ K)`` and ``U = (I +
      A)⁻¹ (β ⊙ V)`` with :func:`unit_lower_inverse` (matmuls, no ``trsm``);
    - the output ``O = (Q ⊙ exp(γ)) S + Aqk V'`` is computed in the scan, where the state and
      ``V'`` are at hand: no per-chunk states or ``V'`` stacked for a second pass.

    On the CPU (``b1 t2048 h8 d64`` float32) about 1.7x the forward of the generic pieces of
    :mod:`~ejkernel.ops.families.delta_rule_math` on the same gates, 1.4-1.6x their
    forward+backward.
    """
    varlen = c.plan is not None
    r, hv, nc, size = c.k.shape[:4]

    def layout(x: Any) -> Any:  # [R, HV, NC, C, ...] -> [NC, R·HV, C, ...]
        x = jnp.moveaxis(x, 2, 0)
        return x.reshape(nc, r * hv, *x.shape[3:])

    q, k, v, beta, g = (layout(x) for x in (c.q, c.k, c.v, c.beta, c.g[..., 0]))
    i = jnp.arange(size)
    strict, causal = i[:, None] > i[None, :], i[:, None] >= i[None, :]
    gam = jax.lax.optimization_barrier(jnp.cumsum(g, axis=-1))  # [NC, R·HV, C]
    decay = jnp.exp(jnp.where(causal, gam[..., :, None] - gam[..., None, :], -jnp.inf))
    a = jnp.where(strict, _mm("...ik,...jk->...ij", k, k, precision) * decay, 0.0) * beta[..., :, None]
    aqk = _mm("...ik,...jk->...ij", q, k, precision) * decay
    inv = unit_lower_inverse(a, precision)
    eg = jnp.exp(gam)
    last = gam[..., -1:]
    w = _mm("...ij,...jk->...ik", inv, k * (beta * eg)[..., None], precision)
    u = _mm("...ij,...jv->...iv", inv, v * beta[..., None], precision)
    qg = q * eg[..., None]
    kg = k * jnp.exp(last - gam)[..., None]
    glast = jnp.exp(last)
    xs: tuple[Any, ...] = (w, u, kg, glast, qg, aqk)
    if varlen:
        xs += (c.plan["chunk_first"], c.plan["chunk_seq"])

    def step(s: Any, inp: Any) -> tuple[Any, Any]:
        w, u, kg, gl, qg, aqk = inp[:6]
        if varlen:  # R = 1: the state is [HV, K, V], a sequence's own
            first, seq = inp[6:]
            s = jnp.where(first, c.h0[seq], s)
        vn = u - _mm("nck,nkv->ncv", w, s, precision)
        o = _mm("nck,nkv->ncv", qg, s, precision) + _mm("nij,njv->niv", aqk, vn, precision)
        s_next = gl[..., None] * s + _mm("nck,ncv->nkv", kg, vn, precision)
        return s_next, (o, s_next if varlen else None)

    dk, dv = c.h0.shape[-2:]
    init = jnp.zeros((hv, dk, dv), jnp.float32) if varlen else c.h0.reshape(r * hv, dk, dv)
    final, (o, ends) = jax.lax.scan(step, init, xs)
    if varlen:
        last_chunk = c.plan["last_chunk"]
        final = jnp.where((last_chunk >= 0)[:, None, None, None], ends[jnp.maximum(last_chunk, 0)], c.h0)
    else:
        final = final.reshape(c.h0.shape)
    o = jnp.moveaxis(o.reshape(nc, r, hv, size, o.shape[-1]), 0, 2)
    return M.from_chunks(c, o), final


class XlaDeltaRule(KernelImpl):
    """The delta rule in plain JAX, any device (base of the two ops' XLA implementations)."""

    version = "2"
    config_cls: ClassVar[type[DeltaRuleConfig]] = DeltaRuleConfig
    test_configs: ClassVar[dict[str, DeltaRuleConfig]] = {}

    def heuristic_cfg(self, args: DeltaRuleArgs, device: DeviceInfo) -> DeltaRuleConfig:
        return self.config_cls(chunk_size=CHUNK, chunked=args.seq != 1 or args.is_varlen)

    def candidate_cfgs(self, args: DeltaRuleArgs, device: DeviceInfo) -> list[DeltaRuleConfig]:
        if args.seq == 1 and not args.is_varlen:
            return [self.heuristic_cfg(args, device)]
        return [self.config_cls(chunk_size=c, chunked=True) for c in (32, 64, 128)]

    def run(self, args: DeltaRuleArgs, cfg: DeltaRuleConfig) -> Any:
        if cfg.chunked is False:
            out, final = recurrent_delta_rule(
                args.query, args.key, args.value, args.beta, args.gate, args.initial_state, args.cu_seqlens,
                scale=args.softmax_scale, use_qk_l2norm=args.use_qk_l2norm,
            )  # fmt: skip
            out = out.astype(args.value.dtype)
        else:
            out, final = chunked_delta_rule(args, cfg.chunk_size or CHUNK)
        return (out, final) if args.return_state else out
