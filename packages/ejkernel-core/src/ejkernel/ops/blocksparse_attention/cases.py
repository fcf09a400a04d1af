"""Conformance cases of ``blocksparse_attention`` (BHSD).

Random inputs, odd lengths: every mask pattern alone (causal both ways and cross lengths,
windows, chunks, an arbitrary block mask at a granularity unrelated to the kernels' tiles, a
token mask with global tokens, documents from segment ids, padding, pairwise masks), fully masked
rows, GQA/MQA, sinks, soft cap, a value head dim of its own, all of them together, and a bias
(declined by the implementations). ``CASES`` adds bfloat16 twins of the main ones;
``FULL_CASES`` adds bfloat16 and float16 twins of every case. ``ARG_SPECS`` are realistic shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...types.mask_info import MaskInfo
from ..flash_attention.cases import _segments
from .mask import block_mask, token_mask

__all__ = ["ARG_SPECS", "CASES", "FULL_CASES", "BlockSparseCase"]


@dataclasses.dataclass(frozen=True)
class BlockSparseCase:
    """One case. ``blocks``: a random block mask of that ``(block_q, block_k)`` granularity through
    ``mask_builder``; ``global_tokens``: a token mask (``mask_builder``) where the first that many
    keys and queries see everything and the rest a window of 8 (local + global, a union no
    intersection of patterns expresses). ``segments``: ``"packed"`` (documents with trailing
    padding), ``"orphans"`` (rows whose document has no key: fully masked rows) or ``"padding"``
    (a 2-D padding mask). ``pairwise``: a per-head ``attention_mask`` with a fully masked row."""

    name: str
    b: int = 1
    sq: int = 16
    sk: int = 16
    h: int = 2
    hk: int = 2
    d: int = 32
    dv: int | None = None
    dtype: str = "float32"
    causal: bool = True
    window: int | tuple[int, int] | None = None
    chunk: int | None = None
    blocks: tuple[int, int] | None = None
    global_tokens: int = 0
    segments: str | None = None
    pairwise: bool = False
    sinks: int = 0
    soft_cap: float | None = None
    scale: float | None = None
    bias: bool = False

    def with_dtype(self, dtype: str) -> BlockSparseCase:
        return dataclasses.replace(self, name=f"{self.name}-{dtype}", dtype=dtype)

    def inputs(self, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        dtype = jnp.dtype(self.dtype)

        def normal(*shape: int, std: float = 1.0) -> jax.Array:
            return jnp.asarray(rng.standard_normal(shape) * std, dtype)

        kw: dict[str, Any] = {
            "query": normal(self.b, self.h, self.sq, self.d),
            "key": normal(self.b, self.hk, self.sk, self.d),
            "value": normal(self.b, self.hk, self.sk, self.dv or self.d),
            "causal": self.causal,
            "sliding_window": self.window,
            "chunk_size": self.chunk,
            "logits_soft_cap": self.soft_cap,
            "softmax_scale": self.scale,
        }
        if self.blocks is not None:
            gq, gk = self.blocks
            bm = rng.random((-(-self.sq // gq), -(-self.sk // gk))) < 0.5
            bm[0, 0] = True
            kw["mask_builder"] = lambda bm=bm, bs=self.blocks: block_mask(bm, bs)
        if self.global_tokens:
            n = self.global_tokens
            i, j = np.arange(self.sq)[:, None], np.arange(self.sk)[None, :]
            tm = (np.abs(i - j) <= 8) | (i < n) | (j < n)
            kw["mask_builder"] = lambda q_len, kv_len, heads, shard, shards, tm=tm: token_mask(tm)
        if self.segments == "packed":
            q_seg = _segments(rng, self.b, self.sq, 3, pad=self.sq // 8)
            kv_seg = q_seg if self.sq == self.sk else _segments(rng, self.b, self.sk, 3, pad=self.sk // 8)
            kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
        elif self.segments == "orphans":
            q_seg = _segments(rng, self.b, self.sq, 2, pad=0)
            kv_seg = q_seg.copy()
            q_seg[:, self.sq // 3 : self.sq // 3 + 4] = 7  # no key has document 7: fully masked rows
            kw["mask_info"] = MaskInfo.from_segments(q_seg, kv_seg)
        elif self.segments == "padding":
            lens = rng.integers(1, self.sq + 1, size=self.b)
            lens[0] = self.sq
            kw["mask_info"] = MaskInfo.from_attention_mask(np.arange(self.sq)[None, :] < lens[:, None])
        if self.pairwise:
            mask = rng.random((self.b, self.h, self.sq, self.sk)) < 0.7
            mask[:, :, self.sq // 2] = False  # a fully masked row
            kw["attention_mask"] = jnp.asarray(mask)
        if self.sinks:
            kw["softmax_aux"] = normal(self.h, self.sinks) if self.sinks > 1 else normal(self.h)
        if self.bias:
            kw["bias"] = normal(self.b, self.h, self.sq, self.sk, std=0.5)
        return kw


_BASE_CASES = (
    BlockSparseCase("causal", b=2, sq=40, sk=40, h=2, hk=2),
    BlockSparseCase("dense-cross-gqa", b=1, sq=33, sk=47, h=4, hk=2, causal=False),
    BlockSparseCase("len1", b=1, sq=1, sk=1, h=2, hk=1),
    BlockSparseCase("causal-sq<sk", b=1, sq=17, sk=70, h=2, hk=2),
    BlockSparseCase("causal-sq>sk", b=1, sq=70, sk=17, h=2, hk=1),
    BlockSparseCase("window-causal", b=1, sq=96, sk=96, h=4, hk=2, window=(20, 0)),
    BlockSparseCase("window-sym", b=1, sq=100, sk=100, h=2, hk=2, window=16, causal=False),
    BlockSparseCase("chunked", b=2, sq=90, sk=90, h=2, hk=1, chunk=24),
    BlockSparseCase("block-mask", b=1, sq=50, sk=70, h=2, hk=2, blocks=(8, 12), causal=False),
    BlockSparseCase("local-global-tokens", b=1, sq=72, sk=72, h=2, hk=2, global_tokens=5, causal=False),
    BlockSparseCase("documents", b=2, sq=90, sk=90, h=2, hk=1, segments="packed"),
    BlockSparseCase("documents-cross", b=2, sq=40, sk=70, h=2, hk=2, segments="packed", causal=False),
    BlockSparseCase("orphan-rows", b=1, sq=50, sk=50, h=2, hk=2, segments="orphans"),
    BlockSparseCase("padding-mask", b=3, sq=37, sk=37, h=2, hk=2, segments="padding", causal=False),
    BlockSparseCase("pairwise", b=2, sq=29, sk=45, h=2, hk=2, pairwise=True, causal=False),
    BlockSparseCase("sinks", b=1, sq=33, sk=33, h=4, hk=2, sinks=1),
    BlockSparseCase("sinks2-window", b=1, sq=60, sk=60, h=2, hk=2, sinks=2, window=(10, 0)),
    BlockSparseCase("softcap", b=1, sq=48, sk=48, h=2, hk=2, soft_cap=5.0, scale=0.5),
    BlockSparseCase("dv-differs", b=1, sq=40, sk=40, h=2, hk=1, d=64, dv=24),
    BlockSparseCase(
        "everything",
        b=2,
        sq=75,
        sk=75,
        h=4,
        hk=2,
        window=(40, 0),
        chunk=32,
        segments="packed",
        sinks=1,
        soft_cap=8.0,
    ),
    BlockSparseCase("block-mask-documents", b=2, sq=64, sk=64, h=2, hk=2, blocks=(16, 16), segments="packed"),
    BlockSparseCase("bias", b=1, sq=24, sk=24, h=2, hk=2, bias=True),
)
_LOW_PRECISION_CASES = ("causal", "window-causal", "documents", "sinks", "everything")

CASES: tuple[BlockSparseCase, ...] = _BASE_CASES + tuple(
    c.with_dtype("bfloat16") for c in _BASE_CASES if c.name in _LOW_PRECISION_CASES
)
FULL_CASES: tuple[BlockSparseCase, ...] = _BASE_CASES + tuple(
    c.with_dtype(dt) for dt in ("bfloat16", "float16") for c in _BASE_CASES
)

# Realistic shapes of long-context models (issue 42's benchmark shape first).
ARG_SPECS: dict[str, dict[str, Any]] = {
    "causal-local2048-docs8-16k": dict(b=2, sq=16384, sk=16384, h=16, hk=16, d=128, window=(2048, 0), documents=8),
    "llama4-chunked-8k": dict(b=1, sq=8192, sk=8192, h=40, hk=8, d=128, chunk=8192 // 4),
    "gemma3-local1024-32k": dict(b=1, sq=32768, sk=32768, h=16, hk=8, d=256, window=(1024, 0)),
}
