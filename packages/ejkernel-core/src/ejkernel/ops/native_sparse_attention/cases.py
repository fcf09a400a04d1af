"""Conformance cases of ``native_sparse_attention``: the computed selection (compressed branch)
and the explicit ``block_indices`` form (negative, future, out-of-range and repeated blocks; int
and per-token counts, zero included), the sliding window, GQA up to NSA's group of 16, odd sizes,
a value head dim of its own, packed sequences (empty ones, NaN padding rows: a kernel that reads
them fails)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "NSACase"]


@dataclasses.dataclass(frozen=True)
class NSACase:
    """One case. ``selected``: ``None`` computes the selection (``g_cmp`` given), a number is the
    slots of random ``block_indices``; ``count``: the int ``block_counts``, or ``None`` for random
    per-token counts; ``lengths``: packed sequences (batch 1) followed by ``pad`` padding rows."""

    name: str
    b: int = 2
    s: int = 80
    h: int = 4
    hk: int = 2
    d: int = 32
    dv: int | None = None
    bs: int = 16
    selected: int | None = None
    count: int | None = 3
    gates: tuple[str, ...] = ("cmp", "slc")
    window: int | None = None
    lengths: tuple[int, ...] | None = None
    pad: int = 0
    dtype: str = "float32"

    def with_dtype(self, dtype: str) -> NSACase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        dtype = jnp.dtype(self.dtype)
        b, s = (1, sum(self.lengths) + self.pad) if self.lengths is not None else (self.b, self.s)
        dv = self.dv or self.d
        arrays = {
            "query": rng.standard_normal((b, s, self.h, self.d)),
            "key": rng.standard_normal((b, s, self.hk, self.d)),
            "value": rng.standard_normal((b, s, self.hk, dv)),
        }
        for g in self.gates:
            arrays[f"g_{g}"] = 1.0 / (1.0 + np.exp(-rng.standard_normal((b, s, self.h))))
        kw: dict[str, Any] = {"block_size": self.bs, "window_size": self.window}
        if self.window is not None:
            arrays["g_swa"] = 1.0 / (1.0 + np.exp(-rng.standard_normal((b, s, self.h))))
        if self.lengths is not None:
            cu = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)
            kw["cu_seqlens"] = jnp.asarray(cu)
            for x in arrays.values():
                x[:, cu[-1] :] = np.nan  # padding rows are never read
        for name, x in arrays.items():
            kw[name] = jnp.asarray(x.astype(np.float32), dtype)
        slots = self.selected or -(-s // self.bs)
        if self.selected is not None:
            # Blocks up to two past the last: future ones and -1 must be ignored, repeats count once.
            nb = -(-s // self.bs)
            kw["block_indices"] = jnp.asarray(rng.integers(-1, nb + 2, (b, s, self.hk, self.selected)), jnp.int32)
        kw["block_counts"] = (
            self.count
            if self.count is not None
            else jnp.asarray(rng.integers(0, slots + 1, (b, s, self.hk)), jnp.int32)
        )
        return kw


_BASE = (
    NSACase("computed"),
    NSACase("explicit", s=70, hk=1, selected=5, count=4, gates=()),
    NSACase("explicit-counts", s=64, h=6, hk=3, d=24, selected=4, count=None, gates=("slc",)),
    NSACase("computed-window", s=75, h=3, hk=3, d=24, dv=16, count=2, window=20, gates=("cmp", "slc")),
    NSACase("computed-counts", s=50, bs=8, count=None, gates=("cmp",)),
    NSACase("gqa16", b=1, s=64, h=16, hk=1, bs=16, count=2, window=16),
    NSACase("count-above-blocks", b=1, s=40, h=2, hk=1, bs=8, count=16),
    NSACase("varlen-computed", lengths=(37, 0, 50, 5), pad=6, bs=8, count=4, window=10),
    NSACase("varlen-explicit", lengths=(20, 33), pad=3, bs=8, selected=3, count=None, gates=("slc",)),
    NSACase("block1-window1", b=1, s=9, h=2, hk=1, d=8, bs=1, count=3, window=1),
)
# The default set: each form once (compile time dominates on a CPU); the full set has every case.
_DEFAULT = ("computed", "explicit-counts", "computed-window", "gqa16", "varlen-computed", "varlen-explicit")
CASES: tuple[NSACase, ...] = tuple(c for c in _BASE if c.name in _DEFAULT) + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name == "computed"
)
FULL_CASES: tuple[NSACase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Realistic shapes: NSA's paper (GQA 64/4, block 64, 16 selected blocks, window 512), scaled.
ARG_SPECS: dict[str, dict[str, Any]] = {
    "nsa-paper-32k": dict(b=1, s=32768, h=64, hk=4, d=128, bs=64, count=16, window=512),
    "nsa-8k-gqa16": dict(b=4, s=8192, h=32, hk=2, d=128, bs=64, count=16, window=512),
}
