"""The kernels to profile with Nsight Compute: grouped_matmul's forward at issue 19's 64-expert
shape (16384, 2048, 1536, 64; multinomial group sizes) and state_space_v1's backward kernels at
b1 T4096 d_inner 4096 d_state 16, bf16, each run after its compilation (and XLA's own GEMM
autotuning, which ``--kernel-name`` keeps out). On the GPU machine:

    ncu --target-processes all --kernel-name regex:"gmm_kernel|ssm1_bwd" --launch-count 5 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \\
        --csv --page details python3 benchmarks/ncu_gmm_ssm1.py > ncu.csv
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import ejkernel
from ejkernel.ops.executor import bind
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.state_space_v1.bench import ssm1_inputs
from ejkernel_triton.state_space_v1 import _call as S
from ejkernel_triton.state_space_v1 import heuristics as H


def main() -> None:
    m, k, n, g = 16384, 2048, 1536, 64
    sizes = jnp.asarray(group_sizes_for(m, g, "multinomial"), jnp.int32)
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (m, k), jnp.bfloat16)
    rhs = (jax.random.normal(k2, (g, k, n), jnp.bfloat16) / 45.0).astype(jnp.bfloat16)
    gmm = jax.jit(lambda a, b, s: ejkernel.grouped_matmul(a, b, s, platform="triton"))
    for _ in range(2):
        jax.block_until_ready(gmm(lhs, rhs, sizes))

    x, A, B, C, D, dt = ssm1_inputs(1, 4096, 4096, 16, jnp.bfloat16)
    dy = jax.random.normal(jax.random.key(1), x.shape, jnp.bfloat16)
    args = bind("state_space_v1", x, A, B, C, D, dt)
    spec = S.make_spec(args, H.heuristic(args))
    _, _, states = jax.jit(lambda *a: S.forward(spec, *a, None, store_states=True))(x, A, B, C, D, dt)
    dhT = jnp.zeros((1, 4096, 16), jnp.float32)
    jax.block_until_ready(jax.jit(lambda *a: S.backward(spec, *a))(x, A, B, C, D, dt, states, dy, dhT))
    print("profiled", spec, flush=True)


if __name__ == "__main__":
    main()
