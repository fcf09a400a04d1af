"""Config sweep of the CUDA paged decode on one shape, next to the heuristic's pick: partition
(split-K) length x ring stages x lane layout.

    python benchmarks/cuda_decode_sweep.py --b 32 --h 32 --hk 8 --d 128 --context 8192 --out sweep.json

Prints GB/s (K and V pages read + q + out) per config; every sequence at full context.
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp

import ejkernel
from ejkernel.cli.bench import PageShape, _timed, measure_copy_gbps
from ejkernel.ops import device_for_arrays
from ejkernel.testing import conformance as C
from ejkernel_cuda.page_attention import heuristics as H
from ejkernel_cuda.page_attention import impl as cuda_impl


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
    shape = PageShape(b=a.b, h=a.h, hk=a.hk, d=a.d, context=a.context, block_size=a.block_size)
    (q, kc, vc, lens, tables), nbytes = shape.inputs(dt)
    peak = measure_copy_gbps(min(2 * kc.nbytes, 2**31), a.repeats)
    impl = ejkernel.kernel_registry.get("page_attention", platform="cuda")
    args = C.bind("page_attention", query=q, key_cache=kc, value_cache=vc, context_lens=lens, block_tables=tables)
    heur = impl.heuristic_cfg(args, device_for_arrays([q]))
    hp = (heur.fwd_params.kv_blocksize, heur.fwd_params.num_stages)
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
                cfg = ejkernel.PageAttentionConfig(fwd_params=ejkernel.FwdParams(kv_blocksize=part, num_stages=stages))

                def f(q, kc, vc, cfg=cfg):
                    return ejkernel.page_attention(q, kc, vc, lens, tables, platform="cuda", cfg=cfg)

                ms = _timed(f, (q, kc, vc), a.repeats)  # device time: 10 calls inside one program
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
