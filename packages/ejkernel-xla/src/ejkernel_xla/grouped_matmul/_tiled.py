"""The tiled form of ``grouped_matmul`` (megablox style): a loop over chunks of one group's rows.

Each local group's rows are cut into chunks of ``block`` rows (its last chunk shorter): however
the rows fall, there are at most ``(m + g·(block - 1)) // block`` chunks. The loop runs one
``[block, k] @ [k, n]`` product per chunk, reading the chunk's group's matrix in place, and writes
the chunk's rows of the output; the rows of no chunk stay zero. That costs the dense product's
FLOPs plus at most ``block - 1`` rows per group, where ``lax.ragged_dot`` on the CPU multiplies
every row by every group's matrix (``g`` times the FLOPs). A chunk's window is ``block`` rows from
its first row, moved back to end at row ``m`` where it would run past it: only the chunk's rows
are written. Gathering each chunk's matrix into one batched product instead would copy
``chunks·k·n`` elements, which takes as long as the products on a CPU.

The loops run only the real chunks (a while loop, which autodiff does not transpose), so the
backward is its own (custom VJP; reverse mode only): two more loops over the chunks, one writing
each chunk's rows of ``dlhs``, one adding its ``lhsᵀ·dout`` into its group's ``drhs`` (float32) in
place. (Autodiff of a fixed-length loop adds a zero-padded ``[g, k, n]`` cotangent of ``rhs`` at
every step: about 1.5x the time of these loops on the CPU.)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ejkernel.ops.families.attention_math import vary_like, varying_axes

F32 = jnp.float32


class Chunks(NamedTuple):
    """The chunks of the local groups' rows, in row order: chunk ``c`` is rows
    ``[lo[c], hi[c])`` of local group ``group[c]``, inside the window of ``block`` rows from
    ``start[c]``; the first ``count`` chunks are real."""

    group: jax.Array
    start: jax.Array
    lo: jax.Array
    hi: jax.Array
    count: jax.Array


def max_chunks(m: int, groups: int, block: int) -> int:
    """The most chunks ``m`` rows in ``groups`` groups can make (each group adds a partial chunk)."""
    return (m + groups * (block - 1)) // block


def chunks(starts: jax.Array, ends: jax.Array, m: int, block: int) -> Chunks:
    """The chunks of the local groups whose rows are ``[starts[j], ends[j])`` (traced-safe)."""
    groups = starts.shape[0]
    per = (ends - starts + block - 1) // block
    last = jnp.cumsum(per)
    c = jnp.arange(max_chunks(m, groups, block), dtype=jnp.int32)
    group = jnp.minimum(jnp.searchsorted(last, c, side="right"), groups - 1).astype(jnp.int32)
    lo = starts[group] + (c - last[group] + per[group]) * block
    hi = jnp.minimum(lo + block, ends[group])
    return Chunks(group, jnp.clip(lo, 0, m - block), lo, hi, last[-1])


def _rows(ch: Chunks, c: jax.Array, block: int) -> tuple[jax.Array, jax.Array]:
    """Chunk ``c``'s window start and which of its ``block`` rows are the chunk's (``[block, 1]``)."""
    start = ch.start[c]
    rows = start + jnp.arange(block, dtype=jnp.int32)
    return start, ((rows >= ch.lo[c]) & (rows < ch.hi[c]))[:, None]


def _write(buf: jax.Array, part: jax.Array, start: jax.Array, inside: jax.Array) -> jax.Array:
    """``buf`` with the window's chunk rows from ``part`` (the window's other rows kept)."""
    old = jax.lax.dynamic_slice_in_dim(buf, start, part.shape[0])
    return jax.lax.dynamic_update_slice_in_dim(buf, jnp.where(inside, part.astype(buf.dtype), old), start, 0)


def _dot(x: jax.Array, y: jax.Array, contract: tuple[int, int], precision, out_dtype) -> jax.Array:
    return jax.lax.dot_general(
        x, y, (((contract[0],), (contract[1],)), ((), ())), precision=precision, preferred_element_type=out_dtype
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def tiled_matmul(
    lhs: jax.Array, rhs: jax.Array, ch: Chunks, block: int, transpose_rhs: bool, precision, out_dtype
) -> jax.Array:
    """``[m, n]``: each chunk's rows of ``lhs`` times its group's ``rhs`` (``[g, n, k]`` with
    ``transpose_rhs``), zeros in the rows of no chunk."""
    m, n = lhs.shape[0], rhs.shape[1 if transpose_rhs else 2]
    w_k = 1 if transpose_rhs else 0  # the contracted axis of one group's matrix

    def step(c, out):
        start, inside = _rows(ch, c, block)
        x = jax.lax.dynamic_slice_in_dim(lhs, start, block)
        return _write(out, _dot(x, rhs[ch.group[c]], (1, w_k), precision, out_dtype), start, inside)

    return jax.lax.fori_loop(0, ch.count, step, vary_like(jnp.zeros((m, n), out_dtype), lhs, rhs, ch))


def _tiled_fwd(lhs, rhs, ch, block, transpose_rhs, precision, out_dtype):
    return tiled_matmul(lhs, rhs, ch, block, transpose_rhs, precision, out_dtype), (lhs, rhs, ch)


def _tiled_bwd(block, transpose_rhs, precision, out_dtype, res, dout):
    lhs, rhs, ch = res
    w_n = 0 if transpose_rhs else 1  # the output axis of one group's matrix

    def lstep(c, dlhs):
        start, inside = _rows(ch, c, block)
        dy = jax.lax.dynamic_slice_in_dim(dout, start, block)
        return _write(dlhs, _dot(dy, rhs[ch.group[c]], (1, w_n), precision, F32), start, inside)

    def rstep(c, drhs):
        start, inside = _rows(ch, c, block)
        x = jnp.where(inside, jax.lax.dynamic_slice_in_dim(lhs, start, block), 0)
        dy = jax.lax.dynamic_slice_in_dim(dout, start, block)
        dw = _dot(dy, x, (0, 0), precision, F32) if transpose_rhs else _dot(x, dy, (0, 0), precision, F32)
        return drhs.at[ch.group[c]].add(dw)

    init = vary_like((jnp.zeros_like(lhs), jnp.zeros(rhs.shape, F32)), lhs, rhs, ch, dout)
    dlhs = jax.lax.fori_loop(0, ch.count, lstep, init[0])
    drhs = jax.lax.fori_loop(0, ch.count, rstep, init[1])
    return _typed_like(dlhs, lhs), _typed_like(drhs, rhs), None


def _typed_like(g: jax.Array, x: jax.Array) -> jax.Array:
    """The cotangent ``g`` in the dtype and manual-axis type of its primal ``x``: under
    ``shard_map(check_vma=True)`` an operand the same on every device of an axis (weights
    replicated over a data-parallel axis) gets the sum of the devices' contributions."""
    extra = tuple(sorted(varying_axes(g) - varying_axes(x), key=str))
    if extra:
        g = jax.lax.psum(g, extra)
    return vary_like(g.astype(x.dtype), x)


tiled_matmul.defvjp(_tiled_fwd, _tiled_bwd)
