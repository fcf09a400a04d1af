"""Conformance cases of ``state_space_v1``: odd lengths and widths, a state carried in, gates
(SiLU and a custom activation), decode steps (2-D inputs with a state in), length 1, the final
state (``return_state``), every input's gradient; bfloat16/float16 twins. ``A`` and ``D`` are
float32, as Mamba keeps them; the other arrays are in the case's dtype."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "StateSpaceV1Case", "make_inputs"]


@dataclasses.dataclass(frozen=True)
class StateSpaceV1Case:
    name: str
    b: int = 2
    s: int = 37
    d: int = 24
    n: int = 16
    dtype: str = "float32"
    gate: bool = False
    act: str | None = None  # "tanh": a custom act_fn
    initial_state: bool = False
    decode: bool = False  # 2-D inputs: one token
    return_state: bool = False

    def with_dtype(self, dtype: str) -> StateSpaceV1Case:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        return make_inputs(self, seed)


def make_inputs(case: StateSpaceV1Case, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    b, s, d, n = case.b, case.s, case.d, case.n
    lead = (b,) if case.decode else (b, s)

    def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    dt = np.log1p(np.exp(randn(*lead, d) - 1.0))  # softplus: positive, mostly < 1
    kw: dict[str, Any] = {
        "hidden_states": jnp.asarray(randn(*lead, d), dtype),
        "A": jnp.asarray(-np.exp(randn(d, n, scale=0.5)), jnp.float32),
        "B": jnp.asarray(randn(*lead, n), dtype),
        "C": jnp.asarray(randn(*lead, n), dtype),
        "D": jnp.asarray(randn(d), jnp.float32),
        "dt": jnp.asarray(dt, dtype),
    }
    if case.gate:
        kw["gate"] = jnp.asarray(randn(*lead, d), dtype)
    if case.act == "tanh":
        kw["act_fn"] = jax.nn.tanh
    if case.initial_state or case.decode:
        kw["initial_state"] = jnp.asarray(randn(b, d, n), dtype)
    if case.return_state:
        kw["return_state"] = True
    return kw


_BASE = (
    StateSpaceV1Case("basic"),
    StateSpaceV1Case("odd", b=1, s=53, d=19, n=5),
    StateSpaceV1Case("gate-state", b=2, s=29, d=40, n=16, gate=True, initial_state=True),
    StateSpaceV1Case("gate-tanh", b=1, s=17, d=8, n=4, gate=True, act="tanh"),
    StateSpaceV1Case("len1", b=3, s=1, d=16, n=8, initial_state=True),
    StateSpaceV1Case("decode", b=3, d=20, n=16, gate=True, decode=True),
    StateSpaceV1Case("long-chunks", b=1, s=300, d=12, n=4, gate=True, initial_state=True),
)
_STATE = (
    StateSpaceV1Case("final-state", b=2, s=45, d=24, n=16, initial_state=True, return_state=True),
    StateSpaceV1Case("decode-state", b=2, d=16, n=8, decode=True, return_state=True),
)
_TWINS = (("basic", "bfloat16"), ("gate-state", "float16"), ("final-state", "bfloat16"))
CASES: tuple[StateSpaceV1Case, ...] = (
    tuple(c for c in _BASE if c.name != "long-chunks")
    + _STATE
    + tuple(c.with_dtype(dt) for c in _BASE + _STATE for name, dt in _TWINS if c.name == name)
)
FULL_CASES: tuple[StateSpaceV1Case, ...] = (
    _BASE + _STATE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE + _STATE)
)

# Realistic shapes: (batch, seq, intermediate, state).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "mamba-130m": dict(b=8, s=2048, d=1536, n=16),
    "mamba-2.8b": dict(b=1, s=4096, d=5120, n=16),
    "falcon-mamba-7b": dict(b=1, s=4096, d=8192, n=16),
    "mamba-2.8b-decode": dict(b=32, s=1, d=5120, n=16),
}
