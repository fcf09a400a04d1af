"""Conformance cases of ``recurrent_attention``: every gate alone and together (key channel,
value channel, per head), GQA, varlen, states, reverse, a decode step."""

from __future__ import annotations

from typing import Any

from ..families.linear_attention import LinearAttentionCase

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES"]

C = LinearAttentionCase
_BASE = (
    C("all-gates", b=2, t=35, h=2, dk=16, dv=16, gates=("g", "g_gamma", "gk", "gv"), initial_state=True,
      return_state=True),
    C("gk-gamma-gqa", b=1, t=40, h=4, hk=2, dk=16, dv=8, gates=("gk", "g_gamma")),
    C("gv-varlen-reverse", seqs=(4, 0, 1, 28), h=2, dk=8, dv=16, gates=("gv",), reverse=True, initial_state=True,
      return_state=True),
    C("gamma-only", b=2, t=19, h=2, dk=16, dv=16, gates=("g_gamma",), return_state=True),
    C("decode-step", b=2, t=1, h=2, dk=16, dv=16, gates=("g", "gv"), initial_state=True, return_state=True),
)  # fmt: skip
CASES: tuple[LinearAttentionCase, ...] = (*_BASE, _BASE[1].with_dtype("bfloat16"))
FULL_CASES: tuple[LinearAttentionCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

ARG_SPECS: dict[str, dict[str, Any]] = {
    "retnet-train-4k": dict(b=4, t=4096, h=16, hk=16, dk=128, dv=128),
}
