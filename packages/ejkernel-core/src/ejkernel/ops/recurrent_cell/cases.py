"""Conformance cases of ``recurrent_cell``: each cell type, odd sizes, every bias form (split,
LSTM/RNN's single ``b``, none), every initial-state form (``h``, ``(h, c)``, ``None``, one state
per direction), bidirectional, relu and a callable activation, an empty sequence."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .op import GATES, REVERSE_PREFIX

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "RecurrentCellCase", "make_weights"]


def make_weights(
    rng: np.random.Generator, cell_type: str, input_dim: int, hidden_dim: int, *, bias: str | None, dirs: int
) -> dict[str, np.ndarray]:
    """Random float32 weights of PyTorch's initialization scale (uniform ±1/sqrt(hidden_dim)).
    ``bias``: ``"split"`` (``b_ih`` and ``b_hh``), ``"single"`` (``b``) or ``None``."""
    g = len(GATES[cell_type]) * hidden_dim
    k = 1.0 / np.sqrt(hidden_dim)

    def u(*shape: int) -> np.ndarray:
        return rng.uniform(-k, k, shape).astype(np.float32)

    out: dict[str, np.ndarray] = {}
    for prefix in ("", REVERSE_PREFIX)[:dirs]:
        out[prefix + "w_ih"] = u(input_dim, g)
        out[prefix + "w_hh"] = u(hidden_dim, g)
        if bias == "split":
            out[prefix + "b_ih"], out[prefix + "b_hh"] = u(g), u(g)
        elif bias == "single":
            out[prefix + "b"] = u(g)
    return out


@dataclasses.dataclass(frozen=True)
class RecurrentCellCase:
    """One case. ``state``: ``"h"`` (``[batch, hidden_dim]``), ``"hc"`` (an lstm's ``(h, c)``),
    ``"dirs"`` (``[2, batch, hidden_dim]``, bidirectional) or ``"none"``."""

    name: str
    cell_type: str = "lstm"
    batch: int = 2
    seq: int = 5
    input_dim: int = 3
    hidden_dim: int = 8
    bidirectional: bool = False
    bias: str | None = "split"
    state: str = "h"
    activation: Any = "tanh"
    dtype: str = "float32"

    def with_dtype(self, dtype: str) -> RecurrentCellCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        dt = jnp.dtype(self.dtype)
        dirs = 2 if self.bidirectional else 1
        w = make_weights(rng, self.cell_type, self.input_dim, self.hidden_dim, bias=self.bias, dirs=dirs)
        x = rng.standard_normal((self.batch, self.seq, self.input_dim)).astype(np.float32)

        def st(*lead: int) -> jax.Array:
            return jnp.asarray(0.5 * rng.standard_normal((*lead, self.batch, self.hidden_dim)), dt)

        hidden: Any = {"h": lambda: st(), "hc": lambda: (st(), st()), "dirs": lambda: st(2), "none": lambda: None}[
            self.state
        ]()
        return {
            "inputs": jnp.asarray(x, dt),
            "hidden": hidden,
            "weights": {k: jnp.asarray(v, dt) for k, v in w.items()},
            "cell_type": self.cell_type,
            "bidirectional": self.bidirectional,
            "activation": self.activation,
        }


_BASE = (
    RecurrentCellCase("lstm", bias="single"),
    RecurrentCellCase("gru", "gru", batch=3, seq=7, input_dim=5, hidden_dim=12),
    RecurrentCellCase("rnn", "rnn", batch=2, seq=6, input_dim=4, hidden_dim=9),
    RecurrentCellCase(
        "rnn-relu-single-bias", "rnn", batch=3, seq=8, input_dim=6, hidden_dim=7, bias="single", activation="relu"
    ),
    RecurrentCellCase("lstm-hc-odd", batch=3, seq=11, input_dim=7, hidden_dim=13, state="hc"),
    RecurrentCellCase(
        "gru-no-bias-zero-state", "gru", batch=1, seq=9, input_dim=2, hidden_dim=5, bias=None, state="none"
    ),
    RecurrentCellCase(
        "lstm-bidirectional", batch=2, seq=9, input_dim=6, hidden_dim=10, bidirectional=True, state="dirs"
    ),
    RecurrentCellCase(
        "gru-bidirectional-shared-state", "gru", batch=3, seq=6, input_dim=4, hidden_dim=6, bidirectional=True
    ),
    RecurrentCellCase(
        "rnn-bidirectional-relu",
        "rnn",
        batch=2,
        seq=5,
        input_dim=3,
        hidden_dim=4,
        bidirectional=True,
        state="dirs",
        activation="relu",
    ),
    RecurrentCellCase("lstm-custom-activation", batch=2, seq=6, input_dim=3, hidden_dim=8, activation=jax.nn.soft_sign),
    RecurrentCellCase("lstm-empty-seq", batch=2, seq=0, input_dim=3, hidden_dim=8, state="hc"),
    RecurrentCellCase("lstm-long", batch=4, seq=64, input_dim=16, hidden_dim=32),
)
# The default set leaves out the long case: the reference's unrolled loop compiles slowly on a CPU.
CASES: tuple[RecurrentCellCase, ...] = tuple(c for c in _BASE if c.name != "lstm-long") + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("lstm", "gru-bidirectional-shared-state")
)
FULL_CASES: tuple[RecurrentCellCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE if c.seq
)

# Realistic shapes: a speech/seq2seq encoder layer and the benchmark shape.
ARG_SPECS: dict[str, dict[str, Any]] = {
    "seq2seq-encoder-bilstm": dict(
        cell_type="lstm", batch=32, seq=512, input_dim=512, hidden_dim=512, bidirectional=True
    ),
    "lstm-h1024": dict(cell_type="lstm", batch=64, seq=2048, input_dim=1024, hidden_dim=1024),
    "gru-h768": dict(cell_type="gru", batch=64, seq=1024, input_dim=768, hidden_dim=768),
}
