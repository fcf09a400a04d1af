"""Chunk length of the XLA ``state_space_v1``: pure functions of the shapes.

A chunk's intermediates are ``[batch, chunk, intermediate, state]`` float32 arrays (a handful of
them, the associative scan's levels included): 64 tokens keep them small (batch 1, 4096 channels,
state 16: 16 MiB each) while the ``lax.scan`` over chunks stays short (64 steps for 4096 tokens).
"""

from __future__ import annotations

from ejkernel.ops.state_space_v1 import StateSpaceV1Args, StateSpaceV1Config

CHUNK = 64
CANDIDATE_CHUNKS = (16, 32, 64, 128, 256)


def heuristic(args: StateSpaceV1Args) -> StateSpaceV1Config:
    return StateSpaceV1Config(block_e=CHUNK)


def candidates(args: StateSpaceV1Args) -> list[StateSpaceV1Config]:
    return [StateSpaceV1Config(block_e=c) for c in CANDIDATE_CHUNKS]
