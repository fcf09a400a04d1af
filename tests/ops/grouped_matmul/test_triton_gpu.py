"""The Triton ``grouped_matmul`` on the GPU beyond the shared conformance cases: the tiles the
heuristic picks at realistic sizes (the conformance cases are small enough that it picks the
smallest), the persistent grid, skewed expert loads, and bit-identical reruns. Every comparison
is against the op's float32 reference."""

from __future__ import annotations

import pytest

from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.grouped_matmul.cases import GroupedMatmulCase
from ejkernel.testing import conformance as C

from .._triton_gpu_checks import assert_deterministic, public_op

pytestmark = pytest.mark.gpu


def _sizes(m: int, g: int, dist: str, empty: int = 0) -> tuple[int, ...]:
    """``g`` group sizes over ``m - 37`` rows (37 rows past the groups), ``empty`` of them zero."""
    s = group_sizes_for(m - 37, g, dist, seed=1)
    if empty:
        moved = s[:empty].sum()
        s[:empty] = 0
        s[-1] += moved
    return tuple(int(x) for x in s)


GMM_CASES = [
    GroupedMatmulCase("few-large", m=4133, k=512, n=384, group_sizes=_sizes(4133, 8, "multinomial"), dtype="bfloat16"),
    GroupedMatmulCase(
        "many-small-zipf", m=3001, k=384, n=320, group_sizes=_sizes(3001, 64, "zipf", empty=5), dtype="bfloat16"
    ),
    GroupedMatmulCase(
        "rhsT-fp16",
        m=2048,
        k=256,
        n=200,
        group_sizes=_sizes(2048, 16, "zipf", empty=2),
        transpose_rhs=True,
        dtype="float16",
    ),
    GroupedMatmulCase(
        "expert-shard-bf16-out",
        m=1500,
        k=320,
        n=256,
        group_sizes=_sizes(1500, 12, "multinomial"),
        group_offset=4,
        local_groups=6,
        existing_out=True,
        bias=True,
        dtype="bfloat16",
        out_dtype=None,
    ),
    # ~250 rows per group: the heuristic's 4-stage 128x256 tiles, on a slice of the experts.
    GroupedMatmulCase(
        "medium-groups-slice",
        m=3100,
        k=256,
        n=520,
        group_sizes=_sizes(3100, 12, "multinomial"),
        group_offset=2,
        local_groups=8,  # 3100 / 8 rows per local group for the heuristic: under 512
        dtype="bfloat16",
    ),
    GroupedMatmulCase("fp32-tf32", m=1031, k=200, n=136, group_sizes=_sizes(1031, 8, "zipf"), dtype="float32"),
]
GMM_CONFIGS = {
    "heuristic": None,
    "persistent-128": GroupedMatmulConfig(
        block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, split_k=1, persistent=True
    ),
    # The persistent grid at the heuristic's wide tiles and 4 stages: its flattened loop takes
    # 224 KiB of shared memory with a 16-bit output (the 4 stages and an epilogue buffer); with a
    # float32 output 320 KiB, which no GPU has: the call must refuse it, naming the limit.
    "persistent-128x256": GroupedMatmulConfig(
        block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, split_k=1, persistent=True
    ),
    "64x256-split4": GroupedMatmulConfig(block_m=64, block_n=256, block_k=64, num_warps=4, num_stages=3, split_k=4),
}


@pytest.mark.parametrize("cfg_id", list(GMM_CONFIGS))
@pytest.mark.parametrize("case", GMM_CASES, ids=lambda c: c.name)
def test_grouped_matmul_realistic_tiles(case, cfg_id):
    cfg = GMM_CONFIGS[cfg_id]
    if case.dtype == "float32" and cfg is not None:  # float32 takes 32-deep k steps (same bytes per stage)
        cfg = GroupedMatmulConfig(**{**cfg.tuning_fields(), "block_k": 32})
    fn = public_op("grouped_matmul", platform="triton", cfg=cfg)
    if cfg is not None:
        from ejkernel.ops import kernel_registry, profile_for
        from ejkernel.ops.device import device_for_arrays
        from ejkernel.ops.resources import unfit

        impl = kernel_registry.get("grouped_matmul", platform="triton")
        kw = case.inputs(0)
        args = C.bind("grouped_matmul", **kw)
        device = device_for_arrays([kw["lhs"]])
        reason = unfit(impl.resources(cfg, args, device), profile_for(device))
        if reason is not None:
            assert cfg_id == "persistent-128x256" and case.out_dtype == "float32", reason
            with pytest.raises(ValueError, match="shared memory per block"):
                fn(**kw)
            return
    C.check(fn, case, op="grouped_matmul")


def test_deterministic():
    assert_deterministic("grouped_matmul", GMM_CASES[1], GMM_CONFIGS["64x256-split4"])
