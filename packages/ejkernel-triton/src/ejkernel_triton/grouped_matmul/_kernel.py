"""The grouped GEMM kernels: megablox's ``gmm`` and ``tgmm`` (Gale et al. 2022, MegaBlocks,
section 5) as Triton programs for NVIDIA GPUs.

``gmm_kernel``: ``out[rows of group j] = a[rows] @ b[j]`` for every local group ``j``, where ``b``
is read through strides (``[g, K, N]`` or its transpose: the forward with ``rhs`` or ``rhsᵀ``,
and ``dlhs = dout @ rhs[j]ᵀ``); with ``HAS_SCALE`` the float32 accumulator of a tile is
multiplied by its group's scale row ``scale[j, N]`` before the store (``rhs_scale``). One program computes a ``[BLOCK_M, BLOCK_N]`` tile of rows of ONE
segment (a group, or a run of rows outside the local groups, written as zeros). The tile schedule
is computed by every program from ``group_sizes`` and ``group_offset`` (``_segments``: a prefix sum
over at most ``S_PAD`` segments, then a one-hot lookup of the program's tile): no XLA program runs
before the kernel (those cost ~12 us per call on an H100, 5 % of the 64-expert forward). The
schedule is at most ``cdiv(m, BLOCK_M) + g + 2`` tiles long; programs past its end do nothing. A
tile never straddles two groups, so each output row is written exactly once. Rows past a segment
are loaded (clamped into ``[0, m)``: always valid memory) and dropped at the store, which keeps the
loads unmasked. A segment's last tile runs ``TAIL_M``-row products (half a tile) when that many
rows are enough: groups of 256 +- 16 rows (64 experts, 16384 tokens) compute ~25 % more rows than
they hold with whole 128-row tiles, ~12 % with half tiles at the group ends (measured: ~3 % of the
forward). With ``NUM_PROGRAMS > 0`` the grid is persistent: that many programs (a multiple of the
SM count) write the rows outside the groups, then stride over the groups' whole tiles in one loop
flattened with the k loop, so the next tile's loads overlap this tile's epilogue
(``_gmm_persistent``).

``tgmm_kernel``: ``db[j] = a[rows of j]ᵀ @ dout[rows of j]`` (the rhs gradient): one program
computes a ``[BLOCK_M, BLOCK_N]`` tile of ``db[j]`` (over ``K`` and ``N``), walking the group's
rows ``BLOCK_K`` at a time (masked at the group's ends); with ``SPLIT > 1`` program ``s`` takes
every ``SPLIT``-th chunk of rows and writes a float32 partial reduced afterwards. Empty groups
write zeros. Products run on tensor cores (``tl.dot``) with a float32 accumulator. Its programs are
short (~8 us at 64 experts: 4 steps of 64 rows) and many (6144), so they read their group's
bounds from ``bounds_kernel``'s output, one launch before them, rather than each computing them
(H100: 0.371 against 0.401 ms; for ``gmm_kernel``'s ~30 us
programs, computing the schedule in the prologue is the faster of the two: 0.228 against 0.238 ms).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _segments(sizes_ptr, offset_ptr, M: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr):
    """The segments that cover rows ``[0, M)`` in order, as vectors over ``s < S_PAD``: ``s = 0``
    the rows before the local groups, ``s = 1 .. G`` local group ``s - 1`` (global group
    ``group_offset + s - 1``), ``s = G + 1`` the rows after them; larger ``s`` are empty. Returns
    each segment's first row and end row, clamped into ``[0, M]`` (``lax.ragged_dot``'s groups
    never reach past the rows; clamped, they cannot make a store do so either)."""
    off = tl.load(offset_ptr)
    base = tl.zeros((), tl.int32)  # rows of the groups before the local ones
    for c in range(0, off, S_PAD):
        i = c + tl.arange(0, S_PAD)
        base += tl.sum(tl.maximum(tl.load(sizes_ptr + i, mask=i < off, other=0), 0))
    s = tl.arange(0, S_PAD)
    j = s - 1
    size = tl.maximum(tl.load(sizes_ptr + off + j, mask=(j >= 0) & (j < G), other=0), 0)
    end = base + tl.cumsum(size, 0)
    lo = tl.where(s == 0, 0, end - size)
    hi = tl.where(s == 0, base, tl.where(s == G + 1, M, end))
    return tl.minimum(lo, M), tl.minimum(hi, M)


@triton.jit
def schedule(sizes_ptr, offset_ptr, M: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """The tile schedule as vectors over the segments (``_segments``): first row, end row, first
    schedule entry and number of ``BLOCK_M``-row entries of each."""
    lo, hi = _segments(sizes_ptr, offset_ptr, M, G, S_PAD)
    ntiles = (hi - lo + BLOCK_M - 1) // BLOCK_M
    return lo, hi, tl.cumsum(ntiles, 0) - ntiles, ntiles


@triton.jit
def tile_of(i_t, lo, hi, first, ntiles, G: tl.constexpr, S_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """Schedule entry ``i_t``: its segment (``j >= 0``: local group ``j``; ``-1``: rows outside
    the local groups, written as zeros; ``-2``: past the schedule), its first row and its
    segment's end row. Segment ``s`` owns entries ``[first[s], first[s] + ntiles[s])``, so at most
    one ``s`` matches (empty segments own none)."""
    s = tl.arange(0, S_PAD)
    hit = (first <= i_t) & (i_t < first + ntiles)
    seg_s = tl.sum(tl.where(hit, s, 0))
    row0 = tl.sum(tl.where(hit, lo + (i_t - first) * BLOCK_M, 0))
    row_end = tl.sum(tl.where(hit, hi, 0))
    inside = (seg_s >= 1) & (seg_s <= G)
    seg = tl.where(i_t < tl.sum(ntiles), tl.where(inside, seg_s - 1, -1), -2)
    return seg, row0, row_end


@triton.jit
def bounds_kernel(
    sizes_ptr, offset_ptr, starts_ptr, ends_ptr, M: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr
):  # fmt: skip
    """Program ``i`` writes the row bounds of local group ``i`` (what ``tgmm_kernel`` reads)."""
    i = tl.program_id(0)
    lo, hi = _segments(sizes_ptr, offset_ptr, M, G, S_PAD)
    own = tl.arange(0, S_PAD) == i + 1  # segment i + 1 is local group i
    tl.store(starts_ptr + i, tl.sum(tl.where(own, lo, 0)))
    tl.store(ends_ptr + i, tl.sum(tl.where(own, hi, 0)))


@triton.jit
def _gmm_rows(
    a_ptr, b_ptr, scale_ptr, out_ptr, seg, row0, row_end, i_n,
    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
    stride_bg: tl.constexpr, stride_bk: tl.constexpr, stride_bn: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, DOT_PRECISION: tl.constexpr, HAS_SCALE: tl.constexpr,
):  # fmt: skip
    """Rows ``[row0, min(row0 + BLOCK_M, row_end))`` x column block ``i_n`` of segment ``seg``."""
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_store = (offs_m < row_end)[:, None] & (offs_n < N)[None, :]
    # Rows outside the groups (seg -1) run no k step: their zero accumulator is stored.
    k_stop = tl.where(seg >= 0, K, 0)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)  # rows of other segments: valid memory, never stored
    cols = offs_n % N
    p_a = a_ptr + rows[:, None] * K + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
    p_b = b_ptr + tl.maximum(seg, 0).to(tl.int64) * stride_bg + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_stop, BLOCK_K):
        if EVEN_K:
            b_a = tl.load(p_a)
            b_b = tl.load(p_b)  # [BLOCK_K, BLOCK_N]
        else:
            in_k = (k0 + offs_k) < K
            b_a = tl.load(p_a, mask=in_k[None, :], other=0.0)
            b_b = tl.load(p_b, mask=in_k[:, None], other=0.0)
        acc = tl.dot(b_a, b_b, acc, input_precision=DOT_PRECISION)
        p_a += BLOCK_K
        p_b += BLOCK_K * stride_bk
    if HAS_SCALE:  # rows outside the groups hold zeros: any group's scale keeps them zero
        acc *= tl.load(scale_ptr + tl.maximum(seg, 0).to(tl.int64) * N + cols)[None, :]
    p_out = out_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    tl.store(p_out, acc.to(out_ptr.dtype.element_ty), mask=m_store & (seg > -2))


@triton.jit
def _gmm_tile(
    tile, a_ptr, b_ptr, scale_ptr, lo, hi, first, ntiles, out_ptr,
    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
    stride_bg: tl.constexpr, stride_bk: tl.constexpr, stride_bn: tl.constexpr,
    G: tl.constexpr, S_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TAIL_M: tl.constexpr,
    EVEN_K: tl.constexpr, DOT_PRECISION: tl.constexpr, HAS_SCALE: tl.constexpr,
):  # fmt: skip
    """One ``[BLOCK_M, BLOCK_N]`` output tile: schedule entry ``tile // tiles_n``, column block
    ``tile % tiles_n`` (consecutive tiles share the rows and the group's matrix: L2 reuse). With
    ``TAIL_M > 0``, a segment's last tile holding at most ``TAIL_M`` rows runs ``TAIL_M``-row
    products: half the work of a full tile for the group ends that need no more."""
    num_tiles_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    i_t = tile // num_tiles_n
    i_n = tile % num_tiles_n
    seg, row0, row_end = tile_of(i_t, lo, hi, first, ntiles, G, S_PAD, BLOCK_M)
    if TAIL_M > 0:  # compile time: a runtime branch over two tile heights
        if row_end - row0 <= TAIL_M:
            _gmm_rows(
                a_ptr, b_ptr, scale_ptr, out_ptr, seg, row0, row_end, i_n, M, N, K, stride_bg, stride_bk, stride_bn,
                TAIL_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_PRECISION, HAS_SCALE,
            )  # fmt: skip
        else:
            _gmm_rows(
                a_ptr, b_ptr, scale_ptr, out_ptr, seg, row0, row_end, i_n, M, N, K, stride_bg, stride_bk, stride_bn,
                BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_PRECISION, HAS_SCALE,
            )  # fmt: skip
    else:
        _gmm_rows(
            a_ptr, b_ptr, scale_ptr, out_ptr, seg, row0, row_end, i_n, M, N, K, stride_bg, stride_bk, stride_bn,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_PRECISION, HAS_SCALE,
        )  # fmt: skip


@triton.jit
def _gmm_zero_rows(
    pid, lo, hi, out_ptr, M: tl.constexpr, N: tl.constexpr, G: tl.constexpr, S_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
):  # fmt: skip
    """Zeros in the rows outside the local groups (segments ``0`` and ``G + 1``), no product."""
    s = tl.arange(0, S_PAD)
    outside = (s == 0) | (s == G + 1)
    ntiles = tl.where(outside, (hi - lo + BLOCK_M - 1) // BLOCK_M, 0)
    first = tl.cumsum(ntiles, 0) - ntiles
    num_tiles_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    for tile in range(pid, tl.sum(ntiles) * num_tiles_n, NUM_PROGRAMS):
        _, row0, row_end = tile_of(tile // num_tiles_n, lo, hi, first, ntiles, G, S_PAD, BLOCK_M)
        offs_m = row0 + tl.arange(0, BLOCK_M)
        offs_n = (tile % num_tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_store = (offs_m < row_end)[:, None] & (offs_n < N)[None, :]
        zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=out_ptr.dtype.element_ty)
        tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :], zeros, mask=m_store)


@triton.jit
def _gmm_persistent(
    pid, a_ptr, b_ptr, scale_ptr, lo, hi, out_ptr,
    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
    stride_bg: tl.constexpr, stride_bk: tl.constexpr, stride_bn: tl.constexpr,
    G: tl.constexpr, S_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_PROGRAMS: tl.constexpr, HAS_SCALE: tl.constexpr,
):  # fmt: skip
    """The persistent grid: the zero rows, then the groups' ``BLOCK_M``-row tiles (whole tiles:
    no half tiles at the group ends), ``NUM_PROGRAMS`` programs striding over them. The tile loop
    is flattened into the k loop (``tl.range(..., flatten=True)``, Triton's persistent matmul),
    so the software pipeline loads the next tile's first k steps during this tile's epilogue;
    that needs a k loop of the same length in every tile, hence the zero rows' separate loop.
    The tile body is ``_gmm_rows``'s without its runtime k bound and segment checks, written out:
    routing both through one function with a compile-time switch changed the PTX of both kernels
    (sm_90), and these are the instructions that were timed."""
    _gmm_zero_rows(pid, lo, hi, out_ptr, M, N, G, S_PAD, BLOCK_M, BLOCK_N, NUM_PROGRAMS)
    s = tl.arange(0, S_PAD)
    ntiles = tl.where((s >= 1) & (s <= G), (hi - lo + BLOCK_M - 1) // BLOCK_M, 0)
    first = tl.cumsum(ntiles, 0) - ntiles
    num_tiles_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(pid, tl.sum(ntiles) * num_tiles_n, NUM_PROGRAMS, flatten=True):
        seg, row0, row_end = tile_of(tile // num_tiles_n, lo, hi, first, ntiles, G, S_PAD, BLOCK_M)
        offs_m = row0 + tl.arange(0, BLOCK_M)
        offs_n = (tile % num_tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = (offs_m % M).to(tl.int64)  # rows of the next segment: valid memory, never stored
        cols = offs_n % N
        p_a = a_ptr + rows[:, None] * K + offs_k[None, :]
        p_b = b_ptr + seg.to(tl.int64) * stride_bg + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                b_a = tl.load(p_a)
                b_b = tl.load(p_b)
            else:
                in_k = (k0 + offs_k) < K
                b_a = tl.load(p_a, mask=in_k[None, :], other=0.0)
                b_b = tl.load(p_b, mask=in_k[:, None], other=0.0)
            acc = tl.dot(b_a, b_b, acc, input_precision=DOT_PRECISION)
            p_a += BLOCK_K
            p_b += BLOCK_K * stride_bk
        if HAS_SCALE:
            acc *= tl.load(scale_ptr + seg.to(tl.int64) * N + cols)[None, :]
        m_store = (offs_m < row_end)[:, None] & (offs_n < N)[None, :]
        p_out = out_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(p_out, acc.to(out_ptr.dtype.element_ty), mask=m_store)


@triton.jit
def gmm_kernel(
    a_ptr, b_ptr, sizes_ptr, offset_ptr, scale_ptr, out_ptr,
    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
    stride_bg: tl.constexpr, stride_bk: tl.constexpr, stride_bn: tl.constexpr,
    G: tl.constexpr, S_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TAIL_M: tl.constexpr,
    EVEN_K: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_PROGRAMS: tl.constexpr, HAS_SCALE: tl.constexpr,
):  # fmt: skip
    """``NUM_PROGRAMS == 0``: one program per tile of the schedule's upper bound (those past
    its end store nothing). Else persistent (``_gmm_persistent``): ``NUM_PROGRAMS`` programs
    stride over the schedule's actual tiles."""
    pid = tl.program_id(0)
    if NUM_PROGRAMS == 0:
        lo, hi, first, ntiles = schedule(sizes_ptr, offset_ptr, M, G, S_PAD, BLOCK_M)
        _gmm_tile(
            pid, a_ptr, b_ptr, scale_ptr, lo, hi, first, ntiles, out_ptr, M, N, K, stride_bg, stride_bk, stride_bn,
            G, S_PAD, BLOCK_M, BLOCK_N, BLOCK_K, TAIL_M, EVEN_K, DOT_PRECISION, HAS_SCALE,
        )  # fmt: skip
    else:
        lo, hi = _segments(sizes_ptr, offset_ptr, M, G, S_PAD)
        _gmm_persistent(
            pid, a_ptr, b_ptr, scale_ptr, lo, hi, out_ptr, M, N, K, stride_bg, stride_bk, stride_bn, G, S_PAD,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_PRECISION, NUM_PROGRAMS, HAS_SCALE,
        )  # fmt: skip


