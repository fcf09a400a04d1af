"""Does the benchmark clock copy its inputs per call, or let XLA hoist a call out of its loop?

    python3 benchmarks/clock_probe.py --jsonl out.jsonl          # on the GPU
    ROWS=2048 python3 benchmarks/clock_probe.py --platform xla --jsonl /tmp/c.jsonl   # CPU check

``ejkernel.ops.timing.looped`` carries the inputs through a ``fori_loop`` and must make every call
depend on the previous ones without touching the inputs. This times five calls (an XLA reduction
of 2 GiB, the Triton ``mean_pooling``, a grouped matmul forward and forward+backward, a dense
matmul whose backward reads only the second argument) under four forms of that dependence:
``barrier`` (the clock's: one optimization barrier over the inputs and the previous outputs'
sum), ``dus`` and ``scatter`` (one element of each input changed per call), and ``none`` (no
dependence: what XLA hoists shows as a near-zero time). Measured on an H100 (2026-11-25):
``dus`` and ``scatter`` add a full copy of every input per call (``jnp.sum`` 2.11 ms against 0.69);
``barrier`` equals ``none`` there (nothing hoisted on the GPU), while on the CPU ``none`` hoists
everything and ``barrier`` nothing.
"""

from __future__ import annotations

import argparse
import json
import os

import jax
import jax.numpy as jnp
from jax import lax

import ejkernel
from ejkernel.ops import timing as T


def _nudge_element(scatter: bool):
    def nudge(args, i, acc):
        never = acc == -3.0e38

        def one(leaf):
            z = (0,) * leaf.ndim
            step = (i.astype(jnp.float32) * 1e-6) if jnp.issubdtype(leaf.dtype, jnp.floating) else never
            if scatter:
                return leaf.at[z].add(step.astype(leaf.dtype))
            old = lax.dynamic_slice(leaf, z, (1,) * leaf.ndim)
            return lax.dynamic_update_slice(leaf, old + step.astype(leaf.dtype), z)

        return jax.tree.map(one, args)

    return nudge


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jsonl", required=True)
    p.add_argument("--platform", default="triton", help="implementation of the ejkernel ops (xla on the CPU)")
    ns = p.parse_args()
    plat = ns.platform
    rows = int(os.environ.get("ROWS", 262144))
    x = jax.random.normal(jax.random.key(0), (rows, 4096), jnp.bfloat16)
    cu = jnp.arange(65, dtype=jnp.int32) * (rows // 64)
    m, k, n, g = (16384, 2048, 1536, 64) if plat == "triton" else (512, 64, 32, 8)
    lhs = jax.random.normal(jax.random.key(1), (m, k), jnp.bfloat16)
    rhs = jax.random.normal(jax.random.key(2), (g, k, n), jnp.bfloat16)
    sizes = jnp.full((g,), m // g, jnp.int32)

    def gmm(a, b, s):
        return ejkernel.grouped_matmul(a, b, s, platform=plat)

    def loss(f):
        return lambda *a: jnp.sum(f(*a).astype(jnp.float32))

    cases = [
        ("sum(x) xla", lambda x, cu: jnp.sum(x, 0, dtype=jnp.float32), (x, cu)),
        ("mean_pooling", lambda x, cu: ejkernel.mean_pooling(x, cu, platform=plat), (x, cu)),
        ("gmm fwd", gmm, (lhs, rhs, sizes)),
        ("gmm fwd+bwd", lambda a, b, s: jax.value_and_grad(loss(lambda a, b: gmm(a, b, s)), (0, 1))(a, b), (lhs, rhs, sizes)),
        ("dense a@b[0] fwd+bwd", lambda a, b, s: jax.value_and_grad(loss(lambda a, b: a @ b[0]), (0, 1))(a, b), (lhs, rhs, sizes)),
    ]  # fmt: skip
    clock = T._nudge
    forms = {
        "barrier": clock,
        "dus": _nudge_element(False),
        "scatter": _nudge_element(True),
        "none": lambda args, i, acc: args,
    }
    with open(ns.jsonl, "a") as f:
        for form, nudge in forms.items():
            T._nudge = nudge
            for name, fn, args in cases:
                try:
                    hlo = T.looped(fn, 4).lower(*args).compile().as_text()
                    copies = sum(1 for line in hlo.splitlines() if " copy(" in line or "copy-start" in line)
                    rec = dict(form=form, case=name, ms=T.device_ms(fn, args, 5), copy_instructions=copies)
                except Exception as e:
                    rec = dict(form=form, case=name, error=f"{type(e).__name__}: {str(e)[:200]}")
                print(json.dumps(rec), flush=True)
                f.write(json.dumps(rec) + "\n")
    T._nudge = clock


if __name__ == "__main__":
    main()
