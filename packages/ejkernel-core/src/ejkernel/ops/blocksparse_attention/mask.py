"""Block-sparse masks: a mask description compiled once into block-level metadata that every
backend's kernel reads (XLA, Triton, Pallas).

A mask is the intersection of patterns. The static ones are described by a :class:`SparseMask`
(causal, local window, chunked, an arbitrary block mask, a static token mask) and compiled with
NumPy, once per (description, lengths, tile sizes), by :func:`compile_static`; the runtime ones
(document masks from segment ids, a dense ``attention_mask``) are classified with ``jnp`` per
call by :func:`block_layout`, which merges both into the kernels' schedule.

Positions: query row ``i`` sits at key position ``i + seq_k - seq_q`` (bottom-right alignment, as
in ``flash_attention``) for ``causal``, the window and chunks; a block mask and a token mask are
indexed by the raw row and column.

Each ``(query tile, key tile)`` pair is ``EMPTY`` (never visited), ``FULL`` (visited without a
mask) or ``PARTIAL`` (visited with its fine mask). A partial tile's static fine mask is stored
once per distinct pattern (``partial_masks[mask_index]``, as splash attention does); the runtime
parts of a partial tile (segment ids, ``attention_mask``) are flagged per tile and evaluated from
those arrays. Key columns past ``seq_k`` (the last tile's padding) count as masked, so that tile
is never ``FULL``; padding query rows are "don't care".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "EMPTY",
    "FLAG_ATTENTION_MASK",
    "FLAG_SEGMENTS",
    "FLAG_STATIC",
    "FULL",
    "PARTIAL",
    "BlockLayout",
    "SparseMask",
    "StaticBlocks",
    "block_layout",
    "block_mask",
    "causal_mask",
    "chunked_mask",
    "compile_static",
    "full_mask",
    "local_mask",
    "token_mask",
]

EMPTY, PARTIAL, FULL = 0, 1, 2
# Which fine masks a visited tile needs (bits of ``BlockLayout.kv_flags`` / ``q_flags``).
FLAG_STATIC, FLAG_SEGMENTS, FLAG_ATTENTION_MASK = 1, 2, 4
# Candidate partial tiles are evaluated this many at a time (bounds the NumPy scratch).
_EVAL_CHUNK = 256


def _window(window: Any) -> tuple[int, int]:
    from ...types.mask_info import canonical_window

    w = canonical_window(window)
    if w is None:
        raise ValueError("local_mask: window must be an int >= 0 or a (left, right) pair, got None")
    return w


@dataclasses.dataclass(frozen=True, eq=False)
class SparseMask:
    """A static attention mask: the intersection of its patterns (combine two with ``&``).

    Attributes:
        causal: key ``j`` visible iff ``j <= pos(i)``.
        windows: ``(left, right)`` pairs: ``pos(i) - left <= j <= pos(i) + right``.
        chunks: chunk sizes ``c``: ``pos(i) // c == j // c`` (chunked / local attention, Llama 4).
        block_masks: ``(mask [q_blocks, k_blocks] bool, (block_q, block_k))``: pair ``(i, j)``
            visible iff ``mask[i // block_q, j // block_k]``.
        token_masks: ``[seq_q, seq_k]`` bool arrays (visible where True).

    ``pos(i) = i + seq_k - seq_q``. Build them with :func:`causal_mask`, :func:`local_mask`,
    :func:`chunked_mask`, :func:`block_mask`, :func:`token_mask` and :func:`full_mask`.
    """

    causal: bool = False
    windows: tuple[tuple[int, int], ...] = ()
    chunks: tuple[int, ...] = ()
    block_masks: tuple[tuple[np.ndarray, tuple[int, int]], ...] = ()
    token_masks: tuple[np.ndarray, ...] = ()

    def __and__(self, other: SparseMask) -> SparseMask:
        if not isinstance(other, SparseMask):
            return NotImplemented
        return SparseMask(
            causal=self.causal or other.causal,
            windows=self.windows + other.windows,
            chunks=self.chunks + other.chunks,
            block_masks=self.block_masks + other.block_masks,
            token_masks=self.token_masks + other.token_masks,
        )

    @property
    def is_full(self) -> bool:
        return not (self.causal or self.windows or self.chunks or self.block_masks or self.token_masks)

    def key(self) -> tuple[Any, ...]:
        """A hashable identity (arrays by content) for caching compiled metadata."""
        return (
            self.causal,
            self.windows,
            self.chunks,
            tuple((m.shape, m.tobytes(), bs) for m, bs in self.block_masks),
            tuple((m.shape, m.tobytes()) for m in self.token_masks),
        )

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SparseMask) and self.key() == other.key()

    def check(self, op: str, seq_q: int, seq_k: int) -> None:
        """``ValueError`` unless every array pattern fits ``seq_q × seq_k``."""
        for m, (gq, gk) in self.block_masks:
            want = (-(-seq_q // gq), -(-seq_k // gk))
            if m.shape != want:
                raise ValueError(
                    f"{op}: a block mask with block_size ({gq}, {gk}) over seq_q={seq_q}, seq_k={seq_k} must be "
                    f"[q_blocks, k_blocks] = {want}, got {m.shape}"
                )
        for m in self.token_masks:
            if m.shape != (seq_q, seq_k):
                raise ValueError(f"{op}: a token mask must be [seq_q, seq_k] = {(seq_q, seq_k)}, got {m.shape}")

    def dense(self, seq_q: int, seq_k: int) -> np.ndarray:
        """The ``[seq_q, seq_k]`` bool mask (quadratic: for references and tests)."""
        i = np.arange(seq_q)[:, None]
        j = np.arange(seq_k)[None, :]
        return _allowed(self, i, j, seq_k - seq_q)


def _concrete_bool(name: str, x: Any, ndim: int) -> np.ndarray:
    if isinstance(x, jax.core.Tracer):
        raise TypeError(f"{name}: the mask must be concrete (NumPy or a JAX array outside jit), got a traced array")
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name}: the mask must be {ndim}-D, got shape {a.shape}")
    if a.dtype != np.bool_ and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name}: the mask must be bool or integer, got {a.dtype}")
    return a.astype(bool)


def full_mask() -> SparseMask:
    """Every pair visible (the identity of ``&``)."""
    return SparseMask()


def causal_mask() -> SparseMask:
    """Key ``j`` visible iff ``j <= i + seq_k - seq_q``."""
    return SparseMask(causal=True)


def local_mask(window: int | tuple[int, int]) -> SparseMask:
    """A sliding window: ``w`` (same as ``(w, w)``) or ``(left, right)`` keys around each position."""
    return SparseMask(windows=(_window(window),))


def chunked_mask(chunk_size: int) -> SparseMask:
    """Chunked (local) attention: a query sees only keys of its own chunk of ``chunk_size`` positions."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunked_mask: chunk_size must be an int >= 1, got {chunk_size!r}")
    return SparseMask(chunks=(int(chunk_size),))


