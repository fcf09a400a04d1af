"""Conformance cases of ``scaled_dot_product_attention``: the dense attention cases (packed
boundaries under its name for them, ``cu_seqlens_q/k``), and per-example lengths
(``cum_seqlens_q/k``, earlier releases' meaning)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from ..flash_attention.cases import ARG_SPECS, AttentionCase
from ..flash_attention.cases import CASES as DENSE_CASES
from ..flash_attention.cases import FULL_CASES as DENSE_FULL_CASES

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "SdpaCase"]


@dataclasses.dataclass(frozen=True)
class SdpaCase:
    """A dense case, with per-example lengths ``q_lens``/``k_lens`` (``[batch]``) when set."""

    base: AttentionCase
    q_lens: tuple[int, ...] | None = None
    k_lens: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        return self.base.name if self.q_lens is None and self.k_lens is None else f"{self.base.name}-lengths"

    @property
    def dtype(self) -> str:
        return self.base.dtype

    def with_dtype(self, dtype: str) -> SdpaCase:
        return dataclasses.replace(self, base=self.base.with_dtype(dtype))

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        kw = self.base.inputs(seed)
        for old, new in (("cum_seqlens_q", "cu_seqlens_q"), ("cum_seqlens_k", "cu_seqlens_k")):
            if old in kw:
                kw[new] = kw.pop(old)
        if self.q_lens is not None:
            kw["cum_seqlens_q"] = jnp.asarray(self.q_lens, jnp.int32)
        if self.k_lens is not None:
            kw["cum_seqlens_k"] = jnp.asarray(self.k_lens, jnp.int32)
        return kw


_LENGTHS = (
    # The last example has no key: its rows are zeros (jax.nn.dot_product_attention: the mean of the values).
    SdpaCase(AttentionCase("causal-gqa", b=3, sq=40, sk=40, h=4, hk=2, d=32, causal=True), (40, 17, 1), (40, 23, 0)),
    SdpaCase(AttentionCase("cross-bias", b=2, sq=24, sk=56, h=2, hk=2, d=16, bias=("b", "h", "q", "k")), (24, 5), None),
    SdpaCase(AttentionCase("keys-only-window", b=2, sq=48, sk=48, h=2, hk=1, d=32, window=(7, 0)), None, (30, 48)),
)
CASES: tuple[SdpaCase, ...] = tuple(SdpaCase(c) for c in DENSE_CASES) + _LENGTHS
FULL_CASES: tuple[SdpaCase, ...] = (
    tuple(SdpaCase(c) for c in DENSE_FULL_CASES) + _LENGTHS + tuple(c.with_dtype("bfloat16") for c in _LENGTHS)
)
