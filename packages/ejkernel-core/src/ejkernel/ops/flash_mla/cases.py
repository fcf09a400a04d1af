"""Conformance cases of ``flash_mla``: the three rope forms, GQA and MQA projections, odd sizes,
decode and chunked prefill against a longer latent cache, packed sequences (an empty one
included), masks with a fully masked row, bias, sinks, soft cap and windows."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "MLACase", "make_latent_inputs"]


@dataclasses.dataclass(frozen=True)
class MLACase:
    """One latent attention case: ``b`` rows of ``sq`` queries against ``sk`` latent rows
    (``kv_lora_rank = r``), ``h`` query heads over ``hk`` projection heads; ``rope`` is
    ``"none"``, ``"query"`` (``b_k``, the query carries its rotary tail) or ``"shared"``
    (``b_q`` and ``b_k``)."""

    name: str
    b: int = 2
    sq: int = 16
    sk: int | None = None
    h: int = 4
    hk: int = 4
    r: int = 32
    dn: int = 16
    dr: int = 8
    dv: int = 16
    rope: str = "query"
    dtype: str = "float32"
    causal: bool = False
    window: int | tuple[int, int] | None = None
    soft_cap: float | None = None
    sinks: int = 0
    bias: bool = False
    mask: bool = False
    cu_seqlens: tuple[int, ...] | None = None
    scale: float | None = None

    def with_dtype(self, dtype: str) -> MLACase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_latent_inputs(self, seed)


def make_latent_inputs(c: MLACase, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dt = jnp.dtype(c.dtype)
    sk = c.sq if c.sk is None else c.sk

    def normal(*shape: int, std: float = 1.0) -> Any:
        return jnp.asarray(rng.standard_normal(shape) * std, dt)

    dq = c.dn + (c.dr if c.rope == "query" else 0)
    # Projections scaled by 1/sqrt(r) keep the per-head keys and values of unit size.
    kw: dict[str, Any] = dict(
        query=normal(c.b, c.sq, c.h, dq),
        key_value=normal(c.b, sk, c.r),
        w_kc=normal(c.r, c.hk, c.dn, std=c.r**-0.5),
        w_vc=normal(c.r, c.hk, c.dv, std=c.r**-0.5),
        causal=c.causal,
    )
    if c.rope != "none":
        kw["b_k"] = normal(c.b, sk, c.dr)
    if c.rope == "shared":
        kw["b_q"] = normal(c.b, c.sq, c.dr)
    if c.cu_seqlens is not None:
        kw["cu_seqlens"] = jnp.asarray(c.cu_seqlens, jnp.int32)
    if c.window is not None:
        kw["sliding_window"] = c.window
    if c.soft_cap is not None:
        kw["logits_soft_cap"] = c.soft_cap
    if c.sinks:
        kw["softmax_aux"] = normal(c.h, c.sinks)
    if c.bias:
        kw["bias"] = normal(1, c.h, c.sq, sk)
    if c.mask:
        mask = rng.random((c.b, 1, c.sq, sk)) < 0.7
        mask[0, 0, 1] = False  # a row that sees nothing: zeros (or only the sinks' share)
        kw["attention_mask"] = jnp.asarray(mask)
    if c.scale is not None:
        kw["softmax_scale"] = c.scale
    return kw


_BASE = (
    MLACase("rope-query-causal", causal=True),
    MLACase("no-rope-odd", sq=13, h=3, hk=1, r=20, dn=12, dv=10, rope="none"),
    MLACase("rope-shared-gqa", h=8, hk=2, rope="shared", causal=True, sq=21),
    MLACase("decode-mqa", b=3, sq=1, sk=37, h=8, hk=1, causal=True),
    MLACase("chunked-prefill-window", sq=5, sk=29, h=4, hk=2, causal=True, window=(8, 0), rope="shared"),
    MLACase("varlen", b=1, sq=31, cu_seqlens=(0, 7, 7, 20, 31), causal=True, h=4, hk=2),
    MLACase("mask-bias-sinks-softcap", sq=12, sk=19, mask=True, bias=True, sinks=2, soft_cap=6.0, scale=0.3),
    MLACase("window", sq=18, window=5, rope="none", dv=24),
)
CASES: tuple[MLACase, ...] = _BASE + tuple(
    c.with_dtype("bfloat16") for c in _BASE if c.name in ("rope-query-causal", "decode-mqa", "varlen")
)
FULL_CASES: tuple[MLACase, ...] = _BASE + tuple(c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE)

# Realistic shapes (DeepSeek-V3: 128 heads, kv_lora_rank 512, nope 128, rope 64, value 128).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "deepseek-v3-decode-8k": dict(b=64, sq=1, sk=8192, h=128, hk=128, r=512, dn=128, dr=64, dv=128),
    "deepseek-v3-prefill-4k": dict(b=1, sq=4096, sk=4096, h=128, hk=128, r=512, dn=128, dr=64, dv=128),
    "deepseek-v2-lite-decode-4k": dict(b=32, sq=1, sk=4096, h=16, hk=16, r=512, dn=128, dr=64, dv=128),
}
