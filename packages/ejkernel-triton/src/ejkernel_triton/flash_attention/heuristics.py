"""Tile and launch parameters: heuristics and the autotuning space (pure functions, no GPU needed).

``fwd`` parameters: ``q_blocksize`` = BLOCK_M (query rows per program), ``kv_blocksize`` =
BLOCK_N (keys per inner step). ``bwd`` parameters describe the dK/dV kernel: ``q_blocksize``
query rows per step, ``kv_blocksize`` keys per program; the dQ kernel swaps the roles (as in the
Triton tutorial's BLOCK_M1/N1 vs BLOCK_M2/N2).
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp

from ejkernel.ops import BwdParams, DeviceInfo, FwdParams, Need, profile_for
from ejkernel.ops.families.attention import AttentionArgs


def smem_limit(cc: tuple[int, int] | None) -> int:
    """Shared memory a block may use on compute capability ``cc`` (sm_86's 99 KiB where unknown)."""
    profile = profile_for(DeviceInfo(platform="gpu", kind="", compute_capability=cc or (8, 6)))
    assert profile is not None
    return profile.shared_memory_per_block


def _pad(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def _copies(itemsize: int) -> int:
    # float32 dots run as "tf32x3": the resident tile is kept twice (high and low parts).
    return 2 if itemsize == 4 else 1


def fwd_smem(p: FwdParams, d: int, dv: int, itemsize: int) -> int:
    """Shared memory of the forward kernel: ``num_stages`` K/V tiles and the resident Q tile.

    Matches what Triton 3.6 allocates for sm_90 (as ``compile_launch`` reports it).
    """
    assert p.q_blocksize and p.kv_blocksize and p.num_stages
    streamed = p.num_stages * p.kv_blocksize * (_pad(d) + _pad(dv))
    return (streamed + _copies(itemsize) * p.q_blocksize * _pad(d)) * itemsize


def bwd_smem(p: BwdParams, d: int, dv: int, itemsize: int) -> int:
    """Shared memory of the backward kernels (dK/dV and dQ need the same): ``num_stages``
    streamed Q/dO tiles, resident K/V, and 1 KiB for the row statistics."""
    assert p.q_blocksize and p.kv_blocksize and p.num_stages
    width = _pad(d) + _pad(dv)
    streamed = p.num_stages * p.q_blocksize * width
    resident = _copies(itemsize) * p.kv_blocksize * width
    return (streamed + resident) * itemsize + 1024


# Shared memory per block the TMA forward's tiles need (``heuristic_fwd_tma``: 197632 B at d 128).
TMA_SMEM = 200 * 1024
# The TMA forward's mbarriers (a few per stage: Triton 3.6 allocates 56 to 1024 B beyond the tiles
# on sm_90).
TMA_BARRIERS = 1024


def tma_fwd_smem(p: FwdParams, d: int, dv: int, itemsize: int, warp_specialized: bool) -> int:
    """Shared memory of the TMA forward (``_fwd``'s TMA kernels): the tiles of :func:`fwd_smem`,
    the mbarriers, and for the warp-specialized kernel the ``[q_blocksize, dv]`` output tile it
    stores through a descriptor (Triton 3.6, sm_90: 197024 B at 128x128 tiles, d 128, 2 stages,
    against 163840 + 32768 + 1024)."""
    assert p.q_blocksize
    out_tile = p.q_blocksize * _pad(dv) * itemsize if warp_specialized else 0
    return fwd_smem(p, d, dv, itemsize) + out_tile + TMA_BARRIERS


def needs(args: AttentionArgs, fwd: FwdParams, bwd: BwdParams, cc: tuple[int, int] | None) -> list[Need]:
    """What the forward and the two backward kernels need with ``fwd`` and ``bwd`` (complete).
    On Hopper a TMA-eligible call's forward is the TMA kernel (warp-specialized when
    ``_call._warp_specialized`` may pick it: non-causal, 4 warps, at most 2 stages)."""
    d, dv, itemsize = args.head_dim, args.value_head_dim, jnp.dtype(args.dtype).itemsize
    assert fwd.num_warps and bwd.num_warps
    if tma_eligible(args, cc):
        ws = not args.causal and fwd.num_warps == 4 and (fwd.num_stages or 0) <= 2
        forward = Need("forward (TMA)", tma_fwd_smem(fwd, d, dv, itemsize, ws), 32 * fwd.num_warps)
    else:
        forward = Need("forward", fwd_smem(fwd, d, dv, itemsize), 32 * fwd.num_warps)
    backward = bwd_smem(bwd, d, dv, itemsize)
    return [
        forward,
        Need("backward dK/dV", backward, 32 * bwd.num_warps),
        Need("backward dQ", backward, 32 * bwd.num_warps),
    ]


def _fit_fwd(p: FwdParams, d: int, dv: int, itemsize: int, cc: tuple[int, int] | None) -> FwdParams:
    """Shrink ``p`` until it fits in shared memory: fewer stages (down to 2), then a smaller
    query tile, then a single stage, then fewer keys per step (16 at least: what still does not
    fit is reported by the resolution's check)."""
    while fwd_smem(p, d, dv, itemsize) > smem_limit(cc):
        if p.num_stages > 2:
            p = FwdParams(p.q_blocksize, p.kv_blocksize, p.num_warps, p.num_stages - 1)
        elif p.q_blocksize > 32:
            p = FwdParams(p.q_blocksize // 2, p.kv_blocksize, 4, p.num_stages)
        elif p.num_stages > 1:
            p = FwdParams(p.q_blocksize, p.kv_blocksize, p.num_warps, 1)
        elif p.kv_blocksize > 16:
            p = FwdParams(p.q_blocksize, p.kv_blocksize // 2, p.num_warps, 1)
        else:
            break
    return p


def _fit_bwd(p: BwdParams, d: int, dv: int, itemsize: int, cc: tuple[int, int] | None) -> BwdParams:
    """As :func:`_fit_fwd` for the backward: fewer stages (down to 2), fewer resident keys (down
    to 32), a single stage, then 16-row query steps and 16 keys (float32 at head dim 256 on a
    99 KiB part needs both)."""
    while bwd_smem(p, d, dv, itemsize) > smem_limit(cc):
        if p.num_stages > 2:
            p = BwdParams(p.q_blocksize, p.kv_blocksize, p.num_warps, p.num_stages - 1)
        elif p.kv_blocksize > 32:
            p = BwdParams(p.q_blocksize, p.kv_blocksize // 2, 4, p.num_stages)
        elif p.num_stages > 1:
            p = BwdParams(p.q_blocksize, p.kv_blocksize, p.num_warps, 1)
        elif p.q_blocksize > 16:
            p = BwdParams(p.q_blocksize // 2, p.kv_blocksize, p.num_warps, 1)
        elif p.kv_blocksize > 16:
            p = BwdParams(p.q_blocksize, p.kv_blocksize // 2, p.num_warps, 1)
        else:
            break
    return p


def heuristic_fwd(d: int, dv: int, itemsize: int, cc: tuple[int, int] | None, seq_k: int) -> FwdParams:
    dmax = max(d, dv)
    if dmax <= 64:
        # Small heads: arithmetic intensity is low, so a wide key step (BLOCK_N=64) and 4 warps
        # keep the tensor cores fed with few registers per thread.
        p = FwdParams(q_blocksize=128, kv_blocksize=64, num_warps=4, num_stages=3)
    elif dmax <= 128:
        # The common case. On Hopper two warpgroups (8 warps) share a 128-row Q tile, which is
        # what wgmma wants; Ampere prefers 4 warps at this size.
        warps = 8 if cc is not None and cc >= (9, 0) else 4
        p = FwdParams(q_blocksize=128, kv_blocksize=64, num_warps=warps, num_stages=3)
    else:
        # 192/256-wide heads: the Q tile and the accumulator dominate registers; halve BLOCK_M
        # and keep two stages so K/V tiles still fit in shared memory.
        p = FwdParams(q_blocksize=64, kv_blocksize=64, num_warps=4, num_stages=2)
    p = _fit_fwd(p, d, dv, itemsize, cc)
    if seq_k <= 32:  # tiny key sets: a 64-wide step would be mostly padding
        p = FwdParams(p.q_blocksize, 32, p.num_warps, p.num_stages)
    return p


def tma_eligible(args: AttentionArgs, cc: tuple[int, int] | None) -> bool:
    """Whether the forward runs on the Hopper TMA kernels (``_fwd.flash_fwd_tma*_kernel``): sm_90+
    with Hopper's shared memory (their tiles need up to 193 KiB: not sm_120's 99 KiB), 16-bit
    inputs, head dim 64, 128 or 256 (queries and values alike), and none of the options only the
    pointer-based kernel implements (bias, segments, soft cap, window, sinks, dropout, varlen).
    At head dim 256, two stages of 64-key tiles and a 128-row Q tile take 193 KiB."""
    return (
        cc is not None
        and cc >= (9, 0)
        and smem_limit(cc) >= TMA_SMEM
        and jnp.dtype(args.dtype).name in ("bfloat16", "float16")
        and args.head_dim == args.value_head_dim
        and args.head_dim in (64, 128, 256)
        and args.bias is None
        and not args.has_segments
        and args.logits_soft_cap is None
        and args.sliding_window is None
        and args.softmax_aux is None
        and args.dropout_prob == 0
        and not args.is_varlen
        and args.position_offset is None
        and args.attention_mask is None
    )


def heuristic_fwd_tma(args: AttentionArgs) -> FwdParams:
    """Tiles of the TMA forward (``_fwd``'s TMA kernels), the fastest on an H200 at b2 s8192 h16 d128 bf16.

    Non-causal with lengths that are multiples of 128: 128x128 tiles, 4 warps, 2 stages, for the
    warp-specialized kernel (520 TFLOP/s; 271 for the same tiles unspecialized). Otherwise 128x64,
    4 warps, 2 stages for the unmasked + masked loops (0.83x / 0.88x cuDNN, ahead of 8 warps and
    128x128 tiles).
    At d 64 three stages of 128x64 tiles (64x64 when causal) ran fastest. At d 256 a
    128x256 float32 accumulator needs two warpgroups (8 warps: 128 registers a thread for it),
    so the unspecialized kernel with 128x64 tiles and 2 stages (193 KiB of shared memory): 0.82x /
    0.85x cuDNN at b1 s16384 h8 d256, where the pointer kernel's 64x64 tiles ran at 0.42x / 0.57x.
    """
    if args.head_dim > 128:
        return FwdParams(q_blocksize=128, kv_blocksize=64, num_warps=8, num_stages=2)
    if args.head_dim <= 64:
        # Half-size tiles leave room for a third stage (b8 s2048 h16 d64: 0.89x / 0.87x cuDNN
        # against 0.79x / 0.74x for the d-128 tiles).
        bq = 64 if args.causal else 128
        return FwdParams(q_blocksize=bq, kv_blocksize=64, num_warps=4, num_stages=3)
    if not args.causal and args.seq_q % 128 == 0 and args.seq_k % 128 == 0:
        return FwdParams(q_blocksize=128, kv_blocksize=128, num_warps=4, num_stages=2)
    return FwdParams(q_blocksize=128, kv_blocksize=64, num_warps=4, num_stages=2)


def heuristic_bwd(d: int, dv: int, itemsize: int, cc: tuple[int, int] | None) -> BwdParams:
    dmax = max(d, dv)
    if dmax <= 64:
        # The tutorial's sizes for d<=64: 128 resident keys, 32-row query steps.
        p = BwdParams(q_blocksize=32, kv_blocksize=128, num_warps=4, num_stages=3)
    elif dmax <= 128 and cc is not None and cc >= (9, 0):
        # Measured on an H200 (b2 s8192 h16 d128 bf16, forward+backward, 2026-11-21): 128
        # resident keys and 64-row query steps with 8 warps ran fastest (355 TFLOP/s non-causal;
        # 32x64/4 warps 329, 64x64/8 warps only 185: too few keys per warp).
        p = BwdParams(q_blocksize=64, kv_blocksize=128, num_warps=8, num_stages=3)
    elif dmax <= 128:
        # Ampere: the smaller tile of the Triton tutorial's Hopper-agnostic sizes.
        p = BwdParams(q_blocksize=32, kv_blocksize=64, num_warps=4, num_stages=3)
    else:
        p = BwdParams(q_blocksize=32, kv_blocksize=32, num_warps=4, num_stages=2)
    return _fit_bwd(p, d, dv, itemsize, cc)


def fwd_candidates(d: int, dv: int, itemsize: int, cc: tuple[int, int] | None) -> list[FwdParams]:
    out = []
    for bm, bn, warps, stages in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4, 5)):
        p = FwdParams(bm, bn, warps, stages)
        if warps == 8 and bm * bn < 128 * 64:  # 8 warps on a small tile starve each warp
            continue
        if fwd_smem(p, d, dv, itemsize) > smem_limit(cc):
            continue
        out.append(p)
    return out


def bwd_candidates(d: int, dv: int, itemsize: int, cc: tuple[int, int] | None) -> list[BwdParams]:
    out = []
    for bm, bn, warps, stages in itertools.product((16, 32, 64), (32, 64, 128), (4, 8), (1, 2, 3)):
        p = BwdParams(bm, bn, warps, stages)
        if warps == 8 and bm * bn < 64 * 64:
            continue
        if bwd_smem(p, d, dv, itemsize) > smem_limit(cc):
            continue
        out.append(p)
    return out


def check_params(name: str, p: FwdParams | BwdParams) -> None:
    """Raise ``ValueError`` unless the tile sizes suit the kernels (powers of two, >= 16)."""
    for field in ("q_blocksize", "kv_blocksize"):
        n = getattr(p, field)
        if n is None or n < 16 or n & (n - 1):
            raise ValueError(f"triton flash_attention: {name}.{field} must be a power of two >= 16, got {n}")
    if p.num_warps is None or p.num_stages is None:
        raise ValueError(f"triton flash_attention: {name} needs num_warps and num_stages")
    if p.num_warps > 16:
        raise ValueError(f"triton flash_attention: {name}.num_warps must be at most 16, got {p.num_warps}")
