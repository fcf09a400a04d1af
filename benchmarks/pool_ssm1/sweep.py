"""Config sweeps of the Triton ``mean_pooling`` and ``state_space_v1`` on a GPU (one JSON line per
config, then a table), to pick the heuristics' tiles.

    python3 benchmarks/pool_ssm1/sweep.py --out sweep.jsonl [--quick]
    python3 benchmarks/pool_ssm1/sweep.py --only pool --pool-cfgs "32,128,1024,2,3;16,128,1024,2,3" --out F

``--pool-cfgs`` times the heuristic and the configs given (``block_size,block_dim,split_size,
num_warps,num_stages``; ``;`` between configs) instead of the built-in grid.

CPU check of the script: ``python benchmarks/pool_ssm1/sweep.py --tiny --platform xla --out /tmp/s.jsonl``
(tiny shapes, two configs each; the XLA path reads only the chunk length).

mean_pooling: (tokens, hidden) = (262144, 4096) bf16 in 64 packed sequences, GB/s of the forward
against a device copy. state_space_v1: b1 s4096 d4096 n16 bf16, forward and forward+backward ms.
Timing: ``ejkernel.ops.timing.device_ms`` (the slope between two fori_loop programs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops.mean_pooling import MeanPoolingConfig
from ejkernel.ops.state_space_v1 import StateSpaceV1Config
from ejkernel.ops.state_space_v1.bench import ssm1_inputs
from ejkernel.ops.timing import device_ms, measure_copy_gbps


def pool_sweep(quick: bool, out, platform: str = "triton", tiny: bool = False, only: str | None = None) -> None:
    tokens, hidden = (4096, 256) if tiny else (262144, 4096)
    x = jax.random.normal(jax.random.key(0), (tokens, hidden), jnp.bfloat16)
    rng = np.random.default_rng(0)
    cu = np.concatenate([[0], np.sort(rng.choice(np.arange(1, tokens), 63, replace=False)), [tokens]])
    cu = jnp.asarray(cu, jnp.int32)
    nbytes = x.nbytes + 64 * hidden * 2
    peak = measure_copy_gbps(min(2**31, 2 * x.nbytes), 5)
    print(f"copy: {peak:.0f} GB/s", flush=True)
    grid = [  # (block_t, block_d, split, warps, stages)
        (32, 256, 2048, 4, 3), (16, 256, 2048, 4, 3), (64, 256, 2048, 8, 3), (32, 256, 2048, 8, 4),
        (16, 512, 2048, 4, 3), (32, 512, 2048, 8, 3), (32, 128, 2048, 4, 3), (64, 128, 2048, 4, 3),
        (16, 256, 2048, 4, 4), (32, 256, 1024, 4, 3), (32, 256, 4096, 4, 3), (32, 256, 8192, 4, 3),
        (8, 256, 2048, 4, 4), (16, 128, 2048, 2, 4), (64, 256, 4096, 8, 2), (32, 256, 2048, 4, 2),
    ]  # fmt: skip
    if only:
        grid = [tuple(int(v) for v in c.split(",")) for c in only.split(";")]
    elif not quick:
        grid += [(t, d, sp, w, st) for t in (16, 32, 64) for d in (128, 256, 512) for sp in (1024, 4096)
                 for w in (4, 8) for st in (2, 3, 4) if t * d <= 32768]  # fmt: skip
    cfgs = [
        MeanPoolingConfig(block_size=t, block_dim=d, split_size=sp, num_warps=w, num_stages=st)
        for t, d, sp, w, st in grid
    ]
    if tiny:
        cfgs = cfgs[:2]
    for cfg in [None, *cfgs]:
        try:
            ms = device_ms(lambda x, cu, cfg=cfg: ejkernel.mean_pooling(x, cu, platform=platform, cfg=cfg), (x, cu), 5)
        except Exception as e:
            print(f"pool {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        rec = {"op": "mean_pooling", "cfg": cfg.tuning_fields() if cfg else "heuristic", "ms": ms,
               "gbps": nbytes / ms / 1e6, "of_copy": nbytes / ms / 1e6 / peak}  # fmt: skip
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(f"pool {rec['cfg']}: {ms:.3f} ms {rec['gbps']:.0f} GB/s ({rec['of_copy']:.2f} of copy)", flush=True)


def ssm_sweep(quick: bool, out, platform: str = "triton", tiny: bool = False) -> None:
    b, s, d, n = (1, 256, 64, 16) if tiny else (1, 4096, 4096, 16)
    arrays = ssm1_inputs(b, s, d, n, jnp.bfloat16)
    grid = [  # (block_d, block_e, warps, stages); the heuristic's comes first (None)
        (16, 16, 4, 2), (4, 32, 2, 2), (16, 8, 4, 2), (32, 8, 4, 2), (8, 16, 2, 2),
    ]  # fmt: skip
    if not quick:
        grid += [(16, 16, 8, 2), (4, 16, 1, 2), (8, 8, 2, 2), (8, 32, 4, 1), (16, 32, 8, 2), (32, 16, 8, 2)]
        grid += [(bd, be, w, st) for bd in (4, 8, 16, 32) for be in (8, 16, 32) for w in (1, 2, 4, 8)
                 for st in (1, 2, 3) if 128 * w <= bd * be * 16 <= 16384]  # fmt: skip
    cfgs = [StateSpaceV1Config(block_d=bd, block_e=be, num_warps=w, num_stages=st) for bd, be, w, st in grid]
    if tiny:
        cfgs = cfgs[:2]
    for cfg in [None, *cfgs]:

        def fwd(*a, cfg=cfg):
            return ejkernel.state_space_v1(*a, platform=platform, cfg=cfg)

        def fwdbwd(*a, cfg=cfg):
            # value_and_grad: the forward's output stays live (jax.grad lets XLA drop it)
            return jax.value_and_grad(lambda *a: jnp.sum(fwd(*a).astype(jnp.float32)), argnums=(0, 1, 2, 3, 4, 5))(*a)

        t0 = time.time()
        try:
            ms_f = device_ms(fwd, arrays, 5)
            ms_fb = device_ms(fwdbwd, arrays, 3)
        except Exception as e:
            print(f"ssm {cfg}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            continue
        rec = {"op": "state_space_v1", "cfg": cfg.tuning_fields() if cfg else "heuristic", "fwd_ms": ms_f,
               "fwdbwd_ms": ms_fb, "wall_s": time.time() - t0}  # fmt: skip
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(f"ssm {rec['cfg']}: fwd {ms_f:.3f} ms fwd+bwd {ms_fb:.3f} ms", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="sweep.jsonl")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=("pool", "ssm"))
    p.add_argument("--platform", default="triton", help="implementation (xla: a CPU check of the script)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, two configs each (CPU check)")
    p.add_argument("--pool-cfgs", help="mean_pooling configs to time instead of the grid: t,d,split,warps,stages;...")
    ns = p.parse_args()
    print(jax.devices(), file=sys.stderr)
    with open(ns.out, "a") as f:
        if ns.only in (None, "pool"):
            pool_sweep(ns.quick, f, ns.platform, ns.tiny, ns.pool_cfgs)
        if ns.only in (None, "ssm"):
            ssm_sweep(ns.quick, f, ns.platform, ns.tiny)
