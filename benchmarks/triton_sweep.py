"""Sweep the Triton flash_attention tile configs on a GPU (to set the heuristics).

    python benchmarks/triton_sweep.py --b 2 --s 8192 --h 16 --d 128 --out sweep.json

For each causal mode: every forward candidate (``heuristics.fwd_candidates``) timed alone, then
every backward candidate timed inside forward+backward (with the best forward), each checked
against the float32 reference on one head. Prints a table sorted by TFLOP/s; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops import time_callable
from ejkernel.ops.flash_attention import FlashAttentionConfig
from ejkernel.testing import attention_reference
from ejkernel_triton.flash_attention import heuristics as H


def _pick(cands: list, idx: str | None) -> list:
    return cands if not idx else [cands[int(i)] for i in idx.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=2)
    ap.add_argument("--s", type=int, default=8192)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--hk", type=int, default=None)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--causal", default="both", choices=("no", "yes", "both"))
    ap.add_argument("--max-fwd", type=int, default=64)
    ap.add_argument("--max-bwd", type=int, default=64)
    ap.add_argument("--fwd-idx", help="comma-separated indices into the forward candidates (default: all)")
    ap.add_argument("--bwd-idx", help="comma-separated indices into the backward candidates (default: all)")
    ap.add_argument("--out", default="sweep.json")
    a = ap.parse_args()
    hk = a.hk or a.h
    dt = jnp.dtype(a.dtype)
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((a.b, a.s, a.h, a.d)), dt)
    k = jnp.asarray(rng.standard_normal((a.b, a.s, hk, a.d)), dt)
    v = jnp.asarray(rng.standard_normal((a.b, a.s, hk, a.d)), dt)
    cot = jnp.asarray(rng.standard_normal(q.shape), dt)
    cc = tuple(int(x) for x in jax.devices()[0].compute_capability.split("."))
    records = []
    for causal in {"no": [False], "yes": [True], "both": [False, True]}[a.causal]:
        flops = 4.0 * a.b * a.h * a.s * a.s * a.d / (2 if causal else 1)
        ref = attention_reference(q[:1, :, :1], k[:1, :, :1], v[:1, :, :1], causal=causal)
        heur_f = H.heuristic_fwd(a.d, a.d, dt.itemsize, cc, a.s)
        heur_b = H.heuristic_bwd(a.d, a.d, dt.itemsize, cc)

        def run_fwd(cfg, causal=causal):
            return jax.jit(lambda q, k, v: ejkernel.flash_attention(q, k, v, causal=causal, platform="triton", cfg=cfg))

        def run_fwdbwd(cfg, causal=causal):
            return jax.jit(
                jax.grad(
                    lambda q, k, v: jnp.sum(
                        ejkernel.flash_attention(q, k, v, causal=causal, platform="triton", cfg=cfg) * cot
                    ),
                    argnums=(0, 1, 2),
                )
            )

        best_f = (None, float("inf"))
        for p in _pick(H.fwd_candidates(a.d, a.d, dt.itemsize, cc), a.fwd_idx)[: a.max_fwd]:
            cfg = FlashAttentionConfig(fwd_params=p, bwd_params=heur_b)
            t0 = time.perf_counter()
            try:
                f = run_fwd(cfg)
                out = jax.block_until_ready(f(q, k, v))
                err = float(jnp.max(jnp.abs(out[:1, :, :1].astype(jnp.float32) - ref)))
                ms = time_callable(lambda f=f: f(q, k, v), a.repeats)
            except Exception as e:
                print(f"fwd {p} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                continue
            rec = {"pass": "fwd", "causal": causal, "params": p.to_dict(), "ms": ms, "tflops": flops / ms / 1e9,
                   "err": err, "compile_s": time.perf_counter() - t0, "heuristic": p == heur_f}  # fmt: skip
            records.append(rec)
            print(
                f"fwd causal={causal} {p.to_dict()} {ms:.3f} ms {rec['tflops']:.0f} TFLOP/s err {err:.2e}", flush=True
            )
            if ms < best_f[1]:
                best_f = (p, ms)
        fwd_best = best_f[0] or heur_f
        for p in _pick(H.bwd_candidates(a.d, a.d, dt.itemsize, cc), a.bwd_idx)[: a.max_bwd]:
            cfg = FlashAttentionConfig(fwd_params=fwd_best, bwd_params=p)
            t0 = time.perf_counter()
            try:
                g = run_fwdbwd(cfg)
                jax.block_until_ready(g(q, k, v))
                ms = time_callable(lambda g=g: g(q, k, v), a.repeats)
            except Exception as e:
                print(f"bwd {p} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                continue
            rec = {"pass": "fwdbwd", "causal": causal, "params": p.to_dict(), "fwd_params": fwd_best.to_dict(),
                   "ms": ms, "tflops": 3.5 * flops / ms / 1e9, "compile_s": time.perf_counter() - t0,
                   "heuristic": p == heur_b}  # fmt: skip
            records.append(rec)
            print(f"fwdbwd causal={causal} {p.to_dict()} {ms:.3f} ms {rec['tflops']:.0f} TFLOP/s", flush=True)
    with open(a.out, "w") as f:
        json.dump(records, f, indent=1)
    print("\nbest per pass:")
    for pass_ in ("fwd", "fwdbwd"):
        for causal in (False, True):
            rs = sorted((r for r in records if r["pass"] == pass_ and r["causal"] == causal), key=lambda r: r["ms"])
            for r in rs[:3]:
                print(f"  {pass_:6} causal={causal!s:5} {r['tflops']:6.0f} TFLOP/s {r['params']}")


if __name__ == "__main__":
    main()
