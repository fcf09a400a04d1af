"""Configs of the Triton ``recurrent_cell``.

``tl.dot`` needs tiles of at least 16 in each dimension. The recurrent weights stay in registers
when ``hidden_dim`` fits one ``BLOCK_H`` tile: up to 64 (four gates' 64x64 tiles, 32 KiB in
bfloat16 over a 4-warp program); larger hidden sizes stream 64-wide tiles every step.
"""

from __future__ import annotations

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
