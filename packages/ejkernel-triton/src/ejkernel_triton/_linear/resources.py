"""What the chunked linear-attention kernels (``_kernel``) need of the GPU for a config.

Each kernel holds a handful of tiles over the chunk (``BT`` tokens), the key block (``BK``) and the
value block (``BV``): ``[BT, BK]`` queries and keys, ``[BT, BV]`` values and outputs, a
``[BK, BV]`` state, ``[BT, BT]`` scores. Triton keeps the operands of its products and the layout
changes between them in shared memory, and how many of those are alive at once depends on the
kernel and the architecture. The need is declared as ``SCALE[kernel] × T`` with ``T`` the bytes
of those four tiles in the inputs' dtype, ``SCALE`` the largest ratio of Triton 3.6's compiled
``metadata.shared`` to ``T`` over the heuristic and autotuning spaces (chunks 16-128, value blocks
32-128, 4 and 8 warps, head dims 64-256, 16- and 32-bit inputs, scalar and per-channel gates) for
sm_80/86 and for sm_90 (whose wgmma layouts take more), rounded up; the suite recompiles a sample
(``tests/ops/test_kernel_resources.py``).
"""

from __future__ import annotations

from typing import Any

from ejkernel.ops import Need
from ejkernel.ops.resources import warpgroup_mma

# kernel -> (scale with warp-level MMA, with warpgroup MMA: ``warpgroup_mma``).
SCALE = {
    "fwd_h": (1.5, 1.75),
    "fwd_o": (2.0, 2.0),
    "bwd_dh": (1.5, 1.75),
    "bwd_dv": (2.0, 2.0),
    "bwd_dqk": (2.0, 2.5),
}


def tile_bytes(bt: int, bk: int, bv: int, itemsize: int) -> int:
    """``T``: a ``[BT, BK]``, a ``[BT, BV]``, a ``[BK, BV]`` and a ``[BT, BT]`` tile."""
    return (bt * bk + bt * bv + bk * bv + bt * bt) * itemsize


def needs(
    chunk: int,
    block_v: int,
    warps: int,
    k: int,
    v: int,
    state_block: int,
    itemsize: int,
    cc: tuple[int, int] | None,
) -> list[Need]:
    """The five kernels of one call (``_call``'s tiles: the state walks at ``state_block``-wide
    tiles, the chunk kernels over the whole key width, ``bwd_dqk`` over 64 key channels, and the
    backward's chunk kernels at 8 warps for 128-token chunks)."""
    from ._call import WIDE_CHUNK_WARPS, _tile

    hopper = warpgroup_mma(cc)

    def need(kernel: str, bk: int, bv: int, w: int) -> Need:
        scale = SCALE[kernel][1 if hopper else 0]
        return Need(kernel, int(scale * tile_bytes(chunk, bk, bv, itemsize)), 32 * w)

    sk, sv = _tile(k, state_block), _tile(v, state_block)
    bv = _tile(v, block_v)
    bwd_warps = max(warps, WIDE_CHUNK_WARPS) if chunk >= 128 else warps
    return [
        need("fwd_h", sk, sv, warps),
        need("fwd_o", _tile(k), bv, warps),
        need("bwd_dh", sk, sv, warps),
        need("bwd_dv", _tile(k), bv, bwd_warps),
        need("bwd_dqk", _tile(k, 64), bv, bwd_warps),
    ]


def shapes(args: Any, op: Any) -> tuple[int, int, int, int]:
    """``(sequences x heads, head_dim, value_head_dim, itemsize)`` of a call."""
    import jax

    def problem(a: Any) -> Any:
        p = op.problem(a)
        return p.q, p.v, p.cu_seqlens

    q, val, cu = jax.eval_shape(problem, args)
    b, _, h, k = q.shape
    n = cu.shape[0] - 1 if cu is not None else b
    return n * h, k, val.shape[-1], q.dtype.itemsize