@triton.jit
def tgmm_kernel(
    a_ptr, d_ptr, starts_ptr, ends_ptr, out_ptr,
    N: tl.constexpr, K: tl.constexpr,
    stride_og: tl.constexpr, stride_ok: tl.constexpr, stride_on: tl.constexpr, stride_os: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    i_s = tl.program_id(1)
    num_tiles_k: tl.constexpr = (K + BLOCK_M - 1) // BLOCK_M
    num_tiles_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    tiles: tl.constexpr = num_tiles_k * num_tiles_n
    g = pid // tiles
    i_k = (pid % tiles) // num_tiles_n
    i_n = pid % num_tiles_n
    start = tl.load(starts_ptr + g)
    end = tl.load(ends_ptr + g)
    offs_k = i_k * BLOCK_M + tl.arange(0, BLOCK_M)  # db rows: lhs columns
    offs_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_K)
    ks = offs_k % K
    ns = offs_n % N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(start + i_s * BLOCK_K, end, SPLIT * BLOCK_K):
        rows = r0 + offs_r
        in_g = rows < end
        rows64 = rows.to(tl.int64)
        b_a = tl.load(a_ptr + rows64[:, None] * K + ks[None, :], mask=in_g[:, None], other=0.0)  # [BLOCK_K, BLOCK_M]
        b_d = tl.load(d_ptr + rows64[:, None] * N + ns[None, :], mask=in_g[:, None], other=0.0)  # [BLOCK_K, BLOCK_N]
        acc = tl.dot(tl.trans(b_a), b_d, acc, input_precision=DOT_PRECISION)
    p_out = (
        out_ptr + i_s.to(tl.int64) * stride_os + g.to(tl.int64) * stride_og
        + offs_k.to(tl.int64)[:, None] * stride_ok + offs_n[None, :] * stride_on
    )  # fmt: skip
    tl.store(p_out, acc.to(out_ptr.dtype.element_ty), mask=(offs_k < K)[:, None] & (offs_n < N)[None, :])
