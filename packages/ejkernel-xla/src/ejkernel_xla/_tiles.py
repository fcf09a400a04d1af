"""Tile-level pieces of dense attention shared by the XLA kernels.

Layouts (GQA without repeating K/V): head-major, transposed once before the loops so that each
tile product is a plain batched matmul over (batch, kv head). A query tile is
``[b, hk, g, bq, d]`` (the ``h`` query heads split as ``hk`` kv heads × ``g`` groups), a key/value
tile ``[b, hk, bk, d]``, logits ``[b, hk, g, bq, bk]``. Masks and biases broadcast against the
logits. (Token-major tiles cost 2-3x on CPU, where XLA transposes every tile.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from jax import lax

from ejkernel.ops.families.attention import AttentionArgs
from ejkernel.ops.families.attention_math import dropout_keep_mask

F32 = jnp.float32


def dot(spec: str, a: Any, b: Any) -> Any:
    """``jnp.einsum`` of two tiles, accumulated in float32. Float32 operands multiply at float32
    accuracy (``HIGHEST``: the default precision is TF32 on recent NVIDIA GPUs, which would lose
    what float32 was chosen for; the Triton kernels use "tf32x3" likewise); lower-precision
    operands keep the default (fast) precision. Autodiff carries the precision to the transposed
    products."""
    precision = lax.Precision.HIGHEST if jnp.result_type(a, b) == F32 else None
    return jnp.einsum(spec, a, b, precision=precision, preferred_element_type=F32)


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def dslice(x: Any, start: Any, size: int, axis: int) -> Any:
    return lax.dynamic_slice_in_dim(x, start, size, axis)


def pad_to(x: Any, axis: int, size: int, value: Any = 0) -> Any:
    if x is None or x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


@dataclasses.dataclass(frozen=True)
class TileSpec:
    """Static description of a tiled attention problem (hashable: a ``nondiff_argnum``)."""

    block_q: int
    block_k: int
    seq_q: int
    seq_k: int
    num_heads: int
    num_kv_heads: int
    scale: float
    soft_cap: float | None
    dropout_prob: float
    interval: bool  # apply the per-row key range [lo, hi) (causal, window, varlen, key padding)

    @property
    def groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def seq_q_padded(self) -> int:
        return round_up(self.seq_q, self.block_q)

    @property
    def seq_k_padded(self) -> int:
        return round_up(self.seq_k, self.block_k)


def tile_spec(args: AttentionArgs, block_q: int, block_k: int) -> TileSpec:
    # Tiles never exceed the (8-rounded) sequence: short sequences are one tile.
    bq = min(block_q, round_up(args.seq_q, 8))
    bk = min(block_k, round_up(args.seq_k, 8))
    interval = (
        args.causal
        or args.sliding_window is not None
        or args.cum_seqlens_q is not None
        or round_up(args.seq_k, bk) != args.seq_k
    )
    return TileSpec(
        block_q=bq,
        block_k=bk,
        seq_q=args.seq_q,
        seq_k=args.seq_k,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        scale=args.softmax_scale,
        soft_cap=args.logits_soft_cap,
        dropout_prob=args.dropout_prob,
        interval=interval,
    )


@dataclasses.dataclass(frozen=True)
class Operands:
    """Padded operands in tile layout. ``bias``/``mask`` keep their broadcast (size-1) dims."""

    q: Any  # [b, hk, g, sq_p, d]
    k: Any  # [b, hk, sk_p, d]
    v: Any  # [b, hk, sk_p, dv]
    bias: Any  # [B1, H1, SQ1, SK1] or None
    lo: Any  # [sq_p] int32
    hi: Any  # [sq_p] int32
    q_seg: Any  # [b, sq_p] or None
    kv_seg: Any  # [b, sk_p] or None
    mask: Any  # [B1, H1, sq_p, sk_p] bool or None
    seed: Any  # uint32 scalar or None


def prepare(ts: TileSpec, q, k, v, bias, lo, hi, q_seg, kv_seg, mask, seed) -> Operands:
    sq_p, sk_p = ts.seq_q_padded, ts.seq_k_padded
    if bias is not None:
        if bias.shape[2] > 1:
            bias = pad_to(bias, 2, sq_p)
        if bias.shape[3] > 1:
            bias = pad_to(bias, 3, sk_p)
    return Operands(
        q=to_head_major(pad_to(q, 1, sq_p), ts),
        k=pad_to(k, 1, sk_p).transpose(0, 2, 1, 3),
        v=pad_to(v, 1, sk_p).transpose(0, 2, 1, 3),
        bias=bias,
        lo=pad_to(lo, 0, sq_p),
        hi=pad_to(hi, 0, sq_p),
        q_seg=pad_to(q_seg, 1, sq_p, -1),
        kv_seg=pad_to(kv_seg, 1, sk_p, -1),
        mask=None if mask is None else pad_to(pad_to(mask, 2, sq_p, False), 3, sk_p, False),
        seed=seed,
    )


def to_head_major(x: Any, ts: TileSpec) -> Any:
    """``[b, s, h, d]`` → ``[b, hk, g, s, d]``."""
    b, s, _, d = x.shape
    return x.reshape(b, s, ts.num_kv_heads, ts.groups, d).transpose(0, 2, 3, 1, 4)


def from_head_major(x: Any) -> Any:
    """``[b, hk, g, s, d]`` → ``[b, s, h, d]``."""
    b, hk, g, s, d = x.shape
    return x.transpose(0, 3, 1, 2, 4).reshape(b, s, hk * g, d)


def _split_heads(x: Any, ts: TileSpec) -> Any:
    """``[B1, H1, x, y]`` → ``[B1, hk, g, x, y]`` (or ``[B1, 1, 1, x, y]`` when H1 == 1)."""
    b1, h1, n1, n2 = x.shape
    if h1 == 1:
        return x[:, :, None]
    return x.reshape(b1, ts.num_kv_heads, ts.groups, n1, n2)


def bias_tile(ts: TileSpec, ops: Operands, q0: Any, k0: Any) -> Any:
    if ops.bias is None:
        return None
    x = ops.bias
    if x.shape[2] > 1:
        x = dslice(x, q0, ts.block_q, 2)
    if x.shape[3] > 1:
        x = dslice(x, k0, ts.block_k, 3)
    return _split_heads(x.astype(F32), ts)


def reduce_to_bias(ts: TileSpec, ds: Any, bias_shape: tuple[int, ...]) -> Any:
    """Sum a logits-gradient tile ``[b, hk, g, bq, bk]`` over the bias's broadcast dims."""
    b, hk, g, bq, bk = ds.shape
    x = ds.reshape(b, hk * g, bq, bk)
    axes = tuple(ax for ax, n in enumerate(bias_shape) if n == 1 and x.shape[ax] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def logits(ts: TileSpec, q_t: Any, k_t: Any, bias_t: Any) -> tuple[Any, Any]:
    """Scaled (soft-capped, biased) logits of a tile, and ``tanh`` of the cap for its gradient."""
    s = dot("bhgqd,bhkd->bhgqk", q_t, k_t) * ts.scale
    t = None
    if ts.soft_cap is not None:
        t = jnp.tanh(s / ts.soft_cap)
        s = ts.soft_cap * t
    if bias_t is not None:
        s = s + bias_t
    return s, t


def valid_tile(ts: TileSpec, ops: Operands, lo_t: Any, hi_t: Any, q_seg_t: Any, q0: Any, k0: Any) -> Any:
    """Which logits of the tile may be attended (bool, broadcastable), or ``None`` for all."""
    conds = []
    if ts.interval:
        kidx = k0 + jnp.arange(ts.block_k, dtype=jnp.int32)
        conds.append(((kidx[None, :] >= lo_t[:, None]) & (kidx[None, :] < hi_t[:, None]))[None, None, None])
    if q_seg_t is not None:
        kv_seg_t = dslice(ops.kv_seg, k0, ts.block_k, 1)
        same = (q_seg_t[:, :, None] == kv_seg_t[:, None, :]) & (q_seg_t[:, :, None] >= 0)
        conds.append(same[:, None, None])
    if ops.mask is not None:
        m = dslice(dslice(ops.mask, q0, ts.block_q, 2), k0, ts.block_k, 3)
        conds.append(_split_heads(m, ts))
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = out & c
    return out


def keep_tile(ts: TileSpec, ops: Operands, batch: int, q0: Any, k0: Any) -> Any:
    """Dropout keep mask of the tile ``[b, hk, g, bq, bk]``, or ``None`` without dropout."""
    if ts.dropout_prob == 0.0:
        return None
    hk, g = ts.num_kv_heads, ts.groups
    bh = (
        jnp.arange(batch, dtype=jnp.int32)[:, None, None] * ts.num_heads
        + jnp.arange(hk, dtype=jnp.int32)[None, :, None] * g
        + jnp.arange(g, dtype=jnp.int32)[None, None, :]
    )[..., None, None]
    qi = (q0 + jnp.arange(ts.block_q, dtype=jnp.int32))[:, None]
    kj = (k0 + jnp.arange(ts.block_k, dtype=jnp.int32))[None, :]
    return dropout_keep_mask(ops.seed, bh, qi, kj, ts.dropout_prob)


def kv_tile_range(ts: TileSpec, ops: Operands, lo_t: Any, hi_t: Any, q_seg_t: Any) -> tuple[Any, Any]:
    """Key tiles ``[j_lo, j_hi)`` that a query tile needs: the others are fully masked.

    From the rows' key ranges and, with segment ids, from the keys whose segment lies within
    the tile's range of query segments (a conservative bound, right for any segment layout).
    """
    nk = ts.seq_k_padded // ts.block_k
    if not ts.interval and q_seg_t is None:
        return 0, nk
    nonempty = hi_t > lo_t
    lo_min = jnp.min(jnp.where(nonempty, lo_t, ts.seq_k_padded))
    hi_max = jnp.max(jnp.where(nonempty, hi_t, 0))
    if q_seg_t is not None:
        valid = q_seg_t >= 0
        smin = jnp.min(jnp.where(valid, q_seg_t, jnp.iinfo(jnp.int32).max), axis=1)
        smax = jnp.max(jnp.where(valid, q_seg_t, -1), axis=1)
        inside = ((ops.kv_seg >= smin[:, None]) & (ops.kv_seg <= smax[:, None])).any(axis=0)
        first = jnp.argmax(inside).astype(jnp.int32)
        last = (ts.seq_k_padded - 1 - jnp.argmax(inside[::-1])).astype(jnp.int32)
        lo_min = jnp.maximum(lo_min, jnp.where(inside.any(), first, ts.seq_k_padded))
        hi_max = jnp.minimum(hi_max, jnp.where(inside.any(), last + 1, 0))
    j_lo = lo_min // ts.block_k
    j_hi = jnp.where(hi_max > lo_min, (hi_max + ts.block_k - 1) // ts.block_k, j_lo)
    return j_lo, j_hi


def sink_logits(ts: TileSpec, aux: Any) -> Any:
    """``[num_heads, n]`` sinks → ``[1, hk, g, 1, n]`` float32."""
    if aux is None:
        return None
    return aux.astype(F32).reshape(ts.num_kv_heads, ts.groups, 1, aux.shape[-1])[None]


def query_tile_operands(ts: TileSpec, ops: Operands, i: Any) -> tuple[Any, Any, Any, Any, Any]:
    q0 = i * ts.block_q
    q_t = dslice(ops.q, q0, ts.block_q, 3)
    lo_t = dslice(ops.lo, q0, ts.block_q, 0)
    hi_t = dslice(ops.hi, q0, ts.block_q, 0)
    q_seg_t = None if ops.q_seg is None else dslice(ops.q_seg, q0, ts.block_q, 1)
    return q0, q_t, lo_t, hi_t, q_seg_t


def masked(x: Any, valid: Any) -> Any:
    return x if valid is None else jnp.where(valid, x, -jnp.inf)


def loop(lo: Any, hi: Any, body: Any, init: Any) -> Any:
    """``fori_loop`` that stays a static loop when the bounds are Python ints."""
    if isinstance(lo, int) and isinstance(hi, int):
        return lax.fori_loop(lo, hi, body, init)
    return lax.fori_loop(jnp.asarray(lo, jnp.int32), jnp.asarray(hi, jnp.int32), body, init)
