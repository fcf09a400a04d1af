"""The reference of ``state_space_v1``: the recurrence one token at a time (``lax.scan``), in
float32 by default (``dtype=``: every operation in that dtype, the low-precision twin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .op import gate_activation

__all__ = ["reference", "state_space_v1_reference"]


def state_space_v1_reference(
    hidden_states: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any,
    dt: Any,
    gate: Any = None,
    initial_state: Any = None,
    conv_state: Any = None,
    *,
    act_fn: Callable[[Any], Any] | None = None,
    return_state: bool = False,
    dtype: Any = jnp.float32,
    precision: Any = None,
) -> Any:
    """``y`` (or ``(y, final_state)``) of the selective scan, computed naively in ``dtype``."""
    del precision  # elementwise products only
    if conv_state is not None:
        raise ValueError("state_space_v1: conv_state is not an input of the scan")
    single = hidden_states.ndim == 2
    if single:
        hidden_states, B, C, dt = (a[:, None] for a in (hidden_states, B, C, dt))
        gate = gate[:, None] if gate is not None else None
    x, A, B, C, D, dt = (jnp.asarray(a).astype(dtype) for a in (hidden_states, A, B, C, D, dt))
    b, _, d = x.shape
    n = A.shape[1]
    h0 = jnp.zeros((b, d, n), dtype) if initial_state is None else jnp.asarray(initial_state).astype(dtype)

    def step(h, inp):
        x_t, B_t, C_t, dt_t = inp  # [b, d], [b, n], [b, n], [b, d]
        h = jnp.exp(dt_t[:, :, None] * A[None]) * h + (dt_t * x_t)[:, :, None] * B_t[:, None, :]
        y = jnp.sum(h * C_t[:, None, :], axis=-1) + D[None] * x_t
        return h, y

    seq_first = [jnp.swapaxes(a, 0, 1) for a in (x, B, C, dt)]
    h, ys = jax.lax.scan(step, h0, seq_first)
    y = jnp.swapaxes(ys, 0, 1)
    if gate is not None:
        y = y * gate_activation(act_fn)(jnp.asarray(gate).astype(dtype))
    if single:
        y = y[:, 0]
    return (y, h) if return_state else y


reference = state_space_v1_reference
