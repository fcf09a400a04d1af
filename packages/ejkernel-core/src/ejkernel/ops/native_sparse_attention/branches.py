"""NSA's branches in plain JAX, shared by the XLA implementation and, around its selected-blocks
kernel, the Triton one ("plan once": :func:`token_layout` and :func:`selected_blocks` are the
metadata every kernel reads).

Memory stays bounded: tokens are processed in chunks of ``chunk`` queries (``lax.map`` over a
``jax.checkpoint``-ed body, so the backward pass recomputes a chunk instead of keeping it), and a
chunk reads only the keys it attends: its selected blocks or its window, gathered, and the
compressed keys. No ``[seq, seq]`` array is ever formed.

Selection (which blocks a token attends) is not differentiable; it is computed in float32 at
HIGHEST precision whatever the inputs' dtype, so a low-precision run selects the same blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "Tokens",
    "clean_padding",
    "combine",
    "compressed_branch",
    "default_chunk",
    "map_chunks",
    "pool_blocks",
    "selected_blocks",
    "selected_branch",
    "sparse_attention",
    "token_layout",
    "window_branch",
]

F32 = jnp.float32
I32 = jnp.int32
HIGHEST = lax.Precision.HIGHEST
# A chunk's gathered keys and logits stay under this many bytes (see default_chunk).
CHUNK_BUDGET = 256 * 2**20


def default_chunk(a: Any) -> int:
    """Query tokens per chunk for ``NativeSparseAttentionArgs`` ``a``: a chunk gathers, per kv head,
    its tokens' selected keys (``num_selected_blocks · block_size`` rows), window rows and the
    compressed blocks, with ``num_heads`` float32 logits per key; the largest power of two that
    keeps that under ``CHUNK_BUDGET`` (at least 16 tokens, at most the sequence rounded up)."""
    keys = a.num_selected_blocks * a.block_size + (a.window_size or 0) + (a.num_blocks if a.g_cmp is not None else 0)
    per_token = a.batch * keys * (a.num_kv_heads * (a.head_dim + a.value_head_dim) + a.num_heads) * 4
    tokens = max(16, CHUNK_BUDGET // max(per_token, 1))
    cap = 1 << max(a.seq - 1, 1).bit_length()
    return min(1 << (tokens.bit_length() - 1), cap)


class Tokens(NamedTuple):
    """Where each of the ``seq`` token rows sits (the same for every batch row)."""

    pos: jax.Array  # [seq] int32: position within its sequence; -1 outside every sequence
    bos: jax.Array  # [seq] int32: row of its sequence's first token
    cbase: jax.Array  # [seq] int32: its sequence's first compressed block (a row of pool_blocks)
    num_cmp: int  # compressed blocks in all (static bound)


def token_layout(seq: int, block_size: int, cu_seqlens: jax.Array | None) -> Tokens:
    """Positions, sequence starts and compressed-block bases of the token rows: one sequence per
    batch row, or (``cu_seqlens``, batch 1) the packed sequences, rows past the last one padding."""
    t = jnp.arange(seq, dtype=I32)
    if cu_seqlens is None:
        zero = jnp.zeros((seq,), I32)
        return Tokens(pos=t, bos=zero, cbase=zero, num_cmp=-(-seq // block_size))
    cu = jnp.clip(cu_seqlens.astype(I32), 0, seq)
    n = cu.shape[0] - 1
    seg = jnp.minimum(jnp.searchsorted(cu[1:], t, side="right", method="scan_unrolled"), n - 1).astype(I32)
    bos = cu[seg]
    inside = t < cu[-1]
    lens = cu[1:] - cu[:-1]
    blocks = (lens + block_size - 1) // block_size
    first = jnp.cumsum(blocks) - blocks
    # sum ceil(len / bs) <= sum (len // bs + 1) <= seq // bs + n
    return Tokens(pos=jnp.where(inside, t - bos, -1), bos=bos, cbase=first[seg], num_cmp=seq // block_size + n)


def pool_blocks(x: jax.Array, tok: Tokens, block_size: int) -> jax.Array:
    """``[batch, num_cmp, heads, dim]`` float32: the mean of each block of ``block_size`` tokens
    of each sequence (a sequence's last block may be shorter: the mean of its tokens)."""
    b, s, h, d = x.shape
    x = x.astype(F32)
    if s % block_size == 0 and tok.num_cmp == s // block_size and s:
        return x.reshape(b, s // block_size, block_size, h, d).mean(axis=2)
    seg = jnp.where(tok.pos >= 0, tok.cbase + tok.pos // block_size, tok.num_cmp)
    sums = jax.ops.segment_sum(jnp.moveaxis(x, 1, 0), seg, num_segments=tok.num_cmp + 1)[: tok.num_cmp]
    count = jax.ops.segment_sum(jnp.ones((s,), F32), seg, num_segments=tok.num_cmp + 1)[: tok.num_cmp]
    return jnp.moveaxis(sums / jnp.maximum(count, 1.0)[:, None, None, None], 0, 1)


def map_chunks(fn: Callable[..., Any], chunk: int, seq: int, batched: dict[str, Any], tokens: dict[str, Any]) -> Any:
    """``fn(batched_chunk, tokens_chunk)`` over chunks of ``chunk`` token rows, outputs put back
    together: ``batched`` arrays have the token axis second (``[batch, seq, ...]``), ``tokens``
    arrays first (``[seq, ...]``). Padding rows of the last chunk get position -1 (they attend
    nothing). The body is checkpointed: its backward recomputes it, one chunk at a time."""
    n = -(-seq // chunk)
    pad = n * chunk - seq

    def split(x: Any, axis: int, fill: Any = 0) -> Any:
        if x is None:
            return None
        if pad:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (0, pad)
            x = jnp.pad(x, widths, constant_values=fill)
        x = x.reshape(*x.shape[:axis], n, chunk, *x.shape[axis + 1 :])
        return jnp.moveaxis(x, axis, 0)

    xs = (
        {k: split(v, 1) for k, v in batched.items()},
        {k: split(v, 0, -1 if k == "pos" else 0) for k, v in tokens.items()},
    )
    body = jax.checkpoint(lambda a: fn(*a))
    out = body(jax.tree.map(lambda x: x[0], xs)) if n == 1 else lax.map(body, xs)
    if n == 1:
        out = jax.tree.map(lambda x: x[None], out)

    def merge(x: Any) -> Any:
        x = jnp.moveaxis(x, 0, 1)  # [batch, n, chunk, ...]
        return x.reshape(x.shape[0], n * chunk, *x.shape[3:])[:, :seq]

    return jax.tree.map(merge, out)


def _softmax_attend(logits: jax.Array, valid: jax.Array, v: jax.Array, spec: str) -> tuple[jax.Array, jax.Array]:
    """Softmax over the last axis of ``logits`` (float32) where ``valid``, applied to ``v`` by
    ``spec`` (an einsum); rows with no valid key give zeros and log-sum-exp ``-inf``."""
    m = jnp.max(jnp.where(valid, logits, -jnp.inf), axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.exp(jnp.where(valid, logits - m, -jnp.inf))
    denom = jnp.sum(p, axis=-1, keepdims=True)
    out = jnp.einsum(spec, p, v.astype(F32), precision=HIGHEST) / jnp.where(denom > 0, denom, 1.0)
    lse = jnp.where(denom > 0, m + jnp.log(jnp.where(denom > 0, denom, 1.0)), -jnp.inf)[..., 0]
    return out, lse


def _logits(q: jax.Array, k: jax.Array, spec: str, scale: float, precision: Any) -> jax.Array:
    return jnp.einsum(spec, q, k, preferred_element_type=F32, precision=precision) * scale


def compressed_branch(
    q: jax.Array,
    k_cmp: jax.Array,
    v_cmp: jax.Array,
    tok: Tokens,
    *,
    block_size: int,
    scale: float,
    chunk: int,
    num_select: int | None,
) -> tuple[jax.Array, jax.Array | None]:
    """Attention of each token over its sequence's complete compressed blocks (block ``c`` once
    its last token ``(c + 1) · block_size - 1`` is at or before the query), and, with
    ``num_select``, the blocks each token selects.

    Returns ``o_cmp [batch, seq, num_heads, value_dim]`` (float32; zeros before the first block
    completes) and ``[batch, seq, num_kv_heads, num_select]`` int32 block numbers within the
    token's sequence, best first, ``-1`` for none (or ``None``). The selection ranks the token's
    own block first, then its earlier blocks by their importance: the compressed attention
    probability summed over the query heads of the kv group (NSA §3.3.2, shared across the
    group); later blocks never.
    """
    b, s, hq, d = q.shape
    h = k_cmp.shape[2]
    g = hq // h
    nc = tok.num_cmp
    q_dtype = q.dtype
    k_lo, v_lo = k_cmp.astype(q_dtype), v_cmp.astype(q_dtype)
    c_ids = jnp.arange(nc, dtype=I32)

    def body(a: dict[str, Any], t: dict[str, Any]) -> Any:
        qc = a["q"].reshape(b, -1, h, g, d)  # [b, C, h, g, d]
        pos, base = t["pos"], t["cbase"]
        rel = c_ids[None, :] - base[:, None]  # [C, nc]: block number within the token's sequence
        done = (pos[:, None] >= 0) & (rel >= 0) & ((rel + 1) * block_size <= pos[:, None] + 1)
        done_b = done[None, :, None, None, :]
        logits = _logits(qc, k_lo, "bchgd,bnhd->bchgn", scale, None)
        o, _ = _softmax_attend(logits, done_b, v_lo, "bchgn,bnhd->bchgd")
        outs = [o.reshape(b, -1, hq, v_cmp.shape[-1])]
        if num_select is not None:
            q32 = lax.stop_gradient(qc.astype(F32))
            k32 = lax.stop_gradient(k_cmp)
            logits32 = _logits(q32, k32, "bchgd,bnhd->bchgn", scale, HIGHEST)
            m = jnp.max(jnp.where(done_b, logits32, -jnp.inf), axis=-1, keepdims=True)
            m = jnp.where(jnp.isfinite(m), m, 0.0)
            p = jnp.exp(jnp.where(done_b, logits32 - m, -jnp.inf))
            p = p / jnp.maximum(jnp.sum(p, axis=-1, keepdims=True), jnp.finfo(F32).tiny)
            cur = pos // block_size  # [C]
            past = (pos[:, None] >= 0) & (rel >= 0) & (rel < cur[:, None])
            score = jnp.where(past[None, :, None, :], jnp.sum(p, axis=3), -jnp.inf)  # [b, C, h, nc]
            score = jnp.where(((rel == cur[:, None]) & (pos[:, None] >= 0))[None, :, None, :], jnp.inf, score)
            top = min(num_select, nc)
            best, idx = lax.top_k(score, top)
            sel = jnp.where(best > -jnp.inf, idx - base[None, :, None, None], -1).astype(I32)
            if top < num_select:
                sel = jnp.pad(sel, ((0, 0), (0, 0), (0, 0), (0, num_select - top)), constant_values=-1)
            outs.append(sel)
        return tuple(outs)

    res = map_chunks(body, chunk, s, {"q": q}, {"pos": tok.pos, "cbase": tok.cbase})
    return res[0], (res[1] if num_select is not None else None)


def selected_blocks(
    block_indices: jax.Array, counts: jax.Array | None, count: int, tok: Tokens, block_size: int
) -> jax.Array:
    """``[batch, seq, num_kv_heads, S]`` int32: each slot's block number if the token attends it,
    else -1: slots at or past the token's count, negative blocks, blocks starting after the token
    (or outside its sequence) and repeats of an earlier slot's block are dropped, so the attended
    keys are the union of the selected blocks (causal within the token's own block)."""
    idx = block_indices.astype(I32)
    slots = idx.shape[-1]
    n = (
        jnp.minimum(counts.astype(I32), slots)
        if counts is not None
        else jnp.full(idx.shape[:-1], min(count, slots), I32)
    )
    keep = jnp.arange(slots, dtype=I32) < n[..., None]
    pos = tok.pos[None, :, None, None]
    keep &= (idx >= 0) & (pos >= 0) & (idx * block_size <= pos)
    earlier = jnp.tril(jnp.ones((slots, slots), bool), -1)  # [j, i]: slot i before slot j
    repeat = jnp.any((idx[..., :, None] == idx[..., None, :]) & keep[..., None, :] & earlier, axis=-1)
    return jnp.where(keep & ~repeat, idx, -1)


def selected_branch(
    q: jax.Array, k: jax.Array, v: jax.Array, sel: jax.Array, tok: Tokens, *, block_size: int, scale: float, chunk: int
) -> jax.Array:
    """Attention of each token over the keys of its selected blocks (``sel`` from
    :func:`selected_blocks` or the computed selection) at or before it; ``[b, s, hq, dv]`` float32."""
    b, s, hq, d = q.shape
    h = k.shape[2]
    g = hq // h
    offs = jnp.arange(block_size, dtype=I32)

    def body(a: dict[str, Any], t: dict[str, Any]) -> Any:
        blk = a["sel"]  # [b, C, h, S]
        local = blk[..., None] * block_size + offs  # [b, C, h, S, bs]
        pos = t["pos"][None, :, None, None, None]
        valid = (blk[..., None] >= 0) & (local <= pos)
        rows = jnp.clip(t["bos"][None, :, None, None, None] + local, 0, s - 1)
        rows = rows.reshape(*rows.shape[:3], -1)  # [b, C, h, L]
        valid = valid.reshape(rows.shape)
        bi = jnp.arange(b)[:, None, None, None]
        hi = jnp.arange(h)[None, None, :, None]
        kg = jnp.where(valid[..., None], k[bi, rows, hi], 0)  # [b, C, h, L, d]
        vg = jnp.where(valid[..., None], v[bi, rows, hi], 0)
        qc = a["q"].reshape(b, -1, h, g, d)
        logits = _logits(qc, kg, "bchgd,bchld->bchgl", scale, None)
        o, _ = _softmax_attend(logits, valid[:, :, :, None, :], vg, "bchgl,bchld->bchgd")
        return o.reshape(b, -1, hq, v.shape[-1])

    return map_chunks(body, chunk, s, {"q": q, "sel": sel}, {"pos": tok.pos, "bos": tok.bos})


def window_branch(
    q: jax.Array, k: jax.Array, v: jax.Array, tok: Tokens, *, window: int, scale: float, chunk: int
) -> jax.Array:
    """Attention of each token over the last ``window`` tokens of its sequence, itself included
    (keys ``t - window + 1 .. t``); ``[b, s, hq, dv]`` float32."""
    b, s, hq, d = q.shape
    h = k.shape[2]
    g = hq // h
    offs = jnp.arange(window, dtype=I32) - (window - 1)

    def body(a: dict[str, Any], t: dict[str, Any]) -> Any:
        local = t["pos"][:, None] + offs  # [C, W]
        valid = (t["pos"][:, None] >= 0) & (local >= 0)
        rows = jnp.clip(t["bos"][:, None] + local, 0, s - 1)
        kg = jnp.where(valid[None, :, :, None, None], k[:, rows], 0)  # [b, C, W, h, d]
        vg = jnp.where(valid[None, :, :, None, None], v[:, rows], 0)
        qc = a["q"].reshape(b, -1, h, g, d)
        logits = _logits(qc, kg, "bchgd,bcwhd->bchgw", scale, None)
        o, _ = _softmax_attend(logits, valid[None, :, None, None, :], vg, "bchgw,bcwhd->bchgd")
        return o.reshape(b, -1, hq, v.shape[-1])

    return map_chunks(body, chunk, s, {"q": q}, {"pos": tok.pos, "bos": tok.bos})


def combine(
    o_slc: jax.Array,
    o_cmp: jax.Array | None,
    o_swa: jax.Array | None,
    g_slc: jax.Array | None,
    g_cmp: jax.Array | None,
    g_swa: jax.Array | None,
    tok: Tokens,
    dtype: Any,
) -> jax.Array:
    """``g_slc · o_slc + g_cmp · o_cmp + g_swa · o_swa`` (``g_slc`` ``None``: weight 1; the other
    branches only where computed), rows outside every sequence zero, in ``dtype``."""

    def gate(gt: jax.Array | None) -> Any:
        return 1.0 if gt is None else gt.astype(F32)[..., None]

    out = gate(g_slc) * o_slc
    if o_cmp is not None:
        out = out + gate(g_cmp) * o_cmp
    if o_swa is not None:
        out = out + gate(g_swa) * o_swa
    return jnp.where((tok.pos >= 0)[None, :, None, None], out, 0.0).astype(dtype)


def clean_padding(x: jax.Array | None, tok: Tokens) -> jax.Array | None:
    """``x`` with the rows outside every sequence zeroed: they are never read (they may hold
    NaN), and their gradient is zero."""
    if x is None:
        return None
    keep = (tok.pos >= 0).reshape(1, -1, *([1] * (x.ndim - 2)))
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


def sparse_attention(args: Any, chunk: int, attend_selected: Callable[..., jax.Array] | None = None) -> jax.Array:
    """The whole op from its bound arguments (``NativeSparseAttentionArgs``): the branches the
    call asks for, combined. ``attend_selected`` replaces :func:`selected_branch` (same
    parameters; a GPU kernel)."""
    a = args
    bs = a.block_size
    tok = token_layout(a.seq, bs, a.cu_seqlens)
    if a.cu_seqlens is not None:
        q, k, v, g_cmp, g_slc, g_swa = (
            clean_padding(x, tok) for x in (a.query, a.key, a.value, a.g_cmp, a.g_slc, a.g_swa)
        )
    else:
        q, k, v, g_cmp, g_slc, g_swa = a.query, a.key, a.value, a.g_cmp, a.g_slc, a.g_swa
    o_cmp = None
    if g_cmp is not None:
        k_cmp, v_cmp = pool_blocks(k, tok, bs), pool_blocks(v, tok, bs)
        o_cmp, ranked = compressed_branch(
            q, k_cmp, v_cmp, tok, block_size=bs, scale=a.softmax_scale, chunk=chunk, num_select=a.num_selected_blocks
        )
        sel = selected_blocks(ranked, a.block_counts, a.block_count, tok, bs)
    else:
        sel = selected_blocks(a.block_indices, a.block_counts, a.block_count, tok, bs)
    sel = lax.stop_gradient(sel)
    attend = attend_selected or selected_branch
    o_slc = attend(q, k, v, sel, tok, block_size=bs, scale=a.softmax_scale, chunk=chunk)
    o_swa = None
    if a.window_size is not None:
        o_swa = window_branch(q, k, v, tok, window=a.window_size, scale=a.softmax_scale, chunk=chunk)
    return combine(o_slc, o_cmp, o_swa, g_slc, g_cmp, g_swa, tok, a.dtype)
