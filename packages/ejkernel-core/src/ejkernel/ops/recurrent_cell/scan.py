"""The cell math shared by the implementations: the input projection of every timestep as one
matmul, one recurrent step, and the ``lax.scan`` over time (the XLA implementation, and the
backward of kernels that differentiate through it).

States are float32 across steps; each step's matmul takes the previous state in the weights'
dtype and accumulates in float32, as a low-precision kernel does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .op import RecurrentCellArgs

F32 = jnp.float32
# Float32 weights multiply in full float32: GPUs would otherwise round the operands to TF32 (16-bit
# weights are unaffected).
HIGHEST = jax.lax.Precision.HIGHEST

__all__ = ["activation_fn", "input_projection", "recurrent_scan", "step"]


def activation_fn(act: Any) -> Callable[[jax.Array], jax.Array]:
    """The function of a record's ``activation`` (a name, or the user's callable)."""
    if act == "tanh":
        return jnp.tanh
    if act == "relu":
        return jax.nn.relu
    return act


def input_projection(a: RecurrentCellArgs) -> jax.Array:
    """``[dirs, seq, batch, gates]`` float32: every timestep's ``x @ w_ih + b_ih`` (plus ``b_hh``
    where it is a plain sum: all blocks of an lstm or rnn, the r and z blocks of a gru), one matmul
    for the whole sequence. The backward direction's rows are in its own time order (reversed)."""
    x = jnp.swapaxes(a.inputs, 0, 1)  # [seq, batch, input]
    xs = jnp.stack([x, jnp.flip(x, 0)])[: a.num_dirs]
    d, s, b, i = xs.shape
    # A plain batched matmul over [seq * batch] rows: XLA's CPU runtime rejects some bfloat16
    # shapes of the four-axis einsum with a float32 result.
    proj = jnp.einsum("dni,dig->dng", xs.reshape(d, s * b, i), a.w_ih, preferred_element_type=F32, precision=HIGHEST)
    proj = proj.reshape(d, s, b, a.w_ih.shape[-1])
    bias = jnp.zeros((a.num_dirs, a.w_ih.shape[-1]), F32)
    if a.b_ih is not None:
        bias = bias + a.b_ih.astype(F32)
    if a.b_hh is not None:
        bias = bias + folded_hh_bias(a).astype(F32)
    return proj + bias[:, None, None, :]


def folded_hh_bias(a: RecurrentCellArgs) -> jax.Array:
    """The part of ``b_hh`` that adds to the input projection (the rest, a gru's n block, stays in
    the step, inside the reset gate's product)."""
    if a.cell_type != "gru":
        return a.b_hh
    h = a.hidden_dim
    return a.b_hh.at[:, 2 * h :].set(0)


def step(
    cell_type: str, act: Callable[[jax.Array], jax.Array], gx: jax.Array, gh: jax.Array, h: jax.Array, c: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """One step from float32 ``gx`` (the input projection with the folded biases) and ``gh``
    (``h @ w_hh``, plus a gru's n-block ``b_hh``): the new ``(h, c)`` (``c`` unused but by an lstm)."""
    if cell_type == "lstm":
        i, f, g, o = jnp.split(gx + gh, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * act(g)
        return jax.nn.sigmoid(o) * act(c), c
    if cell_type == "gru":
        xr, xz, xn = jnp.split(gx, 3, axis=-1)
        hr, hz, hn = jnp.split(gh, 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = act(xn + r * hn)
        return (1.0 - z) * n + z * h, c
    return act(gx + gh), c


def recurrent_scan(a: RecurrentCellArgs, unroll: int = 1) -> Any:
    """The op by ``lax.scan`` over time (both directions in one scan): ``(outputs, final_state)``."""
    act = activation_fn(a.activation)
    gx = input_projection(a)  # [dirs, seq, batch, gates]
    w_hh = a.w_hh
    hn_bias = None
    if a.cell_type == "gru" and a.b_hh is not None:
        hn_bias = jnp.zeros_like(a.b_hh, F32).at[:, 2 * a.hidden_dim :].set(a.b_hh[:, 2 * a.hidden_dim :].astype(F32))
    h0 = a.hidden.astype(F32)
    c0 = a.cell.astype(F32) if a.cell is not None else jnp.zeros_like(h0)

    def body(carry: tuple[jax.Array, jax.Array], gx_t: jax.Array) -> Any:
        h, c = carry
        gh = jnp.einsum("dbh,dhg->dbg", h.astype(w_hh.dtype), w_hh, preferred_element_type=F32, precision=HIGHEST)
        if hn_bias is not None:
            gh = gh + hn_bias[:, None, :]
        h, c = step(a.cell_type, act, gx_t, gh, h, c)
        return (h, c), h.astype(a.dtype)

    (h, c), ys = jax.lax.scan(body, (h0, c0), jnp.moveaxis(gx, 1, 0), unroll=unroll)  # ys [seq, dirs, b, h]
    ys = jnp.moveaxis(ys, 0, 2)  # [dirs, batch, seq, hidden]
    outs = [ys[0]] + ([jnp.flip(ys[1], 1)] if a.bidirectional else [])
    out = jnp.concatenate(outs, axis=-1)
    return out, a.final_state(h.astype(a.dtype), c.astype(a.dtype))
