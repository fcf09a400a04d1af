"""Config sweep of the CUDA paged decode on one shape, next to the heuristic's pick: partition
(split-K) length x ring stages x lane layout.

    python benchmarks/cuda_decode_sweep.py --b 32 --h 32 --hk 8 --d 128 --context 8192 --out sweep.json

Prints GB/s (K and V pages read + q + out) per config; every sequence at full context.
"""

from __future__ import annotations

import argparse
import json
import sys

import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops import device_for_arrays
from ejkernel.ops.timing import device_ms, measure_copy_gbps
from ejkernel.testing import conformance as C
from ejkernel_cuda.page_attention import heuristics as H
from ejkernel_cuda.page_attention import impl as cuda_impl


def page_inputs(b: int, h: int, hk: int, d: int, context: int, block_size: int, dtype, seed: int = 0):
    """Random ``(query, key_cache, value_cache, context_lens, block_tables)`` with every sequence at
    full ``context`` on randomly permuted pages (as ``ejkernel bench page_attention`` makes them),
    and the bytes a decode moves (K and V rows read, query read, output written)."""
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(dtype)
    pages = -(-context // block_size)
    num_blocks = b * pages
    kc = jnp.asarray(rng.standard_normal((num_blocks, block_size, hk, d)), dt)
    vc = jnp.asarray(rng.standard_normal((num_blocks, block_size, hk, d)), dt)
    q = jnp.asarray(rng.standard_normal((b, h, d)), dt)
    tables = jnp.asarray(rng.permutation(num_blocks).reshape(b, pages), jnp.int32)
    lens = jnp.full((b,), context, jnp.int32)
    nbytes = 2 * b * context * hk * d * dt.itemsize + 2 * q.nbytes
    return (q, kc, vc, lens, tables), nbytes


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, default in (("b", 32), ("h", 32), ("hk", 8), ("d", 128), ("context", 8192), ("block_size", 16)):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--partitions", default="512,1024,2048,4096")
    ap.add_argument("--stages", default="2,3,4")
    ap.add_argument("--variants", default="0,1", help="0: tensor cores, 1: FMAs")
    ap.add_argument("--out")
    a = ap.parse_args()
    dt = jnp.dtype(a.dtype)
    (q, kc, vc, lens, tables), nbytes = page_inputs(a.b, a.h, a.hk, a.d, a.context, a.block_size, dt)
    peak = measure_copy_gbps(min(2 * kc.nbytes, 2**31), a.repeats)
    impl = ejkernel.kernel_registry.get("page_attention", platform="cuda")
    args = C.bind("page_attention", query=q, key_cache=kc, value_cache=vc, context_lens=lens, block_tables=tables)
    heur = impl.heuristic_cfg(args, device_for_arrays([q]))
    hp = (heur.tokens_per_block, heur.num_stages)
    print(f"copy peak {peak:.0f} GB/s; heuristic partition {hp[0]} stages {hp[1]}", flush=True)
    itemsize = dt.itemsize
    variants = [int(v) for v in a.variants.split(",")] if H.uses_mma(itemsize, a.d) else [0]
    records = []
    for variant in variants:
        cuda_impl.LANE_VARIANT = variant
        for part in (int(x) for x in a.partitions.split(",")):
            for stages in (int(x) for x in a.stages.split(",")):
                if H.smem_bytes(a.h // a.hk, a.d, part, a.block_size, stages, itemsize, variant) > H.SMEM_LIMIT:
                    continue
                cfg = ejkernel.PageAttentionConfig(tokens_per_block=part, num_stages=stages)

                def f(q, kc, vc, cfg=cfg):
                    return ejkernel.page_attention(
                        q, kc, vc, lens, tables, cache_layout="blocks_tokens_heads", platform="cuda", cfg=cfg
                    )

                try:  # device time: the slope between programs of 10 and n calls
                    ms = device_ms(f, (q, kc, vc), a.repeats)
                except Exception as e:
                    print(f"  timing failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
                    continue
                gbps = nbytes / (ms * 1e-3) / 1e9
                rec = {"variant": variant, "partition": part, "stages": stages, "ms": ms, "gbps": gbps}
                records.append({**rec, "fraction_of_peak": gbps / peak, "peak_gbps": peak})
                print(
                    f"variant {variant} partition {part:5d} stages {stages}: {ms:.4f} ms {gbps:7.0f} GB/s "
                    f"({gbps / peak:.1%} of copy)",
                    flush=True,
                )
    cuda_impl.LANE_VARIANT = 0
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "heuristic": list(hp), "records": records}, fh, indent=1)


if __name__ == "__main__":
    main()
