"""The form of the XLA ``grouped_matmul``: a pure function of the shapes and the device kind.

The tiled form (``_tiled``) costs the dense product's FLOPs plus up to ``block_m - 1`` rows per
group; ``lax.ragged_dot`` is lowered natively on accelerators but multiplies every row by every
group's matrix on the CPU (``g`` times the FLOPs: 461 ms against the tiled form's 67 ms forward,
1.32 s against 0.22 s forward+backward at m=4096 k=1024 n=1024 g=8 float32 on 2 cores).
"""

from __future__ import annotations

from ejkernel.ops.grouped_matmul import GroupedMatmulArgs, GroupedMatmulConfig

MIN_ROWS, MAX_ROWS = 16, 256


def tiled_pays(args: GroupedMatmulArgs, platform: str) -> bool:
    """Whether the tiled form beats ``lax.ragged_dot``: on the CPU with two groups or more (one
    group is one dense product either way). Accelerators keep ``lax.ragged_dot`` until measured;
    ``rhs_scale`` always runs on it (the tiled form does not scale)."""
    return platform == "cpu" and args.groups > 1 and args.rhs_scale is None


def tile_rows(args: GroupedMatmulArgs) -> int:
    """Rows per chunk: the largest power of two up to ``m / (4·g)`` in ``[16, 256]``, so that the
    groups' partial chunks (half a chunk each on average) add about an eighth of the rows, while
    each chunk's product stays large enough to run at the dense product's rate."""
    target = max(1, args.m // (4 * args.groups))
    return min(MAX_ROWS, max(MIN_ROWS, 1 << (target.bit_length() - 1)))


def heuristic(args: GroupedMatmulArgs, platform: str) -> GroupedMatmulConfig:
    """``block_m``: the tiled form's chunk rows where it pays, else ``None`` (``lax.ragged_dot``)."""
    return GroupedMatmulConfig(block_m=tile_rows(args) if tiled_pays(args, platform) else None)
