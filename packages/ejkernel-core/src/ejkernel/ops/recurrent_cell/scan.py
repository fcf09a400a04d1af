"""The cell math shared by the implementations: the input projection of every timestep as one
matmul, one recurrent step, and the ``lax.scan`` over time (the XLA implementation, and the
backward of kernels that differentiate through it).

States are float32 across steps; each step's matmul takes the previous state in the weights'
dtype and accumulates in float32, as a low-precision kernel does.

Three forms of the same scan (:func:`recurrent_scan`'s ``form``; :func:`scan_form` picks one):

- ``"projected"``: ``x @ w_ih`` of every timestep first, as one ``[seq * batch, input]`` matmul
  (:func:`input_projection`, a ``[dirs, seq, batch, gates]`` float32 tensor), then one scan
  carrying both directions at once that adds ``h @ w_hh`` (one batched matmul per step); JAX
  differentiates it. One large matmul in place of a small one per step: the form of
  accelerators, and the backward of the Triton kernel.
- ``"stepwise"``: each step multiplies its own input, ``x_t @ w_ih + h @ w_hh`` (2-D matmuls per
  direction, as the textbook ``lax.scan`` cell does). On a CPU the projected form's float32
  tensor (16 MiB for an lstm at batch 16, seq 256, hidden 256: four times the inputs) is
  written, copied to the scan's layout and read back through memory, while ``w_ih``, read again
  at every step, stays in cache (the matmuls' FLOPs are the same; pinned to one core the
  projected forward still took 1.6x as long). There the stepwise form ran the forward 1.3-2x
  faster (lstm and gru, one or both directions, float32 and bfloat16).
- ``"hoisted"``: the projection first, as in ``"projected"`` (one matmul per direction), the
  rest as in ``"stepwise"``: a CPU's form for a small batch (a per-step matmul of a few rows
  reads all of ``w_ih`` for little work) or a ``w_ih`` too large to stay in cache.

The stepwise and hoisted forms have their own derivative (:func:`_own_jvp`): JAX's, through the
scan, multiplies the weights' tangents at every step, and in reverse mode reads and writes each
weight's ``[in, gates]`` cotangent at every step; theirs takes every matmul by a weight's or the
inputs' tangent over all the steps at once, outside the loop. On a CPU that ran forward+backward
1.1-1.5x as fast as the textbook scan at b16 s256 h256 (lstm, gru, rnn, bidirectional,
bfloat16), and 2.4x at b8 s64 h512.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .op import RecurrentCellArgs

F32 = jnp.float32
# Float32 weights multiply in full float32: GPUs would otherwise round the operands to TF32 (16-bit
# weights are unaffected).
HIGHEST = jax.lax.Precision.HIGHEST

__all__ = ["FORMS", "activation_fn", "input_projection", "recurrent_scan", "scan_form", "step"]

#: The forms of :func:`recurrent_scan` (the module docstring describes them).
FORMS = ("projected", "stepwise", "hoisted")
#: On a CPU the stepwise form needs a batch of at least this many rows (fewer: a per-step matmul
#: reads all of ``w_ih`` for too little work) ...
STEPWISE_MIN_BATCH = 8
#: ... and one direction's ``w_ih`` of at most this many bytes (it is read again at every step) ...
STEPWISE_MAX_W_IH_BYTES = 4 << 20
#: ... unless the batch has this many rows (then any ``w_ih``).
STEPWISE_ANY_W_IH_BATCH = 64


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
    return proj + input_bias(a)[:, None, None, :]


def input_bias(a: RecurrentCellArgs) -> jax.Array:
    """``[dirs, gates]`` float32: the biases that add to ``x @ w_ih`` (``b_ih`` and the folded part
    of ``b_hh``; zeros where there are none)."""
    bias = jnp.zeros((a.num_dirs, a.w_ih.shape[-1]), F32)
    if a.b_ih is not None:
        bias = bias + a.b_ih.astype(F32)
    if a.b_hh is not None:
        bias = bias + folded_hh_bias(a).astype(F32)
    return bias


def folded_hh_bias(a: RecurrentCellArgs) -> jax.Array:
    """The part of ``b_hh`` that adds to the input projection (the rest, a gru's n block, stays in
    the step, inside the reset gate's product)."""
    if a.cell_type != "gru":
        return a.b_hh
    h = a.hidden_dim
    return a.b_hh.at[:, 2 * h :].set(0)


def hn_bias(a: RecurrentCellArgs) -> jax.Array | None:
    """``[dirs, gates]`` float32: a gru's n-block ``b_hh`` (zeros in the r and z blocks), which the
    step adds to ``h @ w_hh``; ``None`` for other cells or without ``b_hh``."""
    if a.cell_type != "gru" or a.b_hh is None:
        return None
    h = a.hidden_dim
    return jnp.zeros_like(a.b_hh, F32).at[:, 2 * h :].set(a.b_hh[:, 2 * h :].astype(F32))


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


def scan_form(a: RecurrentCellArgs, platform: str) -> str:
    """The faster form of :func:`recurrent_scan` for ``a`` on ``platform``: ``"projected"`` on
    accelerators (the form they were measured with); on a CPU ``"stepwise"`` from
    ``STEPWISE_ANY_W_IH_BATCH`` rows, or from ``STEPWISE_MIN_BATCH`` rows while one direction's
    ``w_ih`` takes at most ``STEPWISE_MAX_W_IH_BYTES``; else ``"hoisted"``.

    Measured on a 2-core CPU (stepwise against hoisted, lstm, gru and rnn, batch 1 to 64, hidden
    64 to 1024): stepwise won from batch 16 while ``w_ih`` stayed in cache (1.6x at the CPU
    record's b16 s256 h256, ``benchmarks/results/cpu/recurrent_cell.json``), hoisted won at batch
    1 and 4 (1.5x at b1 h256) and with a ``w_ih`` of 16 MiB up to batch 32.
    """
    if platform != "cpu":
        return "projected"
    w_ih_bytes = a.input_dim * a.gates * jnp.dtype(a.dtype).itemsize
    if a.batch >= STEPWISE_ANY_W_IH_BATCH or (a.batch >= STEPWISE_MIN_BATCH and w_ih_bytes <= STEPWISE_MAX_W_IH_BYTES):
        return "stepwise"
    return "hoisted"


def recurrent_scan(a: RecurrentCellArgs, unroll: int = 1, form: str = "projected") -> Any:
    """The op by ``lax.scan`` over time, both directions in one scan, in ``form`` (one of
    ``FORMS``; the module docstring compares them): ``(outputs, final_state)``."""
    if form in ("stepwise", "hoisted"):
        return _own_scan(a, unroll, form == "hoisted")
    if form != "projected":
        raise ValueError(f"recurrent_scan: form must be one of {FORMS}, got {form!r}")
    act = activation_fn(a.activation)
    gx = input_projection(a)  # [dirs, seq, batch, gates]
    w_hh = a.w_hh
    hn = hn_bias(a)
    h0 = a.hidden.astype(F32)
    c0 = a.cell.astype(F32) if a.cell is not None else jnp.zeros_like(h0)

    def body(carry: tuple[jax.Array, jax.Array], gx_t: jax.Array) -> Any:
        h, c = carry
        gh = jnp.einsum("dbh,dhg->dbg", h.astype(w_hh.dtype), w_hh, preferred_element_type=F32, precision=HIGHEST)
        if hn is not None:
            gh = gh + hn[:, None, :]
        h, c = step(a.cell_type, act, gx_t, gh, h, c)
        return (h, c), h.astype(a.dtype)

    (h, c), ys = jax.lax.scan(body, (h0, c0), jnp.moveaxis(gx, 1, 0), unroll=unroll)  # ys [seq, dirs, b, h]
    ys = jnp.moveaxis(ys, 0, 2)  # [dirs, batch, seq, hidden]
    outs = [ys[0]] + ([jnp.flip(ys[1], 1)] if a.bidirectional else [])
    out = jnp.concatenate(outs, axis=-1)
    return out, a.final_state(h.astype(a.dtype), c.astype(a.dtype))


def _time_major(a: RecurrentCellArgs, x: jax.Array) -> tuple[jax.Array, ...]:
    """``[batch, seq, ...]`` as each direction's ``[seq, batch, ...]`` (the backward one reversed)."""
    x = jnp.swapaxes(x, 0, 1)
    return (x, jnp.flip(x, 0))[: a.num_dirs]


def _batch_major(a: RecurrentCellArgs, ys: tuple[jax.Array, ...]) -> jax.Array:
    """Each direction's ``[seq, batch, hidden]`` rows as the op's ``[batch, seq, dirs * hidden]``."""
    outs = [jnp.swapaxes(ys[0], 0, 1)] + ([jnp.flip(jnp.swapaxes(ys[1], 0, 1), 1)] if a.bidirectional else [])
    return jnp.concatenate(outs, axis=-1) if len(outs) > 1 else outs[0]


def _dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x @ w`` over ``x``'s last axis, float32, as one 2-D matmul."""
    y = jnp.dot(x.reshape(-1, x.shape[-1]), w, preferred_element_type=F32, precision=HIGHEST)
    return y.reshape(*x.shape[:-1], w.shape[-1])


def _own_run(a: RecurrentCellArgs, unroll: int, hoist: bool, keep: bool) -> Any:
    """The stepwise (``hoist``: hoisted) scan: ``(outputs, final_state, kept)``; ``kept`` (with
    ``keep``), per direction, every step's inputs to :func:`step` as ``[seq, batch, ...]``
    float32: the input projection (a gru's apart from ``h @ w_hh``, other cells' with it added:
    ``step`` only takes their sum), a gru's ``h @ w_hh`` (else ``None``), the previous ``h`` and
    (lstm) ``c``."""
    act = activation_fn(a.activation)
    dirs = range(a.num_dirs)
    split, lstm = a.cell_type == "gru", a.cell_type == "lstm"
    bias, hn = input_bias(a), hn_bias(a)
    w_ih = [a.w_ih[k] for k in dirs]
    w_hh = [a.w_hh[k] for k in dirs]
    h0 = a.hidden.astype(F32)
    c0 = a.cell.astype(F32) if a.cell is not None else jnp.zeros_like(h0)
    xs = _time_major(a, a.inputs)
    if hoist:  # every step's projection first, one matmul per direction
        xs = tuple(_dot(xs[k], w_ih[k]) + bias[k] for k in dirs)

    def project(x_t: jax.Array, k: int) -> jax.Array:
        if hoist:
            return x_t
        return jnp.dot(x_t, w_ih[k], preferred_element_type=F32, precision=HIGHEST) + bias[k]

    def body(carry: Any, x_t: Any) -> Any:
        states, ys = [], []
        for k in dirs:
            h, c = carry[k]
            gx = project(x_t[k], k)
            gh = jnp.dot(h.astype(w_hh[k].dtype), w_hh[k], preferred_element_type=F32, precision=HIGHEST)
            if hn is not None:
                gh = gh + hn[k]
            h2, c2 = step(a.cell_type, act, gx, gh, h, c)
            states.append((h2, c2))
            y = h2.astype(a.dtype)
            if not keep:
                ys.append(y)
            elif split:  # (hoisted: the projection is kept already)
                ys.append((y, None if hoist else gx, gh, h, None))
            else:
                ys.append((y, gx + gh, None, h, c if lstm else None))
        return tuple(states), tuple(ys)

    final, ys = jax.lax.scan(body, tuple((h0[k], c0[k]) for k in dirs), xs, unroll=unroll)
    kept = None
    if keep:
        kept = tuple((xs[k] if y[1] is None else y[1], *y[2:]) for k, y in enumerate(ys))
    out = _batch_major(a, tuple(y[0] for y in ys) if keep else ys)
    h = jnp.stack([s[0] for s in final]).astype(a.dtype)
    c = jnp.stack([s[1] for s in final]).astype(a.dtype)
    return out, a.final_state(h, c), kept


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _own_scan(a: RecurrentCellArgs, unroll: int, hoist: bool) -> Any:
    """The stepwise form (``hoist``: the hoisted one): the scan runs over the inputs (the backward
    direction's reversed), each step projecting its own rows (``hoist``: over their projection,
    one matmul per direction first). Every direction keeps its own 2-D matmuls and states, so with
    a single direction the stepwise program is the textbook scan's (a batched matmul over a
    ``dirs`` axis of one would transpose the weights' cotangent at every step of the backward).

    Its derivative (:func:`_own_jvp`) is not the scan's own: JAX's would multiply the weights'
    tangents at every step, and in reverse mode accumulate the weights' cotangents at every step
    (a read and write of each ``[input or hidden, gates]`` matrix per step)."""
    out, state, _ = _own_run(a, unroll, hoist, keep=False)
    return out, state


def _own_jvp(unroll: int, hoist: bool, primals: Any, tangents: Any) -> Any:
    """The JVP of :func:`_own_scan` with every matmul by a tangent of ``w_ih``, ``w_hh`` or the inputs
    taken over all the steps at once, outside the loop (``x @ dw_ih``, ``dx @ w_ih``,
    ``h_prev @ dw_hh``: one ``[seq * batch, .]`` matmul each); the loop keeps ``dh @ w_hh`` and the
    cell's own derivative. Transposed (reverse mode), the weights' and inputs' cotangents are
    these matmuls' transposes, once, after the loop."""
    (a,), (da,) = primals, tangents
    out, state, kept = _own_run(a, unroll, hoist, keep=True)
    act = activation_fn(a.activation)
    dirs = range(a.num_dirs)
    w_hh = [a.w_hh[k] for k in dirs]

    def given(t: Any) -> Any:
        return None if t is None or isinstance(t, SymbolicZero) else t

    d_inputs, d_w_ih, d_w_hh = given(da.inputs), given(da.w_ih), given(da.w_hh)
    d_b_ih, d_b_hh = given(da.b_ih), given(da.b_hh)
    # The biases' tangents (linear): through the same folding as the biases.
    db = dhn = None
    if d_b_ih is not None or d_b_hh is not None:
        ta = dataclasses.replace(a, b_ih=d_b_ih, b_hh=d_b_hh)
        db, dhn = input_bias(ta), hn_bias(ta)
    xs = _time_major(a, a.inputs)
    dxs = _time_major(a, d_inputs) if d_inputs is not None else None
    ext = []  # per direction: the loop's tangent inputs from outside it
    for k in dirs:
        gx, gh, hp, cp = kept[k]
        dgx = None
        for term in (
            _dot(xs[k], d_w_ih[k]) if d_w_ih is not None else None,
            _dot(dxs[k], a.w_ih[k]) if dxs is not None else None,
            db[k] if db is not None else None,
        ):
            if term is not None:
                dgx = term if dgx is None else dgx + term
        dgh = _dot(hp.astype(w_hh[k].dtype), d_w_hh[k]) if d_w_hh is not None else None
        if dgh is not None and gh is None:  # a cell that adds the two: one tangent for the sum
            dgx, dgh = (dgh if dgx is None else dgx + dgh), None
        ext.append((gx, gh, hp, cp, dgx, dgh))
    split, lstm = a.cell_type == "gru", a.cell_type == "lstm"
    d_h0 = given(da.hidden)
    d_c0 = given(da.cell) if a.cell is not None else None
    zeros = jnp.zeros((a.num_dirs, a.batch, a.hidden_dim), F32)
    dh0 = d_h0.astype(F32) if d_h0 is not None else zeros
    dc0 = d_c0.astype(F32) if d_c0 is not None else zeros

    def cell(gx: jax.Array, gh: jax.Array, h: jax.Array, c: jax.Array) -> Any:
        return step(a.cell_type, act, gx, gh, h, c)

    def body(carry: Any, inp: Any) -> Any:
        states, ys = [], []
        for k in dirs:
            dh, dc = carry[k]
            gx, gh, hp, cp, dgx_out, dgh_out = inp[k]
            dgh = jnp.dot(dh.astype(w_hh[k].dtype), w_hh[k], preferred_element_type=F32, precision=HIGHEST)
            if dgh_out is not None:
                dgh = dgh + dgh_out
            if dhn is not None:
                dgh = dgh + dhn[k]
            if not split:  # the step takes the sum: its gh is zero
                dgx = dgh if dgx_out is None else dgx_out + dgh
                gh, dgh = jnp.zeros_like(gx), jnp.zeros_like(gx)
            else:
                dgx = dgx_out if dgx_out is not None else jnp.zeros_like(gx)
            if not lstm:
                cp = jnp.zeros_like(hp)
            _, (dh2, dc2) = jax.jvp(cell, (gx, gh, hp, cp), (dgx, dgh, dh, dc))
            states.append((dh2, dc2))
            ys.append(dh2.astype(a.dtype))
        return tuple(states), tuple(ys)

    final, dys = jax.lax.scan(body, tuple((dh0[k], dc0[k]) for k in dirs), tuple(ext), unroll=unroll)
    d_out = _batch_major(a, dys)
    dh = jnp.stack([s[0] for s in final]).astype(a.dtype)
    dc = jnp.stack([s[1] for s in final]).astype(a.dtype)
    return (out, state), (d_out, a.final_state(dh, dc))


_own_scan.defjvp(_own_jvp, symbolic_zeros=True)
