"""The references of ``recurrent_cell``: a plain loop over timesteps, one cell step at a time,
each direction on its own, with no input projection hoisted out of the loop.

:func:`recurrent_cell_reference` computes in ``dtype`` with ``jax.numpy`` (float32 by default; it
traces, so the conformance suite can ``jit`` it); :func:`recurrent_cell_numpy` is the same loop in
NumPy float64. The equations are PyTorch's (``torch.nn.LSTM``/``GRU``/``RNN``), the weights
transposed to ``[in, gates]``; see :func:`ejkernel.recurrent_cell`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["recurrent_cell_numpy", "recurrent_cell_reference", "reference"]


def _sigmoid(xp: Any, x: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-x))


def _act(xp: Any, activation: Any) -> Any:
    if activation == "tanh":
        return xp.tanh
    if activation == "relu":
        return lambda v: xp.maximum(v, 0.0)
    return activation


def _loop(xp: Any, dot: Any, cast: Any, inputs, hidden, weights, cell_type, bidirectional, activation):
    act = _act(xp, activation)
    x = cast(inputs)
    batch, seq, _ = x.shape
    if isinstance(hidden, (tuple, list)):
        h_init, c_init = hidden
    else:
        h_init, c_init = hidden, None
    hdim = weights["w_hh"].shape[0]
    outs, hs, cs = [], [], []
    for d, prefix in enumerate(("", "reverse_")[: 2 if bidirectional else 1]):
        w_ih, w_hh = cast(weights[prefix + "w_ih"]), cast(weights[prefix + "w_hh"])
        gates = w_hh.shape[1]
        b_ih = weights.get(prefix + "b_ih", weights.get(prefix + "b"))
        b_hh = weights.get(prefix + "b_hh")
        b_ih = cast(b_ih) if b_ih is not None else xp.zeros((gates,), x.dtype)
        b_hh = cast(b_hh) if b_hh is not None else xp.zeros((gates,), x.dtype)

        def state(s, d=d):
            if s is None:
                return xp.zeros((batch, hdim), x.dtype)
            s = cast(s)
            return s[d] if s.ndim == 3 else s

        h, c = state(h_init), state(c_init)
        ys = [None] * seq
        order = range(seq) if d == 0 else range(seq - 1, -1, -1)
        for t in order:
            gi = dot(x[:, t], w_ih) + b_ih
            gh = dot(h, w_hh) + b_hh
            if cell_type == "lstm":
                i, f, g, o = (gi[:, k * hdim : (k + 1) * hdim] + gh[:, k * hdim : (k + 1) * hdim] for k in range(4))
                c = _sigmoid(xp, f) * c + _sigmoid(xp, i) * act(g)
                h = _sigmoid(xp, o) * act(c)
            elif cell_type == "gru":
                r = _sigmoid(xp, gi[:, :hdim] + gh[:, :hdim])
                z = _sigmoid(xp, gi[:, hdim : 2 * hdim] + gh[:, hdim : 2 * hdim])
                n = act(gi[:, 2 * hdim :] + r * gh[:, 2 * hdim :])
                h = (1 - z) * n + z * h
            elif cell_type == "rnn":
                h = act(gi + gh)
            else:
                raise ValueError(f"unknown cell_type {cell_type!r}")
            ys[t] = h
        outs.append(xp.stack(ys, axis=1) if seq else xp.zeros((batch, 0, hdim), x.dtype))
        hs.append(h)
        cs.append(c)
    out = xp.concatenate(outs, axis=-1)
    h_n = xp.stack(hs) if bidirectional else hs[0]
    c_n = xp.stack(cs) if bidirectional else cs[0]
    return out, ((h_n, c_n) if cell_type == "lstm" else h_n)


def recurrent_cell_reference(
    inputs: Any,
    hidden: Any,
    weights: dict[str, Any],
    cell_type: str = "lstm",
    *,
    bidirectional: bool = False,
    activation: Any = "tanh",
    dtype: Any = jnp.float32,
    precision: Any = jax.lax.Precision.HIGHEST,
) -> Any:
    """``recurrent_cell`` step by step in ``dtype`` (same parameters and return value)."""

    def cast(v: Any) -> Any:
        return jnp.asarray(v).astype(dtype)

    def dot(a: Any, b: Any) -> Any:
        return jnp.matmul(a, b, precision=precision)

    out, state = _loop(jnp, dot, cast, inputs, hidden, weights, cell_type.lower(), bidirectional, activation)
    return out, state


def recurrent_cell_numpy(
    inputs: Any,
    hidden: Any,
    weights: dict[str, Any],
    cell_type: str = "lstm",
    *,
    bidirectional: bool = False,
    activation: str = "tanh",
) -> Any:
    """The same loop in NumPy float64 (named activations only)."""

    def cast(v: Any) -> Any:
        return np.asarray(v, np.float64)

    return _loop(np, np.matmul, cast, inputs, hidden, weights, cell_type.lower(), bidirectional, activation)


reference = recurrent_cell_reference
