"""Conformance cases of the dense attention ops (``flash_attention``, ``scaled_dot_product_attention``).

Inputs are random (never all zeros or ones) and sizes odd on purpose: GQA/MQA, cross lengths,
causal both ways, windows, soft cap, every bias broadcast, packed segments, padding masks,
pairwise masks with fully masked rows, varlen with empty tails, sinks, dropout, and all of them
together. ``CASES`` adds bfloat16 twins of the main ones; ``FULL_CASES`` (the ``full`` session)
adds bfloat16 and float16 twins of every case. ``ARG_SPECS`` are realistic model shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "AttentionCase", "make_attention_inputs"]


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """One dense-attention conformance case (see ``FLASH_ATTENTION_CASES``).

    ``segments``: ``"packed"`` (random contiguous segments with trailing padding),
    ``"padding"`` (a 2-D padding mask), ``"orphans"`` (some query rows whose segment no key has:
    fully masked rows). ``pairwise``: a random 4-D mask with some all-False rows. ``varlen``:
    per-sequence ``(q_len, k_len)`` packed in one row, plus ``varlen_pad`` padding tokens.
    ``bias``: the bias shape, with ``"b", "h", "q", "k"`` for full dims and ``1`` for broadcast.
    """

    name: str
    b: int = 1
    sq: int = 16
    sk: int = 16
    h: int = 2
    hk: int = 2
    d: int = 64
    dv: int | None = None
    dtype: str = "float32"
    causal: bool = False
    window: int | tuple[int, int] | None = None
    soft_cap: float | None = None
    bias: tuple[Any, ...] | None = None
    segments: str | None = None
    pairwise: bool = False
    varlen: tuple[tuple[int, int], ...] | None = None
    varlen_pad: int = 0
    sinks: int = 0
    dropout: float = 0.0
    scale: float | None = None

    def with_dtype(self, dtype: str) -> AttentionCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments of a call (arrays and options)."""
        return make_attention_inputs(self, seed)


_BASE_CASES = (
    AttentionCase("basic", b=2, sq=17, sk=17, h=4, hk=4),
    AttentionCase("len1", b=1, sq=1, sk=1, h=2, hk=2),
    AttentionCase("odd200-d80", b=1, sq=200, sk=200, h=2, hk=2, d=80),
    AttentionCase("gqa-d128", b=2, sq=64, sk=64, h=8, hk=2, d=128),
    AttentionCase("mqa-cross", b=1, sq=33, sk=50, h=4, hk=1),
    AttentionCase("dv-differs", b=1, sq=40, sk=24, h=2, hk=1, d=64, dv=32),
    AttentionCase("causal", b=2, sq=70, sk=70, h=4, hk=2, causal=True),
    AttentionCase("causal-sq<sk", b=1, sq=17, sk=200, h=2, hk=2, causal=True),
    AttentionCase("causal-sq>sk", b=1, sq=200, sk=17, h=2, hk=1, causal=True),
    AttentionCase("window-sym", b=1, sq=128, sk=128, h=2, hk=2, window=16),
    AttentionCase("window-asym", b=1, sq=100, sk=120, h=2, hk=2, window=(32, 5)),
    AttentionCase("window-causal", b=1, sq=96, sk=96, h=4, hk=2, window=(20, 0), causal=True),
    AttentionCase("softcap", b=1, sq=48, sk=48, h=2, hk=2, soft_cap=5.0, scale=0.5),
    AttentionCase("bias-full", b=2, sq=33, sk=41, h=2, hk=2, bias=("b", "h", "q", "k")),
    AttentionCase("bias-heads1", b=2, sq=33, sk=41, h=4, hk=2, bias=("b", 1, "q", "k")),
    AttentionCase("bias-2d", b=2, sq=30, sk=30, h=2, hk=2, bias=("q", "k"), causal=True),
    AttentionCase("bias-keys", b=1, sq=25, sk=60, h=4, hk=4, bias=(1, "h", 1, "k")),
    AttentionCase("segments-packed", b=2, sq=90, sk=90, h=2, hk=1, segments="packed", causal=True),
    AttentionCase("segments-cross", b=2, sq=40, sk=70, h=2, hk=2, segments="packed"),
    AttentionCase("padding-mask", b=3, sq=37, sk=37, h=2, hk=2, segments="padding"),
    AttentionCase("pairwise", b=2, sq=29, sk=45, h=2, hk=2, pairwise=True),
    AttentionCase("orphan-rows", b=1, sq=50, sk=50, h=2, hk=2, segments="orphans"),
    AttentionCase(
        "varlen", sq=48, sk=48, h=2, hk=2, varlen=((5, 5), (12, 12), (23, 23), (1, 1)), varlen_pad=7, causal=True
    ),
    AttentionCase(
        "varlen-cross",
        sq=20,
        sk=47,
        h=4,
        hk=2,
        varlen=((3, 12), (7, 8), (8, 25)),
        varlen_pad=2,
        causal=True,
        window=(6, 2),
    ),
    AttentionCase("sinks", b=1, sq=33, sk=33, h=4, hk=2, sinks=1),
    AttentionCase("sinks2-orphans", b=1, sq=40, sk=40, h=2, hk=2, sinks=2, segments="orphans", causal=True),
    AttentionCase("dropout", b=2, sq=50, sk=60, h=2, hk=1, dropout=0.2),
    AttentionCase(
        "everything",
        b=2,
        sq=75,
        sk=75,
        h=4,
        hk=2,
        causal=True,
        window=(30, 0),
        soft_cap=8.0,
        bias=("b", 1, "q", "k"),
        segments="packed",
        sinks=1,
        dropout=0.1,
    ),
)
_LOW_PRECISION_CASES = ("basic", "gqa-d128", "causal", "softcap", "bias-full", "varlen", "sinks", "everything")

