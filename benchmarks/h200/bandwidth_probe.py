"""How fast this GPU moves bytes, measured several ways in one process (a sanity check of the
machine and of the timing method before reading any memory-bound figure).

    python benchmarks/h200/bandwidth_probe.py
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from ejkernel.ops import time_callable


def main() -> None:
    print("XLA_PYTHON_CLIENT_PREALLOCATE =", os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"), flush=True)
    n = 2**29  # 2 GiB of float32
    x = jnp.asarray(np.random.default_rng(0).standard_normal(n, dtype=np.float32))
    for name, fn in (("jnp.copy", jax.jit(jnp.copy)), ("x + 1", jax.jit(lambda x: x + 1))):
        ms = time_callable(lambda fn=fn: fn(x), 10)
        print(f"{name:>24}: {ms:.3f} ms, {2 * x.nbytes / ms / 1e6:.0f} GB/s (read + write)", flush=True)
    # Ten copies inside one program: no host round trips between them.
    loop = jax.jit(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: y * 1.0001, x))
    ms = time_callable(lambda: loop(x), 5) / 10
    print(f"{'fori_loop(y * c) x10':>24}: {ms:.3f} ms, {2 * x.nbytes / ms / 1e6:.0f} GB/s", flush=True)
    try:
        import torch

        a = torch.randn(n, device="cuda")
        b = torch.empty_like(a)
        for _ in range(3):
            b.copy_(a)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 20
        print(f"{'torch copy_ (events)':>24}: {ms:.3f} ms, {2 * a.nbytes / ms / 1e6:.0f} GB/s", flush=True)
    except Exception as e:
        print("torch copy unavailable:", type(e).__name__, e)
    t = time.perf_counter()
    jax.block_until_ready(jax.jit(lambda: jnp.zeros(8))())
    print(f"empty jit call round trip: {(time.perf_counter() - t) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
