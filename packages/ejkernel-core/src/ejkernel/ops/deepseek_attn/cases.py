"""Conformance cases of ``deepseek_attn``: top-k below and above the visible key count (early
queries keep everything, later ones a subset), the three rope forms, GQA and MQA projections,
odd sizes, non-causal selection and decode against a longer latent cache."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..flash_mla.cases import MLACase, make_latent_inputs

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "DSACase"]


@dataclasses.dataclass(frozen=True)
class DSACase(MLACase):
    """A latent attention case (:class:`~ejkernel.ops.flash_mla.cases.MLACase`) with a lightning
    indexer of ``ih`` heads of dim ``idim`` keeping ``topk`` keys per query."""

    ih: int = 2
    idim: int = 8
    topk: int = 6

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        kw = make_latent_inputs(self, seed)
        rng = np.random.default_rng(seed + 100)
        dt = jnp.dtype(self.dtype)
        sk = self.sq if self.sk is None else self.sk
        kw.update(
            query_index=jnp.asarray(rng.standard_normal((self.b, self.sq, self.ih, self.idim)), dt),
            key_index=jnp.asarray(rng.standard_normal((self.b, sk, self.idim)), dt),
            index_weights=jnp.asarray(rng.standard_normal((self.b, self.sq, self.ih)), dt),
            index_topk=self.topk,
        )
        return kw


_BASE = (
    DSACase("topk6-causal", causal=True),
    DSACase("no-rope-odd", sq=13, h=3, hk=1, r=20, dn=12, dv=10, rope="none", causal=True, topk=5, ih=3, idim=5),
    DSACase("shared-rope-gqa", sq=21, h=8, hk=2, rope="shared", causal=True, topk=9),
    DSACase("non-causal", sq=17, topk=4, causal=False),
    DSACase("decode-mqa", b=3, sq=1, sk=37, h=8, hk=1, causal=True, topk=11),
    DSACase("chunk-vs-cache", sq=6, sk=30, h=4, hk=2, causal=True, topk=7, scale=0.25),
    DSACase("topk-covers-all", sq=12, causal=True, topk=64),
)
CASES: tuple[DSACase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("topk6-causal", "decode-mqa")
)
FULL_CASES: tuple[DSACase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Realistic shapes (DeepSeek-V3.2: MLA of V3, indexer of 64 heads of dim 128, top-2048).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "deepseek-v3.2-prefill-8k": dict(
        b=1, sq=8192, sk=8192, h=128, hk=128, r=512, dn=128, dr=64, dv=128, ih=64, idim=128, topk=2048
    ),
}
