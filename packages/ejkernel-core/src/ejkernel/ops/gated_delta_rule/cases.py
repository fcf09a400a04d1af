"""Conformance cases of ``gated_delta_rule``: the delta-rule cases (see
:mod:`ejkernel.ops.kernel_delta_attention.cases`) with a scalar gate ``g`` per head, GVA as in
Qwen3-Next, keys normalized inside the op or given unit-length."""

from __future__ import annotations

from typing import Any

from ..kernel_delta_attention.cases import DeltaRuleCase

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES"]


def _gdn(name: str, **kw: Any) -> DeltaRuleCase:
    kw.setdefault("gate", "scalar")
    kw.setdefault("l2norm", False)
    return DeltaRuleCase(name, op="gdn", **kw)


_BASE = (
    _gdn("gva-odd", b=2, t=45, h=2, hv=4, dk=32, dv=32),
    _gdn("l2norm-state", t=64, dk=16, dv=32, l2norm=True, init=True, ret=True),
    _gdn("varlen-empty-len1", lens=(0, 33, 1, 20), dk=16, init=True, ret=True),
    _gdn("strong-decay", t=90, h=1, dk=16, strong_decay=True),
    _gdn("decode", b=2, t=1, h=1, hv=2, init=True, ret=True),
)
CASES: tuple[DeltaRuleCase, ...] = _BASE + tuple(c.with_dtype("bfloat16") for c in _BASE if c.name == "gva-odd")
FULL_CASES: tuple[DeltaRuleCase, ...] = (
    *_BASE,
    _gdn("varlen-many", lens=(1, 64, 0, 65, 3, 0, 129), h=2, hv=4, dk=32, dv=32, l2norm=True, ret=True),
    *tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE),
)

ARG_SPECS: dict[str, dict[str, Any]] = {
    "qwen3-next-80b-4k": dict(b=4, t=4096, h=16, hv=32, dk=128, dv=128),
    "gdn-bench-4k": dict(b=4, t=4096, h=16, hv=16, dk=128, dv=128),
    "qwen3-next-decode": dict(b=64, t=1, h=16, hv=32, dk=128, dv=128),
}
