"""Time the Triton ``mean_pooling`` at chosen configs on a GPU (the sweep's input and its copy peer:
(262144, 4096) bf16 in 64 packed sequences), one JSON line per config.

    python3 benchmarks/pool_ssm1/pool_probe.py --out probe.jsonl --cfgs "32,128,1024,2,3;16,128,1024,2,3"

Each config is ``block_size,block_dim,split_size,num_warps,num_stages``. ``of_copy`` is the bytes
read per second over a device copy's bytes moved per second (``measure_copy_gbps``), as in
``sweep.py``.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops.mean_pooling import MeanPoolingConfig
from ejkernel.ops.timing import device_ms, measure_copy_gbps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--cfgs", required=True, help="block_size,block_dim,split_size,num_warps,num_stages;...")
    ns = p.parse_args()
    tokens, hidden = 262144, 4096
    x = jax.random.normal(jax.random.key(0), (tokens, hidden), jnp.bfloat16)
    rng = np.random.default_rng(0)
    cu = np.concatenate([[0], np.sort(rng.choice(np.arange(1, tokens), 63, replace=False)), [tokens]])
    cu = jnp.asarray(cu, jnp.int32)
    nbytes = x.nbytes + 64 * hidden * 2
    peak = measure_copy_gbps(min(2**31, 2 * x.nbytes), 5)
    print(f"copy: {peak:.0f} GB/s", flush=True)
    with open(ns.out, "w") as out:
        for spec in ns.cfgs.split(";"):
            t, d, sp, w, st = (int(v) for v in spec.split(","))
            cfg = MeanPoolingConfig(block_size=t, block_dim=d, split_size=sp, num_warps=w, num_stages=st)
            try:
                ms = device_ms(
                    lambda x, cu, cfg=cfg: ejkernel.mean_pooling(x, cu, platform="triton", cfg=cfg), (x, cu), 5
                )
            except Exception as e:  # a config that fails is reported, the probe goes on
                print(f"pool {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            gbps = nbytes / ms / 1e6
            rec = {"cfg": cfg.tuning_fields(), "ms": ms, "gbps": gbps, "of_copy": gbps / peak, "copy_gbps": peak}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"pool {rec['cfg']}: {ms:.3f} ms {gbps:.0f} GB/s ({gbps / peak:.2f} of copy)", flush=True)


if __name__ == "__main__":
    main()
