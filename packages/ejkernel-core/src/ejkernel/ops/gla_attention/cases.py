"""Conformance cases of ``gla_attention``: odd lengths (never a multiple of the chunk), GQA, both
gates, varlen with length-1 and empty sequences, initial and final states, reverse, steep decays
(a chunk's cumulated gate far outside float32's exp range), a decode step, low precisions."""

from __future__ import annotations

from typing import Any

from ..families.linear_attention import LinearAttentionCase

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES"]

C = LinearAttentionCase
_BASE = (
    C("basic", b=2, t=37, h=2, dk=16, dv=16),
    C("gqa-gamma-states", b=2, t=50, h=4, hk=2, dk=16, dv=8, gates=("g", "g_gamma"), initial_state=True,
      return_state=True),
    C("varlen", seqs=(1, 0, 23, 17, 0, 5), h=2, dk=16, dv=16, initial_state=True, return_state=True),
    C("reverse-varlen", seqs=(9, 0, 30), h=2, dk=8, dv=16, reverse=True, initial_state=True, return_state=True),
    C("strong-decay", b=1, t=70, h=2, dk=16, dv=16, decay="strong", return_state=True, scale=0.5),
    C("no-gate", b=1, t=21, h=2, dk=16, dv=16, gates=()),
    C("decode-step", b=3, t=1, h=4, hk=1, dk=16, dv=32, gates=("g", "g_gamma"), initial_state=True,
      return_state=True),
)  # fmt: skip
_LOW = ("basic", "varlen")  # bfloat16 twins by default; every twin (and float16): FULL_CASES
CASES: tuple[LinearAttentionCase, ...] = _BASE + tuple(c.with_dtype("bfloat16") for c in _BASE if c.name in _LOW)
_EXTRA = (
    C("long-d64", b=1, t=300, h=2, dk=64, dv=64, gates=("g", "g_gamma"), initial_state=True, return_state=True),
    C("reverse-gqa", b=2, t=45, h=4, hk=2, dk=32, dv=16, reverse=True, return_state=True),
    C("varlen-many", seqs=(3, 64, 1, 0, 0, 17, 2, 33), h=2, dk=16, dv=16, gates=("g", "g_gamma"), return_state=True),
)
FULL_CASES: tuple[LinearAttentionCase, ...] = (
    _BASE + _EXTRA + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE + _EXTRA)
)

# Realistic shapes: (batch, seq, heads, kv heads, head dim, value head dim).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "gla-1.3b-train-4k": dict(b=4, t=4096, h=16, hk=16, dk=128, dv=128),
    "gla-2.7b-train-2k": dict(b=8, t=2048, h=20, hk=20, dk=128, dv=128),
    "gla-decode": dict(b=64, t=1, h=16, hk=16, dk=128, dv=128),
}
