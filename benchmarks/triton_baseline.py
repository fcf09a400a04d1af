"""Calibration: a minimal FlashAttention-2 forward (no features) through jax-triton.

It answers "what does a plain FA2 forward reach on this GPU through jax-triton?", so the
library kernel's figures can be read against it. Benchmark-only; not part of the library.

    python benchmarks/triton_baseline.py --b 2 --s 8192 --h 16 --d 128
"""

from __future__ import annotations

import argparse
import itertools

import jax
import jax.numpy as jnp
import jax_triton as jt
import numpy as np
import triton
import triton.language as tl

from ejkernel.ops import time_callable


@triton.jit
def _plain_fwd(
    Q, K, V, Out,
    N_CTX: tl.constexpr, H: tl.constexpr, HEAD_DIM: tl.constexpr, SM_SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    stride_s: tl.constexpr = H * HEAD_DIM
    base = off_z.to(tl.int64) * N_CTX * stride_s + off_h.to(tl.int64) * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_s + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = SM_SCALE * 1.44269504
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(K + base + (start_n + offs_n)[None, :] * stride_s + offs_d[:, None])
        qk = tl.dot(q, k)
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + (start_n + offs_n)[:, None] * stride_s + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(Out.dtype.element_ty))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=2)
    ap.add_argument("--s", type=int, default=8192)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--d", type=int, default=128)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((a.b, a.s, a.h, a.d)), jnp.bfloat16) for _ in range(3))
    for causal in (False, True):
        flops = 4.0 * a.b * a.h * a.s * a.s * a.d / (2 if causal else 1)
        best = []
        for bm, bn, w, st in itertools.product((128,), (64, 128), (8,), (2, 3, 4, 5)):
            if bn == 128 and st > 3:
                continue

            def f(q, k, v, bm=bm, bn=bn, w=w, st=st, causal=causal):
                return jt.triton_call(
                    q, k, v, kernel=_plain_fwd, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
                    grid=(a.s // bm, a.b * a.h), num_warps=w, num_stages=st,
                    N_CTX=a.s, H=a.h, HEAD_DIM=a.d, SM_SCALE=a.d**-0.5, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
                )  # fmt: skip

            try:
                fn = jax.jit(f)
                ms = time_callable(lambda fn=fn: fn(q, k, v), 10)
            except Exception as e:
                print(f"baseline {bm}x{bn} w{w} s{st} failed: {str(e).splitlines()[0][:150]}")
                continue
            best.append((flops / ms / 1e9, bm, bn, w, st))
            print(
                f"baseline causal={causal} {bm}x{bn} w{w} s{st}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s", flush=True
            )
        if best:
            print(f"BASELINE BEST causal={causal}: {max(best)}")


if __name__ == "__main__":
    main()
