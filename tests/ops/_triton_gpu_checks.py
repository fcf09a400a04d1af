"""Helpers of the Triton GPU tests beyond the shared conformance cases
(``tests/ops/<op>/test_triton_gpu.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def public_op(name: str, **fixed: Any) -> Callable[..., Any]:
    """``ejkernel.<name>`` with the keyword arguments ``fixed`` (e.g. ``platform="triton"``)."""
    import ejkernel

    fn = getattr(ejkernel, name)
    return lambda **kw: fn(**kw, **fixed)


def assert_deterministic(op: str, case: Any, cfg: Any = None) -> None:
    """Two runs of the same compiled forward and gradient of the Triton ``op`` give bit-identical
    results (no atomics: split reductions are summed in a fixed order)."""
    import ejkernel
    from ejkernel.ops.executor import bind

    kw = case.inputs(0)
    names = [n for n in bind(op, **kw).differentiable() if kw.get(n) is not None]
    fn = getattr(ejkernel, op)

    def loss(arrays):
        out = jax.tree.leaves(fn(**{**kw, **arrays}, platform="triton", cfg=cfg))[0]
        return jnp.sum(out.astype(jnp.float32) * jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape))

    f = jax.jit(jax.value_and_grad(loss))
    arrays = {n: kw[n] for n in names}
    first = jax.tree.map(np.asarray, f(arrays))
    for _ in range(3):
        again = jax.tree.map(np.asarray, f(arrays))
        jax.tree.map(np.testing.assert_array_equal, again, first)
