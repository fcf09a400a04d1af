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


def gather_rows(x: Any, index: Any) -> Any:
    """``out[i] = x[index[i]]`` along axis 0, zeros where ``index[i] < 0``: plain JAX (any
    differentiation mode; its gradient is JAX's scatter-add)."""
    y = jnp.take(x, jnp.maximum(index, 0), axis=0, mode="clip")  # in bounds: no NaN fill
    keep = (index >= 0).reshape((-1,) + (1,) * (y.ndim - 1))
    return jnp.where(keep, y, jnp.zeros((), y.dtype))


@jax.custom_vjp
def take_rows(x: Any, index: Any, inverse: Any) -> Any:
    """:func:`gather_rows` whose gradient is the gather by ``inverse`` (a custom VJP: reverse mode
    only, for backends whose kernels are custom VJPs already). ``index`` and ``inverse`` (int32)
    must be inverse injections: ``inverse[index[i]] == i`` wherever ``index[i] >= 0``, and every
    row of ``x`` that some ``index`` entry reads is named by ``inverse`` (rows no entry reads get
    ``-1`` there, hence a zero gradient)."""
    return gather_rows(x, index)


def _take_rows_fwd(x: Any, index: Any, inverse: Any) -> tuple[Any, Any]:
    return gather_rows(x, index), inverse


def _take_rows_bwd(inverse: Any, dy: Any) -> tuple[Any, None, None]:
    return gather_rows(dy, inverse), None, None


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)
