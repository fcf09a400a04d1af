"""Tiles of the Triton ``mean_pooling``: pure functions of the shapes and dtype.

The op is a streaming read of ``x``: what matters is enough bytes in flight per SM and enough
programs. ``BLOCK_D`` = 256 columns gives 512-byte (16-bit) row segments, fully coalesced;
``BLOCK_T`` rows per step make a 16 KiB (16-bit) tile, several in flight with 3 pipeline stages.
``split`` (rows per program) is chosen so the grid holds about ``WAVES`` programs per SM of an H100/H200
(132 SMs) but never less than 8 steps per program, which keeps the partial sums' traffic
negligible (one float32 row per item against ``split`` rows read). On an H200 these tiles (32x256,
4 warps, 3 stages, 16 waves) read 0.92 of a device copy's bandwidth at (262144, 4096) bf16, and
the sweep's other configs 0.79-0.96 (``benchmarks/config_sweep.py mean_pooling``;
``benchmarks/results/h200/mean_pooling.json``).
"""

from __future__ import annotations

from ejkernel.ops import Need
from ejkernel.ops.mean_pooling import MeanPoolingArgs, MeanPoolingConfig

SMS = 132
WAVES = 16
MAX_BLOCK_D = 256


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _pow2_at_most(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def heuristic(args: MeanPoolingArgs) -> MeanPoolingConfig:
    itemsize = args.x.dtype.itemsize
    block_d = min(MAX_BLOCK_D, max(16, _pow2_at_least(args.hidden)))
    block_t = max(8, 16384 // (block_d * itemsize))  # a 16 KiB tile
    cols = -(-args.hidden // block_d)
    target_items = max(1, SMS * WAVES // cols)
    split = _pow2_at_most(max(1, args.tokens // target_items))
    split = max(8 * block_t, min(split, 16384))
    return MeanPoolingConfig(block_size=block_t, block_dim=block_d, split_size=split, num_warps=4, num_stages=3)


def candidates(args: MeanPoolingArgs) -> list[MeanPoolingConfig]:
    base = heuristic(args)
    out = [base]
    for block_d in (128, 256, 512):
        for block_t in (16, 32, 64):
            for warps in (4, 8):
                split = max(base.split_size or 0, 8 * block_t)
                cfg = MeanPoolingConfig(
                    block_size=block_t, block_dim=block_d, split_size=split, num_warps=warps, num_stages=3
                )
                if cfg not in out:
                    out.append(cfg)
    return out


def check(cfg: MeanPoolingConfig) -> None:
    if cfg.block_size is None or cfg.block_dim is None or cfg.split_size is None:
        raise ValueError("triton mean_pooling needs block_size, block_dim and split_size")
    if cfg.split_size % cfg.block_size:
        raise ValueError(
            f"triton mean_pooling: split_size ({cfg.split_size}) must be a multiple of block_size ({cfg.block_size})"
        )
    if cfg.block_size * cfg.block_dim > 64 * 1024:
        raise ValueError(
            f"triton mean_pooling: a {cfg.block_size}x{cfg.block_dim} tile is too large for registers (at most 64Ki)"
        )


def needs(cfg: MeanPoolingConfig) -> list[Need]:
    """What the three kernels need with ``cfg`` (complete): the rows stream through registers;
    shared memory holds the column sums' exchange between warps, one float32 ``block_dim`` row per
    warp (Triton 3.6, sm_80 and sm_90: 4096 B for the 32x256 forward at 4 warps, 512-1024 B for
    its backward)."""
    assert cfg.block_dim and cfg.num_warps
    row = 4 * cfg.block_dim * cfg.num_warps
    threads = 32 * cfg.num_warps
    return [Need("forward", row, threads), Need("combine", row, threads), Need("backward", row, threads)]
