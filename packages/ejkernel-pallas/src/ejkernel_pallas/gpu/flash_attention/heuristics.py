"""Tiles of the Mosaic GPU flash attention: pure functions of the head dim.

``q_blocksize`` is one warpgroup's query rows (the forward's program takes two warpgroups, so
``2 x q_blocksize`` rows), ``kv_blocksize`` the key tile, ``num_stages`` the K/V (forward, dQ)
or Q/dO (dK/dV) slots in flight. Every tile is a multiple of 64 (``wgmma``'s row step and the
128-byte swizzle of 16-bit tiles); shared memory bounds the rest (:func:`fwd_smem`, :func:`bwd_smem`).
"""

from __future__ import annotations

from ejkernel.ops import BwdParams, FwdParams

#: Shared memory of one Hopper CTA (227 KiB).
SMEM_LIMIT = 232448


def fwd_smem(p: FwdParams, d: int, itemsize: int = 2) -> int:
    """Q/O tiles of both compute warpgroups, the K and V slots, the log-sum-exp rows."""
    return 2 * p.q_blocksize * d * itemsize + 2 * p.num_stages * p.kv_blocksize * d * itemsize + 2 * p.q_blocksize * 4


def bwd_smem(p: BwdParams, d: int, itemsize: int = 2) -> int:
    """The larger kernel's: dQ's resident Q and dO and its K/V slots, or dK/dV's resident K and V
    (which stage dK and dV on the way out) and its Q/dO slots; the log-sum-exp and D rows."""
    dq = 2 * p.q_blocksize * d * itemsize + 2 * p.num_stages * p.kv_blocksize * d * itemsize
    dkdv = 2 * p.kv_blocksize * d * itemsize + 2 * p.num_stages * p.q_blocksize * d * itemsize
    return max(dq, dkdv) + 4 * p.num_stages * p.q_blocksize * 4


def heuristic_fwd(d: int) -> FwdParams:
    """64 rows a warpgroup (128 a program), 128-key tiles at d <= 64 (64 at d 128), two stages."""
    return FwdParams(q_blocksize=64, kv_blocksize=128 if d <= 64 else 64, num_stages=2)


def heuristic_bwd(d: int) -> BwdParams:
    return BwdParams(q_blocksize=64, kv_blocksize=64, num_stages=2)


def check_params(name: str, p: FwdParams | BwdParams, d: int) -> None:
    """``ValueError`` unless the tiles suit the kernels and fit in shared memory."""
    for field in ("q_blocksize", "kv_blocksize"):
        n = getattr(p, field)
        if n is None or n < 64 or n & (n - 1):
            raise ValueError(f"pallas_gpu flash_attention: {name}.{field} must be a power of two >= 64, got {n}")
    if p.num_stages is None or p.num_stages < 1:
        raise ValueError(f"pallas_gpu flash_attention: {name}.num_stages must be at least 1, got {p.num_stages}")
    need = fwd_smem(p, d) if isinstance(p, FwdParams) else bwd_smem(p, d)
    if need > SMEM_LIMIT:
        raise ValueError(
            f"pallas_gpu flash_attention: {name} {p.q_blocksize}x{p.kv_blocksize} with {p.num_stages} stages needs "
            f"{need} B of shared memory at head dim {d}, more than Hopper's {SMEM_LIMIT}"
        )