CASES: tuple[AttentionCase, ...] = _BASE_CASES + tuple(
    c.with_dtype("bfloat16") for c in _BASE_CASES if c.name in _LOW_PRECISION_CASES
)
FULL_CASES: tuple[AttentionCase, ...] = _BASE_CASES + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE_CASES
)

# Realistic shapes (b, sq, sk, h, hk, d) of models this op serves, for benchmarks and tuning.
ARG_SPECS: dict[str, dict[str, Any]] = {
    "llama3-8b-4k": dict(b=1, sq=4096, sk=4096, h=32, hk=8, d=128, causal=True),
    "llama3-70b-8k": dict(b=1, sq=8192, sk=8192, h=64, hk=8, d=128, causal=True),
    "gemma2-9b-4k-window": dict(b=1, sq=4096, sk=4096, h=16, hk=8, d=256, causal=True, window=(4096, 0)),
    "vit-l16": dict(b=32, sq=197, sk=197, h=16, hk=16, d=64),
    "bert-base-512": dict(b=16, sq=512, sk=512, h=12, hk=12, d=64),
}


def _segments(rng: np.random.Generator, b: int, n: int, labels: int, pad: int) -> np.ndarray:
    """Contiguous non-decreasing segments 0..labels-1 over ``n - pad`` tokens, then ``-1``."""
    out = np.full((b, n), -1, np.int32)
    for r in range(b):
        valid = max(n - pad, 1)
        cuts = (
            np.sort(rng.choice(np.arange(1, valid), size=min(labels - 1, valid - 1), replace=False))
            if valid > 1
            else []
        )
        seg = np.zeros(valid, np.int32)
        for c in cuts:
            seg[c:] += 1
        out[r, :valid] = seg
    return out


def make_attention_inputs(case: AttentionCase, seed: int = 0) -> dict[str, Any]:
    """The keyword arguments of a call for ``case`` (``query``, ``key``, ``value`` and options)."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(case.dtype)
    dv = case.dv or case.d
    b = 1 if case.varlen else case.b

    def normal(*shape: int, std: float = 1.0) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape) * std, dtype)

    kw: dict[str, Any] = {
        "query": normal(b, case.sq, case.h, case.d),
        "key": normal(b, case.sk, case.hk, case.d),
        "value": normal(b, case.sk, case.hk, dv),
        "causal": case.causal,
        "sliding_window": case.window,
        "logits_soft_cap": case.soft_cap,
        "softmax_scale": case.scale,
    }
    if case.bias is not None:
        sizes = {"b": b, "h": case.h, "q": case.sq, "k": case.sk}
        kw["bias"] = normal(*(sizes.get(x, x) for x in case.bias), std=0.5)
    if case.segments == "packed":
        q_seg = _segments(rng, b, case.sq, 3, pad=case.sq // 8)
        kv_seg = q_seg if case.sq == case.sk else _segments(rng, b, case.sk, 3, pad=case.sk // 8)
        kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
    elif case.segments == "padding":
        lens = rng.integers(1, case.sq + 1, size=b)
        lens[0] = case.sq
        kw["mask_info"] = MaskInfo.from_attention_mask(np.arange(case.sq)[None, :] < lens[:, None])
    elif case.segments == "orphans":
        q_seg = _segments(rng, b, case.sq, 2, pad=0)
        kv_seg = q_seg.copy()
        q_seg[:, case.sq // 3 : case.sq // 3 + 4] = 7  # no key has segment 7: fully masked rows
        kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
    if case.pairwise:
        mask = rng.random((b, case.h, case.sq, case.sk)) < 0.7
        mask[:, :, case.sq // 2] = False  # a fully masked row
        kw["mask_info"] = MaskInfo.from_attention_mask(mask)
    if case.varlen:
        q_lens = [ql for ql, _ in case.varlen]
        k_lens = [kl for _, kl in case.varlen]
        assert sum(q_lens) + case.varlen_pad == case.sq and sum(k_lens) + case.varlen_pad <= case.sk
        kw["cum_seqlens_q"] = jnp.asarray(np.cumsum([0, *q_lens]), jnp.int32)
        if q_lens != k_lens or case.sq != case.sk:
            kw["cum_seqlens_k"] = jnp.asarray(np.cumsum([0, *k_lens]), jnp.int32)
    if case.sinks:
        kw["softmax_aux"] = normal(case.h, case.sinks) if case.sinks > 1 else normal(case.h)
    if case.dropout:
        kw["dropout_prob"] = case.dropout
        kw["dropout_seed"] = 1234 + seed
    return kw
