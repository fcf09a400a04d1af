"""The chunked gated linear recurrence in plain JAX, shared by ``gla_attention``,
``lightning_attention``, ``recurrent_attention`` and ``state_space_v2``.

Algorithm (chunkwise-parallel form of GLA, Yang et al. 2024, §4): the sequence is cut into chunks
of ``C`` tokens; a ``lax.scan`` over chunks carries the state ``S [h, dk, dv]``. Inside a chunk,
with ``G`` the inclusive cumulative log gate from the chunk's start::

    o_t  = (q_t ⊙ exp(G_t)) S_in ⊙ exp(Gv_t)                         (inter-chunk)
         + Σ_{s<=t} Σ_i q_t,i k_s,i exp(G_t,i − G_s,i) · v_s ⊙ exp(Gv_t − Gv_s)   (intra-chunk)
    S_out = diag(exp(G_C)) S_in diag(exp(Gv_C)) + Σ_s (k_s ⊙ exp(G_C − G_s))ᵀ (v_s ⊙ exp(Gv_C − Gv_s))

Every exponent is a sum of gates over a span, so it is ``<= 0`` for decays: nothing overflows
however steep the gates (the intra-chunk term is gated per pair of positions, exactly, instead of
factoring ``exp(G_t)·exp(−G_s)``, whose second factor overflows float32 once a chunk decays by
more than ~88 nats). The scan body is rematerialized in the backward pass (``jax.checkpoint``), so
reverse-mode keeps only the states at chunk boundaries: memory linear in the length.

Varlen (``cu_seqlens``): sequences are repacked so that each starts on a chunk boundary
(``T + num_seqs·(C−1)`` slots at most; padding has zero keys, values and gates, which leave the
state unchanged); a chunk that starts a sequence loads that sequence's initial state. ``reverse``
flips the packed row (sequence order included) and mirrors ``cu_seqlens``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from ejkernel.ops.families import delta_rule_math as M
from ejkernel.ops.families.linear_attention import LinearProblem

__all__ = ["chunked_linear_attention", "step_linear_attention"]

F32 = jnp.float32


def _flip(x: Any) -> Any:
    return None if x is None else jnp.flip(x, axis=1)


def step_linear_attention(p: LinearProblem) -> tuple[jax.Array, jax.Array]:
    """One token per sequence (``seq == 1``, no ``cu_seqlens``): ``S = decay·S + kᵀv``, ``o = q S``."""
    b, _, h, dk = p.q.shape
    dv = p.v.shape[-1]
    rep = h // p.k.shape[2]
    q = p.q[:, 0].astype(F32) * p.scale
    k = jnp.repeat(p.k[:, 0].astype(F32), rep, axis=1)
    v = jnp.repeat(p.v[:, 0].astype(F32), rep, axis=1)
    s = jnp.zeros((b, h, dk, dv), F32) if p.initial_state is None else p.initial_state.astype(F32)
    a = jnp.zeros((b, h, dk), F32)
    if p.gk is not None:
        a = a + p.gk[:, 0]
    if p.gs is not None:
        a = a + p.gs[:, 0, :, None]
    s = jnp.exp(a)[..., None] * s
    if p.gv is not None:
        s = s * jnp.exp(p.gv[:, 0])[:, :, None, :]
    s = s + k[..., :, None] * v[..., None, :]
    o = jnp.einsum("bhi,bhij->bhj", q, s)
    return o[:, None], s


def _varlen_layout(cu: Any, total: int, chunk: int) -> dict[str, Any]:
    """Index maps of the chunk-aligned repacking of a packed row (all int32, traced-safe)."""
    n = cu.shape[0] - 1
    slots = -(-total // chunk) + n  # chunks: sum(ceil(len / C)) <= ceil(T / C) + n
    lens = cu[1:] - cu[:-1]
    nch = (lens + chunk - 1) // chunk
    choff = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(nch).astype(jnp.int32)])
    c = jnp.arange(slots, dtype=jnp.int32)
    seq_of_chunk = jnp.clip(jnp.searchsorted(choff[1:], c, side="right"), 0, n - 1).astype(jnp.int32)
    pos = jnp.arange(slots * chunk, dtype=jnp.int32)
    cpos = pos // chunk
    sq = seq_of_chunk[cpos]
    j = (cpos - choff[sq]) * chunk + pos % chunk
    valid = (cpos < choff[n]) & (j < lens[sq])
    src = jnp.where(valid, cu[sq] + j, 0)
    t = jnp.arange(total, dtype=jnp.int32)
    seg = jnp.clip(jnp.searchsorted(cu[1:], t, side="right"), 0, n - 1).astype(jnp.int32)
    dst = choff[seg] * chunk + (t - cu[seg])
    return dict(
        slots=slots,
        src=src,
        valid=valid,
        dst=dst,
        reset=c == choff[seq_of_chunk],
        state_idx=seq_of_chunk,
        last_chunk=choff[1:] - 1,
        empty=nch == 0,
    )


def _chunk_body(
    carry: Any, xs: Any, *, scale: float, has: tuple[bool, bool, bool], emit_state: bool
) -> tuple[Any, Any]:
    """One chunk for every (batch, head): see the module docstring. Shapes: ``q, k [B, C, h, dk]``,
    ``v [B, C, h, dv]``, gates float32, ``S [B, h, dk, dv]``."""
    has_gk, has_gv, has_gs = has
    s_prev, h0 = carry
    q, k, v, gk, gv, gs, reset, sidx = xs
    s_in = jnp.where(reset[:, None, None, None], h0[sidx], s_prev)
    csz = q.shape[1]
    causal = jnp.tril(jnp.ones((csz, csz), bool))[None, :, :, None]  # [1, t, s, 1]
    q = q * scale
    if has_gk or has_gs:
        a = (gk if has_gk else 0.0) + (gs[..., None] if has_gs else 0.0)
        a = jnp.broadcast_to(a, q.shape) if has_gk else a
        G = jnp.cumsum(a, axis=1)  # [B, C, h, dk] or [B, C, h, 1]
        G_last = G[:, -1]
        qg = q * jnp.exp(G)
        kg = k * jnp.exp(G_last[:, None] - G)
        if has_gk and csz % min(M.SUB, csz) == 0:
            # Per-channel decays by sub-blocks (exact per pair only inside the diagonal blocks,
            # matmuls elsewhere): 4-10x faster than every pair's [C, C, dk] decays on the CPU
            # (b1 h4, 8 chunks of 64, dk 64: forward 6-8 ms vs 62, with the gradient 40-50 vs 176-209).
            mv = lambda x: jnp.moveaxis(x, 1, 2)  # noqa: E731
            A = M.decayed_pairs(mv(q), mv(k), mv(G), causal[0, :, :, 0], precision=None)
        else:
            d = G[:, :, None] - G[:, None, :]  # [B, t, s, h, dk or 1]
            decay = jnp.exp(jnp.where(causal[..., None], d, -jnp.inf))
            if has_gk:
                A = jnp.einsum("bthi,bshi,btshi->bhts", q, k, decay)
            else:
                A = jnp.einsum("bthi,bshi->bhts", q, k) * jnp.moveaxis(decay[..., 0], 3, 1)
        s_decay = jnp.exp(G_last)[..., None]  # [B, h, dk or 1, 1]
    else:
        qg, kg = q, k
        A = jnp.where(jnp.moveaxis(causal, 3, 1), jnp.einsum("bthi,bshi->bhts", q, k), 0.0)
        s_decay = 1.0
    if has_gv:
        Gv = jnp.cumsum(gv, axis=1)  # [B, C, h, dv]
        Gv_last = Gv[:, -1]
        dvd = jnp.exp(jnp.where(causal[..., None], Gv[:, :, None] - Gv[:, None, :], -jnp.inf))
        o = jnp.einsum("bthi,bhij->bthj", qg, s_in) * jnp.exp(Gv)
        o = o + jnp.einsum("bhts,bshj,btshj->bthj", A, v, dvd)
        vg = v * jnp.exp(Gv_last[:, None] - Gv)
        s_out = s_decay * s_in * jnp.exp(Gv_last)[:, :, None, :] + jnp.einsum("bshi,bshj->bhij", kg, vg)
    else:
        o = jnp.einsum("bthi,bhij->bthj", qg, s_in) + jnp.einsum("bhts,bshj->bthj", A, v)
        s_out = s_decay * s_in + jnp.einsum("bshi,bshj->bhij", kg, v)
    return (s_out, h0), (o, s_out if emit_state else None)


def chunked_linear_attention(p: LinearProblem, chunk: int) -> tuple[jax.Array, jax.Array]:
    """``(out [b, t, h, dv] float32, final_state [num_seqs, h, dk, dv] float32)`` of ``p``."""
    b, t, h, dk = p.q.shape
    dv = p.v.shape[-1]
    rep = h // p.k.shape[2]
    if p.cu_seqlens is None and t == 1:
        return step_linear_attention(p)
    q, k, v = p.q.astype(F32), p.k.astype(F32), p.v.astype(F32)
    if rep > 1:
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    gk, gv, gs, cu, h0 = p.gk, p.gv, p.gs, p.cu_seqlens, p.initial_state
    n_seqs = p.num_seqs
    h0 = jnp.zeros((n_seqs, h, dk, dv), F32) if h0 is None else h0.astype(F32)
    if p.reverse:
        q, k, v, gk, gv, gs = (_flip(x) for x in (q, k, v, gk, gv, gs))
        if cu is not None:
            cu = t - cu[::-1]
        h0 = h0[::-1] if cu is not None else h0
    arrays = [q, k, v, gk, gv, gs]
    if cu is not None:
        chunk = max(1, min(chunk, t))
        lay = _varlen_layout(cu.astype(jnp.int32), t, chunk)
        slots = lay["slots"]

        def pack(x: Any) -> Any:
            if x is None:
                return None
            y = jnp.take(x[0], lay["src"], axis=0)
            mask = lay["valid"].reshape((-1,) + (1,) * (y.ndim - 1))
            return jnp.where(mask, y, 0.0)[None]

        arrays = [pack(x) for x in arrays]
        n_chunks, bb = slots, 1
        reset = lay["reset"][:, None]  # [N, 1]
        sidx = lay["state_idx"][:, None]
    else:
        chunk = max(1, min(chunk, t))
        n_chunks, bb = -(-t // chunk), b
        pad = n_chunks * chunk - t
        if pad:
            arrays = [None if x is None else jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) for x in arrays]
        reset = jnp.broadcast_to((jnp.arange(n_chunks) == 0)[:, None], (n_chunks, b))
        sidx = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32)[None], (n_chunks, b))

    def chunks(x: Any) -> Any:  # [bb, N*C, ...] -> [N, bb, C, ...]
        if x is None:
            return jnp.zeros((n_chunks, bb), F32)  # placeholder, unused
        return jnp.moveaxis(x.reshape(bb, n_chunks, chunk, *x.shape[2:]), 1, 0)

    has = (gk is not None, gv is not None, gs is not None)
    body = jax.checkpoint(functools.partial(_chunk_body, scale=p.scale, has=has, emit_state=cu is not None))
    xs = (*(chunks(x) for x in arrays), reset, sidx)
    s_init = jnp.zeros((bb, h, dk, dv), F32)
    (s_last, _), (o, s_all) = jax.lax.scan(body, (s_init, h0), xs)
    o = jnp.moveaxis(o, 0, 1).reshape(bb, n_chunks * chunk, h, dv)
    if cu is not None:
        o = jnp.take(o[0], lay["dst"], axis=0)[None]
        finals = s_all[jnp.clip(lay["last_chunk"], 0, n_chunks - 1), 0]
        finals = jnp.where(lay["empty"][:, None, None, None], h0, finals)
    else:
        o = o[:, :t]
        finals = s_last
    if p.reverse:
        o = jnp.flip(o, axis=1)
        if cu is not None:
            finals = finals[::-1]
    return o, finals


# -- the implementations (one per op, registered by each op folder's impl) ------------------------

DEFAULT_CHUNK = 64
CANDIDATE_CHUNKS = (16, 32, 64, 128)


class XlaLinearAttention:
    """Mixin of the XLA implementations of the linear-attention ops: every op maps its arguments
    to a :class:`LinearProblem` (``Op.problem``) and its result back (``Op.finish``)."""

    version = "1"

    def heuristic_cfg(self, args: Any, device: Any) -> Any:
        from ejkernel.ops import get_op

        # 64 tokens per chunk: the intra-chunk products (C² per token) stay below the state
        # products (dk·dv per token) for head dims >= 64, with few sequential scan steps.
        return get_op(self.op_name).config_cls(chunk_size=DEFAULT_CHUNK)  # type: ignore[attr-defined]

    def candidate_cfgs(self, args: Any, device: Any) -> list[Any]:
        from ejkernel.ops import get_op

        cls = get_op(self.op_name).config_cls  # type: ignore[attr-defined]
        return [cls(chunk_size=c) for c in CANDIDATE_CHUNKS]

    def validate_cfg(self, cfg: Any, args: Any, device: Any) -> None:
        if cfg.chunk_size is None:
            raise ValueError(f"xla {self.op_name}: chunk_size is required")  # type: ignore[attr-defined]

    def run(self, args: Any, cfg: Any) -> Any:
        from ejkernel.ops import get_op

        op = get_op(self.op_name)  # type: ignore[attr-defined]
        out, final_state = chunked_linear_attention(op.problem(args), cfg.chunk_size)  # type: ignore[attr-defined]
        return op.finish(args, out, final_state)  # type: ignore[attr-defined]
