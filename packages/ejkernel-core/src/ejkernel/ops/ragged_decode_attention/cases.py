"""Conformance cases of ``ragged_decode_attention``: ragged ``[start, end)`` ranges (empty ones
included) in a cache whose slots outside every range are NaN (a kernel that reads them fails),
odd sizes, GQA, soft cap, windows, sinks, value head dims, 4-D queries."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "RaggedDecodeCase", "make_ragged_decode_inputs"]


@dataclasses.dataclass(frozen=True)
class RaggedDecodeCase:
    """One ragged decode case: sequence ``b`` attends ``[ranges[b][0], ranges[b][1])`` of a
    ``kv_len``-slot cache whose other slots are NaN."""

    name: str
    ranges: tuple[tuple[int, int], ...]
    kv_len: int = 64
    h: int = 4
    hk: int = 4
    d: int = 32
    dv: int | None = None
    dtype: str = "float32"
    soft_cap: float | None = None
    window: int | tuple[int, int] | None = None
    sinks: int = 0
    sinks_1d: bool = False
    query_4d: bool = False

    def with_dtype(self, dtype: str) -> RaggedDecodeCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_ragged_decode_inputs(self, seed)


_BASE = (
    RaggedDecodeCase("ragged", ranges=((0, 64), (10, 11), (3, 40), (64, 64), (17, 50))),
    RaggedDecodeCase("odd-sizes", ranges=((0, 37), (5, 37), (36, 37)), kv_len=37, h=3, hk=1, d=24),
    RaggedDecodeCase("gqa4", ranges=((0, 100), (40, 41), (0, 0)), kv_len=100, h=8, hk=2),
    RaggedDecodeCase("gqa8-d128", ranges=((1, 77), (0, 128)), kv_len=128, h=8, hk=1, d=128),
    RaggedDecodeCase("softcap-4d", ranges=((0, 20), (30, 64)), soft_cap=4.0, query_4d=True),
    RaggedDecodeCase("window", ranges=((0, 64), (50, 60), (2, 9)), window=12),
    RaggedDecodeCase("window-pair", ranges=((4, 64), (0, 33)), window=(7, 3), h=4, hk=2),
    RaggedDecodeCase("sinks", ranges=((0, 31), (5, 5), (0, 64)), sinks=2, h=4, hk=2),
    RaggedDecodeCase("sinks-per-head", ranges=((8, 50), (0, 0)), sinks=1, sinks_1d=True, h=6, hk=3),
    RaggedDecodeCase("dv-differs", ranges=((0, 19), (3, 40)), dv=16),
    RaggedDecodeCase(
        "all-features",
        ranges=((0, 70), (69, 70), (10, 10), (20, 55)),
        kv_len=70,
        h=6,
        hk=2,
        window=20,
        sinks=2,
        soft_cap=5.0,
        query_4d=True,
    ),
)
CASES: tuple[RaggedDecodeCase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("ragged", "gqa4", "sinks")
)
FULL_CASES: tuple[RaggedDecodeCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

# Realistic decode shapes: (batch, heads, kv heads, head dim, kv length).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "llama3-8b-decode-8k": dict(b=32, h=32, hk=8, d=128, kv_len=8192),
    "llama3-70b-decode-32k": dict(b=8, h=64, hk=8, d=128, kv_len=32768),
    "mistral-7b-decode-1k": dict(b=64, h=32, hk=8, d=128, kv_len=1024),
}


def make_ragged_decode_inputs(case: RaggedDecodeCase, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of a ``ragged_decode_attention`` call for ``case`` (NaN in every slot
    outside a sequence's range)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    dv = case.dv or case.d
    b, s = len(case.ranges), case.kv_len
    start = np.asarray([r[0] for r in case.ranges], np.int32)
    end = np.asarray([r[1] for r in case.ranges], np.int32)
    k = rng.standard_normal((b, s, case.hk, case.d)).astype(np.float32)
    v = rng.standard_normal((b, s, case.hk, dv)).astype(np.float32)
    t = np.arange(s)[None, :]
    outside = (t < start[:, None]) | (t >= end[:, None])
    k[outside] = np.nan
    v[outside] = np.nan
    q_shape = (b, 1, case.h, case.d) if case.query_4d else (b, case.h, case.d)
    kw: dict[str, Any] = {
        "query": jnp.asarray(rng.standard_normal(q_shape), dtype),
        "key": jnp.asarray(k, dtype),
        "value": jnp.asarray(v, dtype),
        "sequence_start": jnp.asarray(start),
        "sequence_end": jnp.asarray(end),
        "logits_soft_cap": case.soft_cap,
        "sliding_window": case.window,
    }
    if case.sinks:
        shape = (case.h,) if case.sinks_1d else (case.h, case.sinks)
        kw["softmax_aux"] = jnp.asarray(rng.standard_normal(shape), dtype)
    return kw
