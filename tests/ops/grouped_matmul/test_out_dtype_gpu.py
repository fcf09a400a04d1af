"""The Triton ``grouped_matmul`` at the four benchmark shapes with float32 (the default
``preferred_element_type``) and bfloat16 outputs: the configs the heuristic picks fit the GPU
(a float32 output once asked for 278528 B of shared memory on Hopper, 232448 B allowed), and rows
from the start, middle and end of the output match the float32 reference.

The rate of float32 against bfloat16 outputs is the benchmark's (``ejkernel bench grouped_matmul
--dtype bfloat16 --out-dtype float32,input --impl triton`` with the four ``--shape``s)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ejkernel.ops import DeviceInfo, bind, device_for_arrays, kernel_registry, profile_for, record_dispatches
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.resources import unfit

pytestmark = pytest.mark.gpu

SHAPES = [
    (16384, 4096, 2048, 8, "multinomial"),
    (16384, 2048, 1536, 64, "multinomial"),
    (65536, 4096, 1408, 64, "multinomial"),
    (8192, 7168, 2048, 256, "zipf"),
]
CHECK_ROWS = 256  # rows compared at the start, the middle and the end of the output
# Products of bf16 inputs summed in float32 (the reference: float32 at HIGHEST on the same
# bf16 values): float32 outputs differ by summation order only; bfloat16 outputs by one rounding.
ATOL = {"float32": 2e-3, "bfloat16": 3e-2}
RTOL = {"float32": 1e-3, "bfloat16": 1.6e-2}


def _reference_rows(lhs, rhs, sizes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``out[rows]`` in float32 at HIGHEST precision, one product per group the rows touch."""
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    ref = np.zeros((len(rows), rhs.shape[2]), np.float32)
    for g in np.unique(group_of[rows]):
        mine = np.flatnonzero(group_of[rows] == g)
        a = lhs[rows[mine]].astype(jnp.float32)
        ref[mine] = np.asarray(jnp.matmul(a, rhs[g].astype(jnp.float32), precision=jax.lax.Precision.HIGHEST))
    return ref


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{} k{} n{} g{} {}".format(*s))
def test_grouped_matmul_float32_and_bfloat16_outputs(shape):
    import ejkernel

    m, k, n, g, dist = shape
    sizes = group_sizes_for(m, g, dist)
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (m, k), jnp.float32).astype(jnp.bfloat16)
    rhs = (jax.random.normal(k2, (g, k, n), jnp.float32) / np.sqrt(k)).astype(jnp.bfloat16)
    rows = np.concatenate(
        [np.arange(CHECK_ROWS), m // 2 + np.arange(CHECK_ROWS), m - CHECK_ROWS + np.arange(CHECK_ROWS)]
    )
    ref = _reference_rows(lhs, rhs, sizes, rows)
    device = device_for_arrays([lhs])
    impl = kernel_registry.get("grouped_matmul", platform="triton")
    outs = {}
    for out_dtype in ("float32", "bfloat16"):
        kw = {} if out_dtype == "float32" else {"preferred_element_type": jnp.bfloat16}  # float32: the default
        with record_dispatches() as log:
            out = ejkernel.modules.grouped_matmul(lhs, rhs, jnp.asarray(sizes), platform="triton", **kw)
            out = jax.block_until_ready(out)
        assert out.dtype == jnp.dtype(out_dtype) and out.shape == (m, n)
        (d,) = log
        args = bind("grouped_matmul", lhs, rhs, jnp.asarray(sizes), **kw)
        assert unfit(impl.resources(d.config, args, device), profile_for(device)) is None
        got = np.asarray(out[rows].astype(jnp.float32))
        np.testing.assert_allclose(got, ref, atol=ATOL[out_dtype], rtol=RTOL[out_dtype], err_msg=f"{out_dtype} output")
        outs[out_dtype] = np.asarray(out[rows].astype(jnp.float32))
    # The bfloat16 output is the float32 one rounded (both accumulate in float32).
    np.testing.assert_allclose(outs["bfloat16"], outs["float32"], atol=1e-2, rtol=8e-3)


def test_the_persistent_float32_config_is_refused_before_launch():
    """The config the heuristic chose for float32 outputs before it counted the epilogue: an
    explicit ``cfg`` of it is a ``ValueError`` naming the limit, on Hopper; elsewhere it must
    not fit either (sm_80: 163 KiB)."""
    import ejkernel
    from ejkernel.ops.grouped_matmul import GroupedMatmulConfig

    cfg = GroupedMatmulConfig(
        block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, split_k=1, persistent=True
    )
    lhs = jnp.ones((4096, 1024), jnp.bfloat16)
    rhs = jnp.ones((8, 1024, 2048), jnp.bfloat16)
    sizes = jnp.full((8,), 512, jnp.int32)
    device: DeviceInfo = device_for_arrays([lhs])
    limit = profile_for(device).shared_memory_per_block
    with pytest.raises(ValueError, match=f"278528 B .* {limit} B"):
        ejkernel.modules.grouped_matmul(lhs, rhs, sizes, platform="triton", cfg=cfg)
