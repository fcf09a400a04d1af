"""Conformance cases of ``state_space_v2``: groups, odd lengths, initial states, both gatings,
a decode step, steep decays (``A · dt`` down to about -30 per step), low precisions."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "SSDCase", "make_ssd_inputs"]


@dataclasses.dataclass(frozen=True)
class SSDCase:
    """One ``state_space_v2`` case (``P`` = head_dim, ``N`` = state_size, ``G`` = n_groups)."""

    name: str
    b: int = 2
    t: int = 37
    h: int = 4
    p: int = 16
    n: int = 16
    g: int = 1
    gate: str | None = None  # None, "silu" or "rmsnorm"
    initial_state: bool = False
    conv_state: bool = False
    strong: bool = False
    dtype: str = "float32"

    def with_dtype(self, dtype: str) -> SSDCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        return make_ssd_inputs(self, seed)


def make_ssd_inputs(case: SSDCase, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    b, t, h = case.b, case.t, case.h

    def rand(*shape: int, s: float = 1.0) -> Any:
        return rng.standard_normal(shape) * s

    dt = np.log1p(np.exp(rand(b, t, h) + (3.0 if case.strong else -1.0)))  # softplus
    kw: dict[str, Any] = {
        "x": jnp.asarray(rand(b, t, h, case.p), dtype),
        "A": jnp.asarray(-np.exp(rand(h, s=0.5) + (1.5 if case.strong else -0.5)), jnp.float32),
        "B": jnp.asarray(rand(b, t, case.g, case.n, s=case.n**-0.5), dtype),
        "C": jnp.asarray(rand(b, t, case.g, case.n), dtype),
        "D": jnp.asarray(rand(h), jnp.float32),
        "dt": jnp.asarray(dt, jnp.float32),
        "n_groups": case.g,
    }
    if case.gate is not None:
        kw["gate"] = jnp.asarray(rand(b, t, h * case.p), dtype)
        kw["use_gated_rmsnorm"] = case.gate == "rmsnorm"
        kw["act_fn"] = jax.nn.silu
    if case.initial_state:
        kw["initial_state"] = jnp.asarray(rand(b, h, case.p, case.n, s=0.5), jnp.float32)
    if case.conv_state:
        kw["conv_state"] = jnp.asarray(rand(b, h * case.p + 2 * case.g * case.n, 4), dtype)
    return kw


_BASE = (
    SSDCase("basic", b=2, t=37, h=4, p=16, n=16),
    SSDCase("groups-states-silu", b=2, t=50, h=4, p=8, n=16, g=2, gate="silu", initial_state=True),
    SSDCase("rmsnorm-strong", b=1, t=70, h=2, p=16, n=8, gate="rmsnorm", strong=True),
    SSDCase("decode-step", b=3, t=1, h=4, p=16, n=16, g=2, initial_state=True, conv_state=True),
)
CASES: tuple[SSDCase, ...] = (*_BASE, _BASE[1].with_dtype("bfloat16"))
FULL_CASES: tuple[SSDCase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Realistic shapes: Mamba-2 2.7B (80 heads of 64, state 128, 1 group).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "mamba2-2.7b-train-4k": dict(b=4, t=4096, h=80, p=64, n=128, g=1),
    "mamba2-130m-train-2k": dict(b=8, t=2048, h=24, p=64, n=128, g=1),
}
