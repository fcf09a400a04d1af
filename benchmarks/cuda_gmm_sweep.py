"""The CUDA grouped GEMM (CUTLASS 3 on sm_90a, ``ejkernel_cuda.grouped_matmul``) side by side with
the Triton kernels and the dense matmul of the same FLOPs, each kernel timed alone with the
library's looped program (``ejkernel.ops.timing.looped``: LOOP calls, median of 3), bf16, on
issue 19's benchmark shapes. Every CUDA config runs the forward (``gmm``), ``dlhs`` (``gmm`` with
``rhsᵀ``) and ``drhs`` (``tgmm``).

    python3 benchmarks/cuda_gmm_sweep.py --json out.json [--shapes 0,1,2,3] [--configs 0,1,2]

First, a correctness check on an awkward small case (empty groups, rows past the groups, an
expert-parallel slice, float32 output) against a float64 NumPy reference; then each timed
kernel's output is compared with Triton's (relative max error; tgmm: the first 16 groups).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.executor import bind
from ejkernel.ops.grouped_matmul.bench import group_sizes_for
from ejkernel.ops.timing import looped, time_callable
from ejkernel_cuda.grouped_matmul._call import COL_ROW, ROW_COL, ROW_ROW, ffi_gmm
from ejkernel_triton.grouped_matmul import heuristics as TH
from ejkernel_triton.grouped_matmul._call import gmm, group_inputs, make_spec, tgmm

LOOP = 20
SHAPES = [
    (16384, 4096, 2048, 8, "multinomial"),
    (16384, 2048, 1536, 64, "multinomial"),
    (65536, 4096, 1408, 64, "multinomial"),
    (8192, 7168, 2048, 256, "zipf"),
    (16384, 2048, 1536, 64, "equal"),  # shape 1 without partial tiles: what the tile waste costs
]


def _ref_gmm(a, b, starts, ends, m, n, kn=True):
    out = np.zeros((m, n))
    for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
        bj = b[j] if kn else b[j].T
        out[s:e] = a[s:e] @ bj
    return out


def check(dt, configs: list[int]) -> list[dict]:
    """Odd group sizes, empty groups (first, middle, last), rows past the groups, a slice of the
    groups (starts[0] > 0), float32 and in-dtype outputs, all three layouts, every config."""
    rng = np.random.default_rng(0)
    m, k, n = 1000, 136, 264
    sizes = np.array([0, 37, 0, 300, 1, 129, 0, 250, 0], np.int32)  # sum 717 < m
    cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    recs = []
    for lo, hi in ((0, 9), (2, 7)):  # all groups; a shard holding groups 2..6
        starts, ends = cum[lo:hi], cum[lo + 1 : hi + 1]
        g = hi - lo
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = (rng.standard_normal((g, k, n)) / np.sqrt(k)).astype(np.float32)
        d = rng.standard_normal((m, n)).astype(np.float32)
        a16, b16, d16 = (jnp.asarray(x, dt) for x in (a, b, d))
        a64, b64, d64 = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (a16, b16, d16))
        st, en = jnp.asarray(starts), jnp.asarray(ends)
        cases = {}
        for c in configs:
            cases |= {
                (c, "fwd_f32"): (
                    ffi_gmm(a16, b16, st, en, ROW_ROW, jnp.float32, c),
                    _ref_gmm(a64, b64, starts, ends, m, n),
                ),
                (c, "fwd_dtype"): (ffi_gmm(a16, b16, st, en, ROW_ROW, dt, c), _ref_gmm(a64, b64, starts, ends, m, n)),
                (c, "fwd_nk"): (
                    ffi_gmm(a16, jnp.swapaxes(b16, 1, 2), st, en, ROW_COL, jnp.float32, c),
                    _ref_gmm(a64, b64, starts, ends, m, n),
                ),
                (c, "dlhs"): (
                    ffi_gmm(d16, b16, st, en, ROW_COL, jnp.float32, c),
                    _ref_gmm(d64, np.swapaxes(b64, 1, 2), starts, ends, m, k),
                ),
                (c, "tgmm"): (
                    ffi_gmm(a16, d16, st, en, COL_ROW, dt, c),
                    np.stack([a64[s:e].T @ d64[s:e] for s, e in zip(starts, ends, strict=True)]),
                ),
            }
        for (c, name), (got, want) in cases.items():
            got = np.asarray(jnp.asarray(got, jnp.float32), np.float64)
            err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-6))
            exact_zero = True
            if name != "tgmm":  # rows outside the groups must be exactly zero
                outside = np.ones(m, bool)
                outside[starts[0] : ends[-1]] = False
                exact_zero = bool(np.all(got[outside] == 0))
            else:
                empty = (ends - starts) == 0
                exact_zero = bool(np.all(got[empty] == 0))
            ok = err < 2e-2 and exact_zero
            print(
                f"check cfg {c} groups {lo}..{hi - 1} {name}: rel {err:.2e} zeros {exact_zero} "
                f"{'ok' if ok else 'FAILED'}",
                flush=True,
            )
            recs.append(dict(check=name, config=c, groups=[lo, hi], rel=err, zeros=exact_zero, ok=ok))
    return recs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", required=True)
    p.add_argument("--shapes", default="0,1,2,3", help="indices into SHAPES (4: shape 1 with equal groups)")
    p.add_argument(
        "--configs",
        default="0",
        help="CUDA config indices (1-5: a build with EJKERNEL_CUDA_GMM_SWEEP=1, gmm_sm90.cuh)",
    )
    p.add_argument("--kernels", default="fwd,dlhs,tgmm")
    p.add_argument("--no-triton", action="store_true")
    ns = p.parse_args()
    dt = jnp.dtype(jnp.bfloat16)
    recs = check(dt, [int(c) for c in ns.configs.split(",")])

    def dump():
        with open(ns.json, "w") as f:
            json.dump(recs, f, indent=1)

    dump()
    for si in ns.shapes.split(","):
        one_shape(ns, SHAPES[int(si)], dt, recs, dump)
    dump()


def one_shape(ns: argparse.Namespace, shape: tuple, dt, recs: list, dump) -> None:
    m, k, n, g, dist = shape
    # "equal": m / g rows each (no group ends inside a tile when m / g is a multiple of 128).
    sizes = np.full(g, m // g, np.int32) if dist == "equal" else group_sizes_for(m, g, dist)
    cum = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    starts, ends = jnp.asarray(cum[:-1]), jnp.asarray(cum[1:])
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    lhs = jax.random.normal(k1, (m, k), dt)
    rhs = (jax.random.normal(k2, (g, k, n), dt) / float(np.sqrt(k))).astype(dt)
    dout = jax.random.normal(k3, (m, n), dt)
    flops = 2.0 * m * k * n
    shape = [m, k, n, g, dist]
    dense = looped(lambda a, b: a @ b, LOOP)
    ms = time_callable(lambda: dense(lhs, rhs[0]), 3) / LOOP
    print(f"dense m{m} k{k} n{n}: {ms:.3f} ms {flops / (ms * 1e-3) / 1e12:6.1f} TFLOP/s", flush=True)
    recs.append(dict(shape=shape, impl="dense", kernel="fwd", ms=ms, tflops=flops / (ms * 1e-3) / 1e12))
    # Triton's shipped config (its heuristic) for the same three kernels.
    args = bind("grouped_matmul", lhs, rhs, jnp.asarray(sizes), preferred_element_type=dt)
    spec = make_spec(args, TH.heuristic(m, k, n, g, 2, (9, 0)))
    gs, off = group_inputs(args)  # what the Triton kernels read of the groups (they take no bounds)
    kernels = {
        "fwd": (
            (lambda a, b, st, en: gmm(spec, a, b, gs, off, True, dt)),
            lambda c: lambda a, b, st, en: ffi_gmm(a, b, st, en, ROW_ROW, dt, c),
            (lhs, rhs, starts, ends),
        ),
        "dlhs": (
            (lambda a, b, st, en: gmm(spec, a, b, gs, off, False, dt)),
            lambda c: lambda a, b, st, en: ffi_gmm(a, b, st, en, ROW_COL, dt, c),
            (dout, rhs, starts, ends),
        ),
        "tgmm": (
            (lambda a, d, st, en: tgmm(spec, a, d, gs, off, dt)),
            lambda c: lambda a, d, st, en: ffi_gmm(a, d, st, en, COL_ROW, dt, c),
            (lhs, dout, starts, ends),
        ),
    }
    for kernel in ns.kernels.split(","):
        tfn, cfn, args = kernels[kernel]
        cut = 16 if kernel == "tgmm" else None
        first = jax.block_until_ready(jax.jit(tfn)(*args))[:cut].astype(jnp.float32)
        runs = [] if ns.no_triton else [("triton", None, tfn)]
        runs += [("cuda", int(c), cfn(int(c))) for c in ns.configs.split(",")]
        for impl, c, fn in runs:
            t0 = time.time()
            try:
                out = jax.block_until_ready(jax.jit(fn)(*args))[:cut].astype(jnp.float32)
                prog = looped(fn, LOOP)
                ms = time_callable(lambda prog=prog, args=args: prog(*args), 3) / LOOP
            except Exception as e:
                print(f"{kernel} {impl} {c} {shape}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                recs.append(dict(shape=shape, impl=impl, kernel=kernel, config=c, error=str(e)[:400]))
                dump()
                continue
            rel = float(jnp.max(jnp.abs(out - first)) / jnp.maximum(jnp.max(jnp.abs(first)), 1e-6))
            tf = flops / (ms * 1e-3) / 1e12
            print(
                f"{kernel:5s} {impl:6s} cfg {c} {shape}: {ms:.3f} ms {tf:6.1f} TFLOP/s rel-vs-triton {rel:.1e} "
                f"({time.time() - t0:.0f}s)",
                flush=True,
            )
            recs.append(dict(shape=shape, impl=impl, kernel=kernel, config=c, ms=ms, tflops=tf, rel_vs_triton=rel))
            dump()


if __name__ == "__main__":
    main()
