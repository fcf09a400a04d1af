"""Conformance cases of ``attention``: the dense attention cases without varlen (it has no
``cum_seqlens``), with the weights' ``dtype`` set to the inputs' dtype and dropout through
``dropout_rng`` + ``deterministic=False``."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..flash_attention import cases as dense

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "WeightsCase"]


@dataclasses.dataclass(frozen=True)
class WeightsCase:
    """A dense attention case as an ``attention`` call."""

    case: dense.AttentionCase

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def dtype(self) -> str:
        return self.case.dtype

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        kw = self.case.inputs(seed)
        seed_value = kw.pop("dropout_seed", None)
        if self.case.dropout > 0:
            kw.update(dropout_rng=seed_value, deterministic=False)
        return {**kw, "dtype": kw["query"].dtype}


def _cases(cases: tuple[dense.AttentionCase, ...]) -> tuple[WeightsCase, ...]:
    return tuple(WeightsCase(c) for c in cases if c.varlen is None and c.name not in _SKIP)


# A few dense cases cover the weights; the kernel is the dense XLA one that the
# scaled_dot_product_attention cases check in full.
_SKIP = ("bias-2d", "bias-keys", "segments-cross", "window-asym", "causal-sq>sk")
CASES = _cases(dense.CASES)
FULL_CASES = _cases(dense.FULL_CASES)
ARG_SPECS = dense.ARG_SPECS
