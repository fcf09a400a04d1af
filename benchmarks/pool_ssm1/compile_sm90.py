"""Compile the mean_pooling and state_space_v1 Triton kernels for sm_90 on a machine without a
GPU (ptxas ships with Triton) and print registers, spills and shared memory per launch.

    python benchmarks/pool_ssm1/compile_sm90.py [--ssm-cfg BLOCK_D,BLOCK_E,WARPS ...]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops import DeviceInfo, kernel_registry, run_impl
from ejkernel.ops.mean_pooling import MeanPoolingConfig
from ejkernel.ops.state_space_v1 import StateSpaceV1Config
from ejkernel.testing import conformance as C
from ejkernel_triton._launch import compile_launch, compile_only

GPU = DeviceInfo(platform="gpu", kind="NVIDIA H200", compute_capability=(9, 0))


def _usage(cubin: bytes) -> str:
    """Registers, stack and spills from cuobjdump --dump-resource-usage (Triton ships it)."""
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return " ".join(line.strip() for line in out.splitlines() if "REG" in line)


def report(records):
    for r in records:
        kernel = compile_launch(r, 90)
        consts = dict(r["constexprs"])
        print(f"  {r['name']:24s} warps={r['num_warps']} {consts} smem={kernel.metadata.shared}")
        print(f"    {_usage(kernel.asm['cubin'])}")


def ssm(cfgs):
    b, s, d, n = 1, 4096, 4096, 16
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((b, s, d)), jnp.bfloat16)
    A = -jnp.ones((d, n), jnp.float32)
    B = C_ = jnp.asarray(rng.standard_normal((b, s, n)), jnp.bfloat16)
    D = jnp.ones((d,), jnp.float32)
    impl = kernel_registry.get("state_space_v1", platform="triton")
    impl.available = lambda device: None  # no jax-triton needed: nothing is launched
    for cfg in cfgs:
        print(f"state_space_v1 {cfg}")
        with compile_only() as recs:

            def f(x, B, C_, dt, cfg=cfg):
                return jax.grad(
                    lambda x: (
                        run_impl(impl, C.bind("state_space_v1", x, A, B, C_, D, dt), cfg, device=GPU)
                        .astype(jnp.float32)
                        .sum()
                    )
                )(x)

            jax.jit(f).lower(x, B, C_, x)
        report(recs)


def pool(cfgs):
    x = jnp.zeros((262144, 4096), jnp.bfloat16)
    cu = jnp.asarray(np.linspace(0, 262144, 65).astype(np.int32))
    impl = kernel_registry.get("mean_pooling", platform="triton")
    impl.available = lambda device: None
    for cfg in cfgs:
        print(f"mean_pooling {cfg}")
        with compile_only() as recs:
            jax.jit(
                lambda x, cfg=cfg: jax.grad(
                    lambda x: run_impl(impl, C.bind("mean_pooling", x, cu), cfg, device=GPU).astype(jnp.float32).sum()
                )(x)
            ).lower(x)
        report(recs)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ssm-cfg", action="append", default=[])
    p.add_argument("--pool-cfg", action="append", default=[])
    ns = p.parse_args()
    del ejkernel
    ssm_cfgs = [
        StateSpaceV1Config(block_d=int(a), block_e=int(e), num_warps=int(w), num_stages=2)
        for a, e, w in (c.split(",") for c in ns.ssm_cfg or ["16,16,4"])
    ]
    pool_cfgs = [
        MeanPoolingConfig(block_size=int(t), block_dim=int(dd), split_size=int(sp), num_warps=int(w), num_stages=3)
        for t, dd, sp, w in (c.split(",") for c in ns.pool_cfg or ["32,256,2048,4"])
    ]
    pool(pool_cfgs)
    ssm(ssm_cfgs)
