"""The chunked gated linear recurrence in plain JAX, shared by ``gla_attention``,
``lightning_attention``, ``recurrent_attention`` and ``state_space_v2``.

Algorithm (chunkwise-parallel form of GLA, Yang et al. 2024, §4): the sequence is cut into chunks
of ``C`` tokens. Every chunk's own terms (its intra-chunk output, its contribution to the state,
its decays) are computed for all chunks at once; a ``lax.scan`` over chunks then carries only the
state ``S [h, dk, dv]``, and the inter-chunk output is one batched product with the states
entering the chunks. With ``G`` the inclusive cumulative log gate from the chunk's start::

    o_t  = (q_t ⊙ exp(G_t)) S_in ⊙ exp(Gv_t)                         (inter-chunk)
         + Σ_{s<=t} Σ_i q_t,i k_s,i exp(G_t,i − G_s,i) · v_s ⊙ exp(Gv_t − Gv_s)   (intra-chunk)
    S_out = diag(exp(G_C)) S_in diag(exp(Gv_C)) + Σ_s (k_s ⊙ exp(G_C − G_s))ᵀ (v_s ⊙ exp(Gv_C − Gv_s))

Every exponent is a sum of gates over a span, so it is ``<= 0`` for decays: nothing overflows
however steep the gates (the intra-chunk term is gated per pair of positions, exactly, instead of
factoring ``exp(G_t)·exp(−G_s)``, whose second factor overflows float32 once a chunk decays by
more than ~88 nats). The per-chunk terms are rematerialized in the backward pass
(``jax.checkpoint``), so reverse-mode keeps the inputs and the states at chunk boundaries, no
``[C, C]`` pairs: memory linear in the length.

Varlen (``cu_seqlens``): sequences are repacked so that each starts on a chunk boundary
(``T + num_seqs·(C−1)`` slots at most; padding has zero keys, values and gates, which leave the
state unchanged); a chunk that starts a sequence loads that sequence's initial state. ``reverse``
flips the packed row (sequence order included) and mirrors ``cu_seqlens``.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

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


class _Intra(NamedTuple):
    """What a chunk contributes independently of the state entering it (every chunk at once)."""

    o: Any  # intra-chunk output [X, h, C, dv]
    qg: Any  # queries gated from the chunk's start [X, h, C, dk]
    out_gate: Any  # exp(Gv) on the inter-chunk output [X, h, C, dv], or None
    delta: Any  # the chunk's own state [X, h, dk, dv]
    decay_k: Any  # exp(G_C) over key channels [X, h, dk or 1], or None
    decay_v: Any  # exp(Gv_C) over value channels [X, h, dv], or None


#: Temporary memory of the per-chunk terms computed at once (chunks are taken in groups that fit).
INTRA_BYTES = 1 << 26


def _intra_bytes(chunk: int, h: int, dk: int, dv: int, has: tuple[bool, bool, bool], factored: bool) -> int:
    """Bytes the per-chunk terms of one chunk hold at their peak (float32; measured against
    ``memory_analysis`` of the gradient: about six of the largest pairwise arrays)."""
    has_gk, has_gv, _ = has
    exact = has_gk and not factored
    pairs = chunk * chunk * max(1, dv if has_gv else 1, min(M.SUB, chunk) * dk // chunk if exact else 1)
    return 6 * 4 * h * max(pairs, chunk * (dk + dv))


def _intra(q: Any, k: Any, v: Any, G: Any, gv: Any, *, scale: float, per_channel: bool, factored: bool) -> _Intra:
    """The module docstring's terms that do not involve ``S_in``, for ``X`` chunks at once, head
    major: ``q, k [X, h, C, dk]``, ``v [X, h, C, dv]``; ``G`` the key gate cumulated from each
    chunk's start (``[X, h, C, dk]`` when ``per_channel``, else ``[X, h, C, 1]``; ``None``: no key
    gate), ``gv [X, h, C, dv]`` or ``None``. ``factored`` (per-channel gates that
    ``gates_factor`` allows): one exponential ``e = exp(G - G_0)`` gives the pairs as a matmul of
    ``q ⊙ e`` and ``k / e`` and the gated queries and keys from them."""
    csz = q.shape[2]
    causal = jnp.tril(jnp.ones((csz, csz), bool))  # [t, s]
    q = q * scale
    decay_k = None
    if G is None:
        qg, kg = q, k
        A = jnp.where(causal, jnp.einsum("bhti,bhsi->bhts", q, k), 0.0)
    elif per_channel and factored:
        G0, G_last = G[:, :, :1], G[:, :, -1]
        e = jnp.exp(G - G0)
        qs, ks = q * e, k / e
        A = jnp.where(causal, jnp.einsum("bhti,bhsi->bhts", qs, ks), 0.0)
        qg, kg = qs * jnp.exp(G0), ks * jnp.exp(G_last - G0[:, :, 0])[:, :, None]
        decay_k = jnp.exp(G_last)
    else:
        G_last = G[:, :, -1]
        qg = q * jnp.exp(G)
        kg = k * jnp.exp(G_last[:, :, None] - G)
        if per_channel and csz % min(M.SUB, csz) == 0:
            # Exact per-channel decays by sub-blocks (matmuls off the diagonal blocks): 4-10x
            # faster than every pair's [C, C, dk] decays on the CPU.
            A = M.decayed_pairs(q, k, G, causal, precision=None)
        else:
            d = G[:, :, :, None] - G[:, :, None, :]  # [X, h, t, s, dk or 1]
            decay = jnp.exp(jnp.where(causal[..., None], d, -jnp.inf))
            if per_channel:
                A = jnp.einsum("bhti,bhsi,bhtsi->bhts", q, k, decay)
            else:
                A = jnp.einsum("bhti,bhsi->bhts", q, k) * decay[..., 0]
        decay_k = jnp.exp(G_last)  # [X, h, dk or 1]
    if gv is not None:
        Gv = jnp.cumsum(gv, axis=2)  # [X, h, C, dv]
        Gv_last = Gv[:, :, -1]
        dvd = jnp.exp(jnp.where(causal[..., None], Gv[:, :, :, None] - Gv[:, :, None, :], -jnp.inf))
        o = jnp.einsum("bhts,bhsj,bhtsj->bhtj", A, v, dvd)
        delta = jnp.einsum("bhsi,bhsj->bhij", kg, v * jnp.exp(Gv_last[:, :, None] - Gv))
        return _Intra(o, qg, jnp.exp(Gv), delta, decay_k, jnp.exp(Gv_last))
    o = jnp.einsum("bhts,bhsj->bhtj", A, v)
    return _Intra(o, qg, None, jnp.einsum("bhsi,bhsj->bhij", kg, v), decay_k, None)


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

    has = (gk is not None, gv is not None, gs is not None)
    n_all = n_chunks * bb

    def heads_major(x: Any) -> Any:  # [bb, N*C, h, ...] -> [N*bb, h, C, ...]
        if x is None:
            return None
        x = x.reshape(bb, n_chunks, chunk, h, *x.shape[3:])
        return jnp.moveaxis(jnp.moveaxis(x, 1, 0), 3, 2).reshape(n_all, h, chunk, *x.shape[4:])

    def intra_terms(factored: bool, xs: tuple[Any, ...]) -> _Intra:
        """Every chunk's own terms, INTRA_BYTES' worth of chunks at a time (rematerialized in
        the backward pass, so reverse-mode keeps no [C, C] pairs)."""
        group = min(n_all, max(1, INTRA_BYTES // _intra_bytes(chunk, h, dk, dv, has, factored)))
        n_groups = -(-n_all // group)

        def grouped(x: Any) -> Any:  # [N*bb, ...] -> [groups, group, ...], zero-padded
            if x is None:
                return None
            x = jnp.pad(x, [(0, n_groups * group - n_all)] + [(0, 0)] * (x.ndim - 1))
            return x.reshape(n_groups, group, *x.shape[1:])

        fn = jax.checkpoint(functools.partial(_intra, scale=p.scale, per_channel=gk is not None, factored=factored))
        if n_groups == 1:
            return fn(*xs)
        out = jax.lax.map(lambda x: fn(*x), tuple(grouped(x) for x in xs))
        return _Intra(*(None if x is None else x.reshape(-1, *x.shape[2:])[:n_all] for x in out))

    q_hm, k_hm, v_hm, gk_hm, gv_hm, gs_hm = (heads_major(x) for x in arrays)
    G = None
    if gk is not None or gs is not None:
        G = jnp.cumsum((gk_hm if gk is not None else 0.0) + (gs_hm[..., None] if gs is not None else 0.0), axis=2)
    xs_hm = (q_hm, k_hm, v_hm, G, gv_hm)
    if gk is None:
        intra = intra_terms(False, xs_hm)
    else:
        # Gates shallow enough in every chunk (the usual case) take the factored form; one
        # lax.cond for the call, so one branch runs.
        intra = jax.lax.cond(
            M.gates_factor(G), functools.partial(intra_terms, True), functools.partial(intra_terms, False), xs_hm
        )
    # One scan over chunks then carries only the state.

    def per_chunk(x: Any) -> Any:  # [N * bb, ...] -> [N, bb, ...]
        return None if x is None else x.reshape(n_chunks, bb, *x.shape[1:])

    def step(carry: Any, xs: Any) -> tuple[Any, Any]:
        s_prev, h0 = carry
        delta, dk_c, dv_c, reset_c, sidx_c = xs
        s_in = jnp.where(reset_c[:, None, None, None], h0[sidx_c], s_prev)
        s_out = s_in if dk_c is None else s_in * dk_c[..., None]
        s_out = s_out if dv_c is None else s_out * dv_c[:, :, None, :]
        s_out = s_out + delta
        return (s_out, h0), (s_in, s_out if cu is not None else None)

    xs = (per_chunk(intra.delta), per_chunk(intra.decay_k), per_chunk(intra.decay_v), reset, sidx)
    s_init = jnp.zeros((bb, h, dk, dv), F32)
    (s_last, _), (s_enter, s_all) = jax.lax.scan(step, (s_init, h0), xs)
    inter = jnp.einsum("xhti,xhij->xhtj", intra.qg, s_enter.reshape(n_all, h, dk, dv))
    if intra.out_gate is not None:
        inter = inter * intra.out_gate
    o = (intra.o + inter).reshape(n_chunks, bb, h, chunk, dv)
    o = jnp.moveaxis(jnp.moveaxis(o, 0, 1), 2, 3).reshape(bb, n_chunks * chunk, h, dv)
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
