"""What the delta-rule kernels (``_kernel``, ``_intra``) need of the GPU for a config.

As for the linear family (``ejkernel_triton._linear.resources``): each kernel's need is
``SCALE[kernel] × T``, ``T`` the bytes of a ``[C, BK]``, a ``[C, BV]``, a ``[BK, BV]`` and a
``[C, C]`` tile in the inputs' dtype (``C`` the chunk, ``BK``/``BV`` the kernel's key and value
blocks), ``SCALE`` the largest ratio of Triton 3.6's compiled ``metadata.shared`` to ``T`` over
value blocks 16-64, 2-8 warps, head dims 64-256, 16- and 32-bit inputs, scalar and per-channel
gates, for sm_80/86 (also sm_120's) and sm_90 (sm_100's too), rounded up. The state walks' scale grows with the warps on sm_90
(its wgmma layouts: 49152 B at 2 warps, 163840 B at 8, head dim 128 and 64-wide value blocks),
so theirs is per 4 warps there. The intra-chunk kernels (fixed tiles over the whole key and value
widths, no ``[BK, BV]`` product) need three float32 ``[C, C]`` tiles (the inverse's) and
``SCALE × (C·BK + C·BV)`` bytes.
"""

from __future__ import annotations

from ejkernel.ops import Need
from ejkernel.ops.resources import warpgroup_mma

# kernel -> (scale with warp-level MMA, with warpgroup MMA: ``warpgroup_mma``); the state
# walks' per 4 warps with warpgroup MMA.
SCALE = {
    "fwd_h": (1.5, 3.0),
    "bwd_dh": (2.25, 4.5),
    "fwd_o": (1.0, 1.0),  # compiled exactly T (sm_80/86/90, head dims 128 and 256)
    "bwd_dqkw": (1.5, 2.5),
    "intra": (0.75, 1.0),
}
PER_WARP = ("fwd_h", "bwd_dh")
# Float32 inputs' scales where they differ from 16-bit inputs' (their tiles count twice the bytes;
# sm_86: 126976 B at head dim 128, 16-wide value blocks, 2 warps, against 61440 B of tiles; the
# per-4-warps factor on sm_90 applies to both).
F32_SCALE = {"fwd_h": (1.5, 1.5), "bwd_dh": (2.25, 2.25)}


def _pow2(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def tile_bytes(c: int, bk: int, bv: int, itemsize: int) -> int:
    return (c * bk + c * bv + bk * bv + c * c) * itemsize


def needs(
    chunk: int, block_v: int, warps: int, k: int, v: int, itemsize: int, intra: bool, cc: tuple[int, int] | None
) -> list[Need]:
    """The inter-chunk kernels (``_call``'s tiles) and, with ``intra`` (the Triton WY kernels run),
    the intra-chunk ones."""
    from ._call import DQKW_BLOCK_V, INTRA_WARPS, O_BLOCK_V, O_WARPS, dqkw_tiles

    hopper = warpgroup_mma(cc)

    def need(kernel: str, bk: int, bv: int, w: int) -> Need:
        scale = (F32_SCALE if itemsize == 4 and kernel in F32_SCALE else SCALE)[kernel][1 if hopper else 0]
        if kernel in PER_WARP and hopper:
            scale *= max(1.0, w / 4)
        return Need(kernel, int(scale * tile_bytes(chunk, bk, bv, itemsize)), 32 * w)

    bk, vp = _pow2(k), _pow2(v)
    dq_bk, dq_warps = dqkw_tiles(chunk, k)
    out = [
        need("fwd_h", bk, block_v, warps),
        need("bwd_dh", bk, block_v, warps),
        need("fwd_o", bk, min(O_BLOCK_V, vp), O_WARPS),
        need("bwd_dqkw", dq_bk, min(DQKW_BLOCK_V, vp), dq_warps),
    ]
    if intra:
        scale = SCALE["intra"][1 if hopper else 0]
        smem = 3 * chunk * chunk * 4 + int(scale * (chunk * bk + chunk * vp) * itemsize)
        out.append(Need("intra-chunk WY", smem, 32 * max(INTRA_WARPS.values())))
    return out
