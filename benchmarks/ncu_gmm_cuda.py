"""The CUDA grouped GEMM's three kernels (CUTLASS 3 on sm_90a: forward, ``dlhs``, tgmm) at issue 19's
64-expert shape (16384, 2048, 1536, 64; multinomial group sizes), bf16, for Nsight Compute. Each
runs once compiled (the warm-up launches, skipped below), then once more. On the GPU machine:

    ncu --target-processes all --kernel-name regex:"device_kernel" --launch-skip 3 --launch-count 3 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        --section LaunchStats --section ComputeWorkloadAnalysis \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct \\
        --csv --page details python3 benchmarks/ncu_gmm_cuda.py > ncu.csv

(``device_kernel`` is CUTLASS's kernel template; the setup and zero-fill kernels do not match.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel_cuda.grouped_matmul._call import COL_ROW, ROW_COL, ROW_ROW, ffi_gmm


def main() -> None:
    m, k, n, g = 16384, 2048, 1536, 64
    cum = np.concatenate([[0], np.cumsum(group_sizes_for(m, g, "multinomial"))]).astype(np.int32)
    starts, ends = jnp.asarray(cum[:-1]), jnp.asarray(cum[1:])
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    lhs = jax.random.normal(k1, (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(k2, (g, k, n), jnp.bfloat16) / 45.0).astype(jnp.bfloat16)
    dout = jax.random.normal(k3, (m, n), jnp.bfloat16)
    dt = jnp.bfloat16
    calls = [
        (jax.jit(lambda a, b: ffi_gmm(a, b, starts, ends, ROW_ROW, dt, 0)), (lhs, rhs)),  # forward
        (jax.jit(lambda d, b: ffi_gmm(d, b, starts, ends, ROW_COL, dt, 0)), (dout, rhs)),  # dlhs
        (jax.jit(lambda a, d: ffi_gmm(a, d, starts, ends, COL_ROW, dt, 0)), (lhs, dout)),  # tgmm
    ]
    for _ in range(2):  # the warm-up launches, then the profiled ones
        for fn, args in calls:
            jax.block_until_ready(fn(*args))


if __name__ == "__main__":
    main()
