"""Tiles of the Triton ``state_space_v1``: pure functions of the shapes.

A program holds ``[block_e, block_d, state]`` float32 tiles (the chunk's decays, inputs, scanned
states: five live in the forward, about eight in the backward). The forward walks its chunks one
after another: ``block_d`` shrinks for small ``intermediate`` so there are programs for every SM
(the grid is ``intermediate / block_d × batch``), and small programs win (a chunk is a few
dependent scan steps; many small programs per SM hide their latency better than a few large
ones); a warp per ``FWD_ELEMS_PER_WARP`` tile elements. The backward is chunk-parallel (programs
per chunk × channel group × batch, ``BWD_PROGRAMS`` of them, each walking its group's channel
blocks): its own channel block ``bwd_block_d`` (an eighth of the forward's; the token block is the
forward's, whose chunk-start states it reads), a warp per ``BWD_ELEMS_PER_WARP``.

H100, b1 T4096 d_inner 4096 d_state 16 bf16, 32-token chunks, each kernel timed alone: the backward **2.03 ms at 1 channel and 1 warp**, 2.34 at 2 channels and 2
warps (252 registers, no spills), 3.78 at 2 and 1 (255 registers, 728 B of spills), 3.14 at 1 and
2, 3.30 at 2 and 4, 5.48 at 4 and 8 (8 groups); at 2 channels and 2 warps 2.30-2.35 ms for 4 to
64 groups of whole 64-channel multiples, 3.0 for 2 groups, 2.64 for 9 groups of 456 channels; of
it, the carries (chunk sums 0.16 ms, their recurrence 0.05 ms).
The earlier backward (one program per channel block walking the chunks; ``dB``, ``dC`` shares per
2-channel block: 1.07 GB) took 2.55 ms. Forward 0.409 / 0.439 ms (without / storing the chunk
states) at 8 channels and 2 warps.
"""

from __future__ import annotations

from ejkernel.ops import Need
from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

SMS = 132
TILE_ELEMS = 4096
FWD_ELEMS_PER_WARP = 2048
BWD_ELEMS_PER_WARP = 512
# The backward's carry recurrence: blocks of CARRY_BLOCK_C chunks (a reverse scan each) over
# CARRY_BLOCK_D channels, a warp per CARRY_ELEMS_PER_WARP tile elements.
CARRY_BLOCK_C = 32
CARRY_BLOCK_D = 4
CARRY_ELEMS_PER_WARP = 1024
# The backward's programs (chunks x channel groups x batch) to aim for: enough to fill every SM
# several times over; fewer groups mean fewer dB / dC shares for the host to add.
BWD_PROGRAMS = 8 * SMS
# A channel group's width is a multiple of this many channels (128 bytes of a bf16 row).
GROUP_ALIGN = 64


def warps_for(elems: int, per_warp: int) -> int:
    """Warps of a program holding ``elems``-element tiles: one per ``per_warp``, a power of two in 1..8."""
    w = 1
    while w < 8 and w * per_warp < elems:
        w *= 2
    return w


def bwd_block_d(block_d: int) -> int:
    """The backward's channel block: an eighth of the forward's (at least one channel)."""
    return max(1, block_d // 8)


def bwd_groups(d_blocks: int, chunk_programs: int) -> int:
    """Channel groups of the backward: ``BWD_PROGRAMS`` programs over ``chunk_programs`` (chunks x
    batch), at most one per channel block."""
    return max(1, min(d_blocks, -(-BWD_PROGRAMS // max(1, chunk_programs))))


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def state_block(state: int) -> int:
    """The tiles' state axis: ``state`` rounded up to a power of two, at least 2."""
    return max(2, pow2_at_least(state))


def carry_block_c(num_chunks: int) -> int:
    """Chunks per block of the carry recurrence's reverse scan."""
    return min(CARRY_BLOCK_C, max(2, pow2_at_least(num_chunks)))


def heuristic(args: StateSpaceV1Args) -> StateSpaceV1Config:
    n = state_block(args.state)
    block_d = 16
    while block_d > 4 and args.batch * -(-args.intermediate // block_d) < 2 * SMS:
        block_d //= 2
    block_e = max(4, min(32, TILE_ELEMS // (block_d * n)))
    block_e = min(block_e, max(4, pow2_at_least(args.seq)))
    warps = warps_for(block_e * block_d * n, FWD_ELEMS_PER_WARP)
    return StateSpaceV1Config(block_d=block_d, block_e=block_e, num_warps=warps, num_stages=2)


def candidates(args: StateSpaceV1Args) -> list[StateSpaceV1Config]:
    out = [heuristic(args)]
    for block_d in (4, 8, 16, 32):
        for block_e in (8, 16, 32):
            for warps in (1, 2, 4, 8):
                cfg = StateSpaceV1Config(block_d=block_d, block_e=block_e, num_warps=warps, num_stages=2)
                if cfg not in out:
                    out.append(cfg)
    return out


def check(cfg: StateSpaceV1Config, args: StateSpaceV1Args) -> None:
    if cfg.block_d is None or cfg.block_e is None:
        raise ValueError("triton state_space_v1 needs block_d and block_e")
    n = state_block(args.state)
    if cfg.block_e * cfg.block_d * n > 32768:
        raise ValueError(
            f"triton state_space_v1: a [{cfg.block_e}, {cfg.block_d}, {n}] tile is too large for registers "
            "(block_e * block_d * state at most 32768)"
        )


def needs(cfg: StateSpaceV1Config, args: StateSpaceV1Args) -> list[Need]:
    """What the four kernels need with ``cfg`` (complete). Their tiles live in registers; shared
    memory holds only the scans' and reductions' exchanges between warps, bounded by one float32
    ``[block_e, block_d, state]`` tile of each kernel (Triton 3.6 compiled 512-2048 B at the
    benchmark shape, sm_80 and sm_90, against 2048-16384 B declared)."""
    assert cfg.block_d and cfg.block_e and cfg.num_warps
    n = state_block(args.state)
    bwd_d = bwd_block_d(cfg.block_d)
    block_c = carry_block_c(-(-args.seq // cfg.block_e))
    bwd_warps = warps_for(cfg.block_e * bwd_d * n, BWD_ELEMS_PER_WARP)
    carry_warps = warps_for(block_c * CARRY_BLOCK_D * n, CARRY_ELEMS_PER_WARP)
    tile = cfg.block_e * n * 4
    return [
        Need("forward", tile * cfg.block_d, 32 * cfg.num_warps),
        Need("backward chunk sums", tile * bwd_d, 32 * cfg.num_warps),
        Need("backward carries", block_c * CARRY_BLOCK_D * n * 4, 32 * carry_warps),
        Need("backward", tile * bwd_d, 32 * bwd_warps),
    ]
