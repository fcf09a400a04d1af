"""Moving packed (varlen) tokens into a chunk-aligned layout and back, with a gather both ways.

A chunked varlen layout places each sequence at the start of a chunk: slot ``s`` holds packed token
``src[s]`` (``-1``: padding) and token ``t`` sits at slot ``dst[t]``. Both maps are injective and
inverse to each other, so the transpose of the gather ``x[src]`` is the gather ``dy[dst]``, not
the scatter-add JAX derives for a gather (which on a GPU runs several times slower than the
gather: atomics over rows it cannot know are distinct).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _take(x: Any, index: Any) -> Any:
    y = jnp.take(x, jnp.maximum(index, 0), axis=0, mode="clip")  # in bounds: no NaN fill
    keep = (index >= 0).reshape((-1,) + (1,) * (y.ndim - 1))
    return jnp.where(keep, y, jnp.zeros((), y.dtype))


@jax.custom_vjp
def take_rows(x: Any, index: Any, inverse: Any) -> Any:
    """``out[i] = x[index[i]]`` along axis 0 (zeros where ``index[i] < 0``), differentiable in
    ``x`` through the gather by ``inverse``. ``index`` and ``inverse`` (int32) must be inverse
    injections: ``inverse[index[i]] == i`` wherever ``index[i] >= 0``, and every row of ``x``
    that some ``index`` entry reads is named by ``inverse`` (rows no entry reads get ``-1`` there,
    hence a zero gradient)."""
    return _take(x, index)


def _take_rows_fwd(x: Any, index: Any, inverse: Any) -> tuple[Any, Any]:
    return _take(x, index), (index, inverse)


def _take_rows_bwd(res: Any, dy: Any) -> tuple[Any, None, None]:
    _, inverse = res
    return _take(dy, inverse), None, None


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)
