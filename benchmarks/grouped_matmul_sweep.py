"""Tile sweep of the Triton grouped GEMM kernels on a GPU (forward ``gmm``, ``dlhs`` = ``gmm`` with
``rhsᵀ``, ``drhs`` = ``tgmm``), each kernel timed alone with the library's looped
program (``ejkernel.ops.timing.looped``: LOOP data-dependent calls, median of 3) on the benchmark shapes of issue 19, bf16.

    python3 benchmarks/grouped_matmul_sweep.py --json out.json [--quick] [--shapes 0,1] [--shape M,K,N,G,DIST]

CPU check of the script (tiny shape, Triton's interpreter; the timings mean nothing there):
``TRITON_INTERPRET=1 python benchmarks/grouped_matmul_sweep.py --interpret --dtype float16
--shape 96,32,48,4,zipf --quick --json /tmp/gmm_sweep.json`` (in an environment with torch).

Every config's output is compared with the first config's (relative max error), which the
benchmark itself checks against the float32 reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.grouped_matmul import GroupedMatmulConfig
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.timing import looped, time_callable
from ejkernel_triton.grouped_matmul._call import Spec, gmm, persistent_programs, tail_rows, tgmm

LOOP = 20  # calls per timed program (one compile per config; the loop's glue is in every config's time)
SHAPES = [
    (16384, 4096, 2048, 8, "multinomial"),
    (16384, 2048, 1536, 64, "multinomial"),
    (65536, 4096, 1408, 64, "multinomial"),
    (8192, 7168, 2048, 256, "zipf"),
]
# (block_m, block_n, block_k, warps, stages, split_k, persistent[, tail]): ``tail`` (gmm only)
# overrides the rows of a group's last tile (``_call.tail_rows``: half a 128-row tile; 0: whole tiles).
# Variants measured slower and removed (records in results/h200/wave2/gmm-64/README.md): TMA
# operand tiles and warp specialization (3b01b98), merged last tiles and a streaming tgmm
# (db65d11), TMA-store epilogues (1103b5e).
GMM_CFGS = [
    (128, 256, 64, 8, 3, 1, False),
    (128, 256, 64, 8, 4, 1, False),
    (128, 128, 64, 8, 4, 1, False),
    (128, 256, 64, 8, 3, 1, False, 0),
    (128, 128, 64, 8, 4, 1, False, 0),
    (128, 128, 64, 8, 4, 1, True),
    # Two or three programs per SM (96 / 64 KiB of shared memory): one's epilogue under the
    # other's main loop, what a persistent warp-specialized kernel gets by design.
    (128, 128, 64, 8, 3, 1, False),
    (128, 256, 64, 8, 2, 1, False),
    (128, 128, 32, 8, 4, 1, False),
    (64, 256, 64, 4, 4, 1, False),
    (64, 128, 64, 4, 4, 1, False),
    (128, 128, 128, 8, 3, 1, False),
    # 64-row tiles for groups of ~256 rows (4 whole tiles and a 32-row tail for half the groups,
    # against 2 tiles and a 64-row tail): one warpgroup (wgmma m64n256), or two splitting n.
    (64, 256, 64, 4, 3, 1, False),
    (64, 256, 128, 4, 2, 1, False),
    (64, 256, 64, 4, 4, 1, False, 0),
    (64, 256, 64, 8, 4, 1, False),
    # 256-row tiles, 128 columns: a group of <= 256 rows is one row tile, so its rhs column block
    # crosses L2 once instead of 2-3 times (lhs twice as often); 64- or 128-row tails. H200,
    # results/h200/wave2/gmm-schedule call 29: forward 0.242-0.256 ms against 0.220 for 1, slower
    # at 8 experts and at 65536 rows too.
    (256, 128, 64, 8, 3, 1, False, 64),
    (256, 128, 64, 8, 4, 1, False, 64),
    (256, 128, 64, 8, 4, 1, False),
    # The persistent grid (whole tiles, the tile loop flattened into the k loop: the next tile's
    # loads under this tile's epilogue), one program per SM.
    (128, 256, 64, 8, 3, 1, True),
    (128, 256, 64, 8, 4, 1, True),
]
# tgmm: a program reduces one group's rows (256 +- 16 rows: 4 steps of 64 on the 64-expert shape),
# so fewer stages (less shared memory: 2-3 programs per SM) may beat a deeper pipeline.
TGMM_CFGS = [
    (128, 256, 64, 8, 3, 1, False),
    (128, 128, 64, 8, 4, 1, False),
    (128, 256, 64, 8, 4, 1, False),
    (128, 128, 64, 8, 2, 1, False),
    (128, 128, 64, 8, 3, 1, False),
    (128, 256, 64, 8, 2, 1, False),
    (128, 128, 64, 4, 2, 1, False),
    (128, 256, 128, 8, 2, 1, False),
    (128, 128, 64, 8, 4, 2, False),
    (64, 256, 64, 4, 4, 1, False),
    (256, 128, 64, 8, 3, 1, False),
    (256, 128, 64, 8, 4, 1, False),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", required=True)
    p.add_argument("--quick", action="store_true", help="first three configs of each kernel")
    p.add_argument("--only", help="indices into GMM_CFGS / TGMM_CFGS to run, e.g. 0,5,6 (replaces --quick)")
    p.add_argument("--kernels", default="fwd,dlhs,tgmm", help="which kernels to sweep")
    p.add_argument("--shapes", default="0,1,2,3", help="indices into SHAPES")
    p.add_argument("--shape", action="append", help="M,K,N,G,DIST (repeatable; replaces --shapes)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--interpret", action="store_true", help="Triton's interpreter (TRITON_INTERPRET=1; CPU check)")
    ns = p.parse_args()
    shapes = [SHAPES[int(i)] for i in ns.shapes.split(",")]
    if ns.shape:
        shapes = [(*(int(x) for x in t.split(",")[:4]), [*t.split(","), "multinomial"][4]) for t in ns.shape]
    with contextlib.ExitStack() as stack:
        if ns.interpret:
            from ejkernel_triton._launch import interpreted

            stack.enter_context(interpreted())
        sweep(ns, shapes)


def sweep(ns: argparse.Namespace, shapes: list[tuple]) -> None:
    dt = jnp.dtype(ns.dtype)
    recs = []
    for m, k, n, g, dist in shapes:
        sizes = group_sizes_for(m, g, dist)
        # What the kernels read of the groups (``_call.group_inputs``): the sizes, the offset 0.
        gs, off = jnp.asarray(sizes, jnp.int32), jnp.zeros((1,), jnp.int32)
        k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
        lhs = jax.random.normal(k1, (m, k), dt)
        rhs = (jax.random.normal(k2, (g, k, n), dt) / float(np.sqrt(k))).astype(dt)
        dout = jax.random.normal(k3, (m, n), dt)
        flops = 2.0 * m * k * n
        # What each kernel is compared with: the dense matmul of the same FLOPs ([m, k] @ [k, n]).
        dense = looped(lambda a, b: a @ b, LOOP)
        ms = time_callable(lambda dense=dense, a=lhs, b=rhs[0]: dense(a, b), 3) / LOOP
        print(f"dense m{m} k{k} n{n}: {ms:.3f} ms {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s", flush=True)
        recs.append(dict(shape=[m, k, n, g, dist], kernel="dense", ms=ms, tflops=flops / (ms * 1e-3) / 1e12))
        for kernel, cfgs in (("fwd", GMM_CFGS), ("dlhs", GMM_CFGS), ("tgmm", TGMM_CFGS)):
            if kernel not in ns.kernels.split(","):
                continue
            first = None
            picked = cfgs[:3] if ns.quick else cfgs
            if ns.only:
                picked = [cfgs[int(i)] for i in ns.only.split(",") if int(i) < len(cfgs)]
            for c in picked:
                bm, bn, bk, w, s, split, persistent = c[:7]
                tail = c[7] if len(c) > 7 and c[7] is not None else 0 if persistent else tail_rows(bm)
                cfg = GroupedMatmulConfig(
                    block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, split_k=split, persistent=persistent
                )
                programs = persistent_programs(cfg, 2) if persistent else 0
                spec = Spec(m, k, n, g, False, dt.name, "default", bm, bn, bk, w, s, split, programs, tail)
                if kernel == "fwd":
                    fn, args = (
                        (lambda a, b, gs, off, spec=spec: gmm(spec, a, b, gs, off, True, dt)),
                        (lhs, rhs, gs, off),
                    )
                elif kernel == "dlhs":
                    fn, args = (
                        (lambda a, b, gs, off, spec=spec: gmm(spec, a, b, gs, off, False, dt)),
                        (dout, rhs, gs, off),
                    )
                else:
                    fn, args = (
                        (lambda a, d, gs, off, spec=spec: tgmm(spec, a, d, gs, off, dt)),
                        (lhs, dout, gs, off),
                    )
                t0 = time.time()
                try:
                    # The first 16 groups' gradient (a float32 copy of all 256 x 7168 x 2048 is 15 GB).
                    out = jax.block_until_ready(jax.jit(fn)(*args))[: 16 if kernel == "tgmm" else None]
                    out = out.astype(jnp.float32)
                    prog = looped(fn, LOOP)
                    ms = time_callable(lambda prog=prog, args=args: prog(*args), 3) / LOOP
                except Exception as e:  # a config that fails to compile or run is recorded
                    print(f"{kernel} m{m} g{g} {c} tail {tail}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                    recs.append(dict(shape=[m, k, n, g, dist], kernel=kernel, cfg=c, error=str(e)[:300]))
                    continue
                if first is None:
                    first = out
                rel = float(jnp.max(jnp.abs(out - first)) / jnp.maximum(jnp.max(jnp.abs(first)), 1e-6))
                tf = flops / (ms * 1e-3) / 1e12
                print(
                    f"{kernel:5s} m{m} k{k} n{n} g{g} {dist[:5]} {c} tail {tail}: {ms:.3f} ms {tf:6.1f} TFLOP/s rel {rel:.1e} ({time.time() - t0:.0f}s)",
                    flush=True,
                )
                recs.append(
                    dict(shape=[m, k, n, g, dist], kernel=kernel, cfg=c, tail=tail, ms=ms, tflops=tf, rel_vs_first=rel)
                )
                with open(ns.json, "w") as f:  # after every config: a timeout keeps what was measured
                    json.dump(recs, f, indent=1)
    with open(ns.json, "w") as f:
        json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
