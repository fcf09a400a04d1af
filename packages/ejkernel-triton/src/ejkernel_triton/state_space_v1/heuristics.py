"""Tiles of the Triton ``state_space_v1``: pure functions of the shapes.

A program holds ``[block_e, block_d, state]`` float32 tiles (the chunk's decays, inputs, scanned
states: five live in the forward, about eight in the backward). ``block_d`` shrinks for small
``intermediate`` so there are programs for every SM (the grid is ``intermediate / block_d ×
batch``). Small programs win: each walks its chunks one after another, a chunk is a few dependent
scan steps, and many small programs per SM hide their latency better than a few large ones. The
forward takes a warp per ``FWD_ELEMS_PER_WARP`` tile elements; the backward (its own channel
block, ``bwd_block_d``: a quarter of the forward's; the token block must be the forward's, whose
chunk-start states it reads) one per ``BWD_ELEMS_PER_WARP``. H100, b1 T4096 d_inner 4096
d_state 16 bf16, 32-token chunks (``benchmarks/wave2_breakdown.py --only ssm1_bwd``): backward
5.47 ms at 8 channels and 8 warps (the previous rule), 4.24 at 8 and 4, 3.58 at 2 and 2, **2.55 at
2 channels and 1 warp**, 3.95 at 1 and 1; forward 0.424 / 0.692 ms (without / storing the chunk
states) at 8 channels and 4 warps, **0.411 / 0.440 at 8 and 2**, 0.418 / 0.420 at 4 and 1.
"""

from __future__ import annotations

from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

SMS = 132
TILE_ELEMS = 4096
FWD_ELEMS_PER_WARP = 2048
BWD_ELEMS_PER_WARP = 1024


def warps_for(elems: int, per_warp: int) -> int:
    """Warps of a program holding ``elems``-element tiles: one per ``per_warp``, a power of two in 1..8."""
    w = 1
    while w < 8 and w * per_warp < elems:
        w *= 2
    return w


def bwd_block_d(block_d: int) -> int:
    """The backward's channel block: a quarter of the forward's (at least one channel)."""
    return max(1, block_d // 4)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def heuristic(args: StateSpaceV1Args) -> StateSpaceV1Config:
    n = max(2, _pow2_at_least(args.state))
    block_d = 16
    while block_d > 4 and args.batch * -(-args.intermediate // block_d) < 2 * SMS:
        block_d //= 2
    block_e = max(4, min(32, TILE_ELEMS // (block_d * n)))
    block_e = min(block_e, max(4, _pow2_at_least(args.seq)))
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
    n = max(2, _pow2_at_least(args.state))
    if cfg.block_e * cfg.block_d * n > 32768:
        raise ValueError(
            f"triton state_space_v1: a [{cfg.block_e}, {cfg.block_d}, {n}] tile is too large for registers "
            "(block_e * block_d * state at most 32768)"
        )
