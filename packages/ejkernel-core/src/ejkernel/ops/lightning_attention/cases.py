"""Conformance cases of ``lightning_attention``: layers from first to last (head decays from 0 to
-8 per step), explicit per-head decay rates (``decay=``, differentiated), GQA, varlen with empty
and length-1 sequences, states, reverse, a decode step."""

from __future__ import annotations

from typing import Any

from ..families.linear_attention import LinearAttentionCase

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES"]


def _layer(i: int, n: int = 12) -> tuple[tuple[str, Any], ...]:
    return (("layer_idx", i), ("num_layers", n))


C = LinearAttentionCase
_BASE = (
    C("first-layer", b=2, t=45, h=4, dk=16, dv=16, gates=(), extra=_layer(0)),
    C("gqa-states-decay", b=2, t=33, h=4, hk=2, dk=16, dv=8, gates=("decay",), initial_state=True,
      return_state=True),
    C("varlen-reverse", seqs=(1, 0, 26, 7), h=8, dk=16, dv=16, gates=(), reverse=True, initial_state=True,
      return_state=True, extra=_layer(11)),
    C("decode-step", b=2, t=1, h=4, dk=16, dv=16, gates=(), initial_state=True, return_state=True,
      extra=_layer(2)),
)  # fmt: skip
CASES: tuple[LinearAttentionCase, ...] = (*_BASE, _BASE[0].with_dtype("bfloat16"))
FULL_CASES: tuple[LinearAttentionCase, ...] = _BASE + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE
)

ARG_SPECS: dict[str, dict[str, Any]] = {
    "minimax-text-01-4k": dict(b=1, t=4096, h=64, hk=64, dk=128, dv=128),
    "lightning-train-4k": dict(b=4, t=4096, h=16, hk=16, dk=128, dv=128),
}
