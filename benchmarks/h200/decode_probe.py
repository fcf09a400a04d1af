"""Where the time of the CUDA paged decode goes: host-timed calls against 20 calls inside one
jitted program (no host round trips), for several partition lengths, next to cuDNN dense decode.

    python benchmarks/h200/decode_probe.py [--context 8192]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import ejkernel
from ejkernel.ops import time_callable

LOOP = 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--partitions", default="256,512,1024,2048")
    a = ap.parse_args()
    b, h, hk, d, bs = 32, 32, 8, 128, 16
    rng = np.random.default_rng(0)
    pages = a.context // bs
    nb = b * pages
    kc = jnp.asarray(rng.standard_normal((nb, bs, hk, d)), jnp.bfloat16)
    vc = jnp.asarray(rng.standard_normal((nb, bs, hk, d)), jnp.bfloat16)
    q = jnp.asarray(rng.standard_normal((b, h, d)), jnp.bfloat16)
    tables = jnp.asarray(rng.permutation(nb).reshape(b, pages), jnp.int32)
    lens = jnp.full((b,), a.context, jnp.int32)
    nbytes = 2 * b * a.context * hk * d * 2 + 2 * q.nbytes
    kd = kc[tables].reshape(b, -1, hk, d)
    vd = vc[tables].reshape(b, -1, hk, d)

    def report(name, one, looped):
        t1 = time_callable(one, 10)
        t2 = time_callable(looped, 5) / LOOP
        print(f"{name:>28}: host-timed {t1:.4f} ms ({nbytes / t1 / 1e6:5.0f} GB/s) | "
              f"in-program {t2:.4f} ms ({nbytes / t2 / 1e6:5.0f} GB/s)", flush=True)  # fmt: skip

    def looped(fn):
        def body(i, acc):
            return acc + fn(q + (i * 1e-3).astype(q.dtype)).astype(jnp.float32)

        return jax.jit(lambda: jax.lax.fori_loop(0, LOOP, body, jnp.zeros(q.shape, jnp.float32)))

    for part in [int(x) for x in a.partitions.split(",")]:
        cfg = ejkernel.PageAttentionConfig(fwd_params=ejkernel.FwdParams(kv_blocksize=part))

        def fn(qq, cfg=cfg):
            return ejkernel.page_attention(qq, kc, vc, lens, tables, platform="cuda", cfg=cfg)

        one = jax.jit(fn)
        lp = looped(fn)
        report(f"cuda partition {part}", lambda one=one: one(q), lambda lp=lp: lp())

    def dense(qq):
        return jax.nn.dot_product_attention(qq[:, None], kd, vd, implementation="cudnn")[:, 0]

    one = jax.jit(dense)
    lp = looped(dense)
    report("cudnn dense decode", lambda: one(q), lambda: lp())


if __name__ == "__main__":
    main()
