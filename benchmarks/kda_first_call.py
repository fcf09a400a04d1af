"""kernel_delta_attention (Triton) at B4 H16 D128 bf16, T = 1024 and 4096: config choice, compile
and first-call times, then forward and forward+backward device times, printed as they come.

    python3 benchmarks/kda_first_call.py

Written when the op's benchmark step (Triton, XLA and fla in one process) ran past 185 s on an
H200 before its first record. Found there (2026-11-26): the forward compiles for ~47 s at
T = 4096 (the per-channel intra-chunk transform in JAX, ``delta_rule_math``: its forward+backward
holds ~21.6 GB of temporaries by XLA's memory analysis), and the op runs 8.7 / 23.1 ms.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp

import ejkernel
from ejkernel.ops import default_executor, get_op
from ejkernel.ops.kernel_delta_attention.bench import DeltaShape, delta_inputs
from ejkernel.ops.timing import device_ms


def first_call(label: str, fn: Any, args: tuple[Any, ...], t: int) -> None:
    t0 = time.time()
    compiled = fn.lower(*args).compile()
    print(t, label, "compile s", round(time.time() - t0, 1), flush=True)
    t0 = time.time()
    jax.block_until_ready(compiled(*args))
    print(t, label, "first run s", round(time.time() - t0, 2), flush=True)
    print(t, label, "ms", device_ms(fn, args, 3), flush=True)


def main() -> None:
    print(jax.devices(), flush=True)
    b, h, d = 4, 16, 128
    for t in (1024, 4096):
        arrays = delta_inputs(DeltaShape(b, t, h, h, d, d), jnp.bfloat16, per_channel=True)
        t0 = time.time()
        op = get_op("kernel_delta_attention")
        cfg = default_executor().choose_config(op, *arrays, platform="triton", use_qk_l2norm=True)
        print(t, "choose_config s", round(time.time() - t0, 1), cfg, flush=True)

        def fwd(*a: Any) -> Any:
            return ejkernel.kernel_delta_attention(*a, platform="triton", use_qk_l2norm=True)

        def loss(*a: Any) -> Any:
            return jnp.sum(fwd(*a).astype(jnp.float32))

        first_call("fwd", jax.jit(fwd), tuple(arrays), t)
        first_call("fwd+bwd", jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4))), tuple(arrays), t)


if __name__ == "__main__":
    main()
