"""Tiles of the Triton ``state_space_v1``: pure functions of the shapes.

A program holds ``[block_e, block_d, state]`` float32 tiles (the chunk's decays, inputs, scanned
states: five live in the forward, about eight in the backward, which runs with twice the warps).
16 tokens × 16 channels × 16 states is 4096 elements, 32 registers a tile per thread at 4 warps:
the forward fits without spilling. ``block_d`` shrinks for small ``intermediate`` so there are
programs for every SM (the grid is ``intermediate / block_d × batch``).
"""

from __future__ import annotations

from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

SMS = 132
TILE_ELEMS = 4096


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def heuristic(args: StateSpaceV1Args) -> StateSpaceV1Config:
    n = max(2, _pow2_at_least(args.state))
    block_d = 16
    while block_d > 4 and args.batch * -(-args.intermediate // block_d) < 2 * SMS:
        block_d //= 2
    block_e = max(4, min(32, TILE_ELEMS // (block_d * n)))
    block_e = min(block_e, max(4, _pow2_at_least(args.seq)))
    return StateSpaceV1Config(block_d=block_d, block_e=block_e, num_warps=4, num_stages=2)


def candidates(args: StateSpaceV1Args) -> list[StateSpaceV1Config]:
    out = [heuristic(args)]
    for block_d in (4, 8, 16, 32):
        for block_e in (8, 16, 32):
            for warps in (2, 4, 8):
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
