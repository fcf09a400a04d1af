"""Conformance cases of ``ring_attention``: dense cases run as a ring over every local device
(``mesh=`` with the sequence sharded over ``"sp"``; 8 simulated CPU devices in the test suite),
against the dense reference of the whole sequence. Sequence lengths divide by 8."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from ..flash_attention.cases import AttentionCase

__all__ = ["CASES", "FULL_CASES", "RingCase"]


@dataclasses.dataclass(frozen=True)
class RingCase:
    """A dense case (contiguous layout) with the sequence sharded over all local devices."""

    base: AttentionCase

    @property
    def name(self) -> str:
        return f"ring-{self.base.name}"

    @property
    def dtype(self) -> str:
        return self.base.dtype

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        from jax.sharding import Mesh
        from jax.sharding import PartitionSpec as P

        kw = self.base.inputs(seed)
        spec = P(None, "sp", None, None)
        kw.update(axis_name="sp", mesh=Mesh(np.array(jax.devices()), ("sp",)), in_specs=(spec, spec, spec))
        return kw


CASES: tuple[RingCase, ...] = (
    RingCase(AttentionCase("causal-gqa", b=2, sq=64, sk=64, h=4, hk=2, d=32, causal=True)),
    RingCase(AttentionCase("full-sinks-softcap", b=1, sq=64, sk=64, h=2, hk=2, d=32, sinks=1, soft_cap=5.0)),
    RingCase(AttentionCase("segments-causal", b=2, sq=64, sk=64, h=2, hk=1, d=32, segments="packed", causal=True)),
    RingCase(AttentionCase("window", b=1, sq=64, sk=64, h=2, hk=2, d=32, window=(9, 3))),
)
FULL_CASES: tuple[RingCase, ...] = CASES + tuple(RingCase(c.base.with_dtype("bfloat16")) for c in CASES)