def block_mask(mask: Any, block_size: int | tuple[int, int]) -> SparseMask:
    """An arbitrary ``[q_blocks, k_blocks]`` bool mask over blocks of ``block_size`` (an int or
    ``(block_q, block_k)``) rows and columns (the last block of each axis may be short)."""
    if isinstance(block_size, (int, np.integer)) and not isinstance(block_size, bool):
        bs = (int(block_size), int(block_size))
    elif isinstance(block_size, (tuple, list)) and len(block_size) == 2:
        bs = (int(block_size[0]), int(block_size[1]))
    else:
        raise TypeError(f"block_mask: block_size must be an int or (block_q, block_k), got {block_size!r}")
    if min(bs) < 1:
        raise ValueError(f"block_mask: block_size must be positive, got {bs}")
    return SparseMask(block_masks=((_concrete_bool("block_mask", mask, 2), bs),))


def token_mask(mask: Any) -> SparseMask:
    """A static ``[seq_q, seq_k]`` bool mask (True = visible), compiled to blocks like the others."""
    return SparseMask(token_masks=(_concrete_bool("token_mask", mask, 2),))


def _allowed(m: SparseMask, i: np.ndarray, j: np.ndarray, off: int) -> np.ndarray:
    """The mask at broadcastable row / column index arrays ``i``, ``j`` (in range)."""
    pos = i + off
    out = np.ones(np.broadcast_shapes(i.shape, j.shape), bool)
    if m.causal:
        out &= j <= pos
    for left, right in m.windows:
        out &= (j >= pos - left) & (j <= pos + right)
    for c in m.chunks:
        out &= np.floor_divide(pos, c) == np.floor_divide(j, c)
    for bm, (gq, gk) in m.block_masks:
        out &= bm[i // gq, j // gk]
    for tm in m.token_masks:
        out &= tm[i, j]
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class StaticBlocks:
    """The static part of a mask compiled at one tiling (NumPy; see the module docstring).

    Attributes:
        state: ``[q_blocks, k_blocks]`` int8: ``EMPTY``, ``PARTIAL`` or ``FULL``.
        mask_index: ``[q_blocks, k_blocks]`` int32: the tile's pattern in ``partial_masks`` when
            ``PARTIAL``, else ``-1``.
        partial_masks: ``[num_patterns >= 1, block_q, block_k]`` bool, the distinct fine masks
            (one all-False pattern when no tile is partial, so the array is never empty).
    """

    seq_q: int
    seq_k: int
    block_q: int
    block_k: int
    state: np.ndarray
    mask_index: np.ndarray
    partial_masks: np.ndarray

    @property
    def num_q_blocks(self) -> int:
        return self.state.shape[0]

    @property
    def num_kv_blocks(self) -> int:
        return self.state.shape[1]

    @property
    def max_kv_blocks(self) -> int:
        """The most key tiles any query tile visits (the schedule's static width)."""
        return max(1, int((self.state != EMPTY).sum(axis=1).max()))

    @property
    def max_q_blocks(self) -> int:
        """The most query tiles any key tile is visited by."""
        return max(1, int((self.state != EMPTY).sum(axis=0).max()))

    @property
    def density(self) -> float:
        """Fraction of tiles visited."""
        return float((self.state != EMPTY).mean())


def compile_static(mask: SparseMask, seq_q: int, seq_k: int, block_q: int, block_k: int) -> StaticBlocks:
    """Classify every tile of ``mask`` at tiles ``block_q × block_k`` (cached per arguments)."""
    return _compile_static(mask, int(seq_q), int(seq_k), int(block_q), int(block_k))


@functools.lru_cache(maxsize=64)
def _compile_static(mask: SparseMask, sq: int, sk: int, bq: int, bk: int) -> StaticBlocks:
    nq, nk = -(-sq // bq), -(-sk // bk)
    off = sk - sq
    r0 = np.arange(nq)[:, None] * bq  # first row of each query tile
    r1 = np.minimum(r0 + bq, sq) - 1  # last valid row
    c0 = np.arange(nk)[None, :] * bk
    c1 = np.minimum(c0 + bk, sk) - 1  # last valid column
    p0, p1 = r0 + off, r1 + off
    empty = np.zeros((nq, nk), bool)
    full = np.broadcast_to(c0 + bk <= sk, (nq, nk)).copy()  # key padding is masked
    if mask.causal:
        empty |= c0 > p1
        full &= c1 <= p0
    for left, right in mask.windows:
        empty |= (c1 < p0 - left) | (c0 > p1 + right)
        full &= (c0 >= p1 - left) & (c1 <= p0 + right)
    for c in mask.chunks:
        qa, qb, ka, kb = p0 // c, p1 // c, c0 // c, c1 // c
        empty |= (qb < ka) | (kb < qa)
        full &= (qa == qb) & (ka == kb) & (qa == ka)
    for bm, (gq, gk) in mask.block_masks:
        # Counts of visible cells in each tile's rectangle of the block mask, by prefix sums.
        cs = np.zeros((bm.shape[0] + 1, bm.shape[1] + 1), np.int64)
        cs[1:, 1:] = bm.astype(np.int64).cumsum(0).cumsum(1)
        a, b = r0 // gq, r1 // gq + 1
        c, d = c0 // gk, c1 // gk + 1
        n = cs[b, d] - cs[a, d] - cs[b, c] + cs[a, c]
        empty |= n == 0
        full &= n == (b - a) * (d - c)
    for tm in mask.token_masks:
        pad = np.zeros((nq * bq, nk * bk), bool)
        pad[:sq, :sk] = tm
        tiles = pad.reshape(nq, bq, nk, bk)
        rows_valid = (np.arange(nq * bq) < sq).reshape(nq, bq)[:, :, None, None]
        empty |= ~tiles.any(axis=(1, 3))
        full &= (tiles | ~rows_valid).all(axis=(1, 3))
    state = np.where(empty, EMPTY, np.where(full, FULL, PARTIAL)).astype(np.int8)
    mask_index = np.full((nq, nk), -1, np.int32)
    patterns: dict[bytes, int] = {}
    stored: list[np.ndarray] = []
    cand = np.argwhere(state == PARTIAL)
    ii = np.arange(bq)[None, :, None]
    jj = np.arange(bk)[None, None, :]
    for s in range(0, len(cand), _EVAL_CHUNK):
        blk = cand[s : s + _EVAL_CHUNK]
        i = blk[:, 0, None, None] * bq + ii
        j = blk[:, 1, None, None] * bk + jj
        row_ok, col_ok = i < sq, j < sk
        fine = _allowed(mask, np.minimum(i, sq - 1), np.minimum(j, sk - 1), off) & row_ok & col_ok
        any_ = fine.any(axis=(1, 2))
        all_ = (fine | ~row_ok).all(axis=(1, 2))
        for t, (qi, kj) in enumerate(blk):
            if not any_[t]:
                state[qi, kj] = EMPTY
            elif all_[t]:
                state[qi, kj] = FULL
            else:
                key = np.packbits(fine[t]).tobytes()
                if key not in patterns:
                    patterns[key] = len(stored)
                    stored.append(fine[t])
                mask_index[qi, kj] = patterns[key]
    partial = np.stack(stored) if stored else np.zeros((1, bq, bk), bool)
    for a in (state, mask_index, partial):
        a.setflags(write=False)
    return StaticBlocks(sq, sk, bq, bk, state, mask_index, partial)


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """The schedule the kernels follow (``jnp`` arrays; a pytree).

    ``Bm`` is the batch of the metadata: the call's batch when segment ids or a per-example
    ``attention_mask`` make tiles differ per example, else 1 (shared by every example).

    Query-major (forward, dQ): query tile ``i`` of example ``b`` visits key tiles
    ``kv_index[b, i, :kv_count[b, i]]``, each with ``kv_flags`` (``FLAG_*`` bits: which fine masks
    apply; 0 = a full tile) and ``kv_mask_index`` (its static pattern in ``partial_masks``, or 0).
    Slots past the count repeat the last visited tile (so a pipelined kernel refetches nothing)
    and must not be computed.

    Key-major (dK/dV kernels): key tile ``j`` is visited by query tiles
    ``q_index[b, j, :q_count[b, j]]``, with ``q_flags`` / ``q_mask_index`` likewise.
    """

    kv_index: Any  # [Bm, q_blocks, max_kv_blocks] int32
    kv_count: Any  # [Bm, q_blocks] int32
    kv_flags: Any  # [Bm, q_blocks, max_kv_blocks] int32
    kv_mask_index: Any  # [Bm, q_blocks, max_kv_blocks] int32
    q_index: Any  # [Bm, kv_blocks, max_q_blocks] int32
    q_count: Any  # [Bm, kv_blocks] int32
    q_flags: Any  # [Bm, kv_blocks, max_q_blocks] int32
    q_mask_index: Any  # [Bm, kv_blocks, max_q_blocks] int32
    partial_masks: Any  # [num_patterns, block_q, block_k] bool
    block_q: int = dataclasses.field(metadata={"static": True})
    block_k: int = dataclasses.field(metadata={"static": True})

    @property
    def max_kv_blocks(self) -> int:
        return int(self.kv_index.shape[-1])

    @property
    def max_q_blocks(self) -> int:
        return int(self.q_index.shape[-1])


jax.tree_util.register_dataclass(
    BlockLayout,
    data_fields=[
        "kv_index",
        "kv_count",
        "kv_flags",
        "kv_mask_index",
        "q_index",
        "q_count",
        "q_flags",
        "q_mask_index",
        "partial_masks",
    ],
    meta_fields=["block_q", "block_k"],
)


def _tile_ranges(seg: Any, n_tiles: int, block: int) -> tuple[Any, Any, Any]:
    """Per tile of ``seg [b, s]``: min and max of the real (``>= 0``) ids and whether every token is
    real (padding ids ``-1`` and the tile's padding count as not real)."""
    b, s = seg.shape
    pad = n_tiles * block - s
    x = jnp.pad(seg, ((0, 0), (0, pad)), constant_values=-1).reshape(b, n_tiles, block)
    real = x >= 0
    big = jnp.iinfo(jnp.int32).max
    lo = jnp.min(jnp.where(real, x, big), axis=-1)
    hi = jnp.max(jnp.where(real, x, -1), axis=-1)
    return lo, hi, real.all(axis=-1)


def _segment_states(q_seg: Any, kv_seg: Any, nq: int, nk: int, bq: int, bk: int) -> Any:
    """``[b, nq, nk]`` tile states of the document mask ``q_seg[i] == kv_seg[j] >= 0``: empty when the
    tiles' id ranges do not meet (right for any id layout), full when both tiles hold one id."""
    q_lo, q_hi, _ = _tile_ranges(q_seg, nq, bq)
    sq = q_seg.shape[1]
    # Padding query rows are "don't care": the query tile is one-id if its real rows are.
    q_rows = jnp.pad(q_seg, ((0, 0), (0, nq * bq - sq)), constant_values=-2).reshape(q_seg.shape[0], nq, bq)
    q_real = jnp.where(q_rows == -2, True, q_rows >= 0).all(axis=-1)
    k_lo, k_hi, k_real = _tile_ranges(kv_seg, nk, bk)
    meet = (q_lo[:, :, None] <= k_hi[:, None, :]) & (k_lo[:, None, :] <= q_hi[:, :, None])
    one = (q_lo == q_hi)[:, :, None] & (k_lo == k_hi)[:, None, :] & (q_lo[:, :, None] == k_lo[:, None, :])
    full = one & q_real[:, :, None] & k_real[:, None, :]
    return jnp.where(meet, jnp.where(full, FULL, PARTIAL), EMPTY).astype(jnp.int32)


def _mask_states(mask: Any, sq: int, nq: int, nk: int, bq: int, bk: int) -> Any:
    """``[B1, nq, nk]`` tile states of a pairwise mask ``[B1, H1, sq, sk]`` (every head's union
    decides emptiness; a tile is full only when every head sees all of it)."""
    b1, h1, _, sk = mask.shape
    pad = jnp.pad(mask, ((0, 0), (0, 0), (0, nq * bq - sq), (0, nk * bk - sk)))
    tiles = pad.reshape(b1, h1, nq, bq, nk, bk)
    rows_pad = (jnp.arange(nq * bq) >= sq).reshape(nq, bq)[:, :, None, None]
    any_ = tiles.any(axis=(1, 3, 5))
    all_ = (tiles | rows_pad).all(axis=(1, 3, 5))
    return jnp.where(any_, jnp.where(all_, FULL, PARTIAL), EMPTY).astype(jnp.int32)


def _schedule(state: Any, flags: Any, mask_index: Any, width: int) -> tuple[Any, Any, Any, Any]:
    """Compact each row of ``state [Bm, rows, cols]`` to its visited columns (in order), ``width`` wide."""
    visited = state != EMPTY
    count = visited.sum(axis=-1).astype(jnp.int32)
    cols = jnp.arange(state.shape[-1], dtype=jnp.int32)
    # Visited columns first, in increasing order (a stable sort of the "not visited" key).
    order = jnp.argsort(jnp.where(visited, cols, state.shape[-1] + cols), axis=-1).astype(jnp.int32)
    order = order[..., :width]
    slot = jnp.arange(width, dtype=jnp.int32)
    last = jnp.take_along_axis(order, jnp.maximum(count - 1, 0)[..., None], axis=-1)
    index = jnp.where(slot < count[..., None], order, last)
    fl = jnp.take_along_axis(flags, index, axis=-1)
    mi = jnp.take_along_axis(mask_index, index, axis=-1)
    return index, count, jnp.where(slot < count[..., None], fl, 0), jnp.maximum(mi, 0)


def block_layout(
    static: StaticBlocks,
    q_segment_ids: Any = None,
    kv_segment_ids: Any = None,
    attention_mask: Any = None,
) -> BlockLayout:
    """The kernels' schedule: the compiled static mask intersected with the runtime document mask
    (``q_segment_ids [b, seq_q]``, ``kv_segment_ids [b, seq_k]``, ``-1`` = padding) and pairwise
    ``attention_mask [B1, H1, seq_q, seq_k]`` (works under ``jit``)."""
    nq, nk, bq, bk = static.num_q_blocks, static.num_kv_blocks, static.block_q, static.block_k
    state = jnp.asarray(static.state, jnp.int32)[None]
    flags = jnp.where(state == PARTIAL, FLAG_STATIC, 0)
    if q_segment_ids is not None:
        s = _segment_states(q_segment_ids, kv_segment_ids, nq, nk, bq, bk)
        flags = flags | jnp.where(s == PARTIAL, FLAG_SEGMENTS, 0)
        state = jnp.minimum(state, s)
    if attention_mask is not None:
        s = _mask_states(attention_mask, static.seq_q, nq, nk, bq, bk)
        flags = flags | jnp.where(s == PARTIAL, FLAG_ATTENTION_MASK, 0)
        state = jnp.minimum(state, s)
    flags = jnp.where(state == EMPTY, 0, flags).astype(jnp.int32)
    mi = jnp.broadcast_to(jnp.asarray(static.mask_index, jnp.int32)[None], state.shape)
    kv = _schedule(state, flags, mi, static.max_kv_blocks)
    t = (0, 2, 1)
    qm = _schedule(state.transpose(t), flags.transpose(t), mi.transpose(t), static.max_q_blocks)
    return BlockLayout(*kv, *qm, partial_masks=jnp.asarray(static.partial_masks), block_q=bq, block_k=bk)


def intersect(masks: Sequence[SparseMask]) -> SparseMask:
    """The intersection of ``masks`` (the full mask when empty)."""
    out = full_mask()
    for m in masks:
        out = out & m
    return out
