"""Tiles of the Triton grouped GEMM: pure functions of the shapes, dtype and device.

One config serves the three kernels: ``block_m`` rows × ``block_n`` columns × ``block_k`` depth
for ``gmm`` (forward and ``dlhs``, whose columns are ``k``), and for ``tgmm`` an output tile of
``block_m`` (over ``k``) × ``block_n`` (over ``n``) reduced ``block_k`` rows at a time.
"""

from __future__ import annotations

from ejkernel.ops import DeviceInfo, Need, profile_for
from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.resources import DeviceProfile, unfit


def _profile(cc: tuple[int, int] | None) -> DeviceProfile:
    """The limits the configs are fitted to: the architecture's (sm_80's where it is unknown)."""
    profile = profile_for(DeviceInfo(platform="gpu", kind="", compute_capability=cc or (8, 0)))
    assert profile is not None
    return profile


def gmm_smem(
    block_m: int, block_n: int, block_k: int, stages: int, itemsize: int, out_itemsize: int, persistent: bool
) -> int:
    """Shared memory of one ``gmm_kernel`` or ``tgmm_kernel`` program, an upper bound of what
    Triton 3.6 allocates (its compiled ``metadata.shared`` for sm_80, sm_86 and sm_90: the suite
    compares them): ``stages`` buffers of the ``[block_m, block_k]`` and ``[block_k, block_n]``
    operand tiles (sm_80/86 use one fewer); with float32 operands (TF32 passes) one more
    ``[block_m, block_k]`` tile; and the epilogue's ``[block_m, block_n]`` tile in the output dtype,
    through which the accumulator changes from the MMA layout to the store's (128 columns of it at
    a time for a 16-bit output). One program per tile: the epilogue runs after the last k step, in the
    operand buffers, and needs the larger of the two. Persistent (``_gmm_persistent``): the next
    tile's operand loads are in flight during this tile's epilogue, so it needs both (at 128x256x64,
    3 stages, bfloat16 operands: 147456 + 131072 B with a float32 output, over Hopper's 232448; 4
    stages with a bfloat16 output: 196608 + 32768 B, which fits)."""
    operands = stages * (block_m + block_n) * block_k * itemsize
    if itemsize == 4:
        operands += block_m * block_k * itemsize
    # A 16-bit output converts at most 128 columns at a time (128x256 tiles: 32 KiB, not 64);
    # a float32 one the whole tile (test_kernel_resources compares with the compiled allocation).
    epilogue = block_m * (min(block_n, 128) if out_itemsize == 2 else block_n) * out_itemsize
    return operands + epilogue if persistent else max(operands, epilogue)


def needs(cfg: GroupedMatmulConfig, itemsize: int, out_itemsize: int) -> list[Need]:
    """What the three kernels need with ``cfg`` (complete): the forward ``gmm`` (output in
    ``preferred_element_type``, ``out_itemsize`` bytes), ``dlhs`` (the same kernel, output in the
    inputs' dtype) and ``tgmm`` (its own pipeline depth, never persistent, float32 partials when
    split)."""
    assert cfg.block_m and cfg.block_n and cfg.block_k and cfg.num_stages and cfg.num_warps
    tiles = (cfg.block_m, cfg.block_n, cfg.block_k)
    threads = 32 * cfg.num_warps
    persistent = bool(cfg.persistent)
    tgmm_out = 4 if (cfg.split_k or 1) > 1 else itemsize
    return [
        Need("gmm (forward)", gmm_smem(*tiles, cfg.num_stages, itemsize, out_itemsize, persistent), threads),
        Need("gmm (dlhs)", gmm_smem(*tiles, cfg.num_stages, itemsize, itemsize, persistent), threads),
        Need(
            "tgmm (drhs)", gmm_smem(*tiles, cfg.tgmm_num_stages or cfg.num_stages, itemsize, tgmm_out, False), threads
        ),
    ]


