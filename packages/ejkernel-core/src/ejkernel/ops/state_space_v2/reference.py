"""The reference of ``state_space_v2``: the naive SSD recurrence, token by token (float32)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..families.linear_attention import HIGHEST, linear_recurrence_reference
from .op import gated_output

__all__ = ["reference", "state_space_v2_reference"]


def state_space_v2_reference(
    x: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any,
    dt: Any,
    gate: Any = None,
    initial_state: Any = None,
    conv_state: Any = None,
    *,
    n_groups: int = 1,
    act_fn: Any = None,
    use_gated_rmsnorm: bool = False,
    rmsnorm_eps: float = 1e-5,
    precision: Any = HIGHEST,
    dtype: Any = jnp.float32,
) -> Any:
    b, t, h, p = x.shape
    rep = h // B.shape[2]
    f32 = jnp.float32
    low = jnp.dtype(dtype)
    xf, dtf = x.astype(low).astype(f32), dt.astype(f32)
    h0 = None if initial_state is None else jnp.swapaxes(initial_state.astype(f32), -1, -2)
    o, s = linear_recurrence_reference(
        jnp.repeat(C, rep, axis=2),
        jnp.repeat(B, rep, axis=2),
        xf * dtf[..., None],
        gk=jnp.broadcast_to((A.astype(f32)[None, None, :] * dtf)[..., None], (b, t, h, B.shape[3])),
        initial_state=h0,
        softmax_scale=1.0,
        return_state=True,
        dtype=low,
        precision=HIGHEST if precision is None else precision,
    )
    y = (o + D.astype(f32)[:, None] * xf).reshape(b, t, h * p)
    y = gated_output(y, gate, act_fn, use_gated_rmsnorm, rmsnorm_eps, f32)
    if low != f32:
        y = y.astype(low).astype(f32)
    return y, jnp.swapaxes(s, -1, -2), conv_state


reference = state_space_v2_reference
