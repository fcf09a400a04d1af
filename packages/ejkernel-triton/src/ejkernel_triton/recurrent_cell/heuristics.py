"""Configs of the Triton ``recurrent_cell``.

``tl.dot`` needs tiles of at least 16 in each dimension. The recurrent weights stay in registers
when ``hidden_dim`` fits one ``BLOCK_H`` tile: up to 64 (four gates' 64x64 tiles, 32 KiB in
bfloat16); larger hidden sizes stream 64-wide tiles every step.
"""

from __future__ import annotations

import jax.numpy as jnp

from ejkernel.ops import Need
from ejkernel.ops.recurrent_cell import RecurrentCellArgs, RecurrentCellConfig

RESIDENT_MAX = 64


def _pow2(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, 1 << max(0, (n - 1).bit_length())))


def heuristic(args: RecurrentCellArgs) -> RecurrentCellConfig:
    block_h = _pow2(args.hidden_dim, 16, RESIDENT_MAX)
    return RecurrentCellConfig(block_batch=_pow2(args.batch, 16, 64), block_hidden=block_h, num_warps=4)


def candidates(args: RecurrentCellArgs) -> list[RecurrentCellConfig]:
    base = heuristic(args)
    out = [base]
    for bb in (16, 32, 64):
        for bh in (32, 64, 128):
            for w in (4, 8):
                c = RecurrentCellConfig(block_batch=bb, block_hidden=bh, num_warps=w)
                if c not in out:
                    out.append(c)
    return out


def check(cfg: RecurrentCellConfig) -> None:
    if cfg.block_batch < 16 or cfg.block_hidden < 16:
        raise ValueError(f"recurrent_cell (triton): block_batch and block_hidden must be >= 16 (tl.dot), got {cfg}")


def needs(cfg: RecurrentCellConfig, args: RecurrentCellArgs) -> list[Need]:
    """Shared memory of the forward kernel (Triton 3.6, sm_80 and sm_90, compiled without a GPU):
    the ``w_hh`` tiles the dots read from it (every gate's when resident: 49152 B for an lstm at
    hidden 64, bfloat16, 64x64 tiles; one tile when streamed) and a float32 ``[block_batch,
    block_hidden]`` exchange (16384 B of the 24576 B this declares for the streamed 64x64 tiles)."""
    assert cfg.block_batch and cfg.block_hidden and cfg.num_warps
    tile = cfg.block_hidden * cfg.block_hidden * jnp.dtype(args.dtype).itemsize
    resident = args.hidden_dim <= cfg.block_hidden
    shared = (args.num_gates if resident else 1) * tile + 4 * cfg.block_batch * cfg.block_hidden
    return [Need("recurrent forward", shared, 32 * cfg.num_warps)]