def fits(cfg: GroupedMatmulConfig, itemsize: int, out_itemsize: int, cc: tuple[int, int] | None) -> bool:
    return unfit(needs(cfg, itemsize, out_itemsize), _profile(cc)) is None


def programs_per_sm(cfg: GroupedMatmulConfig, itemsize: int, out_itemsize: int, cc: tuple[int, int] | None) -> int:
    """Programs of the persistent ``gmm`` (forward and ``dlhs``) that one SM holds at once."""
    profile = _profile(cc)
    return max(1, min(profile.blocks_per_sm(need) for need in needs(cfg, itemsize, out_itemsize)[:2]))


# Programs that fill an H100/H200 (132 SMs) twice over.
_FULL_GRID = 2 * 132


def tgmm_split(m: int, k: int, n: int, groups: int, block_m: int, block_n: int, block_k: int) -> int:
    """``drhs`` has one program per output tile (``groups x k/block_m x n/block_n``), each
    reducing its group's rows: when that does not fill the GPU (few groups, small k and n) and
    each group has many row steps, split the rows so the grid fills it (at most 8-way: the
    float32 partials cost ``split`` extra writes of the gradient)."""
    tiles = groups * -(-k // block_m) * -(-n // block_n)
    steps = m / max(groups, 1) / block_k
    if tiles >= _FULL_GRID or steps < 8:
        return 1
    return int(min(8, -(-_FULL_GRID // tiles), steps // 4))


def heuristic(
    m: int, k: int, n: int, groups: int, itemsize: int, cc: tuple[int, int] | None, out_itemsize: int | None = None
) -> GroupedMatmulConfig:
    """Few large groups: 128-row tiles (a tile is wasted only at a group's last rows, and a
    group's last rows run half tiles when 64 are enough: ``_call.tail_rows``). Many small groups
    (fewer than 128 rows each on average): 64-row tiles, since each group's last tile is on
    average half empty and that waste grows with the group count. 16-bit inputs take 64-deep k
    steps, float32 32-deep (same bytes). On Hopper, 16-bit 128-row tiles are 256 columns wide
    with 3 stages (144 KiB of shared memory): more flops per byte loaded than 128x128 with 4
    stages, and faster on the three kernels at all three benchmark shapes of an H100
    (``benchmarks/config_sweep.py grouped_matmul``; ``benchmarks/results/h100/grouped_matmul.json``,
    16384x2048x1536 g64, 16384x4096x2048 g8, 65536x4096x1408 g64). Those wide tiles take a 4th
    stage (192 KiB) when the groups hold fewer than 512 rows each: each group's rhs then streams
    from HBM for only 2-4 row tiles, and a deeper pipeline hides more of that latency (same record,
    16384x2048x1536 g64: forward and ``dlhs`` faster with 4 stages; no gain at 8 experts, 1-2 %
    slower with 1024 rows per group). ``tgmm`` keeps 3 stages there (``tgmm_num_stages``): its
    programs reduce one group's ~256 rows in 4-5 steps, too few for a 4th stage to pay for its
    prologue (faster at 3 on an H200 and on an H100: ``benchmarks/results/h200/grouped_matmul.json``
    and the H100 record, 16384x2048x1536 g64).
    Groups of 512 rows or more run those 3-stage wide tiles on the persistent grid (``_kernel``'s
    ``_gmm_persistent``: whole tiles, the next tile's loads under this tile's epilogue): the forward
    and ``dlhs`` are faster than with one 3-stage tile per program at 16384x4096x2048 g8 and
    65536x4096x1408 g64 (``benchmarks/results/h200/grouped_matmul.json``, each kernel alone). Under
    512 rows it is not used: at 64 experts the forward gains less than ``dlhs`` loses, and the
    group ends' half tiles are worth more there.
    Otherwise 128 columns, 4 stages on Hopper, 3 on Ampere (less shared memory).
    The config is then fitted to the device's shared memory for ``out_itemsize``-byte outputs
    (``None``: the inputs' dtype) with :func:`fit`."""
    rows_per_group = m / max(groups, 1)
    block_m = 128 if rows_per_group >= 128 else 64
    block_k = 64 if itemsize <= 2 else 32
    hopper = bool(cc) and cc[0] >= 9
    wide = hopper and block_m == 128 and itemsize <= 2
    block_n = 256 if wide else 128
    stages = (4 if rows_per_group < 512 else 3) if wide else 4 if hopper else 3
    warps = 8 if block_m == 128 and hopper else 4
    cfg = GroupedMatmulConfig(
        block_m=block_m, block_n=block_n, block_k=block_k, num_warps=warps, num_stages=stages,
        tgmm_num_stages=3 if wide and stages > 3 else None,  # None: num_stages (also in configs filled from this)
        split_k=tgmm_split(m, k, n, groups, block_m, block_n, block_k), persistent=wide and rows_per_group >= 512,
    )  # fmt: skip
    return fit(cfg, itemsize, out_itemsize or itemsize, cc)


def fit(cfg: GroupedMatmulConfig, itemsize: int, out_itemsize: int, cc: tuple[int, int] | None) -> GroupedMatmulConfig:
    """``cfg``, or the nearest config that fits the device's shared memory: a persistent grid
    whose epilogue does not fit beside its operand buffers runs one program per tile (its epilogue
    then reuses the buffers: a float32 output at 128x256 tiles needs 278528 B persistent at 3
    stages, 147456 B one program per tile); then fewer stages, then half as many columns."""
    while not fits(cfg, itemsize, out_itemsize, cc):
        fields = cfg.tuning_fields()
        if cfg.persistent:
            fields["persistent"] = False
        elif cfg.num_stages > 2:
            fields["num_stages"] = cfg.num_stages - 1
            fields["tgmm_num_stages"] = min(cfg.num_stages - 1, cfg.tgmm_num_stages) if cfg.tgmm_num_stages else None
        elif cfg.block_n > 16:
            fields["block_n"] = cfg.block_n // 2
        elif cfg.block_m > 16:
            fields["block_m"] = cfg.block_m // 2
        else:
            raise AssertionError(f"no grouped_matmul config fits {_profile(cc).describe()}")  # 16x16 tiles always fit
        cfg = GroupedMatmulConfig(**fields)
    return cfg


# (block_m, block_n, block_k, num_warps, num_stages) for 16-bit inputs on Hopper: wgmma tiles of
# 64 rows per warpgroup (4 warps), 128 or 256 columns; float32 halves block_k (same bytes per stage).
_CANDIDATES = (
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (128, 128, 64, 8, 3),  # 96 KiB: two programs per SM (one's epilogue under the other's loop)
    (64, 256, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 128, 128, 8, 3),
    (64, 128, 128, 4, 3),
)
# The persistent grid (one program per SM) at the wide tiles.
_PERSISTENT_CANDIDATES = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4))


def candidates(
    m: int, k: int, n: int, groups: int, itemsize: int, cc: tuple[int, int] | None, out_itemsize: int | None = None
) -> list[GroupedMatmulConfig]:
    """The autotuning space, without the configs that do not fit the device; the heuristic's choice first."""
    out_itemsize = out_itemsize or itemsize
    out = [heuristic(m, k, n, groups, itemsize, cc, out_itemsize)]
    space = [(c, False) for c in _CANDIDATES] + [(c, True) for c in _PERSISTENT_CANDIDATES]
    for (bm, bn, bk, warps, stages), persistent in space:
        if itemsize > 2:
            bk //= 2
        cfg = GroupedMatmulConfig(
            block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages, split_k=1, persistent=persistent
        )
        if cfg not in out and fits(cfg.filled_from(out[0]), itemsize, out_itemsize, cc):
            out.append(cfg)
    return out
