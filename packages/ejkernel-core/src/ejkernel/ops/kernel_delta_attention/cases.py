"""Conformance cases of the delta-rule ops: lengths that are not a multiple of the chunk, GVA,
initial and final states, varlen with empty and length-1 sequences, strong per-channel decays
(whose ratios across a chunk overflow float32), no decay, scalar decay, decode (one token)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "DeltaRuleCase", "make_delta_inputs"]


@dataclasses.dataclass(frozen=True)
class DeltaRuleCase:
    """One delta-rule case. ``op``: ``"kda"`` (``kernel_delta_attention``, gate ``decay``) or
    ``"gdn"`` (``gated_delta_rule``, gate ``g``); ``gate``: ``"channel"``, ``"scalar"`` or
    ``None``; ``lens``: packed sequence lengths (varlen, batch 1)."""

    name: str
    op: str = "kda"
    b: int = 1
    t: int = 37
    h: int = 2
    hv: int | None = None
    dk: int = 32
    dv: int = 16
    gate: str | None = "channel"
    lens: tuple[int, ...] | None = None
    init: bool = False
    ret: bool = False
    l2norm: bool = True
    strong_decay: bool = False
    scale: float | None = None
    dtype: str = "float32"

    def with_dtype(self, dtype: str) -> DeltaRuleCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        return make_delta_inputs(self, seed)


def make_delta_inputs(case: DeltaRuleCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a call for ``case``: random normal q/k/v, sigmoid betas,
    log-sigmoid gates (``strong_decay``: about -3 per token), unit keys when the op does not
    normalize them, a random float32 initial state."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    hv = case.hv or case.h
    b, t = (1, sum(case.lens)) if case.lens is not None else (case.b, case.t)
    n = len(case.lens) if case.lens is not None else b

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    q, k = normal(b, t, case.h, case.dk), normal(b, t, case.h, case.dk)
    if not case.l2norm:
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    kw: dict[str, Any] = {
        "query": jnp.asarray(q, dtype),
        "key": jnp.asarray(k, dtype),
        "value": jnp.asarray(normal(b, t, hv, case.dv), dtype),
        "beta": jnp.asarray(jax.nn.sigmoid(normal(b, t, hv)), dtype),
    }
    if case.gate is not None:
        shape = (b, t, hv, case.dk) if case.gate == "channel" else (b, t, hv)
        g = np.asarray(jax.nn.log_sigmoid(normal(*shape) - (3.0 if case.strong_decay else 0.0)))
        kw["decay" if case.op == "kda" else "g"] = jnp.asarray(g, dtype)
    elif case.op == "gdn":
        kw["g"] = jnp.zeros((b, t, hv), dtype)
    if case.init:
        kw["initial_state"] = jnp.asarray(0.5 * normal(n, hv, case.dk, case.dv))
    if case.lens is not None:
        kw["cu_seqlens"] = jnp.asarray(np.concatenate([[0], np.cumsum(case.lens)]), jnp.int32)
    kw["use_qk_l2norm" if case.op == "kda" else "use_qk_l2norm_in_kernel"] = case.l2norm
    kw["return_state"] = case.ret
    if case.scale is not None:
        kw["softmax_scale"] = case.scale
    return kw


_BASE = (
    DeltaRuleCase("odd-b2", b=2, t=37),
    DeltaRuleCase("gva-state", t=70, h=1, hv=2, dk=16, dv=32, init=True, ret=True),
    DeltaRuleCase("varlen-empty-len1", lens=(5, 0, 1, 40, 17), dk=16, init=True, ret=True),
    DeltaRuleCase("strong-decay", t=80, h=1, dk=16, strong_decay=True, ret=True),
    DeltaRuleCase("scalar-decay-unnormed", t=33, gate="scalar", l2norm=False, scale=0.3),
    DeltaRuleCase("no-decay", t=20, gate=None, dv=32),
    DeltaRuleCase("decode", b=3, t=1, init=True, ret=True),
)
# One bfloat16 twin by default (the varlen one is the slowest case to compile); every twin: FULL_CASES.
CASES: tuple[DeltaRuleCase, ...] = _BASE + tuple(c.with_dtype("bfloat16") for c in _BASE if c.name == "odd-b2")
FULL_CASES: tuple[DeltaRuleCase, ...] = (
    *_BASE,
    DeltaRuleCase("long-multi-chunk", b=1, t=300, h=2, dk=64, dv=64, init=True, ret=True),
    DeltaRuleCase("varlen-many", lens=(1, 64, 0, 65, 3, 0, 129), h=2, hv=4, dk=32, dv=32, ret=True),
    *tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE),
)

# Realistic shapes: (batch, seq, q/k heads, value heads, head dim, value head dim).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "kimi-linear-48b-4k": dict(b=4, t=4096, h=32, hv=32, dk=128, dv=128),
    "kda-bench-4k": dict(b=4, t=4096, h=16, hv=16, dk=128, dv=128),
    "kimi-linear-decode": dict(b=64, t=1, h=32, hv=32, dk=128, dv=128),
}
