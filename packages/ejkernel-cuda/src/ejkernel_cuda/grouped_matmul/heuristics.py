"""Tile configs of the CUDA grouped GEMM (CUTLASS 3 on sm_90a): pure functions of the shapes.

Each config is one compiled kernel family of ``csrc/grouped_matmul/gmm_sm90.cuh`` (its index is
the FFI's ``config`` attribute), named here by its CTA tile: ``block_m`` x ``block_n`` x
``block_k``. The kernels are warp-specialized (a TMA producer warpgroup and two consumer
warpgroups: 12 warps) and persistent, with as many pipeline stages as shared memory holds
(CUTLASS's choice): a config leaves ``num_warps``, ``num_stages`` and ``tgmm_num_stages`` ``None``.
"""

from __future__ import annotations

from ejkernel.ops.grouped_matmul import GroupedMatmulConfig

# (block_m, block_n, block_k) -> FFI config index. One kernel family: 128x256x64 cooperative tiles
# in 2-CTA clusters along n (gmm_sm90.cuh says why, and which alternatives it beat).
CONFIGS: dict[tuple[int, int, int], int] = {(128, 256, 64): 0}
ALIGN = 8  # k and n in elements: TMA needs 16-byte rows
THREADS = 384  # a TMA producer warpgroup and two wgmma consumer warpgroups


def config_index(cfg: GroupedMatmulConfig) -> int:
    """The FFI's config index of ``cfg``; ``ValueError`` for what no compiled kernel runs."""
    fixed = {"num_warps": None, "num_stages": None, "tgmm_num_stages": None, "split_k": 1, "persistent": True}
    for name, want in fixed.items():
        got = getattr(cfg, name)
        if got is not None and got != want:
            raise ValueError(
                f"cuda grouped_matmul: {name} is fixed by the compiled kernels (12 warps, CUTLASS's stage count, no "
                f"split, a persistent grid): leave it None, got {got!r}"
            )
    key = (cfg.block_m, cfg.block_n, cfg.block_k)
    if key not in CONFIGS:
        tiles = ", ".join("x".join(map(str, t)) for t in CONFIGS)
        raise ValueError(
            f"cuda grouped_matmul: block_m x block_n x block_k must be one of {tiles}, got {'x'.join(map(str, key))}"
        )
    return CONFIGS[key]


def _cfg(tile: tuple[int, int, int]) -> GroupedMatmulConfig:
    bm, bn, bk = tile
    return GroupedMatmulConfig(block_m=bm, block_n=bn, block_k=bk, split_k=1, persistent=True)


def heuristic(m: int, k: int, n: int, groups: int) -> GroupedMatmulConfig:
    """128x256 tiles: the widest wgmma tile two consumer warpgroups hold in registers."""
    return _cfg((128, 256, 64))


def candidates(m: int, k: int, n: int, groups: int) -> list[GroupedMatmulConfig]:
    return [_cfg(t) for t in CONFIGS]
