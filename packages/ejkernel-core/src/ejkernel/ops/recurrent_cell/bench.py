"""The benchmark of ``recurrent_cell`` (``ejkernel bench recurrent_cell``).

Compute-bound at large batch and hidden sizes: FLOPs = ``2 · batch · seq · (input_dim +
hidden_dim) · G · hidden_dim`` per direction (``G`` gate blocks: 4 lstm, 3 gru, 1 rnn), backward
counted as 2x. Peer: the textbook ``jax.lax.scan`` over the cell, each step multiplying its own
input (``x_t @ w_ih + h @ w_hh``: the form of ``flax.linen.scan`` over an ``LSTMCell``), in
plain JAX.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..benchmark import BenchCase, OpBench, Peer
from .cases import make_weights
from .op import CELL_TYPES, GATES
from .reference import recurrent_cell_reference

__all__ = ["BENCH", "RecurrentCellBench", "RecurrentShape", "scan_peer"]

CHECK_STEPS = 32  # the reference is a Python loop: the check covers the first steps of the forward direction


@dataclasses.dataclass(frozen=True)
class RecurrentShape:
    cell: str
    batch: int
    seq: int
    input_dim: int
    hidden: int
    bidirectional: bool

    def label(self) -> str:
        bi = " bi" if self.bidirectional else ""
        return f"{self.cell} b{self.batch} s{self.seq} in{self.input_dim} h{self.hidden}{bi}"

    @property
    def flops(self) -> float:
        g = len(GATES[self.cell])
        dirs = 2 if self.bidirectional else 1
        return 2.0 * self.batch * self.seq * (self.input_dim + self.hidden) * g * self.hidden * dirs


def scan_peer(cell: str, bidirectional: bool, inputs: Any, hidden: Any, weights: dict[str, Any]) -> Any:
    """The plain ``lax.scan`` peer: ``(outputs, h_n)`` (an lstm's cell state starts at zeros)."""
    from .scan import step

    f32 = jnp.float32

    def run(prefix: str, x: Any) -> tuple[Any, Any]:
        w_ih, w_hh = weights[prefix + "w_ih"], weights[prefix + "w_hh"]
        b = weights[prefix + "b"].astype(f32) if prefix + "b" in weights else 0.0

        def body(carry: Any, x_t: Any) -> Any:
            h, c = carry
            gx = jnp.dot(x_t, w_ih, preferred_element_type=f32) + b
            gh = jnp.dot(h.astype(w_hh.dtype), w_hh, preferred_element_type=f32)
            h, c = step(cell, jnp.tanh, gx, gh, h, c)
            return (h, c), h.astype(x.dtype)

        h0 = hidden.astype(f32)
        (h, _), ys = jax.lax.scan(body, (h0, jnp.zeros_like(h0)), jnp.swapaxes(x, 0, 1))
        return jnp.swapaxes(ys, 0, 1), h

    out, h = run("", inputs)
    if not bidirectional:
        return out, h
    out_b, h_b = run("reverse_", jnp.flip(inputs, 1))
    return jnp.concatenate([out, jnp.flip(out_b, 1)], -1), jnp.stack([h, h_b])


class RecurrentCellBench(OpBench):
    metric = "tflops"
    backward_factor = 2.0
    peer = "jax.lax.scan"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--cell", choices=CELL_TYPES, default="lstm", help="cell type")
        p.add_argument("--batch", type=int, default=64, help="batch")
        p.add_argument("--seq", type=int, action="append", help="sequence length (repeatable; default 2048)")
        p.add_argument("--input-dim", type=int, default=None, help="input features (default: --hidden)")
        p.add_argument("--hidden", type=int, default=1024, help="hidden size")
        p.add_argument("--bidirectional", action="store_true", help="both directions")

    def shapes(self, ns: argparse.Namespace) -> list[RecurrentShape]:
        shapes = [
            RecurrentShape(ns.cell, ns.batch, s, ns.input_dim or ns.hidden, ns.hidden, ns.bidirectional)
            for s in (ns.seq or [2048])
        ]
        for s in shapes:
            bad = [k for k in ("batch", "seq", "input_dim", "hidden") if getattr(s, k) < 1]
            if bad:
                raise ValueError(f"bad {', '.join('--' + k.replace('_', '-') for k in bad)}: must be positive")
        return shapes

    def cases(self, ns: argparse.Namespace, dtype: str, *, peers: bool, check: bool) -> list[BenchCase]:
        jdt = jnp.dtype(dtype)
        out = []
        for s in self.shapes(ns):
            rng = np.random.default_rng(0)
            bias = "single" if s.cell != "gru" else None
            dirs = 2 if s.bidirectional else 1
            w = {
                k: jnp.asarray(v, jdt)
                for k, v in make_weights(rng, s.cell, s.input_dim, s.hidden, bias=bias, dirs=dirs).items()
            }
            x = jnp.asarray(rng.standard_normal((s.batch, s.seq, s.input_dim)), jdt)
            h = jnp.asarray(0.5 * rng.standard_normal((s.batch, s.hidden)), jdt)
            options = {"cell_type": s.cell, "bidirectional": s.bidirectional}
            case_peers = []
            if peers:
                fn = functools.partial(scan_peer, s.cell, s.bidirectional)
                case_peers.append(Peer("jax.lax.scan", fn, (x, h, w), to_op=lambda o: o))
            out.append(
                BenchCase(
                    label=s.label(),
                    fields=dataclasses.asdict(s),
                    arrays=(x, h, w),
                    options=options,
                    cost=s.flops,
                    peers=case_peers,
                    check=_check(dtype, s, x, h, w) if check else None,
                )
            )
        return out


def _check(dtype: str, s: RecurrentShape, x: Any, h: Any, w: dict[str, Any]) -> Any:
    """The forward direction's first ``CHECK_STEPS`` steps of the first rows (they depend on
    nothing later) against the reference."""
    from ...testing import conformance as C

    n, t = min(s.batch, 4), min(s.seq, CHECK_STEPS)
    fwd = {k: v for k, v in w.items() if not k.startswith("reverse_")}
    args = (x[:n, :t], h[:n], fwd, s.cell)
    ref32 = recurrent_cell_reference(*args)[0]
    ref_low = recurrent_cell_reference(*args, dtype=jnp.dtype(dtype), precision=C.LOW_PRECISION)[0]

    def check(out: Any) -> tuple[str, float]:
        o = out[0][:n, :t, : s.hidden]
        err = float(jnp.max(jnp.abs(o.astype(jnp.float32) - ref32)))
        try:
            C.assert_close("bench", o, ref32, ref_low, dtype, {**C.ATOL, "bfloat16": 2e-2, "float16": 4e-3})
        except AssertionError as e:
            return f"FAIL ({str(e).split(': ', 2)[-1][:60]})", err
        return "ok", err

    return check


BENCH = RecurrentCellBench()
