"""What the grouped kernels leave on the table at 64 experts: with EQUAL groups a grouped matmul
is a batched one, which cuBLAS runs with no per-group bookkeeping (no group walk, no tensor-map
updates per group). This times, at ``m / g`` rows per group, bf16, with the bench's clock
(``ejkernel.ops.timing.device_ms``):

- the dense matmul of the same FLOPs (``lhs @ rhs[0]``);
- cuBLAS's batched products (XLA ``einsum`` over ``[g, m / g, ...]``) for the forward, ``dlhs``
  and ``drhs`` (tgmm);
- the CUDA (CUTLASS grouped, config 0) and Triton (shipped heuristic) grouped kernels on the
  same rows as equal groups.

    python3 benchmarks/gmm_batched_bound.py --json out.json [--shape 16384,2048,1536,64]

Each grouped output is compared with the batched one (relative max error).
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops.timing import device_ms


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", required=True)
    p.add_argument("--shape", default="16384,2048,1536,64", help="M,K,N,G with G dividing M")
    p.add_argument("--repeats", type=int, default=3)
    ns = p.parse_args()
    m, k, n, g = (int(x) for x in ns.shape.split(","))
    if m % g:
        raise ValueError(f"--shape: G must divide M, got {ns.shape}")
    r = m // g
    dt = jnp.bfloat16
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    lhs = jax.random.normal(k1, (m, k), dt)
    rhs = (jax.random.normal(k2, (g, k, n), dt) / float(np.sqrt(k))).astype(dt)
    dout = jax.random.normal(k3, (m, n), dt)
    starts = jnp.arange(g, dtype=jnp.int32) * r
    ends = starts + r
    flops = 2.0 * m * k * n
    recs: list[dict] = []

    def bmm(spec):
        return lambda x, y: jnp.einsum(spec, x, y, preferred_element_type=jnp.float32).astype(dt)

    batched = {
        "fwd": (lambda a, b: bmm("gmk,gkn->gmn")(a.reshape(g, r, k), b).reshape(m, n), (lhs, rhs)),
        "dlhs": (lambda d, b: bmm("gmn,gkn->gmk")(d.reshape(g, r, n), b).reshape(m, k), (dout, rhs)),
        "tgmm": (lambda a, d: bmm("gmk,gmn->gkn")(a.reshape(g, r, k), d.reshape(g, r, n)), (lhs, dout)),
    }
    grouped: dict[str, dict] = {"cuda": {}, "triton": {}}
    try:
        from ejkernel_cuda.grouped_matmul._call import COL_ROW, ROW_COL, ROW_ROW, ffi_gmm

        grouped["cuda"] = {
            "fwd": lambda a, b: ffi_gmm(a, b, starts, ends, ROW_ROW, dt, 0),
            "dlhs": lambda d, b: ffi_gmm(d, b, starts, ends, ROW_COL, dt, 0),
            "tgmm": lambda a, d: ffi_gmm(a, d, starts, ends, COL_ROW, dt, 0),
        }
    except ImportError as e:
        print(f"no CUDA grouped kernels: {e}")
    try:
        from ejkernel.ops.executor import bind
        from ejkernel_triton.grouped_matmul import heuristics as TH
        from ejkernel_triton.grouped_matmul._call import gmm, group_inputs, make_spec, tgmm

        sizes = jnp.full((g,), r, jnp.int32)
        args = bind("grouped_matmul", lhs, rhs, sizes, preferred_element_type=dt)
        spec = make_spec(args, TH.heuristic(m, k, n, g, 2, (9, 0)))  # Triton's shipped config on Hopper
        gs, off = group_inputs(args)
        grouped["triton"] = {
            "fwd": lambda a, b: gmm(spec, a, b, gs, off, True, dt),
            "dlhs": lambda d, b: gmm(spec, d, b, gs, off, False, dt),
            "tgmm": lambda a, d: tgmm(spec, a, d, gs, off, dt),
        }
    except ImportError as e:
        print(f"no Triton grouped kernels: {e}")

    def record(kernel: str, impl: str, fn, args, ref=None) -> None:
        try:
            ms = device_ms(fn, args, ns.repeats)
        except Exception as e:  # a kernel this machine cannot run: recorded, the others go on
            recs.append(dict(shape=[m, k, n, g], kernel=kernel, impl=impl, error=f"{type(e).__name__}: {e}"[:300]))
            print(f"{kernel:5s} {impl:8s}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            return
        rec = dict(shape=[m, k, n, g], rows_per_group=r, kernel=kernel, impl=impl, ms=ms)
        rec["tflops"] = flops / (ms * 1e-3) / 1e12
        if ref is not None:
            out = jax.jit(fn)(*args).astype(jnp.float32)
            rec["rel_vs_batched"] = float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref)))
        recs.append(rec)
        extra = f" rel {rec['rel_vs_batched']:.1e}" if "rel_vs_batched" in rec else ""
        print(f"{kernel:5s} {impl:8s}: {ms:.3f} ms {rec['tflops']:6.1f} TFLOP/s{extra}", flush=True)
        with open(ns.json, "w") as f:
            json.dump(recs, f, indent=1)

    record("fwd", "dense", lambda a, b: a @ b[0], (lhs, rhs))
    for kernel, (fn, args) in batched.items():
        ref = jax.jit(fn)(*args).astype(jnp.float32)
        record(kernel, "batched", fn, args)
        for impl, fns in grouped.items():
            if kernel in fns:
                record(kernel, impl, fns[kernel], args, ref)


if __name__ == "__main__":
    main()
